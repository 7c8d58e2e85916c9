"""The startup probe's answers as the first records: the route model knows this machine's
paces before the first client request (real proxy, simulated engines on loopback)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs

from backends.capability import ProbeResult, TimedProbe, probe_body
from backends.local.simulator import MACHINES, SimState
from backends.spec import BackendSpec, Speculation
from backends.stats import UpstreamReport
from classifiers.scorer import RuleScorer
from policies.learner.observation import observation_from_record
from policies.learner.routemodel import RouteEvidence, RouteModel
from policies.policyfile.machine import GB10_DS4
from policies.store import DEFAULT_POLICY
from router.instances.pace_probe import PROBE_RULE, measured_notes, probe_records
from router.learning.online import ONLINE
from tests.router.conftest import ServerFactory, Stack, start_stack
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
    assert [r.decision["rule"] for r in probes] == [PROBE_RULE] * 4
    assert sorted(r.request_id for r in probes) == [
        "probe_mtp-0_copy", "probe_mtp-0_free", "probe_plain-0_copy", "probe_plain-0_free"]
    assert {(r.outcome.backend, r.outcome.spec) for r in probes} == {
        ("mtp-0", "mtp"), ("plain-0", "plain")}
    assert all(r.outcome.backend_tps and r.outcome.status == 200 for r in probes)
    model = stack.proxy.app[ONLINE].model
    assert model.pace_source("plain") == "probe" and model.pace_source("mtp") == "probe"
    assert model.t_plain_ms == pytest.approx(SLOW_VERIFY.t_plain_ms, rel=0.05)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as r:
            assert r.status == 200 and r.headers["x-specroute-backend"] == "plain-0"
        async with session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as r:
            ready = await r.json()
    status = ready["route_model"]
    assert [(b["name"], b["drafts"], b["probe_warnings"]) for b in ready["backends"]] == [
        ("mtp-0", True, []), ("plain-0", None, [])]  # the simulator's plain reports nothing
    assert status["prior"] == "neutral"
    assert status["pace"]["plain"]["source"] == "log"  # the probe and that request
    assert status["pace"]["mtp"]["ms_per_token"] > status["pace"]["plain"]["ms_per_token"]


def _probe(ms_per_token: float, kind: str = "free") -> TimedProbe:
    report = UpstreamReport(prompt_tokens=20, completion_tokens=32,
                            backend_tps=1000.0 / ms_per_token)
    return TimedProbe(probe_body("m", kind), report, 32 * ms_per_token)


def test_probe_records_teach_the_model_and_say_when_the_prior_is_far_off() -> None:
    specs = [BackendSpec(name="mtp-0", profile="mtp", url="http://127.0.0.1:9"),
             BackendSpec(name="plain-0", profile="plain", url="http://127.0.0.1:9")]
    timed = {"mtp-0": {"free": _probe(17.8)}, "plain-0": {"free": _probe(6.9)},
             "gone": {"free": _probe(1.0)}}  # not configured: no record
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


def test_each_probe_answer_is_a_record_of_its_instances_speculation() -> None:
    ngram = BackendSpec(name="ngram-0", engine="llamacpp",
                        speculation=Speculation(type="ngram-simple", depth=16),
                        url="http://127.0.0.1:9")
    plain = BackendSpec(name="plain-0", profile="plain", url="http://127.0.0.1:9")
    copy = replace(_probe(9.0, "copy"), report=UpstreamReport(
        prompt_tokens=300, completion_tokens=64, backend_tps=111.0, draft_n=40,
        draft_accepted=38, spec_source="timings"))
    short = replace(_probe(30.0), report=UpstreamReport(completion_tokens=1))  # nothing to time
    timed = {"ngram-0": {"copy": copy, "free": _probe(31.0)},
             "plain-0": {"copy": _probe(30.0, "copy"), "free": short}}
    result = ProbeResult({}, "m", {}, (), (), timed)
    records = probe_records(result, [ngram, plain], RuleScorer(), None,
                            datetime(2026, 12, 1, tzinfo=UTC))
    assert [(r.request_id, r.outcome.spec, r.outcome.profile) for r in records] == [
        ("probe_ngram-0_copy", "ngram-simple", "mtp"), ("probe_ngram-0_free", "ngram-simple", "mtp"),
        ("probe_plain-0_copy", "plain", "plain")]
    assert (records[0].outcome.draft_n, records[0].outcome.completion_tokens) == (40, 64)
    # the copy probe's body, its quoted module and all, is what the classifier saw
    assert records[0].features != records[1].features


async def _readyz_backends(stack: Stack) -> dict[str, dict[str, object]]:
    async with (aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as r):
        return {b["name"]: b for b in (await r.json())["backends"]}


async def test_readyz_says_which_instance_drafted_on_the_probes(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    # engines whose drafts show in Prometheus counters (vLLM's): an "mtp" instance that is
    # really plain counts 0 drafted tokens over both probes
    with capture_logs() as logs:
        stack = await start_stack(
            aiohttp_server, tmp_path, policy=DEFAULT_POLICY, startup_probe=True, engine="vllm",
            mtp=SimState(profile="plain", stats="prometheus"),
            plain=SimState(profile="plain", stats="prometheus"),
        )
    warned = [(e["backend"], e["detail"]) for e in logs if e["event"] == "capability_warning"]
    assert [(name, detail.split(": ")[0]) for name, detail in warned] == [
        ("mtp-0", "backend 'mtp-0' (mtp) drafted no token on the greedy probes (copy, free)")]
    backends = await _readyz_backends(stack)
    assert (backends["mtp-0"]["drafts"], backends["plain-0"]["drafts"]) == (False, False)
    assert backends["mtp-0"]["probe_warnings"] == [
        ("backend 'mtp-0' (mtp) drafted no token on the greedy probes (copy, free): "
         "speculation is not running there; start it with `--per-request-spec-decode-metrics "
         "summary` to have them in each answer")]
    assert backends["plain-0"]["probe_warnings"] == []


async def test_readyz_without_a_startup_probe_knows_nothing_of_drafts(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, startup_probe=False)
    backends = await _readyz_backends(stack)
    assert {name: (b["drafts"], b["probe_warnings"]) for name, b in backends.items()} == {
        "mtp-0": (None, []), "plain-0": (None, [])}
