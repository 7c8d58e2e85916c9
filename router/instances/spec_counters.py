"""Speculative stats from an engine's global Prometheus counters, differenced around a request.

For engines that report no per-request draft stats (vLLM without its per-request flag, forks of
ds4 that only export counters), the proxy scrapes the counters just before sending and just after
the reply. The difference belongs to this request only if nothing else ran on that instance in
between: the watch is taken only when the instance is idle, and dropped when another request
started there meanwhile or the reply already carried its own stats.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from backends.capability import scrape_metrics
from backends.engines import EngineAdapter, adapter_for
from backends.measure import StreamMeter
from backends.stats import Samples, counter_delta, merge
from router.instances.pool import BackendPool

SCRAPE_TIMEOUT = aiohttp.ClientTimeout(total=2.0)
# Engines whose responses carry their own draft stats: no need to scrape around requests.
PER_RESPONSE_STATS = frozenset({"llamacpp", "sglang"})


@dataclass(frozen=True, slots=True)
class CounterWatch:
    backend: str
    adapter: EngineAdapter
    before: Samples
    ticket: int  # the instance's request count when we started


def wanted(pool: BackendPool, backend: str) -> bool:
    """Whether `watch` would scrape: the engine keeps counters and the instance is idle."""
    if backend not in pool.names:
        return False
    runtime = pool.runtime(backend)
    if runtime.spec.profile != "mtp" or runtime.spec.engine in PER_RESPONSE_STATS:
        return False  # a plain instance drafts nothing; these engines say it per response
    return adapter_for(runtime.spec).counters is not None and runtime.inflight == 0


async def watch(pool: BackendPool, session: aiohttp.ClientSession,
                backend: str) -> CounterWatch | None:
    """Scrape before sending; the caller asked `wanted` first (most requests need no scrape,
    and then no coroutine is made)."""
    runtime = pool.runtime(backend)
    adapter = adapter_for(runtime.spec)
    before = await scrape_metrics(runtime.spec, adapter, session, SCRAPE_TIMEOUT)
    if before is None:
        return None
    return CounterWatch(backend, adapter, before, runtime.started)


async def settle(pool: BackendPool, session: aiohttp.ClientSession, taken: CounterWatch,
                 served_by: str, meter: StreamMeter) -> None:
    """Fold the counter delta into `meter` when it can only be this request's."""
    if served_by != taken.backend or meter.report.draft_n is not None or taken.adapter.counters is None:
        return
    runtime = pool.runtime(taken.backend)
    if runtime.inflight > 0 or runtime.started != taken.ticket + 1:
        return  # another request ran there too: the delta is not ours alone
    after = await scrape_metrics(runtime.spec, taken.adapter, session, SCRAPE_TIMEOUT)
    if after is not None:
        meter.report = merge(meter.report, counter_delta(taken.before, after, taken.adapter.counters))
