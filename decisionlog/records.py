"""The decision-log record: one JSON line per request, the contract between the proxy (writer)
and `tail`, `learn`, `train` and `report` (readers).

Pure: building, serialising and parsing records; no I/O, no clock (the caller passes `ts`).
Any change to field names or meanings bumps `SCHEMA_VERSION`; readers accept every version in
`READABLE_VERSIONS` and count what they skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import isfinite
from typing import Any, Final

import orjson

SCHEMA_VERSION: Final = 1
READABLE_VERSIONS: Final = frozenset({1})
# Every string in a line is cut to this many characters (content text is cut earlier, to 4,000):
# a 900 KB `model` must not make a 900 KB line.
STRING_CAP: Final = 4_096


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened upstream, as measured by the proxy and reported by the backend."""

    status: int = 0
    error: str = ""
    backend: str = ""
    profile: str = ""
    # the speculation config of the instance that served it (backends.spec `spec_key`);
    # optional in schema_version 1: absent, the profile names it
    spec: str = ""
    ttft_ms: float | None = None
    total_ms: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    decode_tps: float | None = None  # measured from the stream: first content to last
    backend_tps: float | None = None  # as the backend reported it (llama.cpp timings)
    draft_n: int | None = None
    draft_accepted: int | None = None
    spec_source: str = ""  # where draft stats came from: timings, metrics, meta_info, ...
    failover_from: tuple[str, ...] = ()
    client_disconnected: bool = False
    # the batch it ran in, optional in schema_version 1 (absent: a batch of 1, as ds4 serves):
    # the requests being served on its instance when it was sent, itself included, and their
    # mean over its life (capped at the instance's slots: those past them wait, not decode)
    batch_start: int | None = None
    batch_mean: float | None = None
    # the answer went on but its end was not seen (the picker stopped while it ran): whether
    # and when it ended is unknown, so it is never timed. Optional in schema_version 1.
    unobserved: bool = False


@dataclass(frozen=True, slots=True)
class RouteRecord:
    ts: str  # ISO-8601 UTC
    request_id: str
    endpoint: str
    model: str
    stream: bool
    conversation: str
    features: Mapping[str, float | int | bool]
    classifier: Mapping[str, Any]
    decision: Mapping[str, Any]
    outcome: Outcome
    overhead_ms: float
    content: Mapping[str, str] | None = None  # only with log.content: true
    # The route's request rewrite, when one applied: {label, changes, before, paths}. Optional
    # in schema_version 1 (absent: the request went upstream as the client sent it).
    rewrite: Mapping[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)
    # In memory only, never written: the route model's inputs the decision priced (built from
    # `features` and the logged scores), so that the proxy's own learner takes them as they are.
    inputs: Sequence[float] | None = field(default=None, compare=False, repr=False)

    @property
    def acceptance(self) -> float | None:
        o = self.outcome
        if not o.draft_n:
            return None
        return (o.draft_accepted or 0) / o.draft_n


def to_json(record: RouteRecord) -> str:
    """One line of JSON, keys in a fixed order, no text unless the record carries content."""
    data = _as_data(record)
    fast = _fast_line(data)
    return fast.decode() if fast is not None else _standard_line(data)


def to_json_line(record: RouteRecord) -> bytes:
    """`to_json` as the decision log writes it: UTF-8 with a newline; what UTF-8 cannot encode
    (a lone surrogate the client sent) as its JSON escape."""
    data = _as_data(record)
    fast = _fast_line(data)
    if fast is not None:
        return fast + b"\n"
    return (_standard_line(data) + "\n").encode("utf-8", "backslashreplace")


def _as_data(record: RouteRecord) -> dict[str, Any]:
    # Built by hand, not with dataclasses.asdict (which deep-copies every nested value): this
    # runs once per request in the proxy's process.
    outcome = record.outcome
    data: dict[str, Any] = {"schema_version": record.schema_version}
    for name in _RECORD_FIELDS:
        data[name] = getattr(record, name)
    data["outcome"] = {name: getattr(outcome, name) for name in _OUTCOME_ORDER}
    data["outcome"]["failover_from"] = list(outcome.failover_from)
    if record.content is None:
        del data["content"]
    if record.rewrite is None:
        del data["rewrite"]
    if not record.extra:
        del data["extra"]
    return data


def _fast_line(data: dict[str, Any]) -> bytes | None:
    """The line as orjson writes it (~10x faster than json), or None where its output would
    differ from the standard encoder's: a non-finite number (json writes `NaN`, orjson `null`),
    a lone surrogate or an integer past 64 bits (orjson refuses both). The same JSON values
    either way; number spellings may differ (`1e-5` for `1e-05`)."""
    if not _all_finite(data):
        return None
    try:
        line = orjson.dumps(data, default=_plain)
    except TypeError:  # orjson.JSONEncodeError
        return None
    if len(line) <= STRING_CAP:  # no string inside can be longer than the whole line
        return line
    try:
        return orjson.dumps(_capped(data), default=_plain)
    except TypeError:
        return None


