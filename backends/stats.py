"""Read what a backend reports about a request: usage, cached tokens, speculative stats.

Pure: functions from parsed JSON (a whole response, or one SSE chunk) to an `UpstreamReport`.
Each engine reports in its own place; `merge` folds the pieces of a stream together.
- usage: `usage.prompt_tokens`, `usage.completion_tokens`, `usage.prompt_tokens_details.cached_tokens`
- llama.cpp: `timings.{predicted_per_second, draft_n, draft_n_accepted, prompt_n, cache_n}`
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class UpstreamReport:
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    backend_tps: float | None = None
    draft_n: int | None = None
    draft_accepted: int | None = None
    spec_source: str = ""


EMPTY = UpstreamReport()


def read_report(payload: object) -> UpstreamReport:
    """Everything one JSON object (a response or an SSE chunk) says about the request."""
    if not isinstance(payload, Mapping):
        return EMPTY
    return merge(_from_usage(payload.get("usage")), _from_llamacpp(payload.get("timings")))


def merge(old: UpstreamReport, new: UpstreamReport) -> UpstreamReport:
    """`new`'s values where it has them, `old`'s elsewhere."""
    changes = {
        f.name: getattr(new, f.name)
        for f in fields(UpstreamReport)
        if getattr(new, f.name) not in (None, "")
    }
    return replace(old, **changes) if changes else old


def _from_usage(usage: object) -> UpstreamReport:
    if not isinstance(usage, Mapping):
        return EMPTY
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    # Anthropic-shaped usage (the /v1/messages endpoint)
    prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = _int(usage.get("completion_tokens", usage.get("output_tokens")))
    if cached is None:
        cached = usage.get("cache_read_input_tokens")
    return UpstreamReport(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=_int(cached))


def _from_llamacpp(timings: object) -> UpstreamReport:
    if not isinstance(timings, Mapping):
        return EMPTY
    draft_n = _int(timings.get("draft_n"))
    accepted = _int(timings.get("draft_n_accepted"))
    return UpstreamReport(
        prompt_tokens=None,
        cached_tokens=_int(timings.get("cache_n")),
        backend_tps=_float(timings.get("predicted_per_second")),
        draft_n=draft_n,
        draft_accepted=accepted,
        spec_source="timings" if draft_n is not None else "",
    )


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
