"""`GET /dashboard` fed with the records of a real run (the proxy in front of two simulated
engines), checked over HTTP and rendered in headless Chromium (Debian's `chromium`, driven by
Playwright); the screenshot is saved to tests/artifacts/dashboard.png."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from backends.local.simulator import SimState
from decisionlog.records import RouteRecord
from decisionlog.summary import summarize
from policies.learner.arm_rows import arm_rows
from router.addons.dashboard import (
    RecentRecords,
    _is_loopback,
    add_dashboard_routes,
    choose_bucket_s,
)
from router.learning.online import ONLINE, model_status
from tests.missing import CHROMIUM as CHROMIUM_PACKAGE
from tests.missing import skip_missing
from tests.router.conftest import ServerFactory, Stack, start_stack

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACT = Path(__file__).resolve().parents[2] / "artifacts" / "dashboard.png"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
PROMPTS = [
    ("Explain how a B-tree keeps itself balanced.", 0.0),
    ("Write a Python function that merges two sorted lists.\n```python\n```", 0.0),
    ("Summarise the causes of the French revolution.", 0.9),
    ("请解释一下快速排序的原理。", 0.0),
    ("Tell me a story about a lighthouse keeper.", 1.0),
]


async def _real_run(aiohttp_server: ServerFactory, tmp_path: Path) -> tuple[Stack, list[RouteRecord]]:
    """Requests through the real proxy; the records it logged."""
    stack = await start_stack(
        aiohttp_server, tmp_path,
        mtp=SimState(profile="mtp", acceptance={"technical": 0.85}, time_scale=0.15),
        plain=SimState(profile="plain", time_scale=0.15),
    )
    client = stack.client()
    for round_ in range(3):
        for prompt, temperature in PROMPTS:
            stream = await client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": f"{prompt} ({round_})"}],
                temperature=temperature, stream=True)
            async for _ in stream:
                pass
    await client.close()
    return stack, list(stack.sink.records)


def _status(stack: Stack, records: list[RouteRecord]) -> dict[str, Any]:
    """Backends from the run's config; the speedup model as the proxy reports it."""
    return {
        "backends": [{"name": b.name, "profile": b.profile, "speculation": b.spec_key,
                      "healthy": b.profile == "mtp",
                      "inflight": 0, "restarts": 0} for b in stack.config.backends],
        "speedup_model": model_status(stack.proxy.app[ONLINE].model),
    }


async def _dashboard_server(
    aiohttp_server: ServerFactory, records: list[RouteRecord], status: Mapping[str, Any]
) -> Any:
    recent = RecentRecords(maxlen=1000)
    for record in records:
        recent.add(record)
    app = web.Application()
    add_dashboard_routes(app, records_source=recent.snapshot, status_source=lambda: status)
    return await aiohttp_server(app)


async def test_data_json_carries_the_shared_summary(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack, records = await _real_run(aiohttp_server, tmp_path)
    assert len(records) == 15
    assert {r.outcome.profile for r in records} == {"mtp", "plain"}
    server = await _dashboard_server(aiohttp_server, records, _status(stack, records))
    base = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/dashboard/data.json") as response:
            assert response.status == 200
            data = await response.json()
        async with session.get(f"{base}/dashboard/plotly.min.js") as response:
            assert response.status == 200
            assert len(await response.read()) > 1_000_000
        async with session.get(f"{base}/dashboard") as response:
            page = await response.text()
    assert '<script src="/dashboard/plotly.min.js">' in page and "cdn" not in page.lower()
    expected = {g.key: g for g in summarize(records)}
    assert {c["key"] for c in data["classes"]} == set(expected)
    for row in data["classes"]:
        assert row["requests"] == expected[row["key"]].requests
        assert row["acceptance"] == pytest.approx(expected[row["key"]].acceptance)
    assert data["records"] == 15 and len(data["recent"]) == 15
    assert data["recent"][0]["ts"] == records[-1].ts  # newest first
    assert len(data["backends"]) == 2
    model = data["speedup_model"]
    assert model["prior"] == "gb10-ds4" and model["observations"] >= 1  # mtp outcomes learned
    tech = model["classes"]["technical"]
    assert tech["low"] < tech["value"] < tech["high"] and tech["prior"] == pytest.approx(1.044)
    assert set(model["weights"]) >= {"bias", "agent_structure", "cjk"}
    predicted = [r for r in data["classes"] if r["predicted_speedup"] is not None]
    assert predicted  # the decisions' predictions, per class
    assert {(a["cls"], a["arm"]) for a in data["arms"]} == {
        (r.cls, r.arm) for r in arm_rows(records)} and data["arms"]
    assert {r["pool"] for r in data["recent"]} <= {"mtp", "plain"}


async def test_dashboard_renders_its_plots_in_chromium(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    if not CHROMIUM.exists():
        skip_missing(CHROMIUM_PACKAGE)
    from playwright.async_api import async_playwright

    stack, records = await _real_run(aiohttp_server, tmp_path)
    server = await _dashboard_server(aiohttp_server, records, _status(stack, records))
    profile_dir = tempfile.mkdtemp(prefix="specroute-chromium-")
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch_persistent_context(
                profile_dir, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1500},
            )
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"http://127.0.0.1:{server.port}/dashboard")
            await page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot').length === 6 && "
                "[...document.querySelectorAll('.js-plotly-plot')]"
                ".every(p => p.querySelector('g.trace'))",
                timeout=30_000,
            )
            traces = await page.eval_on_selector_all(
                ".js-plotly-plot", "plots => plots.map(p => p.querySelectorAll('g.trace').length)")
            recent_rows = await page.eval_on_selector_all("#recent tr", "rows => rows.length")
            arm_rows_shown = await page.eval_on_selector_all("#arms tr", "rows => rows.length")
            status_text = await page.inner_text("#status")
            ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACT), full_page=True)
            await browser.close()
    finally:
        shutil.rmtree(profile_dir, ignore_errors=True)
    assert errors == []
    assert all(n >= 1 for n in traces) and len(traces) == 6
    assert recent_rows == 16  # header + the 15 requests
    assert arm_rows_shown == 1 + len(arm_rows(records))
    assert "15 recent requests" in status_text
    assert ARTIFACT.stat().st_size > 20_000


@pytest.mark.parametrize(
    ("remote", "allowed"),
    [("127.0.0.1", True), ("127.8.0.3", True), ("::1", True), ("10.0.0.5", False),
     ("192.168.1.2", False), (None, False)],
)
def test_only_loopback_clients_by_default(remote: str | None, allowed: bool) -> None:
    assert _is_loopback(remote) is allowed


def test_bucket_width_is_round_and_follows_the_span() -> None:
    from tests.decisionlog.examples import make_record

    def at(second: int) -> RouteRecord:
        return make_record(ts=datetime.fromtimestamp(1_800_000_000 + second, tz=UTC).isoformat())

    assert choose_bucket_s([at(0), at(30)]) == 1
    assert choose_bucket_s([at(0), at(3600)]) == 120
    assert choose_bucket_s([]) == 1
    with pytest.raises(ValueError):
        RecentRecords(0)
