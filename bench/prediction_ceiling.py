"""How well any prediction of a request's time could have done on a decision log, in hindsight:
the ceiling beside the router's own prediction error (issue 50).

For each answered request of a log it fits, by least squares over the log's own requests,

    log(total_ms / completion tokens) = a[instance, class] + per instance, b . columns

and reports the median and 90th percentile of |fitted - total_ms| / total_ms over the requests
asked about. The fit has seen the very requests it is judged on (its parameters are the best
for them), so no predictor of the same form does better on them: a floor under the error, not
an estimate of it. Beside it, the same form learned online: each request predicted from the
requests that had ended before it started (a router's own position, without its priors). Two
sets of columns:

- known at the start: log(the batch the request joined) and log(1 + the requests on the other
  instances then): what a router can know when it sends the request;
- with the future: log(the mean batch over its life) and log(1 + the mean number on the other
  instances over its life): what it would know if it saw the requests still to come.

Each set also with the batch's classes in place of its size: per instance, log(1 + the requests
of each class beside it on its own instance), at its start or over its life (on llama-server's
n-gram instance a story beside copy edits slows with their drafts, an edit beside stories less).

Beside the router's own error, its route model replayed over the log (`bench.route_replay`:
each request from the records ended before it started, at its tokens and the batch it joined).

A request's life is [end - total_ms, end], its end the record's `ts` (written when the answer
ends). The start-up probe's records and the failed ones are left out.

    python -m bench.prediction_ceiling /tmp/arms/real/run-2/decisions.jsonl [...]

Pure but for `log_ceiling` and `main`, which read decision logs.
"""

from __future__ import annotations

import argparse
import math
import sys
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import numpy as np

from bench.arms_batch import ErrorSummary, prediction_errors, summarize
from bench.route_replay import replay_errors
from decisionlog.readers import iter_log_records
from decisionlog.records import RouteRecord
from policies.learner.observation import PROBE_REASON
from policies.policyfile.machine import BUILTIN, NEUTRAL, MachinePrior

if TYPE_CHECKING:
    from bench.arms import Served


class Lived(NamedTuple):
    """One answered request as the fit sees it."""

    request_id: str
    instance: str
    cls: str
    tokens: int
    total_ms: float
    start: float  # s, the wall clock
    end: float
    batch_start: float  # the batch it joined, itself included (1: none logged)
    batch_mean: float  # the mean batch over its life (1: none logged)
    others_start: float = 0.0  # requests on the other instances when it started
    others_mean: float = 0.0  # their mean number over its life
    # the requests beside it on its own instance, by class: when it started, and their mean
    # number over its life
    beside_start: tuple[tuple[str, float], ...] = ()
    beside_mean: tuple[tuple[str, float], ...] = ()

    def beside(self, cls: str, *, future: bool) -> float:
        """The requests of class `cls` beside it on its instance (at its start, or their mean
        over its life)."""
        return dict(self.beside_mean if future else self.beside_start).get(cls, 0.0)


class Ceiling(NamedTuple):
    """The hindsight fit's errors: with what was known at each request's start, and with the
    batch it went on to run in; and the online fit's, with what was known at the start."""

    known: ErrorSummary
    future: ErrorSummary
    online: ErrorSummary | None  # None: no request had enough ended before it to learn from


Column = Callable[[Lived], float]
KNOWN: tuple[Column, ...] = (lambda r: math.log(r.batch_start),
                             lambda r: math.log1p(r.others_start))
FUTURE: tuple[Column, ...] = (lambda r: math.log(r.batch_mean),
                              lambda r: math.log1p(r.others_mean))


def lived_requests(records: Iterable[RouteRecord]) -> list[Lived]:
    """The answered, timed requests of a log (the probe's left out), each with what ran on the
    other instances beside it."""
    alone = sorted((lived for record in records if (lived := _lived(record)) is not None),
                   key=attrgetter("start"))
    starts = [r.start for r in alone]
    longest = max((r.end - r.start for r in alone), default=0.0)
    # only a request that started within the longest life before this one can overlap it
    return [_with_others(lived, alone[bisect_left(starts, lived.start - longest):
                                      bisect_left(starts, lived.end)])
            for lived in alone]


