"""The core a request's plan and bookkeeping read: built once by `create_app` from the parts the
app holds, frozen, and handed to what needs it (`router.request.lifecycle`), so that no part of
a request's path looks its inputs up in the `web.Application`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from classifiers.features import TokenCounter
from classifiers.memos import AskMemo, ToolsMemo
from policies import PolicyStore, SessionTable
from router.config import Config
from router.instances.pool import BackendPool
from router.learning.online import OnlineModel
from router.learning.scorer_holder import ScorerHolder
from router.learning.sinks import RecordQueue
from router.state import Deps, TurnSharer


@dataclass(frozen=True, slots=True)
class Core:
    """The config and deps, and the holders a request reads and updates (each keeps its own
    state; the core only names them)."""

    config: Config
    deps: Deps
    pool: BackendPool
    policy: PolicyStore
    sessions: SessionTable
    online: OnlineModel
    scorer: ScorerHolder
    count_tokens: TokenCounter | None
    tools_memo: ToolsMemo
    ask_memo: AskMemo
    records: RecordQueue  # finished requests whose records are due
    tasks: set[asyncio.Task[None]]  # work that must finish even if its request is cancelled
    turn_sharers: list[TurnSharer]


CORE = web.AppKey("core", Core)
