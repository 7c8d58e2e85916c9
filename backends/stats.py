"""Read what a backend reports about a request: usage, cached tokens, speculative stats.

Pure: functions from parsed JSON (a whole response, or one SSE chunk) to an `UpstreamReport`.
Each engine reports in its own place; `merge` folds the pieces of a stream together.
- usage: `usage.prompt_tokens`, `usage.completion_tokens`, `usage.prompt_tokens_details.cached_tokens`
- llama.cpp: `timings.{predicted_per_second, predicted_n, draft_n, draft_n_accepted, prompt_n,
  cache_n}`, on every answer's last chunk (no `include_usage` needed)
- vLLM (`--per-request-spec-decode-metrics`): `metrics.speculative_decoding.{num_draft_tokens,
  num_accepted_draft_tokens}` (streaming: on the final usage chunk)
- SGLang (`return_meta_info`): `meta_info` (top level or per choice) `.{spec_draft_token_num,
  spec_accept_token_num}`, or, in versions without them, `spec_verify_ct` and
  `completion_tokens` (depth 1: one draft token per verify, the rest of the tokens accepted)
- Prometheus text (`/metrics`): `parse_prometheus`, and `counter_delta` around one request for
  engines that only keep global counters.
"""

from __future__ import annotations

import math
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
_REPORT_FIELDS = tuple(f.name for f in fields(UpstreamReport))


def read_report(payload: object) -> UpstreamReport:
    """Everything one JSON object (a response or an SSE chunk) says about the request."""
    if not isinstance(payload, Mapping):
        return EMPTY
    report = merge(_from_usage(payload.get("usage")), _from_llamacpp(payload.get("timings")))
    report = merge(report, _from_vllm(payload.get("metrics")))
    return merge(report, _from_sglang(_meta_info(payload)))


def merge(old: UpstreamReport, new: UpstreamReport) -> UpstreamReport:
    """`new`'s values where it has them, `old`'s elsewhere."""
    if new is EMPTY:  # most SSE chunks say nothing about the request: once per chunk, cheap
        return old
    if old is EMPTY:  # the first report of a request (a whole non-stream answer's usage)
        return new
    changes = {
        name: getattr(new, name) for name in _REPORT_FIELDS if getattr(new, name) not in (None, "")
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
    processed, cached = _int(timings.get("prompt_n")), _int(timings.get("cache_n"))
    # the prompt's tokens are those it processed and those it found cached: usage's figures,
    # reported on every answer's last chunk, asked for or not
    prompt = None if processed is None else processed + (cached or 0)
    return UpstreamReport(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=_int(timings.get("predicted_n")),
        backend_tps=_float(timings.get("predicted_per_second")),
        draft_n=draft_n,
        draft_accepted=accepted,
        spec_source="timings" if draft_n is not None else "",
    )


def _from_vllm(metrics: object) -> UpstreamReport:
    spec = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if not isinstance(spec, Mapping):
        return EMPTY
    draft_n = _int(spec.get("num_draft_tokens"))
    accepted = _int(spec.get("num_accepted_draft_tokens", spec.get("num_accepted_tokens")))
    if draft_n is None:
        return EMPTY
    return UpstreamReport(draft_n=draft_n, draft_accepted=accepted, spec_source="metrics")


def _meta_info(payload: Mapping[str, Any]) -> object:
    """SGLang puts `meta_info` at the top level (native API) or in each choice (OpenAI API)."""
    if isinstance(payload.get("meta_info"), Mapping):
        return payload["meta_info"]
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0].get("meta_info")
    return None


def _from_sglang(meta: object) -> UpstreamReport:
    if not isinstance(meta, Mapping):
        return EMPTY
    draft_n = _int(meta.get("spec_draft_token_num"))
    accepted = _int(meta.get("spec_accept_token_num"))
    verify = _int(meta.get("spec_verify_ct"))
    completion = _int(meta.get("completion_tokens"))
    if draft_n is None and verify is not None and completion is not None:
        # Depth 1: each verify drafted one token; every token beyond one per verify was accepted.
        draft_n, accepted = verify, max(0, completion - verify)
    if draft_n is None:
        return EMPTY
    return UpstreamReport(
        prompt_tokens=_int(meta.get("prompt_tokens")),
        cached_tokens=_int(meta.get("cached_tokens")),
        completion_tokens=completion,
        draft_n=draft_n,
        draft_accepted=accepted,
        spec_source="meta_info",
    )


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Names of an engine's global Prometheus counters of drafted and accepted tokens."""

    draft_tokens: str
    accepted_tokens: str


Samples = Mapping[str, float]  # metric name -> value summed over its label sets


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {name: sum over label sets}. Comments and junk are skipped."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parsed = parse_sample(line)
        if parsed is not None:
            name, value = parsed
            totals[name] = totals.get(name, 0.0) + value
    return totals


def parse_sample(line: str) -> tuple[str, float] | None:
    """One exposition line -> (metric name, value); None for junk or NaN."""
    brace = line.find("{")
    if brace >= 0:
        close = line.rfind("}")
        if close < brace:
            return None
        name, rest = line[:brace], line[close + 1 :]
    else:
        name, _, rest = line.partition(" ")
    fields_ = rest.split()
    if not name or not fields_:
        return None
    try:
        value = float(fields_[0])
    except ValueError:
        return None
    return None if math.isnan(value) else (name, value)


def counter_delta(before: Samples, after: Samples, counters: SpecCounters) -> UpstreamReport:
    """Draft stats of whatever ran between two scrapes (one request, if it ran alone).

    A counter that went down means the engine restarted in between: no delta then.
    """
    drafted = _delta(before, after, counters.draft_tokens)
    accepted = _delta(before, after, counters.accepted_tokens)
    if drafted is None or accepted is None:
        return EMPTY
    return UpstreamReport(draft_n=drafted, draft_accepted=accepted, spec_source="prometheus")


def _delta(before: Samples, after: Samples, name: str) -> int | None:
    if name not in after:
        return None
    change = after[name] - before.get(name, 0.0)
    return round(change) if change >= 0 else None


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