def _lived(record: RouteRecord) -> Lived | None:
    o = record.outcome
    if (o.error or not o.backend or not o.total_ms or o.total_ms <= 0
            or not o.completion_tokens or record.decision.get("reason") == PROBE_REASON):
        return None
    end = datetime.fromisoformat(record.ts).timestamp()
    return Lived(record.request_id, o.backend, str(record.classifier.get("class", "")),
                 o.completion_tokens, o.total_ms, end - o.total_ms / 1000.0, end,
                 max(float(o.batch_start or 1), 1.0), max(o.batch_mean or 1.0, 1.0))


def _with_others(lived: Lived, near: Sequence[Lived]) -> Lived:
    overlapping = [r for r in near if r is not lived
                   and r.start < lived.end and r.end > lived.start]
    others = [r for r in overlapping if r.instance != lived.instance]
    beside = [r for r in overlapping if r.instance == lived.instance]
    at_start, mean = _counted(lived, others)
    classes = sorted({r.cls for r in beside})
    by_class = {cls: _counted(lived, [r for r in beside if r.cls == cls]) for cls in classes}
    return lived._replace(others_start=at_start, others_mean=mean,
                          beside_start=tuple((c, by_class[c][0]) for c in classes),
                          beside_mean=tuple((c, by_class[c][1]) for c in classes))


def _counted(lived: Lived, near: Sequence[Lived]) -> tuple[float, float]:
    """How many of `near` (overlapping `lived`) ran when it started, and their mean number
    over its life."""
    at_start = float(sum(r.start <= lived.start for r in near))
    life = lived.end - lived.start
    overlap = sum(min(r.end, lived.end) - max(r.start, lived.start) for r in near)
    return at_start, overlap / life if life > 0 else at_start


def composition(classes: Iterable[str], *, future: bool) -> tuple[Column, ...]:
    """The batch's classes as columns: log(1 + the requests of each class beside the request
    on its instance), at its start or (`future`) over its life."""
    return tuple(_beside_column(cls, future) for cls in sorted(set(classes)))


def _beside_column(cls: str, future: bool) -> Column:
    return lambda r: math.log1p(r.beside(cls, future=future))


def hindsight_errors(lived: Sequence[Lived], columns: Sequence[Column],
                     judged: Collection[str]) -> list[float]:
    """The relative errors, on the requests `judged` (by request id), of the least-squares fit
    of log(ms per token) over all of `lived`: a level per instance and class, and per instance
    a slope on each of `columns`."""
    if not lived:
        return []
    levels = sorted({(r.instance, r.cls) for r in lived})
    instances = sorted({r.instance for r in lived})
    rows = np.array([_row(r, levels, instances, columns) for r in lived])
    logs = np.array([math.log(r.total_ms / r.tokens) for r in lived])
    weights, *_ = np.linalg.lstsq(rows, logs, rcond=None)
    fitted = np.exp(rows @ weights)
    return [abs(fitted[i] * r.tokens - r.total_ms) / r.total_ms
            for i, r in enumerate(lived) if r.request_id in judged]


# The online fit's slopes are pulled towards 0 (flat) by this much: with a few requests in a
# batch ended, a free slope is unbounded. Its levels are free.
ONLINE_RIDGE: Final = 0.5
# An online prediction needs this many requests ended before it, one of them of its instance
# and class.
ONLINE_FIRST: Final = 8


def online_errors(lived: Sequence[Lived], columns: Sequence[Column],
                  judged: Collection[str]) -> list[float]:
    """The relative errors, on the requests `judged`, of the same fit as `hindsight_errors`
    made before each request from the requests that had ended by its start (ridge on the
    slopes: `ONLINE_RIDGE`); one with too little before it (`ONLINE_FIRST`) is not judged.
    The sums of the ended requests grow as the requests start (a level or slope no request
    has yet: weight 0, as if absent)."""
    levels = sorted({(r.instance, r.cls) for r in lived})
    instances = sorted({r.instance for r in lived})
    rows = np.array([_row(r, levels, instances, columns) for r in lived])
    logs = np.array([math.log(r.total_ms / r.tokens) for r in lived])
    size = rows.shape[1] if len(lived) else 0
    ridge = np.diag([0.0] * len(levels) + [ONLINE_RIDGE] * (size - len(levels)))
    xtx, xty = np.zeros((size, size)), np.zeros(size)
    by_end = sorted(range(len(lived)), key=lambda i: lived[i].end)
    ended, seen, errors = 0, set(), []
    for i in sorted(range(len(lived)), key=lambda i: lived[i].start):
        request = lived[i]
        while ended < len(by_end) and lived[by_end[ended]].end <= request.start:
            j = by_end[ended]
            xtx += np.outer(rows[j], rows[j])
            xty += rows[j] * logs[j]
            seen.add((lived[j].instance, lived[j].cls))
            ended += 1
        if (request.request_id not in judged or ended < ONLINE_FIRST
                or (request.instance, request.cls) not in seen):
            continue
        weights = np.linalg.lstsq(xtx + ridge, xty, rcond=None)[0]
        fitted = math.exp(float(rows[i] @ weights))
        errors.append(abs(fitted * request.tokens - request.total_ms) / request.total_ms)
    return errors


