"""A replica's published sums: they round-trip, add in any order, and garbage is refused."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from policies.learner.arms import learn_arms
from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import gather
from policies.learner.shared import (
    EMPTY_SUMS,
    SharedSumsError,
    Sums,
    sums_from_json,
    sums_to_json,
    total_sums,
)
from policies.policyfile.schema import Assume


def _sums(observations: list[Observation]) -> Sums:
    through = max((o.ts for o in observations), default="")
    return Sums(gather(observations, Assume()), learn_arms(observations), through)


def _observations(n: int, seed: int) -> list[Observation]:
    rng = random.Random(seed)
    inputs = request_inputs({"prompt_tokens": 120, "has_tools": True}, {"agent": 0.7})
    return [Observation(rng.choice(["agent", "code", "prose"]), "en", 0.5,
                        rng.choice(["mtp", "plain"]), 64, rng.uniform(5, 60), inputs=inputs,
                        prompt_tokens=200, total_ms=rng.uniform(500, 3000), arm="plain",
                        ts=f"2026-12-01T00:{seed}{i:02d}:00") for i in range(n)]


def test_sums_round_trip_through_json() -> None:
    sums = _sums(_observations(20, 1))
    replica, back = sums_from_json(sums_to_json("a", sums))
    assert replica == "a" and back.through == sums.through
    np.testing.assert_array_equal(back.evidence.greedy_of("mtp").xtx, sums.evidence.greedy_of("mtp").xtx)
    assert back.evidence.plain == sums.evidence.plain
    assert back.arms.n_observations == sums.arms.n_observations


def test_the_union_of_replicas_equals_one_process_over_all_their_records() -> None:
    parts = [_observations(15, seed) for seed in (1, 2, 3)]
    one_process = _sums([o for part in parts for o in part])
    shared = total_sums(_sums(part) for part in reversed(parts))
    np.testing.assert_allclose(shared.evidence.greedy_of("mtp").xtx, one_process.evidence.greedy_of("mtp").xtx,
                               atol=1e-9, rtol=0)
    assert shared.evidence.plain.total == pytest.approx(one_process.evidence.plain.total,
                                                        abs=1e-9)
    assert shared.arms.n_observations == one_process.arms.n_observations == 45
    assert total_sums([]) is EMPTY_SUMS


@pytest.mark.parametrize("text", [
    "{not json", "[]", '{"version": 99}', "null",
    '{"version": 1, "replica": "a", "through": "", "evidence": {}, "arms": {}}',
])
def test_malformed_sums_are_refused(text: str) -> None:
    with pytest.raises(SharedSumsError):
        sums_from_json(text)


def test_non_finite_numbers_are_refused() -> None:
    data = json.loads(sums_to_json("a", _sums(_observations(5, 4))))
    data["evidence"]["greedy"]["mtp"]["yy"] = 1e999  # parses as inf
    with pytest.raises(SharedSumsError, match="non-finite"):
        sums_from_json(json.dumps(data).replace("Infinity", "1e999"))
    with pytest.raises(SharedSumsError):
        sums_from_json(json.dumps(data))  # written as Infinity


def test_a_matrix_of_another_shape_is_refused() -> None:
    data = json.loads(sums_to_json("a", _sums(_observations(5, 4))))
    data["evidence"]["greedy"]["mtp"]["xtx"] = [[0.0]]
    with pytest.raises(SharedSumsError):
        sums_from_json(json.dumps(data))