def _standard_line(data: dict[str, Any]) -> str:
    line = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(line) <= STRING_CAP:
        return line
    return json.dumps(_capped(data), ensure_ascii=False, separators=(",", ":"), default=str)


def _plain(value: object) -> object:
    """What json.dumps writes for what orjson does not know: a float subclass (numpy's
    float64) as a number, anything else as its str()."""
    return float(value) if isinstance(value, float) else str(value)


def _all_finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a record's data (dicts, lists, tuples, numbers)."""
    items = value.values() if type(value) is dict else value
    for item in items:
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is dict or kind is list or kind is tuple:
            if not _all_finite(item):
                return False
        elif isinstance(item, float) and not isfinite(item):  # float and its subclasses
            return False
    return True


_LEAVES: Final = frozenset({str, int, bool, type(None)})


def cap_string(text: str, cap: int = STRING_CAP) -> str:
    """`text`, or its first `cap` characters and how many were cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}...[{len(text) - cap} more characters]"


def _capped(value: Any) -> Any:
    """`value` with every string (keys included) cut to `STRING_CAP` characters."""
    if isinstance(value, str):
        return cap_string(value)
    if isinstance(value, dict):
        return {cap_string(str(k)): _capped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_capped(v) for v in value]
    return value


@dataclass
class ReadStats:
    read: int = 0
    skipped_malformed: int = 0
    skipped_versions: dict[int, int] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{self.read} records"]
        if self.skipped_malformed:
            parts.append(f"{self.skipped_malformed} malformed lines skipped")
        for version, n in sorted(self.skipped_versions.items()):
            parts.append(f"{n} lines of unknown schema_version {version} skipped")
        return ", ".join(parts)


def parse_line(line: str, stats: ReadStats | None = None) -> RouteRecord | None:
    """A record from one log line, or None (counted in `stats`) when it is not one we read."""
    stats = stats if stats is not None else ReadStats()
    try:
        data = json.loads(line)
        version = data.get("schema_version") if isinstance(data, dict) else None
    except (ValueError, AttributeError):
        stats.skipped_malformed += 1
        return None
    if not isinstance(version, int):
        stats.skipped_malformed += 1
        return None
    if version not in READABLE_VERSIONS:
        stats.skipped_versions[version] = stats.skipped_versions.get(version, 0) + 1
        return None
    try:
        record = _from_v1(data)
    except (KeyError, TypeError, ValueError):
        stats.skipped_malformed += 1
        return None
    stats.read += 1
    return record


def parse_lines(lines: Iterable[str], stats: ReadStats | None = None) -> Iterator[RouteRecord]:
    for line in lines:
        if line.strip():
            record = parse_line(line, stats)
            if record is not None:
                yield record


_OUTCOME_FIELDS: Final = frozenset(Outcome.__dataclass_fields__)
_OUTCOME_ORDER: Final = tuple(Outcome.__dataclass_fields__)
# written in this order after schema_version; `inputs` never (in memory only)
_RECORD_FIELDS: Final = tuple(n for n in RouteRecord.__dataclass_fields__
                              if n not in ("schema_version", "inputs"))


def _from_v1(data: dict[str, Any]) -> RouteRecord:
    raw_outcome = data["outcome"]
    if not isinstance(raw_outcome, dict):
        raise TypeError("outcome must be an object")
    outcome_args = {k: v for k, v in raw_outcome.items() if k in _OUTCOME_FIELDS}
    outcome_args["failover_from"] = tuple(outcome_args.get("failover_from") or ())
    for key in ("features", "classifier", "decision"):
        if not isinstance(data[key], dict):
            raise TypeError(f"{key} must be an object")
    return RouteRecord(
        ts=str(data["ts"]),
        request_id=str(data["request_id"]),
        endpoint=str(data["endpoint"]),
        model=str(data.get("model", "")),
        stream=bool(data.get("stream", False)),
        conversation=str(data.get("conversation", "")),
        features=data["features"],
        classifier=data["classifier"],
        decision=data["decision"],
        outcome=Outcome(**outcome_args),
        overhead_ms=float(data.get("overhead_ms") or 0.0),
        content=data.get("content"),
        rewrite=data.get("rewrite") if isinstance(data.get("rewrite"), dict) else None,
        schema_version=int(data["schema_version"]),
        extra=data.get("extra") or {},
    )
