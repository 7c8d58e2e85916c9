"""The app's state: typed keys, injected dependencies, and the holders they point to."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import aiohttp
from aiohttp import web

from classifiers.features import TokenCounter
from policies.schema import Policy
from router.config import Config
from router.pool import BackendPool
from router.records import RouteRecord
from router.scoring import Scorer, ScorerHolder


class RecordSink(Protocol):
    def write_record(self, record: RouteRecord) -> None: ...


@dataclass(frozen=True)
class Deps:
    """What the app takes from outside; tests inject their own."""

    clock: Callable[[], float] = time.perf_counter
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    new_request_id: Callable[[], str] = lambda: "req_" + uuid.uuid4().hex[:20]
    count_tokens: TokenCounter | None = None  # None: loaded at start when config.tokenizer
    scorer: Scorer | None = None  # None: loaded from config.classifier
    sinks: tuple[RecordSink, ...] = field(default_factory=tuple)  # extra record sinks
    reload_interval_s: float = 1.0


@dataclass
class PolicyHolder:
    """The policy in force; reloaded when its file changes, keeping the last good one."""

    path: str
    policy: Policy
    thresholds: dict[str, float] = field(default_factory=dict)


CONFIG = web.AppKey("config", Config)
DEPS = web.AppKey("deps", Deps)
POOL = web.AppKey("pool", BackendPool)
SCORER = web.AppKey("scorer", ScorerHolder)
POLICY = web.AppKey("policy", PolicyHolder)
SESSION = web.AppKey("session", aiohttp.ClientSession)
TOKENS = web.AppKey("count_tokens", object)
SINKS = web.AppKey("sinks", list[RecordSink])
