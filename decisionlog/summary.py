"""Per-class aggregates of decision-log records: the one source of the numbers `tail`'s live
summary, `report` and the dashboard show.

Pure: functions over `RouteRecord`s; no I/O, no clock (time buckets come from the records' `ts`).

Tokens/s of a group is its throughput, total completion tokens over total decode time (each
request's decode time being tokens / its decode tokens/s), so a long reply weighs more than a
short one. Acceptance is pooled: accepted drafts over drafted tokens. "Estimated gain" compares
the time the routed traffic took with what the same tokens would have taken at the class's
measured tokens/s on one profile only; it is an estimate from class averages, not a replay.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final

from decisionlog.records import RouteRecord

PROFILES: Final = ("mtp", "plain")
UNKNOWN: Final = "?"


def record_class(record: RouteRecord) -> str:
    return str(record.classifier.get("class") or UNKNOWN)


def record_lang(record: RouteRecord) -> str:
    return str(record.classifier.get("lang") or UNKNOWN)


def record_profile(record: RouteRecord) -> str:
    """The profile that served the request (after any failover), else the one decided."""
    return record.outcome.profile or str(record.decision.get("profile") or UNKNOWN)


def record_spec(record: RouteRecord) -> str:
    """The speculation config of the instance that served it (`backends.spec` `spec_key`:
    `plain` for none, `mtp`, `ngram-simple`, `draft`, ...); a record from before configs were
    logged names its profile, the shorthand (`mtp`: any instance that speculated)."""
    return record.outcome.spec or record_profile(record)


def record_backend(record: RouteRecord) -> str:
    return record.outcome.backend or str(record.decision.get("backend") or UNKNOWN)


def record_reason(record: RouteRecord) -> str:
    return str(record.decision.get("reason") or UNKNOWN)


def record_tps(record: RouteRecord) -> float | None:
    """Decode tokens/s measured from the stream, else as the backend reported it."""
    tps = record.outcome.decode_tps or record.outcome.backend_tps
    return tps if tps and tps > 0 else None


def is_ok(record: RouteRecord) -> bool:
    return 200 <= record.outcome.status < 300 and not record.outcome.error


def by_class(record: RouteRecord) -> str:
    return record_class(record)


def by_class_lang(record: RouteRecord) -> str:
    return f"{record_class(record)}/{record_lang(record)}"


@dataclass
class _Accumulator:
    requests: int = 0
    errors: int = 0
    explored: int = 0
    mtp_requests: int = 0
    draft_n: int = 0
    draft_accepted: int = 0
    tokens: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0.0))
    decode_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0.0))
    samples: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0))
    ttft_ms: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PROFILES})
    predicted: list[float] = field(default_factory=list)  # the decisions' predicted speedups
    skipped: int = 0  # cycles the margin gate skipped, on mtp requests that reported drafts
    # stratum (what the decision knew: predicted speedup or p_spec bin) -> profile -> [tokens, s]
    strata: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, record: RouteRecord) -> None:
        self.requests += 1
        profile = record_profile(record)
        if record.decision.get("explored"):
            self.explored += 1
        predicted = record.decision.get("speedup")
        if isinstance(predicted, (int, float)) and not isinstance(predicted, bool):
            self.predicted.append(float(predicted))
        if not is_ok(record):
            self.errors += 1
            return
        if profile == "mtp":
            self.mtp_requests += 1
            if record.outcome.draft_n:
                self.draft_n += record.outcome.draft_n
                self.draft_accepted += record.outcome.draft_accepted or 0
                made = record.outcome.completion_tokens or 0
                accepted = record.outcome.draft_accepted or 0
                self.skipped += max(0, made - record.outcome.draft_n - accepted)
        if profile not in self.tokens:
            return
        if record.outcome.ttft_ms is not None:
            self.ttft_ms[profile].append(record.outcome.ttft_ms)
        tps = record_tps(record)
        if tps is not None:
            weight = float(record.outcome.completion_tokens or 1)
            self.tokens[profile] += weight
            self.decode_s[profile] += weight / tps
            self.samples[profile] += 1
            cell = self.strata.setdefault(_stratum(record), {}).setdefault(profile, [0.0, 0.0])
            cell[0] += weight
            cell[1] += weight / tps

    def matched_speedup(self) -> float | None:
        """mtp over plain tokens/s compared like with like: within each stratum of what the
        decision knew (requests the router thought alike), weighted by the stratum's tokens;
        strata served by one profile only are left out. Explored and misread requests then
        stand beside requests the router judged the same, not beside the whole class."""
        ratio_sum = weight_sum = 0.0
        for cells in self.strata.values():
            if "mtp" not in cells or "plain" not in cells:
                continue
            (mt, ms), (pt, ps) = cells["mtp"], cells["plain"]
            if ms <= 0 or ps <= 0:
                continue
            weight = mt + pt
            ratio_sum += weight * (mt / ms) / (pt / ps)
            weight_sum += weight
        return ratio_sum / weight_sum if weight_sum else None


@dataclass(frozen=True, slots=True)
class GroupSummary:
    key: str
    requests: int
    errors: int
    mtp_share: float | None  # of successful requests, the share served by `mtp`
    explored_share: float
    acceptance: float | None  # pooled over mtp requests that reported drafts
    draft_n: int
    tps_mtp: float | None
    tps_plain: float | None
    n_tps_mtp: int
    n_tps_plain: int
    ttft_p50_mtp: float | None
    ttft_p50_plain: float | None
    predicted_speedup: float | None  # mean mtp speedup the decisions predicted for the group
    matched_speedup: float | None  # measured like with like (see _Accumulator.matched_speedup)
    gate_skip: float | None  # share of mtp cycles the margin gate skipped (drafts reported)
    gain_vs_always_mtp: float | None
    gain_vs_never_mtp: float | None
    tokens: float  # completion tokens of the requests with a measured tokens/s
    decode_s: float  # their decode time as routed

    @property
    def speedup(self) -> float | None:
        """Measured mtp tokens/s over plain tokens/s (needs both profiles measured)."""
        if self.tps_mtp is None or self.tps_plain is None:
            return None
        return self.tps_mtp / self.tps_plain


def summarize(
    records: Iterable[RouteRecord], key: Callable[[RouteRecord], str] = by_class
) -> list[GroupSummary]:
    """One summary per group, sorted by requests (most first), then name."""
    groups: dict[str, _Accumulator] = {}
    for record in records:
        groups.setdefault(key(record), _Accumulator()).add(record)
    summaries = [_finish(name, acc) for name, acc in groups.items()]
    return sorted(summaries, key=lambda s: (-s.requests, s.key))


def total(summaries: Sequence[GroupSummary], records: Iterable[RouteRecord]) -> GroupSummary:
    """The summary of all records as one group, with gains summed over the groups' estimates."""
    everything = summarize(records, key=lambda _: "all")
    pooled = everything[0] if everything else _finish("all", _Accumulator())
    return _with_gains(pooled, summaries)


