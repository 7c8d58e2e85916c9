"""The paces as `policy explain`, the dashboard and `/readyz` show them."""

from __future__ import annotations

import pytest

from policies.learner.observation import Observation, request_inputs
from policies.learner.pace import discount_note, far, paces, prior_note
from policies.learner.routemodel import RouteEvidence, RouteModel, gather
from policies.policyfile.machine import GB10_DS4, NEUTRAL
from policies.policyfile.schema import Assume


def _served(profile: str, ms: float, i: int, probe: bool = False) -> Observation:
    return Observation("chat", "en", 0.3, profile, 32, 1000 / ms, probe=probe,
                       inputs=request_inputs({"n_messages": 1}, {"chat": 1.0}), ts=f"t{i:04d}")


def test_before_any_measurement_the_paces_are_the_priors() -> None:
    plain, mtp = paces(RouteModel(GB10_DS4, RouteEvidence()))
    assert plain.source == mtp.source == "prior" and plain.n == 0
    assert plain.ms_per_token == pytest.approx(68.0)
    assert plain.low < 68.0 < plain.high  # its spread: wide, in log space
    assert not plain.far_from_prior and prior_note(GB10_DS4, plain) == ""
    # no class in particular: the mean of the GB10's five class speedups, about 1.02
    assert mtp.prior_ms_per_token == pytest.approx(68.0 / 1.0207, rel=0.01)


def test_measured_paces_far_from_the_prior_discount_it() -> None:
    log = [_served("plain", 6.9, 0, probe=True), _served("mtp", 17.8, 1, probe=True)]
    log += [_served("plain", 6.9, 2 + i) for i in range(3)]
    plain, mtp = paces(RouteModel(GB10_DS4, gather(log, Assume())))
    assert plain.source == "log" and plain.n == 4 and plain.probes == 1
    assert mtp.source == "probe" and mtp.n == 1
    assert plain.ms_per_token == pytest.approx(6.9, rel=0.05)
    assert mtp.ms_per_token == pytest.approx(17.8, rel=0.15)
    assert plain.far_from_prior
    note = prior_note(GB10_DS4, plain)
    assert note.startswith("prior gb10-ds4 says 68 ms/token on plain, plain (log, n=4) measures 7")
    assert note.endswith(": the prior is discounted")
    near = paces(RouteModel(NEUTRAL, gather([_served("plain", 40.0, 0)], Assume())))[0]
    assert not near.far_from_prior  # 40 against the neutral prior's 50


@pytest.mark.parametrize(("measured", "expected", "result"),
                         [(6.9, 68.0, True), (34.0, 68.0, False), (136.0, 68.0, False),
                          (137.0, 68.0, True)])
def test_far_is_beyond_twice_either_way(measured: float, expected: float, result: bool) -> None:
    assert far(measured, expected) is result
    assert discount_note("p", "plain", expected, "x", measured).endswith("the prior is discounted")
