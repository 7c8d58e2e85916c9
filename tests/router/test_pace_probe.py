"""The startup probe's answers as the first records: the route model knows this machine's
paces before the first client request (real proxy, simulated engines on loopback)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from backends.capability import ProbeResult, TimedProbe, probe_body
from backends.local.simulator import MACHINES, SimState
from backends.spec import BackendSpec
from backends.stats import UpstreamReport
from policies.machine import GB10_DS4
from policies.observation import observation_from_record
from policies.routemodel import RouteEvidence, RouteModel
from policies.store import DEFAULT_POLICY
from router.pace_probe import PROBE_RULE, measured_notes, probe_records
from router.scoring import RuleScorer
from router.state import ONLINE
from tests.router.conftest import ServerFactory, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH

SLOW_VERIFY = MACHINES["slow-verify"]  # speculation loses on every class, plain step 20 ms


async def test_the_first_request_is_routed_on_this_machines_measured_paces(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(
        aiohttp_server, tmp_path, policy=DEFAULT_POLICY, startup_probe=True,
        mtp=SimState(profile="mtp", cost=SLOW_VERIFY, default_acceptance=0.9),
        plain=SimState(profile="plain", cost=SLOW_VERIFY),
    )
    probes = list(stack.sink.records)
    assert [r.decision["rule"] for r in probes] == [PROBE_RULE, PROBE_RULE]
    assert {r.outcome.backend for r in probes} == {"mtp-0", "plain-0"}
    assert all(r.outcome.backend_tps and r.outcome.status == 200 for r in probes)
    model = stack.proxy.app[ONLINE].model
    assert model.pace_source("plain") == "probe" and model.pace_source("mtp") == "probe"
    assert model.t_plain_ms == pytest.approx(SLOW_VERIFY.t_plain_ms, rel=0.05)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as r:
            assert r.status == 200 and r.headers["x-specroute-backend"] == "plain-0"
        async with session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as r:
            status = (await r.json())["route_model"]
    assert status["prior"] == "neutral"
    assert status["pace"]["plain"]["source"] == "log"  # the probe and that request
    assert status["pace"]["mtp"]["ms_per_token"] > status["pace"]["plain"]["ms_per_token"]


def _probe(profile: str, ms_per_token: float) -> TimedProbe:
    report = UpstreamReport(prompt_tokens=20, completion_tokens=32,
                            backend_tps=1000.0 / ms_per_token)
    return TimedProbe(probe_body("m"), report, 32 * ms_per_token)


def test_probe_records_teach_the_model_and_say_when_the_prior_is_far_off() -> None:
    specs = [BackendSpec(name="mtp-0", profile="mtp", url="http://127.0.0.1:9"),
             BackendSpec(name="plain-0", profile="plain", url="http://127.0.0.1:9")]
    timed = {"mtp-0": _probe("mtp", 17.8), "plain-0": _probe("plain", 6.9),
             "gone": _probe("plain", 1.0)}  # not configured: no record
    result = ProbeResult({}, "m", {}, (), (), timed)
    records = probe_records(result, specs, RuleScorer(), None, datetime(2026, 12, 1, tzinfo=UTC))
    assert [r.outcome.backend for r in records] == ["mtp-0", "plain-0"]
    observations = [observation_from_record(r) for r in records]
    assert all(o is not None and o.probe for o in observations)
    model = RouteModel(GB10_DS4, RouteEvidence())
    notes = measured_notes(records, model)
    assert any(n.startswith("prior gb10-ds4 says 68 ms/token on plain, plain-0 measures 6.9")
               for n in notes)
    near = [r for r in records if r.outcome.backend == "plain-0"]
    slow_box = RouteModel(replace(GB10_DS4, t_plain_ms=7.5), RouteEvidence())
    assert measured_notes(near, slow_box) == []  # within 2x of the prior: nothing to say
