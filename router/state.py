"""The app's injected dependencies (`Deps`) and the keys of what the app holds that no room of
`router/` owns: the config, the policy store, the conversations, the HTTP client session, the
tokenizer, the memos, the supervisor and the probe's answers. A holder of `router/`'s own keeps
its key beside it (`instances.pool.POOL`, `learning.online.ONLINE`, ...), so this module
imports no room of `router/` and every room may import it."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import aiohttp
from aiohttp import web

from backends.capability import ProbeResult
from backends.supervisor import Supervisor
from classifiers.features import TokenCounter
from classifiers.memos import AskMemo, ToolsMemo
from classifiers.scorer import Scorer
from decisionlog.records import RouteRecord
from policies import PolicyStore, SessionTable
from router.config import Config


class RecordSink(Protocol):
    """Takes each finished request's record (router/learning/sinks hands them over)."""

    def write_record(self, record: RouteRecord) -> None: ...


@dataclass(frozen=True)
class Deps:
    """What the app takes from outside; tests inject their own."""

    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    new_request_id: Callable[[], str] = field(default_factory=lambda: request_ids())
    random: Callable[[], float] = field(default_factory=lambda: random.Random().random)
    count_tokens: TokenCounter | None = None  # None: loaded at start when config.tokenizer
    scorer: Scorer | None = None  # None: loaded from config.classifier
    sinks: tuple[RecordSink, ...] = field(default_factory=tuple)  # extra record sinks
    reload_interval_s: float = 1.0
    # Records of finished requests are built and written in batches this often (0: each as its
    # request finishes, as tests that read a record as soon as the answer is in want it).
    record_interval_s: float = 0.02
    explore: bool = True  # False: no Thompson draw, the posterior median (benchmarks, tests)


def request_ids() -> Callable[[], str]:
    """`req_` and 80 random bits in hex, as uuid4 gave them, from a generator seeded once from
    the OS: uuid4 reads the OS's random source on every call (a system call per request)."""
    bits = random.Random(os.urandom(16)).getrandbits
    return lambda: f"req_{bits(80):020x}"


CONFIG = web.AppKey("config", Config)
DEPS = web.AppKey("deps", Deps)
POLICY = web.AppKey("policy", PolicyStore)
SESSIONS = web.AppKey("sessions", SessionTable)
SESSION = web.AppKey("session", aiohttp.ClientSession)
TOKENS: web.AppKey[TokenCounter | None] = web.AppKey("count_tokens")
SUPERVISOR = web.AppKey("supervisor", Supervisor)
TOOLS_MEMO = web.AppKey("tools_memo", ToolsMemo)
ASK_MEMO = web.AppKey("ask_memo", AskMemo)
PROBE = web.AppKey("probe", ProbeResult)  # the startup probe's answers, until recorded
# Told of each served turn (conversation, instance, profile, prompt tokens) after the session
# table: the replicas' shared stream when `replicas.store` is set (router/replicas/link).
TurnSharer = Callable[[str, str, str, int], None]
TURN_SHARERS = web.AppKey("turn_sharers", list[TurnSharer])
# work that must finish even if its request is cancelled
TASKS: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("tasks")


class Addon:
    """An optional part of the app, kept off the request path (after mitmproxy's addons): what
    it serves, what it does with each record, the work it runs while the app runs
    (`router.app.install` wires all three). No routes, takes no records, runs nothing:
    subclasses override what they need. The background loops of the rooms are add-ons too."""

    sink_name = "addon"  # names the add-on where its records are accounted for

    def add_routes(self, app: web.Application) -> None:
        """Add the add-on's HTTP routes to `app`."""

    def write_record(self, record: RouteRecord) -> None:
        """Take one decision-log record (called once per request, after the decision log)."""

    async def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        """Set up before the app serves, tear down after (an aiohttp `cleanup_ctx`)."""
        yield

    @property
    def takes_records(self) -> bool:
        """Whether it is a record sink: it overrides `write_record`."""
        return type(self).write_record is not Addon.write_record