def _row(r: Lived, levels: Sequence[tuple[str, str]], instances: Sequence[str],
         columns: Sequence[Column]) -> list[float]:
    level = [1.0 if (r.instance, r.cls) == key else 0.0 for key in levels]
    slopes = [column(r) if r.instance == name else 0.0
              for column in columns for name in instances]
    return level + slopes


def ceiling(lived: Sequence[Lived], judged: Collection[str]) -> Ceiling | None:
    """Both fits' error summaries on the requests `judged` (None: none of them lived)."""
    known = summarize(hindsight_errors(lived, KNOWN, judged))
    future = summarize(hindsight_errors(lived, FUTURE, judged))
    if known is None or future is None:
        return None
    return Ceiling(known, future, summarize(online_errors(lived, KNOWN, judged)))


def log_ceiling(log: Path, served: Sequence[Served]) -> Ceiling | None:
    """`ceiling` fitted over every request of the decision log `log` (a warm-up's included),
    judged on the requests `served` (bench.arms's measured ones, by the proxy's request id)."""
    if not log.exists():
        return None
    judged = {s.request_id for s in served if s.request_id and not s.error}
    return ceiling(lived_requests(iter_log_records([log])), judged)


def report(log: Path, prior: MachinePrior = NEUTRAL) -> str:
    """One log's lines: the router's own prediction error, its route model's replayed from
    `prior` (`bench.route_replay`), then the fits', all over the same requests (those whose
    decision predicted a finish)."""
    records = list(iter_log_records([log]))
    lived = lived_requests(records)
    judged = {r.request_id for r in records if r.decision.get("reason") != PROBE_REASON}
    own = summarize(prediction_errors(records, judged))
    if own is None:  # pinned requests predict no finish: judge the fits on every one
        judged = {r.request_id for r in lived}
    bounds = ceiling(lived, judged)
    instances = len({r.instance for r in lived})
    lines = [f"{log}: {len(lived)} answered requests on {instances} instances"]
    lines.append(f"  the router's prediction          {_summary(own)}")
    replayed = summarize(replay_errors(records, judged, prior))
    lines.append(f"  its route model, replayed        {_summary(replayed)}")
    if bounds is not None:
        classes = {r.cls for r in lived}
        by_class = [summarize(hindsight_errors(lived, composition(classes, future=future),
                                               judged)) for future in (False, True)]
        lines.append(f"  hindsight fit, known at start    {_summary(bounds.known)}")
        lines.append(f"    the batch's classes instead    {_summary(by_class[0])}")
        lines.append(f"  hindsight fit, with the future   {_summary(bounds.future)}")
        lines.append(f"    the batch's classes instead    {_summary(by_class[1])}")
        lines.append(f"  online fit, known at start       {_summary(bounds.online)}")
    return "\n".join(lines)


def _summary(summary: ErrorSummary | None) -> str:
    if summary is None:
        return "-"
    return f"median {summary.median:.0%}  p90 {summary.p90:.0%}  (n={summary.n})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prediction_ceiling",
        description="the least prediction error a fit of each request's time could reach on a "
                    "decision log, in hindsight, with what was known at each start and with "
                    "the batch it went on to run in")
    parser.add_argument("logs", nargs="+", type=Path, help="decision logs (decisions.jsonl)")
    parser.add_argument("--prior", default=NEUTRAL.name, choices=sorted(BUILTIN),
                        help="the machine prior the route model is replayed from (the "
                             "policy's `prior:`; default %(default)s)")
    args = parser.parse_args(argv)
    missing = [str(log) for log in args.logs if not log.is_file()]
    if missing:
        print(f"bench.prediction_ceiling: no such log: {', '.join(missing)}", file=sys.stderr)
        return 2
    prior = BUILTIN[args.prior]
    print("\n".join(report(log, prior) for log in args.logs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
