"""Each instance's per-token time against its batch, learned jointly with the paces and the
speedups: the slope's column in the route model's regression."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from policies.learner.batch import PRIOR_CURVE, SLOPE_PRIOR, BatchEvidence
from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, gather, observe
from policies.policyfile.machine import LOCAL_PAIR
from policies.policyfile.schema import Assume

ASSUME = Assume()
PACE_MS = 30.0  # the plain instance's ms per token alone
EDIT = request_inputs({"quoted_code_share": 0.9, "quoted_chars": 3000, "edit_verb": True,
                       "reemit_format": True}, {"code": 1.0})
STORY = request_inputs({"n_messages": 1, "prompt_tokens": 20}, {"prose": 1.0})


def _plain(batch: float, i: int, slope: float = 0.9, jitter: float = 0.0) -> Observation:
    ms = PACE_MS * batch**slope * math.exp(jitter)
    return Observation("chat", "en", 0.3, "plain", 100, 1000.0 / ms, backend="plain-0",
                       ts=f"t{i:04d}", batch=batch)


def _ngram(batch: float, i: int, edit: bool, slope: float = 0.6) -> Observation:
    alone = PACE_MS / (2.0 if edit else 0.97)  # n-gram pays 2x on an edit, loses 3% on a story
    ms = alone * batch**slope
    return Observation("code" if edit else "prose", "en", 0.3, "mtp", 100, 1000.0 / ms,
                       backend="ngram-0", spec="ngram-simple", ts=f"u{i:04d}", batch=batch,
                       inputs=EDIT if edit else STORY, temperature=0.0, thinking=False)


@pytest.mark.parametrize("slope", [0.05, 0.45, 0.9])
def test_the_slope_and_the_pace_alone_are_learned_together(slope: float) -> None:
    rng = random.Random(4)
    records = [_plain(rng.uniform(1.0, 4.0), i, slope, rng.gauss(0, 0.05)) for i in range(80)]
    model = RouteModel(LOCAL_PAIR, gather(records, ASSUME))
    curve = model.batch_curve("plain-0")
    assert curve.slope == pytest.approx(slope, abs=0.08) and curve.measured
    assert curve.sd < PRIOR_CURVE.sd / 3
    assert curve.factor(4.0) == pytest.approx(4.0**curve.slope)
    assert model.t_plain_ms == pytest.approx(PACE_MS, rel=0.06)  # not the batches' mean pace


def test_a_cold_start_ramp_is_not_read_as_the_batchs_cost() -> None:
    # the first requests alone, the later ones in ever larger batches, on a flat curve: what
    # changed with time is the batch, and the pace alone is one figure throughout
    records = [_plain(1.0 + min(i / 10, 7.0), i, slope=0.05) for i in range(100)]
    online = RouteEvidence()
    for o in records:
        online = observe(online, o, ASSUME)
    assert RouteModel(LOCAL_PAIR, online).batch_curve("plain-0").slope < 0.12


def test_the_speedup_and_each_instances_batch_term_are_told_apart() -> None:
    rng = random.Random(9)
    records = []
    for i in range(120):
        batch = rng.choice([1.0, 2.0, 3.0, 4.0])
        records += [_plain(batch, i), _ngram(rng.choice([1.0, 2.0, 4.0]), i, edit=i % 2 == 0)]
    evidence = gather(records, ASSUME)
    model = RouteModel(LOCAL_PAIR, evidence)
    assert model.batch_curve("plain-0").slope == pytest.approx(0.9, abs=0.06)
    assert model.batch_curve("ngram-0").slope == pytest.approx(0.6, abs=0.06)
    edit = model.speedup(np.array(EDIT), "ngram-simple").speedup
    story = model.speedup(np.array(STORY), "ngram-simple").speedup
    assert edit == pytest.approx(2.0, rel=0.1) and story == pytest.approx(0.97, rel=0.06)
    online = RouteEvidence()
    for o in records:
        online = observe(online, o, ASSUME)
    assert online.batch == evidence.batch  # the same sums, one at a time or all at once


def test_records_without_a_batch_are_learned_as_before_and_the_sums_survive_json() -> None:
    older = [_plain(1.0, i) for i in range(20)]
    evidence = gather(older, ASSUME)
    assert not evidence.batch
    assert RouteModel(LOCAL_PAIR, evidence).batch_curve("plain-0") == PRIOR_CURVE
    assert PRIOR_CURVE.slope == SLOPE_PRIOR
    batched = gather([_ngram(1.0 + i % 4, i, edit=True) for i in range(20)], ASSUME)
    again = RouteEvidence.from_json(json.loads(json.dumps(batched.as_json())))
    assert again.batch == batched.batch and again.batch["ngram-0"].config == "ngram-simple"
    assert len(again.batch["ngram-0"].xu) == len(EDIT)
    assert RouteEvidence.from_json({**evidence.as_json(), "batch": {}}).batch == {}
    assert BatchEvidence().plus(1.0, 0.3, "plain").uu == 0.0  # a batch of 1 teaches no slope


def test_policy_explain_shows_each_instances_curve_and_the_speedups_batch_term() -> None:
    from policies.explain import describe_model

    rng = random.Random(2)
    records = []
    for i in range(80):
        records += [_plain(rng.choice([1.0, 2.0, 4.0]), i),
                    _ngram(rng.choice([1.0, 2.0, 4.0]), i, edit=i % 2 == 0)]
    lines = "\n".join(describe_model(RouteModel(LOCAL_PAIR, gather(records, ASSUME))))
    assert "plain-0" in lines and "ngram-0" in lines
    assert "x3.4" in lines or "x3.5" in lines  # 4^0.9 = 3.48
    # n-gram's slope 0.6 against plain's 0.9: its gain grows with the batch here, by -0.3
    assert any(f"ngram-simple -0.{d}" in lines for d in ("27", "28", "29", "30", "31", "32"))
    empty = "\n".join(describe_model(RouteModel(LOCAL_PAIR, RouteEvidence())))
    assert "no record ran in a batch" in empty
