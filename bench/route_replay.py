"""The route model's own prediction error on a decision log, replayed: each request predicted
from the records that had ended before it started, as the router would have learned them, at
the batch it joined and with the tokens it went on to produce (bench.prediction_ceiling shows
it beside the hindsight fits).

Where the router's own error (its logged `queue_ms + service_ms`) mixes the model with the
reply's length and the wait it guessed for a slot, this isolates the model's time per request:
its prefill (the rate learned for the instance's config, over the uncached prompt) plus the
tokens x its pace there (the plain pace over the config's speedup for this request) x its batch
term at the batch it joined (`BatchCurve.joining`). A change to the learner can be judged on the
logs of earlier runs, without running them again.

Pure: records in, errors out; no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Final, NamedTuple

import numpy as np

from decisionlog.records import RouteRecord
from policies.learner.observation import PROBE_REASON, Observation, observation_from_record
from policies.learner.routemodel import PLAIN_CONFIG, RouteEvidence, RouteModel, observe
from policies.policyfile.machine import MachinePrior
from policies.policyfile.schema import Assume

DEFAULT_ASSUME: Final = Assume()  # the policy's defaults: what a request left unset is


class Timed(NamedTuple):
    """One answered request of the log: when it started and ended (s), and what it taught."""

    start: float
    end: float
    request_id: str
    observation: Observation
    batch_start: int  # the batch it joined, itself included (1: none logged)
    total_ms: float


def replay_errors(records: Iterable[RouteRecord], judged: Collection[str],
                  prior: MachinePrior, assume: Assume = DEFAULT_ASSUME) -> list[float]:
    """|predicted - total_ms| / total_ms of each request in `judged` (by request id), each
    predicted by the route model learned from the records that ended before it started (the
    start-up probe's included, as the router learns them)."""
    timed = [t for record in records if (t := _timed(record)) is not None]
    by_end = sorted(timed, key=lambda t: t.end)
    evidence, learned, errors = RouteEvidence(), 0, []
    for request in sorted(timed, key=lambda t: t.start):
        while learned < len(by_end) and by_end[learned].end <= request.start:
            evidence = observe(evidence, by_end[learned].observation, assume)
            learned += 1
        if request.request_id in judged:
            predicted = predicted_ms(RouteModel(prior, evidence), request, assume)
            errors.append(abs(predicted - request.total_ms) / request.total_ms)
    return errors


def predicted_ms(model: RouteModel, request: Timed, assume: Assume = DEFAULT_ASSUME) -> float:
    """The model's time for `request` on the instance that served it, at its tokens."""
    o = request.observation
    x = None if o.inputs is None else np.array(o.inputs, dtype=np.float64)
    pace = model.t_plain_ms
    if o.config != PLAIN_CONFIG:
        speedup = (model.speedup(x, o.config) if x is not None and o.greedy(assume)
                   else model.sampled_speedup(o.config))
        pace /= speedup.speedup
    joining = model.batch_curve(o.backend).joining(request.batch_start)
    prefill = max(o.prompt_tokens - o.cached_tokens, 0) * model.prefill_ms_per_token(o.config)
    return prefill + o.completion_tokens * pace * joining


def judged_requests(records: Iterable[RouteRecord]) -> set[str]:
    """The client requests of a log (the start-up probe's left out)."""
    return {r.request_id for r in records if r.decision.get("reason") != PROBE_REASON}


def _timed(record: RouteRecord) -> Timed | None:
    o = record.outcome
    observation = observation_from_record(record)
    if observation is None or not o.total_ms or o.total_ms <= 0 or not o.backend:
        return None
    end = datetime.fromisoformat(record.ts).timestamp()
    batch = o.batch_start if o.batch_start and math.isfinite(o.batch_start) else 1.0
    return Timed(end - o.total_ms / 1000.0, end, record.request_id, observation,
                 max(round(batch), 1), o.total_ms)
