"""`GET /dashboard`: a live page on the router with plots of the recent decisions (plotly.js,
served from the `plotly` Python package: nothing comes from a CDN, the page works offline).

The page polls `GET /dashboard/data.json` every few seconds. The numbers come from
`decisionlog.summary` (the same aggregates `tail` and `report` print); this module only shapes
them for the page and serves the files. Loopback clients only (or those presenting `admin_token`),
unless `allow_remote` is set: the page shows traffic metadata the operator may not want to
expose. `DashboardAddon` puts it on the proxy.
"""

from __future__ import annotations

import importlib.util
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from decisionlog.records import RouteRecord
from decisionlog.summary import (
    GroupSummary,
    parse_ts,
    record_backend,
    record_class,
    record_lang,
    record_profile,
    record_reason,
    record_spec,
    record_tps,
    summarize,
    timeline,
    total,
)
from policies import arm_rows
from router.edge.admin import guard_admin, is_loopback
from router.instances.pool import POOL
from router.learning.online import ONLINE, model_status
from router.state import DEPS, Addon

STATIC_DIR: Final = Path(__file__).with_name("static")
_NICE_BUCKETS_S: Final = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600)

RecordsSource = Callable[[], Sequence[RouteRecord]]
StatusSource = Callable[[], Mapping[str, Any]]


class RecentRecords:
    """The last `maxlen` records, kept by the app for the dashboard (oldest first)."""

    def __init__(self, maxlen: int = 5000) -> None:
        if maxlen < 1:
            raise ValueError("RecentRecords needs maxlen >= 1")
        self._records: deque[RouteRecord] = deque(maxlen=maxlen)

    def add(self, record: RouteRecord) -> None:
        self._records.append(record)

    def snapshot(self) -> list[RouteRecord]:
        return list(self._records)

    def __len__(self) -> int:
        return len(self._records)


def choose_bucket_s(records: Sequence[RouteRecord], points: int = 40) -> int:
    """A round bucket width giving about `points` buckets over the records' time span."""
    times = [t.timestamp() for t in (parse_ts(r.ts) for r in records) if t is not None]
    span = max(times) - min(times) if times else 0.0
    wanted = span / max(points, 1)
    return next((b for b in _NICE_BUCKETS_S if b >= wanted), _NICE_BUCKETS_S[-1])


def _group_dict(group: GroupSummary) -> dict[str, Any]:
    data = asdict(group)
    data["speedup"] = group.speedup
    return data


def _recent_row(record: RouteRecord) -> dict[str, Any]:
    return {
        "ts": record.ts,
        "class": record_class(record),
        "lang": record_lang(record),
        "spec": record_spec(record),
        "pool": str(record.decision.get("pool") or record_profile(record)),
        "rewrite": str((record.rewrite or {}).get("label") or ""),
        "reason": record_reason(record),
        "explored": bool(record.decision.get("explored")),
        "backend": record_backend(record),
        "status": record.outcome.status,
        "ttft_ms": record.outcome.ttft_ms,
        "tokens": record.outcome.completion_tokens,
        "tps": record_tps(record),
        "acceptance": record.acceptance,
        "p_spec": record.decision.get("p_spec", record.classifier.get("p_spec")),
    }


def _speedup_model(
    status: Mapping[str, Any], groups: Iterable[GroupSummary]
) -> dict[str, Any]:
    """The speedup model's per-class predictions with their 1-sd range (the proxy's status);
    else the mean speedup the records' decisions predicted."""
    model = status.get("speedup_model")
    if isinstance(model, Mapping) and model.get("classes"):
        return dict(model)
    return {"prior": None, "observations": None, "weights": {},
            "classes": {g.key: {"value": g.predicted_speedup, "low": None, "high": None}
                        for g in groups if g.predicted_speedup is not None}}


