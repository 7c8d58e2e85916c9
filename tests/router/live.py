"""The proxy and two simulated engines served from a thread of their own, for tests that drive
them from synchronous code (hypothesis, schemathesis): real sockets on loopback, one event loop
in the thread, stopped (servers closed, thread joined) on exit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Self, TypeVar

from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, Limits, LogConfig, SupervisorConfig
from router.serve import start_site
from router.state import Deps
from tests.router.conftest import ListSink

T = TypeVar("T")


class LiveStack:
    def __init__(self, tmp: Path, *, shipped_scorer: bool = True) -> None:
        self.tmp = tmp
        self.shipped_scorer = shipped_scorer
        self.sink = ListSink()
        self.mtp = SimState(profile="mtp", acceptance={"technical": 0.8})
        self.plain = SimState(profile="plain")
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stops: list[Callable[[], Awaitable[None]]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, work: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run `work` on the stack's loop and wait for it (bounded)."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout_s)

    def __enter__(self) -> Self:
        self._thread.start()
        self.run(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _start(self) -> None:
        ports = []
        for state in (self.mtp, self.plain):
            _, port, stop = await start_site(create_sim_app(state))
            ports.append(port)
            self._stops.append(stop)
        config = Config(
            backends=[
                BackendSpec(name="mtp-0", engine="llamacpp", profile="mtp",
                            url=f"http://127.0.0.1:{ports[0]}"),
                BackendSpec(name="plain-0", engine="llamacpp", profile="plain",
                            url=f"http://127.0.0.1:{ports[1]}"),
            ],
            default_backend="plain-0",
            tokenizer=self.shipped_scorer,
            classifier="default" if self.shipped_scorer else "rules",
            log=LogConfig(path=str(self.tmp / "decisions.jsonl")),
            limits=Limits(max_body_mb=4, connect_timeout_s=2.0),
            supervisor=SupervisorConfig(log_dir=str(self.tmp / "backends"), startup_probe=False),
        )
        app = create_app(config, deps=Deps(sinks=(self.sink,), explore=False,
                                           record_interval_s=0.0))
        _, self.port, stop = await start_site(app)
        self._stops.insert(0, stop)

    async def _stop(self) -> None:
        for stop in self._stops:
            await stop()
