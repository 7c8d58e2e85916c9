"""`specroute demo`: the router in front of a backend pair, a mixed workload, a table per class.

With `--backends fake` (the embedded default until the local pair is built) both instances are
simulated engines pacing tokens by the GB10 cost model with per-class acceptance, so the table
shows what specroute is for. Each request is sent three times: pinned to `mtp`, pinned to
`plain` (to measure both instances) and on `auto` (the route specroute chooses).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

import openai

from backends.simulator import CostModel, SimState, create_sim_app
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, LogConfig
from router.records import RouteRecord
from router.serve import start_site
from router.state import Deps
from router.workload import WorkItem, class_by_key, requests_for

# Acceptance on verified cycles that reproduces the GB10 per-class speedups under the cost
# model (agent +9.4%, code +6.5%, technical +4.4%, prose -3.6%, chat -3.7%).
GB10_ACCEPTANCE = {"agent": 0.926, "code": 0.854, "technical": 0.802, "prose": 0.604, "chat": 0.602}
DEMO_TIME_SCALE = 0.15  # the simulated engines run at 0.15x of GB10 step times
CLASSES = ("agent", "code", "technical", "prose", "chat")


class _Collect:
    def __init__(self) -> None:
        self.records: list[RouteRecord] = []

    def write_record(self, record: RouteRecord) -> None:
        self.records.append(record)


def run_demo(*, backends: str, requests: int, log_path: str) -> int:
    if backends != "fake":
        print("specroute demo: the local llama.cpp pair is not available in this build; "
              "use --backends fake", file=sys.stderr)
        return 2
    return asyncio.run(_demo_fake(requests, log_path))


async def _demo_fake(n: int, log_path: str) -> int:
    print("specroute demo: two SIMULATED engines (GB10 cost model, per-class acceptance), "
          f"time scale {DEMO_TIME_SCALE}x; the router in front; {n} requests x 3 passes.")
    truth = class_by_key()
    sims = [
        SimState(profile=p, cost=CostModel(), acceptance=GB10_ACCEPTANCE, reply_tokens=32,
                 time_scale=DEMO_TIME_SCALE, model="deepseek-v4-flash-sim",
                 class_of=lambda body: truth.get(_last_text(body), "technical"))
        for p in ("mtp", "plain")
    ]
    stops = []
    specs = []
    for sim in sims:
        _, port, stop = await start_site(create_sim_app(sim))
        stops.append(stop)
        specs.append(BackendSpec(name=f"{sim.profile}-0", engine="llamacpp", profile=sim.profile,
                                 url=f"http://127.0.0.1:{port}"))
    collect = _Collect()
    config = Config(backends=specs, log=LogConfig(path=str(Path(log_path).resolve())))
    _, port, stop_router = await start_site(create_app(config, deps=Deps(sinks=(collect,))))
    stops.insert(0, stop_router)
    try:
        print(f"router on http://127.0.0.1:{port}/v1 ; decision log {config.log.path}")
        true_class = await _replay(
            f"http://127.0.0.1:{port}/v1", requests_for(n, model="deepseek-v4-flash-sim")
        )
    finally:
        for stop in stops:
            await stop()
    print()
    print(format_table(collect.records, true_class))
    print(f"\n{len(collect.records)} decisions logged to {config.log.path}")
    return 0


async def _replay(base_url: str, items: Sequence[WorkItem]) -> dict[str, str]:
    """Send every item pinned to each profile and on auto; request id -> true class."""
    started = time.perf_counter()
    true_class: dict[str, str] = {}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0) as client:
        for index, item in enumerate(items):
            for route in ("mtp", "plain", "auto"):
                raw = await client.chat.completions.with_raw_response.create(
                    **item.body, extra_headers={"x-specroute-route": route}
                )
                true_class[raw.headers.get("x-specroute-request-id", "")] = item.true_class
                async for _ in raw.parse():
                    pass
            print(f"\r  replayed {index + 1}/{len(items)} ({time.perf_counter() - started:.1f} s)",
                  end="", flush=True)
    print()
    return true_class


def format_table(records: Sequence[RouteRecord], true_class: Mapping[str, str]) -> str:
    """Per true class: the route chosen on `auto`, acceptance, decode tokens/s per instance."""
    rows: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        row = rows[true_class.get(r.request_id) or str(r.classifier.get("class"))]
        if r.decision["reason"] == "header":
            if r.outcome.decode_tps:
                row[f"tps_{r.outcome.profile}"].append(r.outcome.decode_tps)
            if r.acceptance is not None:
                row["acceptance"].append(r.acceptance)
        else:
            row["routes"].append(r.outcome.profile)
            row["classified"].append(r.classifier.get("class"))
    header = (f"{'class':<10} {'n':>3} {'classified as':<18} {'route (auto)':<14} "
              f"{'accept':>6} {'mtp tok/s':>9} {'plain tok/s':>11} {'mtp/plain':>9}")
    lines = [header, "-" * len(header)]
    for cls in CLASSES:
        if cls not in rows:
            continue
        row = rows[cls]
        mtp, plain = _median(row["tps_mtp"]), _median(row["tps_plain"])
        ratio = f"{mtp / plain:9.3f}" if mtp and plain else f"{'-':>9}"
        lines.append(
            f"{cls:<10} {len(row['routes']):>3} {_counts(row['classified']):<18} "
            f"{_counts(row['routes']):<14} {_fmt(_median(row['acceptance']), 6, 2)} "
            f"{_fmt(mtp, 9, 1)} {_fmt(plain, 11, 1)} {ratio}"
        )
    return "\n".join(lines)


def _counts(values: Sequence[Any]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for v in values:
        counts[str(v)] += 1
    return " ".join(f"{k}:{n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _median(values: Sequence[float]) -> float | None:
    return median(values) if values else None


def _fmt(value: float | None, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _last_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content") if isinstance(messages[-1], dict) else ""
    return content if isinstance(content, str) else str(content)
