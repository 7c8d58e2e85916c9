"""`specroute tail`: the decision log as one readable line per request, optionally followed
live (across rotation) with a per-class summary redrawn below the lines on a terminal.

`--json` passes the matching lines through unchanged, for `jq`. Lines that are not records we
read (partial, foreign, unknown `schema_version`) are skipped and counted, never fatal.
"""

from __future__ import annotations

import argparse
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final, TextIO

from decisionlog.readers import LogFollower, iter_lines
from decisionlog.records import ReadStats, RouteRecord, parse_line
from decisionlog.summary import (
    GroupSummary,
    record_backend,
    record_class,
    record_lang,
    record_reason,
    record_spec,
    record_tps,
    summarize,
)
from decisionlog.writer import rotated_set

CLEAR_BELOW: Final = "\x1b[J"


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Keep a record when it matches every given field (each a set of accepted values)."""

    classes: frozenset[str] = frozenset()
    langs: frozenset[str] = frozenset()
    backends: frozenset[str] = frozenset()
    reasons: frozenset[str] = frozenset()

    def matches(self, record: RouteRecord) -> bool:
        checks = (
            (self.classes, record_class(record)),
            (self.langs, record_lang(record)),
            (self.backends, record_backend(record)),
            (self.reasons, record_reason(record)),
        )
        return all(not wanted or value in wanted for wanted, value in checks)


def format_record(record: RouteRecord) -> str:
    """time, class/lang, the serving instance's speculation config and the reason, backend,
    TTFT, tokens, tokens/s, acceptance"""
    outcome = record.outcome
    clock = record.ts[11:19] if len(record.ts) >= 19 else record.ts
    reason = record_reason(record) + ("*" if record.decision.get("explored") else "")
    route = f"{record_spec(record):<12} {reason:<15.15}"
    parts = [
        clock,
        f"{record_class(record) + '/' + record_lang(record):<16.16}",
        route,
        f"{record_backend(record):<10.10}",
        f"ttft {_num(outcome.ttft_ms, '{:.0f}ms'):>7}",
        f"tok {_num(outcome.completion_tokens, '{}'):>5}",
        f"{_num(record_tps(record), '{:.1f}'):>6} tok/s",
        f"acc {_num(record.acceptance, '{:.2f}'):>4}",
    ]
    if outcome.status and not 200 <= outcome.status < 300 or outcome.error:
        parts.append(f"status {outcome.status} {outcome.error[:60]}".rstrip())
    if outcome.failover_from:
        parts.append("failover from " + ",".join(outcome.failover_from))
    pool = str(record.decision.get("pool") or "")
    if pool and pool not in ("mtp", "plain"):
        parts.append(f"pool {pool}")
    if record.rewrite:
        parts.append(f"rewrite {record.rewrite.get('label', '')}")
    return "  ".join(parts)


def _num(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def format_summary(summaries: Iterable[GroupSummary], stats: ReadStats, window: int) -> list[str]:
    """The live per-class block: requests, share to the speculating instances, acceptance,
    tokens/s (speculating, plain), measured and predicted speedup."""
    rows = list(summaries)
    header = (
        f"{'class':<14} {'reqs':>6} {'->spec':>6} {'acc':>5} {'spec tok/s':>10} "
        f"{'plain tok/s':>12} {'speedup':>8} {'pred':>6}"
    )
    lines = [f"-- per class, last {window} requests " + "-" * 40, header]
    for row in rows:
        lines.append(
            f"{row.key:<14.14} {row.requests:>6} {_pct(row.mtp_share):>6} "
            f"{_num(row.acceptance, '{:.2f}'):>5} {_num(row.tps_mtp, '{:.1f}'):>10} "
            f"{_num(row.tps_plain, '{:.1f}'):>12} {_num(row.speedup, '{:.2f}x'):>8} "
            f"{_num(row.predicted_speedup, '{:.2f}x'):>6}"
        )
    lines.append(f"({stats.summary()})")
    return lines


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


@dataclass
class TailOptions:
    path: str
    lines: int = 10
    follow: bool = False
    json: bool = False
    poll_s: float = 0.5
    window: int = 2000
    live_summary: bool = False  # redraw the summary block (follow mode on a terminal)
    record_filter: RecordFilter = RecordFilter()


class Tail:
    """Prints the last lines, then (follow mode) new lines as they arrive."""

    def __init__(self, options: TailOptions, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.out, self.err = out, err
        self.stats = ReadStats()
        self.recent: deque[RouteRecord] = deque(maxlen=options.window)
        self._summary_height = 0

    def run(
        self, stop: Callable[[], bool] = lambda: False, sleep: Callable[[float], None] = time.sleep
    ) -> int:
        follower = LogFollower(self.options.path) if self.options.follow else None
        if follower is not None:
            follower.poll()  # open at the current end before reading history: no line missed
        self._emit(self._history())
        if follower is None:
            self._report_skipped()
            return 0
        try:
            while not stop():
                self._emit(self._matching(follower.poll()))
                sleep(self.options.poll_s)
        except KeyboardInterrupt:
            pass
        finally:
            follower.close()
            self._report_skipped()
        return 0

    def _history(self) -> list[tuple[str, RouteRecord]]:
        if not rotated_set(self.options.path):
            return []
        last: deque[tuple[str, RouteRecord]] = deque(maxlen=max(self.options.lines, 0))
        for item in self._matching(iter_lines([self.options.path])):
            last.append(item)
        return list(last)

    def _matching(self, lines: Iterable[str]) -> Iterator[tuple[str, RouteRecord]]:
        for line in lines:
            record = parse_line(line, self.stats)
            if record is not None and self.options.record_filter.matches(record):
                self.recent.append(record)
                yield line, record

    def _emit(self, items: Iterable[tuple[str, RouteRecord]]) -> None:
        items = list(items)
        if not items and self._summary_height:
            return  # nothing new: leave the block as it is
        if self._summary_height:
            self.out.write(f"\x1b[{self._summary_height}F{CLEAR_BELOW}")
        for line, record in items:
            self.out.write((line if self.options.json else format_record(record)) + "\n")
        if self.options.live_summary and not self.options.json:
            block = format_summary(summarize(self.recent), self.stats, len(self.recent))
            self.out.write("\n".join(block) + "\n")
            self._summary_height = len(block)
        self.out.flush()

    def _report_skipped(self) -> None:
        if self.stats.skipped_malformed or self.stats.skipped_versions:
            self.err.write(f"specroute tail: {self.stats.summary()}\n")


def options_from_args(args: argparse.Namespace, *, is_tty: bool) -> TailOptions:
    return TailOptions(
        path=args.log,
        lines=args.lines,
        follow=args.follow,
        json=args.json,
        poll_s=args.poll,
        window=args.window,
        live_summary=args.follow and is_tty and not args.no_summary,
        record_filter=RecordFilter(
            classes=frozenset(args.cls or ()),
            langs=frozenset(args.lang or ()),
            backends=frozenset(args.backend or ()),
            reasons=frozenset(args.reason or ()),
        ),
    )
