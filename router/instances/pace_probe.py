"""The startup probe's answers as the decision log's first records: this machine's paces,
measured on every instance before the first client request is routed.

The capability probe (backends.capability) times two short greedy generations per backend (a
copy-heavy one and a free-form one), one at a time. Each answer becomes an ordinary record
(decision reason `probe`, request id `probe_{backend}_{kind}`, `outcome.spec` the instance's
speculation key) that goes through the record sinks like any request's: the online route model
learns from it at once, the log keeps it for the periodic learner, `policy explain` and the
report. Then the paces are held against the machine prior's: where the prior is far off, the
log and `/readyz` say so.

No I/O: records and notes from the probe's result, the scorer and the time passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from backends.capability import ProbeResult, TimedProbe
from backends.spec import BackendSpec
from classifiers.features import TokenCounter, extract
from classifiers.request_view import view_request
from classifiers.scorer import Scorer, score_safely
from decisionlog.records import Outcome, RouteRecord
from policies import (
    PROBE_REASON,
    RouteModel,
    discount_note,
    far,
    observation_from_record,
    prior_pace,
    wall_rate,
)

PROBE_RULE = "startup_probe"


def probe_records(
    result: ProbeResult, specs: Sequence[BackendSpec], scorer: Scorer,
    count_tokens: TokenCounter | None, ts: datetime,
) -> list[RouteRecord]:
    """One record per probe answer with a decode worth timing, backend by backend."""
    configured = {spec.name: spec for spec in specs}
    stamp = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return [_record(configured[name], kind, probe, scorer, count_tokens, stamp)
            for name, answers in result.timed.items() if name in configured
            for kind, probe in answers.items() if (probe.report.completion_tokens or 0) >= 2]


def _record(spec: BackendSpec, kind: str, probe: TimedProbe, scorer: Scorer,
            count_tokens: TokenCounter | None, ts: str) -> RouteRecord:
    name, profile = spec.name, spec.profile
    view = view_request("chat", dict(probe.body))
    features = extract(view, count_tokens)
    scored = score_safely(scorer, view, features)
    report = probe.report
    tokens = report.completion_tokens or 0
    # the copy probe quotes a module (~200 tokens): its wall rate counts that prefill, used only
    # where the engine reports no rate of its own
    wall_tps = wall_rate(tokens, probe.elapsed_ms)
    outcome = Outcome(
        status=200, backend=name, profile=profile, spec=spec.spec_key,
        total_ms=round(probe.elapsed_ms, 3),
        prompt_tokens=report.prompt_tokens, cached_tokens=report.cached_tokens,
        completion_tokens=tokens, decode_tps=wall_tps, backend_tps=report.backend_tps,
        draft_n=report.draft_n, draft_accepted=report.draft_accepted,
        spec_source=report.spec_source,
    )
    classifier = scored.scores.as_dict() if scored.scores else {"class": None, "lang": None,
                                                                "artifact": scorer.name}
    decision = {"profile": profile, "backend": name, "reason": PROBE_REASON, "rule": PROBE_RULE,
                "explored": False, "queue_ms": 0.0}
    return RouteRecord(
        ts=ts, request_id=f"probe_{name}_{kind}", endpoint="chat", model=view.model, stream=False,
        conversation="", features=features.as_dict(), classifier=classifier, decision=decision,
        outcome=outcome, overhead_ms=0.0,
    )


def measured_notes(records: Sequence[RouteRecord], model: RouteModel) -> list[str]:
    """Per probed instance, its measured ms per token against what the prior expected for that
    request there, where they differ by more than `FAR_FACTOR` ('prior gb10-ds4 says 68
    ms/token on plain, plain-0 measures 6.9: the prior is discounted')."""
    notes = []
    for record in records:
        o = observation_from_record(record)
        if o is None or not o.paced or o.inputs is None:
            continue
        expected = prior_pace(model.prior, o.config, np.array(o.inputs, dtype=np.float64))
        if far(o.ms_per_token, expected):
            notes.append(discount_note(model.prior.name, o.config, expected, o.backend,
                                       o.ms_per_token))
    return notes
