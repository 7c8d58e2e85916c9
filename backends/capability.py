"""At start: do both profiles serve the same model, and does the mtp instance really speculate?

Routing between a speculative and a plain instance only makes sense if they return the same
tokens: same model on both (compared by the ids of `GET /v1/models`). A mismatch refuses the
start. Then one short greedy request goes to every backend, one backend at a time (instances
that share a machine must not share it while they are timed): the mtp instances must report
drafted tokens (llama.cpp timings, vLLM metrics, SGLang meta_info, or Prometheus counter
deltas); when they report none, or the engine reports nothing, the result carries a warning,
not a refusal. Each answer is kept with its wall time (`ProbeResult.timed`): the router takes
them as the first measurements of this machine's paces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from backends.engines import ADAPTERS, EngineAdapter
from backends.spec import BackendSpec
from backends.stats import (
    EMPTY,
    UpstreamReport,
    counter_delta,
    merge,
    parse_prometheus,
    read_report,
)

PROBE_PROMPT = "Count from 1 to 20, separated by commas."
PROBE_MAX_TOKENS = 32  # long enough to time a decode, short enough for a slow CPU start


class CapabilityError(RuntimeError):
    """The configured backends cannot be routed between (the message says why)."""


@dataclass(frozen=True, slots=True)
class TimedProbe:
    """One probe request's answer as the backend reported it, and its wall time."""

    body: Mapping[str, object]  # the request as the client side wrote it (no engine tweaks)
    report: UpstreamReport
    elapsed_ms: float


@dataclass(frozen=True, slots=True)
class ProbeResult:
    models: Mapping[str, tuple[str, ...]]  # backend -> the model ids it serves
    common_model: str  # the id sent in the probe requests ("" if none is shared)
    drafted: Mapping[str, int | None]  # backend -> drafted tokens seen (None: not reported)
    errors: tuple[str, ...]  # reasons to refuse the start
    warnings: tuple[str, ...]
    timed: Mapping[str, TimedProbe] = field(default_factory=dict)  # backend -> its answer

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise CapabilityError("; ".join(self.errors))


async def capability_probe(
    specs: Sequence[BackendSpec],
    session: aiohttp.ClientSession,
    *,
    adapters: Mapping[str, EngineAdapter] = ADAPTERS,
    timeout_s: float = 120.0,
    max_tokens: int = PROBE_MAX_TOKENS,
) -> ProbeResult:
    """Compare the models of every backend, then send each one short greedy request, in turn."""
    listed = await asyncio.gather(*(_model_ids(s, adapters, session, timeout_s) for s in specs))
    models = {spec.name: ids for spec, (ids, _) in zip(specs, listed)}
    warnings = [why for _, why in listed if why]
    errors = _model_mismatch(specs, models)
    common = common_model(models)
    drafted: dict[str, int | None] = {}
    timed: dict[str, TimedProbe] = {}
    if not errors and common:
        for spec in specs:
            if not models[spec.name]:
                continue
            probe, why = await _probe_request(spec, adapters[spec.engine], session, common,
                                              timeout_s, max_tokens)
            drafted[spec.name] = probe.report.draft_n
            warnings += [why] if why else _speculation_warnings(spec, probe.report)
            if not why:
                timed[spec.name] = probe
    if {spec.profile for spec in specs} != {"mtp", "plain"}:
        warnings.append("only one profile is configured: every request goes to it")
    return ProbeResult(models, common, drafted, tuple(errors), tuple(warnings), timed)


def probe_body(model: str, max_tokens: int = PROBE_MAX_TOKENS) -> dict[str, object]:
    """The probe request: a short greedy generation, the same for every backend."""
    return {"model": model, "messages": [{"role": "user", "content": PROBE_PROMPT}],
            "max_tokens": max_tokens, "temperature": 0, "stream": False}


