"""Real vLLM instances for the integration tests: launched by the supervisor from their launch
blocks (`backends.local.vllm_pair`), in a loop of their own on a background thread, so that one
start (~30-80 s each on 2 cores) serves every test of a module whatever loop each test runs in.

The tests skip, naming `make vllm`, when vLLM or its model is not cached (they fail instead
with SPECROUTE_REQUIRE_VLLM set, as in CI).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from backends.local.vllm import find_all
from backends.local.vllm_pair import TEST_MODEL, VllmConfig, vllm_specs
from backends.spec import BackendSpec
from backends.supervisor import Supervisor, SupervisorSettings
from tests.missing import VLLM, skip_missing

T = TypeVar("T")


def require_vllm() -> None:
    if find_all(models=(TEST_MODEL,)) is None:
        skip_missing(VLLM)


class LoopThread:
    """An event loop running on its own thread until `close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Fleet:
    """Launched instances, the seconds their start took, and the supervisor's health changes."""

    specs: list[BackendSpec]
    start_s: float
    supervisor: Supervisor
    log_dir: Path
    changes: list[tuple[str, bool, str]] = field(default_factory=list)

    def spec(self, name: str) -> BackendSpec:
        return next(spec for spec in self.specs if spec.name == name)


class FleetRunner:
    """Starts `configs` through a supervisor on a background loop; `stop` stops them by PID."""

    def __init__(self, configs: Sequence[VllmConfig], log_dir: Path, **options: Any) -> None:
        self.specs = vllm_specs(configs, **options)
        self.log_dir = log_dir
        self.thread = LoopThread()
        self.session: aiohttp.ClientSession | None = None
        self.fleet: Fleet | None = None

    def start(self) -> Fleet:
        changes: list[tuple[str, bool, str]] = []

        async def start() -> Supervisor:
            self.session = aiohttp.ClientSession()
            supervisor = Supervisor(
                self.specs, self.log_dir, session=self.session,
                on_change=lambda *change: changes.append(change),
                settings=SupervisorSettings(health_interval_s=1.0))
            await supervisor.start()
            return supervisor

        started = time.monotonic()
        try:
            supervisor = self.thread.run(start(), timeout_s=900)
        except BaseException:
            self.stop()
            raise
        self.fleet = Fleet(self.specs, time.monotonic() - started, supervisor, self.log_dir,
                           changes)
        return self.fleet

    def stop(self) -> None:
        async def stop() -> None:
            if self.fleet is not None:
                await self.fleet.supervisor.stop()
            if self.session is not None:
                await self.session.close()

        try:
            self.thread.run(stop(), timeout_s=60)
        finally:
            self.thread.close()
