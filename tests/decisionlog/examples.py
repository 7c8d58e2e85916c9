"""Records for the operator-tool tests (tail, report, summary, metrics, dashboard)."""

from __future__ import annotations

from typing import Any

from decisionlog.records import Outcome, RouteRecord


def make_record(
    *,
    cls: str = "code",
    lang: str = "en",
    profile: str = "mtp",
    backend: str | None = None,
    reason: str = "learned",
    ts: str = "2026-11-29T12:00:00+00:00",
    tps: float | None = 20.0,
    tokens: int | None = 100,
    draft_n: int | None = None,
    accepted: int | None = None,
    ttft_ms: float | None = 150.0,
    status: int = 200,
    error: str = "",
    speedup: float | None = 1.05,
    explored: bool = False,
    request_id: str = "req",
    overhead_ms: float = 0.8,
    failover_from: tuple[str, ...] = (),
    p_spec: float = 0.7,
    spec: str = "",
) -> RouteRecord:
    """One record; `spec` '' writes it as records before speculation configs were logged."""
    backend = backend if backend is not None else f"{profile}-0"
    decision: dict[str, Any] = {"profile": profile, "backend": backend, "reason": reason,
                                "rule": "routes.x", "explored": explored, "speedup": speedup,
                                "p_spec": p_spec}
    return RouteRecord(
        ts=ts, request_id=request_id, endpoint="/v1/chat/completions", model="m", stream=True,
        conversation="c", features={"n_tools": 0},
        classifier={"class": cls, "lang": lang, "scores": {cls: 1.0}, "artifact": "rules"},
        decision=decision,
        outcome=Outcome(status=status, error=error, backend=backend, profile=profile, spec=spec,
                        ttft_ms=ttft_ms, total_ms=1000.0, completion_tokens=tokens,
                        decode_tps=tps, draft_n=draft_n, draft_accepted=accepted,
                        failover_from=failover_from),
        overhead_ms=overhead_ms,
    )