async def _model_ids(
    spec: BackendSpec, adapters: Mapping[str, EngineAdapter],
    session: aiohttp.ClientSession, timeout_s: float,
) -> tuple[tuple[str, ...], str]:
    url = spec.base_url + adapters[spec.engine].models_path
    try:
        async with session.get(url, headers=_auth(spec),
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            payload = await response.json(content_type=None)
            response.raise_for_status()
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return (), f"backend {spec.name!r}: cannot list models at {url}: {error}"
    data = payload.get("data") if isinstance(payload, Mapping) else None
    ids = tuple(sorted(str(m["id"]) for m in data or [] if isinstance(m, Mapping) and "id" in m))
    return ids, "" if ids else f"backend {spec.name!r}: {url} lists no models"


def _model_mismatch(specs: Sequence[BackendSpec], models: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Every reachable backend must share a model id with every reachable one of the other profile."""
    errors = []
    for spec in specs:
        for other in specs:
            if spec.profile == "mtp" and other.profile == "plain" and models[spec.name] \
                    and models[other.name] and not set(models[spec.name]) & set(models[other.name]):
                errors.append(
                    f"backends {spec.name!r} (mtp) and {other.name!r} (plain) serve different "
                    f"models: {list(models[spec.name])} vs {list(models[other.name])}; both "
                    "profiles must serve the same model, or routing changes the answers"
                )
    return errors


def common_model(models: Mapping[str, tuple[str, ...]]) -> str:
    sets = [set(ids) for ids in models.values() if ids]
    shared = set.intersection(*sets) if sets else set()
    return min(shared) if shared else ""


async def _probe_request(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    model: str, timeout_s: float, max_tokens: int,
) -> tuple[TimedProbe, str]:
    sent = probe_body(model, max_tokens)
    body = adapter.request_tweaks(dict(sent), stream=False, path="/v1/chat/completions").body
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        before = await scrape_metrics(spec, adapter, session, timeout)
        started = time.monotonic()
        async with session.post(spec.base_url + "/v1/chat/completions", json=body,
                                headers=_auth(spec), timeout=timeout) as response:
            payload = await response.json(content_type=None)
            response.raise_for_status()
        elapsed_ms = (time.monotonic() - started) * 1000.0
        report = read_report(payload)
        if report.draft_n is None and adapter.counters is not None and before is not None:
            after = await scrape_metrics(spec, adapter, session, timeout)
            delta = counter_delta(before, after or {}, adapter.counters)
            report = merge(report, delta)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return TimedProbe(sent, EMPTY, 0.0), f"backend {spec.name!r}: the probe request failed: {error}"
    return TimedProbe(sent, report, elapsed_ms), ""


async def scrape_metrics(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    timeout: aiohttp.ClientTimeout,
) -> dict[str, float] | None:
    """The engine's Prometheus counters (`parse_prometheus`), or None when it has none or the
    scrape fails. Difference two scrapes with `stats.counter_delta(before, after, counters)`."""
    text, _ = await metrics_text(spec, adapter, session, timeout)
    return parse_prometheus(text) if text is not None else None


async def metrics_text(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    timeout: aiohttp.ClientTimeout,
) -> tuple[str | None, str]:
    """The engine's `/metrics` text, or None and why (no metrics path, an error status, the
    connection or the timeout)."""
    if not adapter.metrics_path:
        return None, "no metrics path"
    try:
        async with session.get(spec.base_url + adapter.metrics_path, headers=_auth(spec),
                               timeout=timeout) as response:
            if response.status != 200:
                return None, f"HTTP {response.status}"
            return await response.text(errors="replace"), ""
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _speculation_warnings(spec: BackendSpec, report: UpstreamReport) -> list[str]:
    if spec.profile == "mtp" and report.draft_n is None:
        return [(f"backend {spec.name!r} (mtp): the engine reports no draft statistics; "
                "speculation cannot be confirmed (decode tokens/s is still measured)")]
    if spec.profile == "mtp" and report.draft_n == 0:
        return [(f"backend {spec.name!r} (mtp) drafted no token on a greedy request: "
                "speculation is not running there")]
    if spec.profile == "plain" and report.draft_n:
        return [(f"backend {spec.name!r} (plain) drafted {report.draft_n} tokens: "
                "it speculates, so both profiles do")]
    return []


def _auth(spec: BackendSpec) -> dict[str, str]:
    return {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
