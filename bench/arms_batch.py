"""bench.arms's figures for instances that serve several requests at once (issue 50): per load,
the makespans side by side, auto's ratio to the best static arm, where auto sent the copy edits
and how well its decisions predicted each request's finish.

- The static arms are least connections and each config alone (`plain`, `ngram`, ...); auto's
  ratio is the best one's makespan over auto's (above 1: auto finished sooner).
- The copy edits are the edits that n-gram alone (the 1-client runs) served `COPY_WIN` faster
  than every other config alone; the share is of those that auto sent to n-gram.
- The hand rules (`--hand-rules`) are written knowing each request's class and where it is
  faster alone (bench.arms `HandRule`): their best makespan over the best static arm's is the
  ceiling of routing by class and load, measured on the same instances, beside auto's ratio.
- The prediction error of one request is |(queue_ms + service_ms) - total_ms| / total_ms, from
  auto's decision log (read through `decisionlog.readers`), over the measured requests only:
  the warm-up's and the start-up probe's records are not counted. Beside it, the same over the
  requests whose batch over their life (`batch_mean`) came out as the decision predicted it
  (`decision.batch`, within half a request). And the ceiling (`bench.prediction_ceiling`):
  the error of a fit of each request's time made in hindsight over the same log, with what was
  known at its start and with the batch it went on to run in, and of the same fit learned
  online.

Pure but for `log_errors`, which reads one decision log.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from decisionlog.readers import iter_log_records
from decisionlog.records import RouteRecord

if TYPE_CHECKING:
    from bench.arms import Served
    from bench.prediction_ceiling import Ceiling

LC = "least-conn"
HAND = "hand-"  # a hand rule's arm: `hand-K`, K its threshold


def declared_slots(slots: int) -> int | None:
    """The slots each instance is declared to serve in the proxy's config: none at 1 (what the
    engine reports, as before `--slots`), else `slots`."""
    return slots if slots > 1 else None


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """Relative prediction errors: how many, their median and 90th percentile (nearest rank)."""

    n: int
    median: float
    p90: float


def prediction_errors(records: Iterable[RouteRecord], request_ids: Collection[str],
                      *, steady: bool = False) -> list[float]:
    """|(queue_ms + service_ms) - total_ms| / total_ms of each answered record in
    `request_ids` whose decision predicted both parts (a pinned request's does not).
    `steady`: only those whose batch over their life came out as predicted (within half a
    request): what is left of the error when the future load was guessed right."""
    errors = []
    for record in records:
        if steady and not _batch_as_predicted(record):
            continue
        if record.request_id not in request_ids or record.outcome.error:
            continue
        queue, service = record.decision.get("queue_ms"), record.decision.get("service_ms")
        total = record.outcome.total_ms
        if not isinstance(queue, int | float) or not isinstance(service, int | float) \
                or not total or total <= 0:
            continue
        errors.append(abs(queue + service - total) / total)
    return errors


def _batch_as_predicted(record: RouteRecord) -> bool:
    predicted, lived = record.decision.get("batch"), record.outcome.batch_mean
    return (isinstance(predicted, int | float) and lived is not None
            and abs(lived - predicted) < 0.5)


def summarize(errors: Sequence[float]) -> ErrorSummary | None:
    """The errors' count, median and 90th percentile (None: none)."""
    if not errors:
        return None
    ordered = sorted(errors)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return ErrorSummary(len(ordered), median, nearest_rank(ordered, 0.9))


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of sorted values by nearest rank: the least value with at least a `q`
    share of them at or below it."""
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def log_errors(log: Path, served: Sequence[Served], *, steady: bool = False
               ) -> ErrorSummary | None:
    """`summarize` of the prediction errors in the decision log `log` of the requests `served`
    (by the proxy's request id: the warm-up's and the probe's are left out); `steady`: of
    those whose batch came out as predicted only."""
    if not log.exists():
        return None
    ids = {s.request_id for s in served if s.request_id and not s.error}
    return summarize(prediction_errors(iter_log_records([log]), ids, steady=steady))


def share_on(backend: str | None, served: Sequence[Served], indices: Collection[int]
             ) -> float | None:
    """The share of the requests `indices` among `served` that `backend` answered (None: no
    such backend, or none of them served)."""
    chosen = [s for s in served if s.index in indices and not s.error]
    if backend is None or not chosen:
        return None
    return sum(s.backend == backend for s in chosen) / len(chosen)


@dataclass(frozen=True, slots=True)
class BatchRow:
    load: str
    slots: int
    makespan: Mapping[str, float]  # least-conn, each config alone, auto (closed loop: wall s)
    best: str  # the static arm of the least makespan
    auto_x_best: float  # its makespan over auto's
    copy_edits: int  # edits n-gram alone served COPY_WIN faster than every other config
    copy_edits_on_ngram: float | None  # the share of them auto sent to n-gram
    prediction: ErrorSummary | None  # auto's, the measured requests only
    # the hand rules' makespans (`hand-K` -> wall s), and the best one's over the best static
    # arm's makespan inverted as auto's is (above 1: it finished sooner; nan: none ran)
    hand: Mapping[str, float] = field(default_factory=dict)
    hand_x_best: float = math.nan
    # auto's error on the requests whose batch over their life came out as predicted
    steady: ErrorSummary | None = None
    ceiling: Ceiling | None = None  # the hindsight and online fits' on auto's log


def batch_row(load: str, slots: int, totals: Mapping[str, float], roles: Sequence[str],
              auto: Sequence[Served], copy_edits: Collection[int], ngram: str | None,
              prediction: ErrorSummary | None, steady: ErrorSummary | None = None,
              ceiling: Ceiling | None = None) -> BatchRow:
    """One load's figures from each arm's total (`totals`: arm -> seconds), the configs
    `roles`, auto's requests, the copy edits (request indices) and n-gram's instance name."""
    static = [LC, *roles]
    makespan = {arm: totals.get(arm, math.nan) for arm in (*static, "auto")}
    best = min(static, key=lambda arm: math.inf if math.isnan(makespan[arm]) else makespan[arm])
    ratio = makespan[best] / makespan["auto"] if makespan["auto"] > 0 else math.nan
    hand = {arm: total for arm, total in totals.items() if arm.startswith(HAND)}
    fastest_hand = min(hand.values(), default=math.nan)
    return BatchRow(load, slots, makespan, best, ratio, len(copy_edits),
                    share_on(ngram, auto, copy_edits), prediction, hand,
                    makespan[best] / fastest_hand if fastest_hand > 0 else math.nan, steady,
                    ceiling)


def format_batch(rows: Sequence[BatchRow]) -> str:
    """The loads side by side: makespans, auto's ratio to the best static arm, its share of
    the copy edits on n-gram and its prediction error (median and 90th percentile)."""
    if not rows:
        return ""
    arms = [*rows[0].makespan, *rows[0].hand]
    head = (f"  {'load':<10} {'slots':>5}" + "".join(f"{arm:>11}" for arm in arms)
            + f"  {'auto x best static':>20}  {'best hand x best static':>23}"
            f"  {'copy edits->ngram':>17}  {'|pred-actual|/actual median/p90 (n)':>36}"
            f"  {'batch as predicted: same':>26}  {'fit in hindsight: known at start':>32}"
            f"  {'with the future':>16}  {'online fit':>16}")
    lines = [f"  batch figures (issue 50; makespan s, after the warm-up):\n{head}"]
    for row in rows:
        cells = "".join(f"{row.makespan.get(arm, row.hand.get(arm, math.nan)):>11.2f}"
                        for arm in arms)
        ratio = f"{row.auto_x_best:.3f} ({row.best})"
        hand = "-" if math.isnan(row.hand_x_best) else f"{row.hand_x_best:.3f}"
        share = ("-" if row.copy_edits_on_ngram is None
                 else f"{row.copy_edits_on_ngram:.0%} of {row.copy_edits}")
        c = row.ceiling
        error, steady, known, future, online = (_errors(summary) for summary in (
            row.prediction, row.steady, c and c.known, c and c.future, c and c.online))
        lines.append(f"  {row.load:<10} {row.slots:>5}{cells}  {ratio:>20}  {hand:>23}"
                     f"  {share:>17}  {error:>36}  {steady:>26}  {known:>32}  {future:>16}"
                     f"  {online:>16}")
    return "\n".join(lines)


def _errors(summary: ErrorSummary | None) -> str:
    return "-" if summary is None else f"{summary.median:.0%}/{summary.p90:.0%} ({summary.n})"
