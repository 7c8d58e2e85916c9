"""In-flight work and outcomes reach the decision: the queue on a busy instance, and the model
updated record by record, without counting a record twice once a learned file covers it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from backends.local.simulator import SimState
from decisionlog.records import Outcome, RouteRecord
from policies.learner.learn import learn
from policies.learner.observation import observation_from_record, request_inputs
from policies.learner.speedup import Vector
from policies.store import PolicyStore, learned_path_for, write_learned
from router.config import DEFAULT_POLICY
from router.instances.pool import POOL
from router.learning.online import ONLINE, OnlineModel
from tests.router.conftest import ServerFactory, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH


async def test_a_request_goes_to_the_idle_instance_while_the_faster_one_is_busy(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    # one request at a time per instance, paced in real time (32 tokens: ~2 s)
    mtp = SimState(profile="mtp", acceptance={"technical": 0.9}, time_scale=1.0, serial=True)
    plain = SimState(profile="plain", time_scale=1.0, serial=True)
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp, plain=plain)
    body = {**GREEDY_TECH, "max_tokens": 32, "stream": True}
    async with aiohttp.ClientSession() as session:
        url = f"{stack.base_url}/chat/completions"
        async with session.post(url, json=body) as first:
            assert first.headers["x-specroute-backend"] == "mtp-0"  # +4.4%: both idle
            await first.content.readline()  # streaming: in flight on mtp-0
            async with session.post(url, json={**body, "max_tokens": 31}) as second:
                assert second.headers["x-specroute-backend"] == "plain-0"
                await second.read()
            await first.read()
    await stack.logged(2)
    queued = [r.decision["finish_ms"] for r in stack.sink.records]
    assert queued[1]["mtp-0"] > queued[1]["plain-0"]  # the queue ahead on mtp-0 was priced
    pool = stack.proxy.app[POOL]
    assert pool.runtime("mtp-0").running == {}  # nothing left in flight
    # each decision left what its request would have lost had each instance been taken: the
    # first, mtp-0's pace gain; the second, the queue it would have waited on mtp-0
    first_mtp, second_mtp = pool.runtime("mtp-0").losses_ms
    first_plain, second_plain = pool.runtime("plain-0").losses_ms
    assert first_mtp > 0.0 and first_plain == 0.0
    assert second_mtp == 0.0  # the log rounds the finishes to 0.1 ms
    assert second_plain == pytest.approx(queued[1]["mtp-0"] - queued[1]["plain-0"], abs=0.2)


def _record(i: int, profile: str, tps: float) -> RouteRecord:
    return RouteRecord(
        ts=f"2026-01-01T00:00:{i:02d}.000Z", request_id=f"r{i}", endpoint="chat", model="m",
        stream=True, conversation="c", features={"temperature": 0.0, "thinking_unset": True},
        classifier={"class": "code", "lang": "en", "scores": {"code": 1.0}, "p_spec": 0.7},
        decision={"profile": profile, "backend": f"{profile}-0", "queue_ms": 0.0},
        outcome=Outcome(status=200, backend=f"{profile}-0", profile=profile,
                        completion_tokens=64, backend_tps=tps, total_ms=64_000 / tps),
        overhead_ms=0.1,
    )


def test_records_since_the_learned_file_are_counted_once(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(DEFAULT_POLICY).read_text(), encoding="utf-8")
    store = PolicyStore(policy)
    online = OnlineModel(store)
    records = [_record(i, "mtp" if i % 2 else "plain", 10.0 if i % 2 else 14.7) for i in range(10)]
    for record in records:
        online.write_record(record)
    assert online.model.evidence.greedy_of("mtp").n == 5 and online.online_records == 10
    slow = online.model.speedup(_code_inputs())
    assert slow.speedup < 0.9  # 10 tok/s on mtp against 14.7 on plain: the outcomes count

    learned = [observation_from_record(r) for r in records[:6]]
    state = learn([o for o in learned if o], assume=store.policy.assume)
    write_learned(learned_path_for(policy), state)
    assert store.reload_if_changed(now=1.0)
    assert online.model.evidence.greedy_of("mtp").n == 5  # 3 from the file, 2 online: none twice
    assert online.online_records == 4


def _code_inputs() -> Vector:
    return np.array(request_inputs({}, {"code": 1.0}))


def test_a_policy_edit_keeps_what_was_learned_online_and_applies_the_new_prior(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    text = Path(DEFAULT_POLICY).read_text(encoding="utf-8")
    policy.write_text(text.replace("prior: neutral", "prior: gb10-ds4"), encoding="utf-8")
    store = PolicyStore(policy)
    online = OnlineModel(store)
    for i in range(6):
        online.write_record(_record(i, "mtp", 14.0))
    before = online.model.evidence
    replacement = tmp_path / "policy.new"
    replacement.write_text(text.replace("prior: neutral", "prior: local-pair"), encoding="utf-8")
    replacement.replace(policy)  # a new inode: the store sees a change
    assert store.reload_if_changed(now=1.0)
    assert online.model.prior.name == "local-pair"
    assert online.model.evidence is not before and online.model.evidence.greedy == before.greedy


def test_a_batch_of_records_teaches_what_the_same_records_teach_one_by_one(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(DEFAULT_POLICY).read_text(), encoding="utf-8")
    records = [_record(i, "mtp" if i % 2 else "plain", 10.0 if i % 2 else 14.7) for i in range(10)]
    one_by_one, batched = OnlineModel(PolicyStore(policy)), OnlineModel(PolicyStore(policy))
    for record in records:
        one_by_one.write_record(record)
    batched.write_records(records[:1])  # the first builds the model, the rest are one batch
    batched.write_records(records[1:])
    assert batched.online_records == one_by_one.online_records == 10
    assert batched.model.evidence.greedy_of("mtp").n == one_by_one.model.evidence.greedy_of("mtp").n == 5
    x = _code_inputs()
    assert batched.model.speedup(x) == one_by_one.model.speedup(x)


def test_records_kept_for_a_reload_are_re_applied_whole(tmp_path: Path) -> None:
    """What the online part keeps to re-apply after a reload (packed, to stay small) teaches
    after the reload what the same records teach a model that saw them after it."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(DEFAULT_POLICY).read_text(), encoding="utf-8")
    store = PolicyStore(policy)
    online = OnlineModel(store)
    records = [replace(_record(i, "mtp" if i % 2 else "plain", 10.0 + i if i % 2 else 14.7),
                       features={"temperature": 0.0, "thinking_unset": True, "code_fences": i % 3,
                                 "prompt_tokens": 100 * i, "n_messages": i})
               for i in range(10)]
    assert online.model  # built before the records arrive: they are observed as they come
    online.write_records(records)
    learned = [observation_from_record(r) for r in records[:4]]
    state = learn([o for o in learned if o], assume=store.policy.assume)
    write_learned(learned_path_for(policy), state)
    assert store.reload_if_changed(now=1.0)
    after = OnlineModel(PolicyStore(policy))  # the new file from the start, then the rest
    assert after.model
    after.write_records(records[4:])
    x = _code_inputs()
    assert online.model  # the reload is taken up when the model is next asked for
    assert online.online_records == after.online_records == 6
    assert online.model.speedup(x) == after.model.speedup(x)
    assert online.model.evidence.greedy_of("mtp").n == after.model.evidence.greedy_of("mtp").n


