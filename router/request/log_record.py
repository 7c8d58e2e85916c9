"""A routed request's decision-log record: its plan and its outcome as one `RouteRecord`.

No I/O and no clock: the start, end and wall-clock times come in as arguments, and the sinks
write the record (`router/learning/sinks`). Not on the pure list only because it names `datetime` for
the type of its `ts` argument. Built after the answer has left, in batches.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from backends.upstream import ForwardResult
from decisionlog.records import Outcome, RouteRecord
from router.request.routing import RoutedRequest

CONTENT_CAP: Final = 4_000  # characters of prompt and of completion text kept when logging content


def record_for(
    plan: RoutedRequest,
    result: ForwardResult,
    *,
    started: float,
    ended: float,
    ts: datetime,
    log_content: bool,
) -> RouteRecord:
    meter, report = result.meter, result.meter.report
    classifier: dict[str, Any] = (
        plan.scores.as_dict() if plan.scores else {"class": None, "lang": None, "artifact": plan.scorer_name}
    )
    if plan.scorer_error:
        classifier["error"] = plan.scorer_error
    outcome = Outcome(
        status=result.status,
        error=result.error,
        backend=result.backend,
        profile=result.profile,
        spec=result.spec,
        ttft_ms=meter.ttft_ms(),
        total_ms=round((ended - started) * 1000, 3),
        prompt_tokens=report.prompt_tokens,
        cached_tokens=report.cached_tokens,
        completion_tokens=report.completion_tokens,
        decode_tps=meter.decode_tps(),
        backend_tps=report.backend_tps,
        draft_n=report.draft_n,
        draft_accepted=report.draft_accepted,
        spec_source=report.spec_source,
        failover_from=tuple(result.failover_from),
        client_disconnected=result.client_disconnected,
        unobserved=result.unobserved,
        batch_start=result.batch_start,
        batch_mean=result.batch_mean,
    )
    overhead = ((result.sent_at or ended) - started) * 1000
    content = {
        "last_user": plan.view.last_user_text[:CONTENT_CAP],
        "completion": meter.text(),  # the meter keeps at most CONTENT_CAP characters
    } if log_content else None
    return RouteRecord(
        ts=ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        request_id=plan.request_id,
        endpoint=plan.endpoint,
        model=plan.view.model,
        stream=plan.view.stream,
        conversation=plan.conversation,
        features=plan.features.as_dict(),
        classifier=classifier,
        decision=plan.decision_record(),
        outcome=outcome,
        overhead_ms=round(overhead, 3),
        content=content,
        rewrite=plan.rewrite.as_dict() if plan.rewrite is not None else None,
        inputs=plan.decision.inputs,
    )