def _float(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _json_safe(value: Any) -> Any:
    """JSON has no NaN or Infinity (an unbounded uncertainty, say): they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def dashboard_data(
    records: Sequence[RouteRecord], status: Mapping[str, Any], *, now: datetime, recent_n: int = 50
) -> dict[str, Any]:
    """Everything the page plots, as JSON-ready data (non-finite numbers as null)."""
    groups = summarize(records)
    bucket_s = choose_bucket_s(records)
    data: dict[str, Any] = _json_safe({
        "generated_at": now.isoformat(),
        "records": len(records),
        "bucket_s": bucket_s,
        "classes": [_group_dict(g) for g in groups],
        "overall": _group_dict(total(groups, records)),
        "timeline": [
            {"start": b.start, "groups": {g.key: _group_dict(g) for g in b.groups}}
            for b in timeline(records, bucket_s)
        ],
        "speedup_model": _speedup_model(status, groups),
        "backends": list(status.get("backends") or []),
        "recent": [_recent_row(r) for r in reversed(records[-recent_n:])],
        "arms": [asdict(row) for row in arm_rows(records)],
    })
    return data


def _plotly_js_path() -> Path:
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise RuntimeError("the dashboard needs the `plotly` package (a dependency of specroute)")
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise RuntimeError(f"plotly.min.js not found in the plotly package at {path}")
    return path


def _is_loopback(remote: str | None) -> bool:
    return is_loopback(remote)


def add_dashboard_routes(
    app: web.Application,
    *,
    records_source: RecordsSource,
    status_source: StatusSource,
    allow_remote: bool = False,
    admin_token: str = "",
    recent_n: int = 50,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Serve `/dashboard`, `/dashboard/data.json` and the page's scripts on `app`."""
    plotly_js = _plotly_js_path()

    def guard(request: web.Request) -> None:
        if not allow_remote:
            guard_admin(request, admin_token)

    async def page(request: web.Request) -> web.StreamResponse:
        guard(request)
        return web.FileResponse(STATIC_DIR / "dashboard.html",
                                headers={"Cache-Control": "no-cache"})

    async def script(request: web.Request) -> web.StreamResponse:
        guard(request)
        return web.FileResponse(STATIC_DIR / "dashboard.js", headers={"Cache-Control": "no-cache"})

    async def plotly(request: web.Request) -> web.StreamResponse:
        guard(request)
        return web.FileResponse(plotly_js, headers={"Cache-Control": "max-age=86400"})

    async def data(request: web.Request) -> web.Response:
        guard(request)
        payload = dashboard_data(records_source(), status_source(), now=clock(),
                                 recent_n=recent_n)
        return web.json_response(payload, headers={"Cache-Control": "no-store"})

    app.router.add_get("/dashboard", page)
    app.router.add_get("/dashboard/data.json", data)
    app.router.add_get("/dashboard/dashboard.js", script)
    app.router.add_get("/dashboard/plotly.min.js", plotly)


class DashboardAddon(Addon):
    """`GET /dashboard` on the proxy: the last records, kept in a ring as they are logged, with
    the backends' health and the speedup model read when the page asks."""

    sink_name = "dashboard"

    def __init__(self, maxlen: int = 5000, *, admin_token: str = "") -> None:
        self.recent = RecentRecords(maxlen)
        self.admin_token = admin_token  # besides loopback clients, who may read the page

    def add_routes(self, app: web.Application) -> None:
        add_dashboard_routes(app, records_source=self.recent.snapshot,
                             status_source=lambda: app_status(app), admin_token=self.admin_token)

    def write_record(self, record: RouteRecord) -> None:
        self.recent.add(record)


def app_status(app: web.Application) -> dict[str, Any]:
    """What the dashboard shows besides the records: backend health and the speedup model."""
    backends = app[POOL].describe(app[DEPS].clock())
    configs = {str(b["speculation"]) for b in backends}
    return {"backends": backends, "speedup_model": model_status(app[ONLINE].model, configs)}
