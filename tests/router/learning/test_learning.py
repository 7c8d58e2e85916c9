"""The background learner, end to end: logged outcomes -> learned state -> hot reload -> routes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from backends.local.simulator import SimState
from router.app import reload_once
from router.learning.online import ONLINE
from router.learning.relearn import LEARNER
from router.state import POLICY
from tests.router.conftest import ServerFactory, gb10_policy, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH


async def _send(base_url: str, route: str, n: int, tag: str = "") -> list[str]:
    reasons = []
    async with aiohttp.ClientSession() as session:
        for i in range(n):
            headers = {"x-specroute-route": route, "x-specroute-conversation": f"{route}{tag}-{i}"}
            body = {**GREEDY_TECH, "max_tokens": 20 + i}  # distinct requests
            async with session.post(f"{base_url}/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
                reasons.append(f"{r.headers['x-specroute-profile']}:{r.headers['x-specroute-reason']}")
    return reasons


async def test_learner_moves_a_class_to_plain_when_speculation_loses(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(Path(gb10_policy(tmp_path)).read_text().replace("min_samples: 30",
                                                                       "min_samples: 4"))
    # technical text: drafts rarely accepted, so the 2-row verify costs more than it brings
    mtp = SimState(profile="mtp", acceptance={"technical": 0.2}, reply_tokens=32)
    stack = await start_stack(aiohttp_server, tmp_path, policy=str(policy), mtp=mtp)
    assert (await _send(stack.base_url, "auto", 1))[0].startswith("mtp:")  # the prior says mtp

    await _send(stack.base_url, "mtp", 6)
    await _send(stack.base_url, "plain", 6)
    state = stack.proxy.app[LEARNER].learn_now(datetime(2026, 1, 1, tzinfo=UTC))
    belief = state.beliefs["technical/en"]
    assert belief.trusted
    assert belief.speedup < 1.0
    assert (tmp_path / "policy.learned.json").exists()

    reload_once(stack.proxy.app)
    after = await _send(stack.base_url, "auto", 3, tag="-new")
    assert after == ["plain:finish"] * 3


async def test_outcomes_reach_the_decision_online_before_any_learning_run(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    mtp = SimState(profile="mtp", acceptance={"technical": 0.1}, reply_tokens=32)
    stack = await start_stack(aiohttp_server, tmp_path, mtp=mtp)
    assert (await _send(stack.base_url, "auto", 1))[0] == "mtp:finish"  # the prior: +4.4%
    await _send(stack.base_url, "mtp", 8)
    await _send(stack.base_url, "plain", 8)
    assert not (tmp_path / "policy.learned.json").exists()  # nothing learned from the file
    assert await _send(stack.base_url, "auto", 3, tag="-new") == ["plain:finish"] * 3


async def test_the_learners_state_is_in_force_at_once_without_reading_the_file_back(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, policy=gb10_policy(tmp_path))
    await _send(stack.base_url, "mtp", 3)
    store = stack.proxy.app[POLICY]
    before = store.snapshot
    state = stack.proxy.app[LEARNER].learn_now(datetime(2026, 1, 1, tzinfo=UTC))
    assert store.snapshot is not before and store.learned is state  # the same object
    assert store.reload_if_changed(now=1.0) is False  # the file it wrote counts as seen
    online = stack.proxy.app[ONLINE]
    assert online.online_records == 0  # what the state covers is not counted twice
    assert online.model.evidence.greedy_of("mtp").n == state.evidence.greedy_of("mtp").n == 3
