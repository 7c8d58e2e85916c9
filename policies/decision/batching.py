"""The finish rule on an instance that serves several requests at once (`slots > 1`: llama-server's
slots, vLLM's and SGLang's continuous batches).

Pure: no I/O, no clock (the caller passes `now`), no globals.

A request sent there joins the batch being decoded when a slot is free, and otherwise waits for
the first slot to free (the requests past the slots wait their turn, first come first served).
So its predicted finish is
    the wait for a slot (0 while one is free)
  + its prefill
  + its tokens x the instance's per-token time at the batch it decodes in
    (`policies.learner.batch`: its pace alone x b^slope, learned per instance),
and the price it imposes is what the requests served there now lose while they decode beside
it, each that much slower (`Candidate.overlap_delay_ms`), or, when it waits for a slot, a slot's
share of its service for each request that will come meanwhile (`Candidate.cost_ms`), in place
of the queue-of-one price of the requests left behind. One slot is the case
`policies.decision.finish` prices as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection

from policies.decision.finish import Queued, Running, time_left


def batch_work(running: Collection[Running], now: float, slots: int) -> Queued:
    """The requests on an instance with `slots` slots, as the rule uses them: the oldest
    `slots` being served (each one's time left, ascending), the rest waiting for a slot in
    the order they came, and the wait a new request would have for one (`slot_wait`)."""
    ordered = sorted(running, key=lambda r: r.sent)
    served, waiting = ordered[:slots], ordered[slots:]
    lefts = sorted(time_left(r.predicted_ms, (now - r.sent) * 1000.0 if now > r.sent else 0.0,
                             r.spread, r.most_ms) for r in served)
    wait = slot_wait(lefts, [r.predicted_ms for r in waiting], slots)
    return Queued(len(ordered), wait, tuple(lefts))


def slot_wait(serving: list[float], waiting: list[float], slots: int) -> float:
    """When a slot frees for one more request: the requests served now end after their time
    left, and each waiting one takes the first slot to free for its whole predicted time."""
    if len(serving) + len(waiting) < slots:
        return 0.0
    frees = list(serving)
    heapq.heapify(frees)
    for service in waiting:
        heapq.heappush(frees, heapq.heappop(frees) + service)
    return frees[0] if frees else 0.0


def joined_batch(requests: int, slots: int) -> int:
    """The batch a request decodes in when `requests` are on the instance: itself and those
    served beside it, at most its slots."""
    return min(requests + 1, slots)
