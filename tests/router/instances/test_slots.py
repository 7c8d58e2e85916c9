"""Each instance's slots on /readyz: read from the engine once it is healthy (and again after a
restart), else its launch flags, the declared count, or 1 with a note (router/instances/
supervision, backends.slots)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from backends.local.simulator import SimState, create_sim_app
from backends.slots import NONE_REPORTED
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.state import SUPERVISOR, Deps
from tests.backends.test_supervisor import eventually, fake_spec
from tests.router.conftest import ServerFactory


def _config(tmp_path: Path, backends: list[BackendSpec], interval_s: float = 5.0) -> Config:
    return Config(
        backends=backends, default_backend=backends[0].name, classifier="rules",
        tokenizer=False, log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
        supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"), startup_probe=False,
                                    health_interval_s=interval_s),
    )


async def _ready(server: TestServer) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{server.port}/readyz") as response:
        body = await response.json()
    return {b["name"]: b for b in body["backends"]}


def _slots(backend: dict[str, Any]) -> tuple[int, str, str]:
    return backend["slots"], backend["slots_source"], backend.get("slots_warning", "")


async def test_readyz_shows_each_instances_slots_and_where_they_came_from(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    backends = [
        fake_spec("told-4", "--slots", "4").model_copy(update={"slots": 2}),  # contradicted
        fake_spec("told-3", "--slots", "3", "--no-props"),  # /slots alone tells
        fake_spec("declared-2").model_copy(update={"slots": 2}),  # the engine tells nothing
        fake_spec("silent"),
        fake_spec("flags-3", "--parallel", "3"),
    ]
    server = await aiohttp_server(create_app(_config(tmp_path, backends),
                                             deps=Deps(explore=False)))
    ready = await _ready(server)
    slots, source, warning = _slots(ready["told-4"])
    assert (slots, source) == (4, "engine")
    assert "slots: 2 declared" in warning and "4 used" in warning and "`slots:`" in warning
    assert _slots(ready["told-3"]) == (3, "engine", "")
    assert _slots(ready["declared-2"]) == (2, "declared", "")
    assert _slots(ready["silent"]) == (1, "default", NONE_REPORTED)
    assert _slots(ready["flags-3"]) == (3, "launch", "")


async def test_ds4_serves_one_at_a_time_whatever_is_declared(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    engine = await aiohttp_server(create_sim_app(SimState(profile="plain")))
    spec = BackendSpec(name="ds4-0", engine="ds4", profile="plain", slots=4,
                       url=f"http://127.0.0.1:{engine.port}")
    server = await aiohttp_server(create_app(_config(tmp_path, [spec]), deps=Deps(explore=False)))
    slots, source, warning = _slots((await _ready(server))["ds4-0"])
    assert (slots, source) == (1, "engine")
    assert "slots: 4 declared" in warning and "one request at a time" in warning


async def test_slots_are_read_again_after_a_restart(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    count = tmp_path / "slots"
    count.write_text("2")
    spec = fake_spec("one", "--slots-file", str(count))
    server = await aiohttp_server(create_app(_config(tmp_path, [spec], interval_s=0.1),
                                             deps=Deps(explore=False)))
    assert _slots((await _ready(server))["one"]) == (2, "engine", "")
    supervisor = server.app[SUPERVISOR]
    pid = supervisor.state("one").pid
    assert pid is not None
    count.write_text("5")  # the restarted engine serves more at once
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: supervisor.state("one").healthy
                     and supervisor.state("one").pid not in (None, pid))
    seen: tuple[int, str, str] = (0, "", "")
    for _ in range(100):  # bounded: 5 s (the read follows the health change)
        seen = _slots((await _ready(server))["one"])
        if seen[0] == 5:
            break
        await asyncio.sleep(0.05)
    assert seen == (5, "engine", "")
