"""`specroute demo`: the router in front of three instances, a mixed workload, a table per class.

`--backends local` (what `make demo` runs) builds once and caches llama-server and the Qwen2.5-
Coder 1.5B target / 0.5B draft pair, launches three instances on loopback (plain, n-gram prompt
lookup: `speculation: {type: ngram-simple}`, and the 0.5B as a depth-1 draft model) and puts
the router in front of them. `--backends fake` uses three simulated engines pacing tokens by
the GB10 cost model (plain, MTP-1 with per-class acceptance, n-gram prompt lookup; seconds,
nothing to build).

`--front envoy` puts a real Envoy (1.40, from the cache; `deploy/envoy/envoy.yaml` as shipped) in
front instead, with the router as its endpoint picker (`specroute epp`): the same decisions, the
same records, Envoy relaying the bytes.

Three phases, all through the `openai` SDK: every request pinned to each instance in turn (a
named pool of one instance each, `x-specroute-route: <instance>`: measuring all three), then
`specroute learn` on the decision log (the demo policy trusts a class after `--min-samples`
requests per arm), then every request on `auto`: the route the learner chose for this machine.
The workload (`router.ops.workload`) includes code edits (a function returned whole with a
rename): the class prompt lookup exists for.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any, Final

import openai
from aiohttp import web

from backends.local.simulator import MACHINES, CostModel, SimState, create_sim_app
from backends.spec import BackendSpec, Speculation
from decisionlog.records import RouteRecord
from policies import DEFAULT_POLICY, PROBE_REASON, describe_model
from router.app import create_app, reload_once
from router.config import Config, LogConfig, SupervisorConfig
from router.learning.online import ONLINE
from router.learning.relearn import LEARNER
from router.ops.workload import WorkItem, class_by_key, last_text, requests_for
from router.serve import start_site
from router.state import CONFIG, Deps

# Acceptance on verified cycles that reproduces the GB10 per-class speedups under the cost
# model (agent +9.4%, code +6.5%, technical +4.4%, prose -3.6%, chat -3.7%); an edit's reply is
# mostly a copy of its prompt, which MTP-1 predicts almost always.
GB10_ACCEPTANCE = {"agent": 0.926, "code": 0.854, "technical": 0.802, "prose": 0.604, "chat": 0.602,
                   "edit": 0.97}
DEMO_TIME_SCALE = 0.15  # the simulated engines run at 0.15x of GB10 step times
# With --slots the simulated engines batch on a GPU's curve: nearly flat, speculation fading.
BATCH_CURVE = MACHINES["gpu-batch"]
CLASSES = ("agent", "code", "edit", "technical", "prose", "chat")
# How long the demo waits, once its last answer is in, for the records it has not had yet.
RECORD_WAIT_S: Final = 10.0
Stop = Any


class _Collect:
    def __init__(self) -> None:
        self.records: list[RouteRecord] = []

    def write_record(self, record: RouteRecord) -> None:
        self.records.append(record)


def run_demo(
    *, backends: str, requests: int, max_tokens: int | None, min_samples: int, out: str,
    front: str = "proxy", slots: int | None = None, engine: str = "llamacpp",
) -> int:
    """The demo with one proxy in front (`--replicas 2`: router/ops/demo_replicas). `slots`:
    the requests each instance serves at once (None: the engine's own, 1 for the fake ones)."""
    tokens, edit_tokens = demo_tokens(backends, max_tokens)
    kind = "vllm" if backends == "local" and engine == "vllm" else backends
    return asyncio.run(_demo(kind, requests, tokens, min_samples, Path(out).resolve(),
                             front, edit_tokens, slots))


def demo_tokens(backends: str, max_tokens: int | None) -> tuple[int, int]:
    """The max_tokens of each request and of an edit's answer (0: the request's own)."""
    # Short replies keep the real CPU pair quick; the simulated engines can afford longer ones,
    # which keeps per-request acceptance close to the class's (fewer cycles, more noise).
    tokens = max_tokens or (32 if backends == "local" else 128)
    # an edit's answer is the whole function: on the real instances, unless told otherwise, it
    # may run to 128 tokens (32 are mostly the preamble and the key prompt lookup must match)
    edit_tokens = 0 if max_tokens else 128
    return tokens, edit_tokens


async def _demo(backends: str, n: int, max_tokens: int, min_samples: int, out: Path,
                front: str = "proxy", edit_tokens: int = 0, slots: int | None = None) -> int:
    policy = demo_policy(out, backends, min_samples)
    stops: list[Stop] = []
    try:
        specs, model = await _backends(backends, stops, slots)
        collect = _Collect()
        config = Config(
            backends=specs, policy=str(policy), learn={"interval_s": 0},
            pools={spec.name: [spec.name] for spec in specs},  # to pin each instance alone
            log=LogConfig(path=str(out / "decisions.jsonl")),
            supervisor=SupervisorConfig(log_dir=str(out / "backends")),
        )
        app = create_app(config, deps=Deps(sinks=(collect,), explore=False))
        engine = {"local": "llama-server", "vllm": "vLLM"}.get(backends)
        print("starting the router" + (f" and the {len(specs)} {engine} instances"
                                       if engine else ""))
        _, port, stop_router = await start_site(app)
        stops.insert(0, stop_router)
        base_url = f"http://127.0.0.1:{port}/v1"
        if front == "envoy":
            base_url = await _behind_envoy(app, out, stops)
        print(f"router on {base_url} ; decision log {config.log.path}")
        items = requests_for(n, model=model, max_tokens=max_tokens, edit_tokens=edit_tokens)
        names = [spec.name for spec in specs]
        true_class = await _replay(base_url, items, names, f"measure the {len(names)} instances")
        app[LEARNER].learn_now(datetime.now(UTC))
        reload_once(app)
        print("\n".join(describe_model(app[ONLINE].model)))
        true_class |= await _replay(base_url, items, ("auto",), "route on auto (learned)")
        await _recorded(collect, true_class.keys())
    finally:
        for stop in stops:
            await stop()
    print()
    print(format_table(collect.records, true_class, [spec.name for spec in specs]))
    print(f"\n{len(collect.records)} decisions in {config.log.path}")
    print(f"  specroute tail {config.log.path}          # one line per request")
    print(f"  specroute report {config.log.path} --project-onto gb10   # the same traffic on a GB10")
    return 0


async def _recorded(collect: _Collect, request_ids: Iterable[str],
                    timeout_s: float = RECORD_WAIT_S) -> None:
    """Wait, at most `timeout_s`, until every request sent has its record: behind Envoy the
    picker reads an answer beside its client, and on a busy machine the last chunks reach it
    after the client has them all; stopped before, it would record that answer as cut."""
    wanted = set(request_ids) - {""}
    deadline = time.monotonic() + timeout_s
    while not wanted <= {r.request_id for r in collect.records} and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def demo_policy(out: Path, backends: str, min_samples: int) -> Path:
    """A fresh run directory (no log, no learned state: the learner sees this run only) and
    the demo's policy in it."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in (*out.glob("*.jsonl*"), *out.glob("policy.learned*.json")):
        stale.unlink()
    policy = out / "policy.yaml"
    # the shipped policy as it is (prior: neutral: nothing assumed of this machine); the
    # simulated engines are a GB10 running ds4, whose set-up names that prior
    prior = "gb10-ds4" if backends == "fake" else "neutral"
    policy.write_text(Path(DEFAULT_POLICY).read_text().replace(
        "min_samples: 30", f"min_samples: {min_samples}  # demo: trust a class early").replace(
        "prior: neutral", f"prior: {prior}"))
    return policy


async def _behind_envoy(app: web.Application, out: Path, stops: list[Stop]) -> str:
    """The app as Envoy's endpoint picker, Envoy running the shipped config in front; the base
    URL is Envoy's. Stopped first (Envoy, then the picker), before the router's site."""
    from backends.local.cache import free_loopback_port
    from backends.local.envoy import PICKER_CONFIG, ensure_envoy, render_config, start_envoy
    from router.epp.server import check_endpoints, serve_grpc

    check_endpoints(app[CONFIG])
    binary = await asyncio.to_thread(ensure_envoy)
    picker = contextlib.AsyncExitStack()
    stops.insert(0, picker.aclose)
    grpc_port = await picker.enter_async_context(
        serve_grpc(app, "127.0.0.1", 0, fallbacks=False))  # ORIGINAL_DST: one ip:port
    listen = free_loopback_port()
    text = render_config(PICKER_CONFIG, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                         ADMIN_PORT=free_loopback_port())
    envoy = await asyncio.to_thread(start_envoy, text, out / "envoy", binary=binary)
    stops.insert(0, lambda: asyncio.to_thread(envoy.stop))
    print(f"Envoy {PICKER_CONFIG.name} on 127.0.0.1:{listen}, specroute its endpoint picker "
          f"(gRPC 127.0.0.1:{grpc_port}); Envoy's log {envoy.log}")
    return f"http://127.0.0.1:{listen}/v1"


async def _backends(kind: str, stops: list[Stop],
                    slots: int | None = None) -> tuple[list[BackendSpec], str]:
    if kind == "vllm":
        print("specroute demo: two real vLLM instances on the CPU (Qwen2.5-Coder-0.5B, plain "
              "and n-gram prompt lookup, `make vllm`); each takes about a minute to start")
        return vllm_instances(slots)
    if kind == "local":
        print("specroute demo: three real local llama.cpp instances of Qwen2.5-Coder 1.5B "
              "(plain, n-gram prompt lookup, the 0.5B as a depth-1 draft); the first run builds "
              "and downloads into the cache (~10-15 minutes), later runs reuse it")
        return local_instances(slots)
    batching = slots or 1
    print("specroute demo: three SIMULATED engines (GB10 cost model: plain, MTP-1 with per-class "
          f"acceptance, n-gram prompt lookup), time scale {DEMO_TIME_SCALE}x"
          + (f", {batching} slots each on a GPU-like batch curve" if batching > 1 else ""))
    truth = class_by_key()
    specs = []
    cost = CostModel() if batching == 1 else replace(
        CostModel(), batch_cost=BATCH_CURVE.batch_cost,
        verify_batch_cost=BATCH_CURVE.verify_batch_cost)
    for name, profile, speculation in (("mtp-0", "mtp", ""), ("plain-0", "plain", ""),
                                       ("ngram-0", "mtp", "ngram")):
        sim = SimState(profile=profile, speculation=speculation, cost=cost, slots=batching,
                       acceptance=GB10_ACCEPTANCE, reply_tokens=1024, time_scale=DEMO_TIME_SCALE,
                       model="deepseek-v4-flash-sim",
                       class_of=lambda body: truth.get(last_text(body), "technical"))
        _, port, stop = await start_site(create_sim_app(sim))
        stops.append(stop)
        url = f"http://127.0.0.1:{port}"
        if speculation:
            specs.append(BackendSpec(name=name, engine="llamacpp", url=url,
                                     speculation=Speculation(type="ngram-simple")))
        else:
            specs.append(BackendSpec(name=name, engine="llamacpp", profile=profile, url=url))
    return specs, "deepseek-v4-flash-sim"


def local_instances(slots: int | None = None) -> tuple[list[BackendSpec], str]:
    """The launch specs of the three local instances (plain, n-gram prompt lookup, the draft
    model at depth 1), each serving `slots` at once (None: llama-server's default; it tells
    them on /props), and their model id; builds and downloads into the cache on first use."""
    from backends.local.pair import THREE, ensure_pair, local_specs

    pair = ensure_pair("qwen")
    return local_specs("qwen", THREE, parallel=slots), pair.target.stem


def vllm_instances(slots: int | None = None) -> tuple[list[BackendSpec], str]:
    """The launch specs of the plain and n-gram vLLM instances (`make vllm`), each batching
    up to `slots` (None: vLLM's own), and their model id."""
    from backends.local.vllm_pair import BENCH_MODEL, NGRAM, vllm_specs

    # the demo's agent turns carry tools with tool_choice auto, which vLLM serves only with a
    # tool-call parser (Qwen2.5's is hermes)
    tools = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    return (vllm_specs(("plain", NGRAM), model=BENCH_MODEL, max_num_seqs=slots, args=tools),
            BENCH_MODEL)


async def _replay(base_url: str, items: Sequence[WorkItem], routes: Sequence[str], what: str) -> dict[str, str]:
    """Send every item on each route; request id -> true class."""
    started = time.perf_counter()
    true_class: dict[str, str] = {}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="demo", max_retries=0, timeout=600) as client:
        for index, item in enumerate(items):
            for route in routes:
                raw = await client.chat.completions.with_raw_response.create(
                    **item.body, extra_headers={"x-specroute-route": route,
                                                "x-specroute-conversation": f"{route}-{index}"}
                )
                true_class[raw.headers.get("x-specroute-request-id", "")] = item.true_class
                async for _ in raw.parse():
                    pass
            done = index + 1
            if sys.stdout.isatty() or done == len(items) or done % 5 == 0:
                end = "" if sys.stdout.isatty() and done < len(items) else "\n"
                print(f"\r  {what}: {done}/{len(items)} requests "
                      f"({time.perf_counter() - started:.0f} s)", end=end, flush=True)
    return true_class


def format_table(records: Sequence[RouteRecord], true_class: Mapping[str, str],
                 instances: Sequence[str] = ()) -> str:
    """Per true class: where `auto` sent it, and each instance's decode ms per token (with its
    acceptance where it drafted) from the requests pinned to it; the startup probe's records are
    the proxy's own measurements, not the workload's. Instances in `instances`' order (the rest
    as first served)."""
    rows: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    served = list(instances)
    for r in records:
        if r.decision.get("reason") == PROBE_REASON:
            continue
        row = rows[true_class.get(r.request_id) or str(r.classifier.get("class"))]
        backend = r.outcome.backend
        if backend and backend not in served:
            served.append(backend)
        if r.decision["reason"] == "header":
            tps = r.outcome.decode_tps or r.outcome.backend_tps
            if tps:
                row[f"ms {backend}"].append(1000.0 / tps)
            if r.acceptance is not None:
                row[f"accept {backend}"].append(r.acceptance)
        else:
            row["routes"].append(backend)
            row["classified"].append(r.classifier.get("class"))
    classes = [c for c in (*CLASSES, *sorted(set(rows) - set(CLASSES))) if c in rows]
    wide = {key: max([len(title)] + [len(_counts(rows[c][key])) for c in classes])
            for key, title in (("classified", "classified as"), ("routes", "route (auto)"))}
    cell_width = max([20] + [len(name) + 8 for name in served])
    header = (f"{'class':<10} {'n':>3} {'classified as':<{wide['classified']}} "
              f"{'route (auto)':<{wide['routes']}} "
              + " ".join(f"{name + ' ms/tok':>{cell_width}}" for name in served))
    lines = [header, "-" * len(header)]
    for cls in classes:
        row = rows[cls]
        cells = []
        for name in served:
            ms, accept = _median(row[f"ms {name}"]), _median(row[f"accept {name}"])
            cell = _fmt(ms, 1) + (f" ({accept:.2f})" if accept is not None else "")
            cells.append(f"{cell:>{cell_width}}")
        lines.append(f"{cls:<10} {len(row['routes']):>3} "
                     f"{_counts(row['classified']):<{wide['classified']}} "
                     f"{_counts(row['routes']):<{wide['routes']}} " + " ".join(cells))
    lines.append("(ms/tok: median decode milliseconds per token of the requests pinned to the "
                 "instance; in parentheses, its draft acceptance)")
    return "\n".join(lines)


def _counts(values: Sequence[Any]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for v in values:
        counts[str(v)] += 1
    return " ".join(f"{k}:{n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _median(values: Sequence[float]) -> float | None:
    return median(values) if values else None


def _fmt(value: float | None, digits: int) -> str:
    return f"{value:.{digits}f}" if value is not None else "-"
