"""The background learner: every `learn.interval_s`, one pass over the whole decision log feeds
every accumulator of the learner (the route model's evidence, the arms' sums, the per-class
tables), and the one learned state is written next to the policy, where the store hot-reloads
it (records written since reach the model and the arms online: router.learning.online).

Learning reads the whole rotated log (bounded by `log.rotate_mb * log.keep`) and does
arithmetic: it runs in a worker thread so that the event loop keeps relaying streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import structlog
from aiohttp import web

from decisionlog.readers import iter_log_records
from decisionlog.records import ReadStats
from policies import LearnedState, PolicyStore, learn_to_file, observations
from router.state import CONFIG, DEPS, Addon

log = structlog.get_logger("specroute")


@dataclass(frozen=True, slots=True)
class Learner:
    """What a pass over the log needs, handed over once by `create_app`: the policy store it
    learns under and puts the result in, the log it reads, the clock that stamps it in force."""

    store: PolicyStore
    log_path: str
    clock: Callable[[], float]

    def learn_now(self, now: datetime) -> LearnedState:
        """Learn from the decision log under the policy in force: one pass, one learned state,
        written atomically next to the policy (for `policy explain`, other processes and
        restarts) and put in force at once."""
        store = self.store
        read = ReadStats()
        records = iter_log_records([self.log_path], read)
        state = learn_to_file(observations(records), store.policy, store.learned_path,
                              created=now.isoformat())
        store.put_learned(state, self.clock())  # in force now, not read back from the file
        log.info("learned", observations=state.n_observations, skipped=state.n_skipped,
                 log_read=read.summary(), mtp_outcomes=state.evidence.n_speculating,
                 plain_outcomes=state.evidence.plain.n,
                 through=state.through, path=str(store.learned_path))
        return state


LEARNER = web.AppKey("learner", Learner)


async def relearn_own_log(app: web.Application) -> None:
    """A replica, before it publishes for the first time: learn its own log whole, so that the
    records it wrote after its last publish (up to `replicas.sync_interval_s` of them before a
    SIGKILL) are in its sums at once, not a `learn.interval_s` later. The sums it published
    before then cover fewer records than this learned state, and are not added again."""
    learner = app[LEARNER]
    path = Path(learner.log_path)
    if not path.exists() and not any(path.parent.glob(f"{path.name}.*")):
        return  # a first start: no log yet (nor rotated ones), nothing to relearn
    try:
        await asyncio.to_thread(learner.learn_now, app[DEPS].wall_clock())
    except (OSError, ValueError) as exc:  # as the background learner: the published sums stand
        log.warning("relearn_failed", error=str(exc))


async def background_learner(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: the periodic learning task (off when `learn.interval_s` is 0)."""
    interval = app[CONFIG].learn.interval_s
    task = (asyncio.create_task(_loop(app[LEARNER], app[DEPS].wall_clock, interval))
            if interval > 0 else None)
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _loop(learner: Learner, wall_clock: Callable[[], datetime], interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(learner.learn_now, wall_clock())
        except (OSError, ValueError) as exc:  # an unreadable log: try again next time
            log.warning("learn_failed", error=str(exc))


class BackgroundLearner(Addon):
    """The periodic pass over the log (`background_learner`), as an add-on."""

    def cleanup_ctx(self, app: web.Application) -> AsyncIterator[None]:
        return background_learner(app)
