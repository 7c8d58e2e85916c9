"""Continuous batching for the simulated engine (`simulator.SimState.slots` > 1).

Up to `slots` requests decode at once; the rest wait their turn, first come first served, before
their first byte (llama-server's deferred requests). Each admitted request walks its plan's steps,
each step a plain part and speculation's extra part, timed at the batch in force
(`CostModel.at_batch`). When the batch changes mid-step (a request joins or leaves) the rest of
the step is timed again at the new batch: processor sharing, in real time at `time_scale` of the
cost model's pace. What each step really took, in the cost model's time, is what the request's
`timings` report: the batch's cost shows in them, as in llama.cpp's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.local.simulator import CostModel


class Batcher:
    """One instance's batch: the requests decoding (`running`) and those waiting for a slot."""

    def __init__(self) -> None:
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._changed: asyncio.Future[None] | None = None

    @asynccontextmanager
    async def slot(self, slots: int) -> AsyncIterator[None]:
        """Holds one of `slots` for the block, after those that came first."""
        if self.running < slots and not self._waiting:
            self.running += 1
            self._signal()
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            try:
                await turn  # `_leave` hands the slot over, counted
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._leave(slots)  # handed over as it was cancelled: hand it on
                elif turn in self._waiting:
                    self._waiting.remove(turn)
                raise
        try:
            yield
        finally:
            self._leave(slots)

    def _leave(self, slots: int) -> None:
        self.running -= 1
        while self._waiting and self.running < slots:
            turn = self._waiting.popleft()
            if not turn.done():
                self.running += 1
                turn.set_result(None)
        self._signal()

    def _signal(self) -> None:
        """The batch changed: every step under way is timed again."""
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    def change(self) -> asyncio.Future[None]:
        """Done at the batch's next change."""
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed


class Pacer:
    """One admitted request's steps, timed at its instance's batch; `spent_s` holds what each
    step took in the cost model's time."""

    def __init__(self, batcher: Batcher, cost: CostModel, time_scale: float) -> None:
        self._batcher, self._cost, self._scale = batcher, cost, time_scale
        self._loop = asyncio.get_running_loop()
        self._due = self._loop.time()
        self.spent_s: list[float] = []

    async def step(self, step_s: float, extra_s: float) -> None:
        """One step that alone costs `step_s`, `extra_s` of it speculation's extra work."""
        base_s, left, spent = step_s - extra_s, 1.0, 0.0
        while True:
            full = self._cost.at_batch(base_s, extra_s, self._batcher.running)
            if self._scale <= 0 or full <= 0:
                self.spent_s.append(spent + left * full)
                return
            deadline = self._due + left * full * self._scale
            changed = self._batcher.change()
            if deadline > self._loop.time():
                await asyncio.wait({changed}, timeout=deadline - self._loop.time())
            now = self._loop.time()
            if not changed.done() or now >= deadline:
                # on time (to the absolute schedule, so that timer overhead does not accumulate)
                self._due = deadline
                self.spent_s.append(spent + left * full)
                return
            done = min(left, (now - self._due) / (full * self._scale))
            left, spent, self._due = left - done, spent + done * full, now

    async def steps(self, step_s: Sequence[float], extra_s: Sequence[float]) -> None:
        for index, step in enumerate(step_s):
            await self.step(step, extra_s[index] if index < len(extra_s) else 0.0)