def test_the_arms_sums_online_equal_one_pass_over_the_same_records(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(DEFAULT_POLICY).read_text(), encoding="utf-8")
    online = OnlineModel(PolicyStore(policy))
    records = [_record(i, "mtp" if i % 3 else "plain", 10.0 + i) for i in range(9)]
    online.write_records(records[:4])
    for record in records[4:]:
        online.write_record(record)
    observations = [o for o in map(observation_from_record, records) if o is not None]
    assert online.arms == learn(observations).arms
    assert online.arms.stats["code/*"]["mtp"].n == 6


def test_the_records_teach_each_request_its_own_reply_length(tmp_path: Path) -> None:
    # one class, two lengths: questions of 20 tokens and edits returning a quoted module (220)
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(DEFAULT_POLICY).read_text(), encoding="utf-8")
    online = OnlineModel(PolicyStore(policy))
    question = {"temperature": 0.0, "thinking_unset": True, "prompt_tokens": 15, "n_messages": 1}
    edit = {**question, "prompt_tokens": 300, "code_fences": 1, "quoted_code_share": 0.9,
            "quoted_chars": 900, "edit_verb": True, "reemit_format": True}
    for i in range(16):
        features, tokens = (edit, 220) if i % 2 else (question, 20)
        base = _record(i, "plain", 14.7)
        online.write_record(replace(base, features=features,
                                    outcome=replace(base.outcome, completion_tokens=tokens)))
    model = online.model
    assert model.evidence.length["code"].n == 16
    scores = {"code": 1.0}
    asked = model.completion_tokens(np.array(request_inputs(question, scores)), 0)
    quoted = model.completion_tokens(np.array(request_inputs(edit, scores)), 0)
    assert asked == pytest.approx(20, rel=0.4) and quoted == pytest.approx(220, rel=0.25)


async def test_answers_an_engine_sends_whole_without_a_rate_teach_the_route_model(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    # vLLM reports no decode rate and a non-streamed answer comes in one piece: its wall rate
    # is its pace (before, such traffic never moved the model off the probe and the prior)
    engines = {profile: SimState(profile=profile, stats="prometheus", time_scale=0.05)
               for profile in ("mtp", "plain")}
    stack = await start_stack(aiohttp_server, tmp_path, engine="vllm", **engines)
    client = stack.client()
    for _ in range(3):
        await client.chat.completions.create(**{**GREEDY_TECH, "max_tokens": 16})
    records = await stack.logged(3)
    assert all(r.outcome.decode_tps is None and r.outcome.backend_tps is None for r in records)
    evidence = stack.proxy.app[ONLINE].model.evidence
    assert evidence.plain.n + sum(g.n for g in evidence.greedy.values()) == 3