def _finish(name: str, acc: _Accumulator) -> GroupSummary:
    ok = acc.requests - acc.errors
    tps = {p: (acc.tokens[p] / acc.decode_s[p]) if acc.decode_s[p] > 0 else None for p in PROFILES}
    routed_s = acc.decode_s["mtp"] + acc.decode_s["plain"]
    all_tokens = acc.tokens["mtp"] + acc.tokens["plain"]
    return GroupSummary(
        key=name,
        requests=acc.requests,
        errors=acc.errors,
        mtp_share=acc.mtp_requests / ok if ok else None,
        explored_share=acc.explored / acc.requests if acc.requests else 0.0,
        acceptance=acc.draft_accepted / acc.draft_n if acc.draft_n else None,
        draft_n=acc.draft_n,
        tps_mtp=tps["mtp"],
        tps_plain=tps["plain"],
        n_tps_mtp=acc.samples["mtp"],
        n_tps_plain=acc.samples["plain"],
        ttft_p50_mtp=_median_or_none(acc.ttft_ms["mtp"]),
        ttft_p50_plain=_median_or_none(acc.ttft_ms["plain"]),
        predicted_speedup=sum(acc.predicted) / len(acc.predicted) if acc.predicted else None,
        matched_speedup=acc.matched_speedup(),
        gate_skip=acc.skipped / (acc.skipped + acc.draft_n) if acc.draft_n else None,
        gain_vs_always_mtp=_gain(all_tokens, routed_s, tps["mtp"], tps["plain"]),
        gain_vs_never_mtp=_gain(all_tokens, routed_s, tps["plain"], tps["mtp"]),
        tokens=all_tokens,
        decode_s=routed_s,
    )


def _stratum(record: RouteRecord) -> str:
    """What the decision knew of the request: its predicted speedup (2% bins of the log), or
    for older records the classifier's p_spec (tenths)."""
    predicted = record.decision.get("speedup")
    if isinstance(predicted, (int, float)) and not isinstance(predicted, bool) and predicted > 0:
        return f"s{round(math.log(predicted) / 0.02)}"
    p_spec = record.classifier.get("p_spec")
    if isinstance(p_spec, (int, float)) and not isinstance(p_spec, bool):
        return f"p{min(9, max(0, int(p_spec * 10)))}"
    return "-"


def _gain(
    tokens: float, routed_s: float, single: float | None, other: float | None
) -> float | None:
    """How much faster the routed traffic was than all of it at `single` tokens/s (0.05: 5%)."""
    if single is None or other is None or routed_s <= 0:
        return None
    return (tokens / single) / routed_s - 1.0


def _with_gains(pooled: GroupSummary, groups: Sequence[GroupSummary]) -> GroupSummary:
    """Overall gains: each group's tokens at its own single-profile rate, summed, against the
    summed routed time (groups without both profiles measured are left out)."""
    always = never = routed = tokens = 0.0
    for group in groups:
        if group.tps_mtp is None or group.tps_plain is None:
            continue
        always += group.tokens / group.tps_mtp
        never += group.tokens / group.tps_plain
        routed += group.decode_s
        tokens += group.tokens
    if routed <= 0:
        return replace(pooled, gain_vs_always_mtp=None, gain_vs_never_mtp=None)
    return replace(
        pooled, gain_vs_always_mtp=always / routed - 1.0, gain_vs_never_mtp=never / routed - 1.0
    )


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def parse_ts(ts: str) -> datetime | None:
    """A record's timestamp (ISO-8601, `Z` accepted), None when unreadable."""
    try:
        when = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Bucket:
    start: str  # ISO-8601 start of the bucket
    groups: tuple[GroupSummary, ...]


def timeline(
    records: Iterable[RouteRecord],
    bucket_s: float,
    key: Callable[[RouteRecord], str] = by_class,
) -> list[Bucket]:
    """Per-group summaries in consecutive time buckets of `bucket_s` seconds (oldest first);
    records with an unreadable `ts` are left out."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be > 0")
    buckets: dict[int, list[RouteRecord]] = {}
    for record in records:
        when = parse_ts(record.ts)
        if when is not None:
            buckets.setdefault(int(when.timestamp() // bucket_s), []).append(record)
    return [
        Bucket(
            start=datetime.fromtimestamp(index * bucket_s, tz=UTC).isoformat(),
            groups=tuple(summarize(members, key)),
        )
        for index, members in sorted(buckets.items())
    ]
