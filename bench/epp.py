"""What the endpoint picker costs, side by side in one run against two fake upstreams on loopback:

    direct               the client talks to the upstreams itself (in turn)
    Envoy + picker       Envoy 1.40 running deploy/envoy/envoy.yaml (ORIGINAL_DST) with
                         `specroute epp --endpoints primary` as its ext_proc endpoint picker
    specroute proxy      `specroute serve` with the same config
    Envoy round robin    the same Envoy config without the ext_proc filter, its cluster a
                         STATIC ROUND_ROBIN one over the two upstreams (everything else as is)

The upstreams are bench.proxy_overhead's (one named `mtp`, one `plain`, engine llamacpp, so
the decision is the real one); the specroute config is that bench's (shipped classifier and
tokenizer, decision log on disk). Each role runs in its own process, the client is this one.
Rounds are interleaved and the order shuffled per round: only ratios and differences measured
here, in one run, mean anything.

    .venv/bin/python -m bench.epp                           # the full table (a few minutes)
    .venv/bin/python -m bench.epp --rounds 1 --requests 200 --sizes 1k sse   # a smoke run
    .venv/bin/python -m bench.epp --baseline DIR  # and the picker of another checkout beside

Measured per body size (1 KB, 42 KB, 285 KB; SSE: 42 KB streamed, 24 chunks 2 ms apart, each
stamped by the upstream): added p50 latency at concurrency 1 (p50 through the front minus p50
straight to the upstreams, same run); for SSE the added lag per chunk and time to first byte;
requests/s in a closed loop (--concurrency clients, --requests per front and size, bounded by
--phase-seconds); CPU per request of each process (/proc/<pid>/stat, utime + stime); the
`x-specroute-overhead-ms` header's p50 (the picker's or the proxy's own time from the request's
headers to its pick); and one gRPC round trip to the picker (a grpc.health.v1 Check, p50).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from backends.local.envoy import (
    PICKER_CONFIG,
    EnvoyProcess,
    ensure_envoy,
    render_config,
    start_envoy,
)
from bench.proxy_overhead import (
    ROOT,
    SSE_CHUNKS,
    SSE_INTERVAL_S,
    Sample,
    cpu_seconds,
    free_port,
    make_body,
    one_request,
    spawn,
    specroute_config,
    stop,
    wait_ready,
)

ORIGINAL_DST: Final = PICKER_CONFIG
EXT_PROC: Final = ("type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
                   "ExternalProcessor")  # the picker's filters, dropped for round robin
# the size name -> (make_body's kind, streamed)
CASES: Final = {"1k": ("1k", False), "42k": ("42k", False), "285k": ("285k", False),
                "sse": ("42k", True)}
CASE_TITLES: Final = {"1k": "1 KB", "42k": "42 KB", "285k": "285 KB",
                      "sse": f"SSE (42 KB, {SSE_CHUNKS} chunks)"}
DIRECT: Final = "direct"
PICKER: Final = "Envoy + picker"
PROXY: Final = "specroute proxy"
ROUND_ROBIN: Final = "Envoy round robin"
BASELINE: Final = "Envoy + picker, baseline"  # --baseline: the picker from another checkout
FRONTS: Final = (DIRECT, PICKER, PROXY, ROUND_ROBIN)
UPSTREAMS: Final = "upstreams"
# the processes whose CPU is counted, as table rows, in this order
ROLES: Final = ("Envoy", "picker / proxy", UPSTREAMS)
CLIENT_TIMEOUT: Final = aiohttp.ClientTimeout(total=60)
# The picker's answers a request waits for: the pick, once the whole body is in. The answer's
# headers and chunks go to the watcher without a wait (observability mode); only an answer the
# picker edits (what it asked the engine for) waits on each message.
WAITS: Final = 1
PROBES: Final = 10  # requests per size to see whom the picker and the proxy choose
# Envoy's own timing of its ext_proc calls (the filter's logging info, per request, in its
# access log): how long it waited for the pick, and for each answer message it held.
PER_CHUNK: Final = "answer_body_per_call_us"  # derived: the body's hold per message
TIMED: Final = "x-bench-timed"  # the concurrency-1 requests carry their case in this header
PICK_FILTER: Final = "specroute.pick"
EDIT_FILTER: Final = "specroute.edit"  # on the answer's path only when the picker edits it
ENVOY_TIMING: Final = {  # the access log's field -> (the filter, its logging-info field)
    "pick_us": (PICK_FILTER, "request_header_latency_us"),
    "answer_headers_us": (EDIT_FILTER, "response_header_latency_us"),
    "answer_body_us": (EDIT_FILTER, "response_body_total_latency_us"),
    "answer_body_calls": (EDIT_FILTER, "response_body_call_count"),
}
SETTLE_S: Final = 0.25  # after a loop, before reading CPU: the decision log's batch lands


# --- the fronts ---------------------------------------------------------------------------------

@dataclass
class Front:
    name: str
    urls: list[str]  # base URLs, taken in turn (direct: each upstream)
    pids: dict[str, list[int]]  # role -> the processes whose CPU counts for it
    admin_url: str = ""  # Envoy's, to read its ext_proc counters
    timing_log: Path | None = None  # Envoy's access log of its ext_proc timing
    session: aiohttp.ClientSession | None = None
    turn: int = 0

    def next_url(self) -> str:
        self.turn += 1
        return self.urls[self.turn % len(self.urls)]

    def cpu(self) -> dict[str, float]:
        return {role: cpu_seconds(pids) for role, pids in self.pids.items()}


@dataclass
class Tally:
    """What one front measured on one size, over all rounds."""

    samples: list[Sample] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds in the loops
    served_by: str = ""  # "mtp-0 5 / plain-0 3": who the probes went to
    messages: tuple[float, float] | None = None  # ext_proc messages per request: sent, got
    envoy_timing: dict[str, float] = field(default_factory=dict)  # ENVOY_TIMING's p50s


@dataclass
class Processes:
    """Everything started, to stop by PID at the end."""

    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    envoys: list[EnvoyProcess] = field(default_factory=list)

    def stop_all(self) -> None:
        for envoy in reversed(self.envoys):
            envoy.stop()
        for child in reversed(self.children):
            stop(child)


def _connection_manager(config: dict[str, Any]) -> dict[str, Any]:
    listener = config["static_resources"]["listeners"][0]
    manager: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return manager


def with_timing_log(config_text: str, path: Path) -> str:
    """The config with an access log of Envoy's own ext_proc timing (ENVOY_TIMING) for the
    requests that carry TIMED: what the picker costs as Envoy waits for it, not as the
    picker or a Python client sees it."""
    config: dict[str, Any] = yaml.safe_load(config_text)
    fields = {"case": f"%REQ({TIMED})%"} | {
        name: f"%FILTER_STATE({name_}:FIELD:{field})%"
        for name, (name_, field) in ENVOY_TIMING.items()}
    _connection_manager(config)["access_log"] = [{
        "name": "envoy.access_loggers.file",
        "filter": {"header_filter": {"header": {"name": TIMED, "present_match": True}}},
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            "path": str(path), "log_format": {"json_format": fields}}}]
    return str(yaml.safe_dump(config, sort_keys=False))


def envoy_timings(path: Path) -> dict[str, dict[str, float]]:
    """Per case, the p50 of each ENVOY_TIMING field over the logged requests (those Envoy
    made no such call for are left out of that field)."""
    values: dict[str, dict[str, list[float]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        per_case = values.setdefault(str(entry.get("case")), {})
        got = {}
        for name in ENVOY_TIMING:
            with contextlib.suppress(TypeError, ValueError):
                got[name] = float(entry.get(name))
                per_case.setdefault(name, []).append(got[name])
        if got.get("answer_body_calls"):
            per_case.setdefault(PER_CHUNK, []).append(
                got["answer_body_us"] / got["answer_body_calls"])
    return {case: {name: statistics.median(v) for name, v in fields.items() if v}
            for case, fields in values.items()}


def round_robin_config(listen: int, admin: int, upstream_ports: Sequence[int]) -> str:
    """deploy/envoy/envoy.yaml with no ext_proc filter and a STATIC round-robin cluster over
    the upstreams: the listener, route, timeouts and connect timeout stay as deployed."""
    config: dict[str, Any] = yaml.safe_load(
        render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=1, ADMIN_PORT=admin))
    resources = config["static_resources"]
    manager = _connection_manager(config)
    manager["http_filters"] = [f for f in manager["http_filters"]
                               if f["typed_config"]["@type"] != EXT_PROC]
    pool = next(c for c in resources["clusters"] if c["name"] == "inference_pool")
    del pool["original_dst_lb_config"]
    pool.update(type="STATIC", lb_policy="ROUND_ROBIN", load_assignment={
        "cluster_name": "inference_pool",
        "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1",
                                                         "port_value": port}}}}
            for port in upstream_ports]}]})
    resources["clusters"] = [pool]  # the picker's cluster has no user left
    return str(yaml.safe_dump(config, sort_keys=False))


def start_picker(work: Path, name: str, ports: Sequence[int], tree: Path, started: Processes,
                 binary: Path) -> tuple[Front, int]:
    """`specroute epp` from the checkout `tree` and an Envoy running that checkout's
    envoy.yaml in front of it (the processing modes go with the picker that answers them);
    the front and the picker's gRPC port."""
    grpc_port = free_port()
    picker_config = specroute_config(work, free_port(), ports[0], plain_port=ports[1], name=name)
    picker = spawn([sys.executable, "-m", "router", "epp", "--config", str(picker_config),
                    "--grpc-port", str(grpc_port), "--endpoints", "primary"],
                   work / f"{name}.log", tree=tree)
    started.children.append(picker)
    listen = free_port()
    timing_log = work / f"envoy-{name}-timing.jsonl"
    config = render_config(tree / ORIGINAL_DST.relative_to(ROOT), LISTEN_PORT=listen,
                           PICKER_PORT=grpc_port, ADMIN_PORT=free_port())
    envoy = start_envoy(with_timing_log(config, timing_log), work / f"envoy-{name}",
                        binary=binary, concurrency=1)
    started.envoys.append(envoy)
    front = Front(BASELINE if name == "baseline" else PICKER, [f"http://127.0.0.1:{listen}"],
                  {"Envoy": [envoy.process.pid], "picker / proxy": [picker.pid]},
                  admin_url=envoy.admin_url, timing_log=timing_log)
    return front, grpc_port


async def start_fronts(work: Path, started: Processes, baseline: Path | None = None
                       ) -> tuple[list[Front], int]:
    """Direct to the upstreams and the three fronts (four with a baseline), all ready; and the
    picker's gRPC port."""
    me = [sys.executable, "-m", "bench.proxy_overhead"]  # its upstream role
    ports = [free_port(), free_port()]
    upstreams = [spawn([*me, "--role", "upstream", "--port", str(p)], work / f"up-{p}.log")
                 for p in ports]
    started.children += upstreams
    direct_urls = [f"http://127.0.0.1:{p}" for p in ports]
    for url in direct_urls:
        await wait_ready(url)
    upstream_pids = [u.pid for u in upstreams]

    binary = ensure_envoy()
    picker, grpc_port = start_picker(work, "picker", ports, ROOT, started, binary)
    pickers = [picker]
    if baseline is not None:
        pickers.append(start_picker(work, "baseline", ports, baseline, started, binary)[0])
    proxy_port = free_port()
    proxy_config = specroute_config(work, proxy_port, ports[0], plain_port=ports[1], name="proxy")
    proxy = spawn([sys.executable, "-m", "router", "serve", "--config", str(proxy_config)],
                  work / "proxy.log")
    started.children.append(proxy)
    rr_listen = free_port()
    round_robin = start_envoy(round_robin_config(rr_listen, free_port(), ports),
                              work / "envoy-rr", binary=binary, concurrency=1)
    started.envoys.append(round_robin)

    for front in pickers:
        front.pids[UPSTREAMS] = upstream_pids
    fronts = [
        Front(DIRECT, direct_urls, {UPSTREAMS: upstream_pids}),
        *pickers,
        Front(PROXY, [f"http://127.0.0.1:{proxy_port}"],
              {"picker / proxy": [proxy.pid], UPSTREAMS: upstream_pids}),
        Front(ROUND_ROBIN, [f"http://127.0.0.1:{rr_listen}"],
              {"Envoy": [round_robin.process.pid], UPSTREAMS: upstream_pids}),
    ]
    for front in fronts[1:]:
        await wait_ready(front.urls[0])  # the picker's tokenizer and classifier load first
    return fronts, grpc_port


# --- measuring ----------------------------------------------------------------------------------

async def probe(front: Front, body: bytes, count: int, tally: Tally) -> None:
    """Who the picker or the proxy chose for `count` of these bodies (explore is on, as
    deployed: a draw can go either way), and, behind Envoy, the ext_proc messages each took."""
    session = front.session
    assert session is not None
    chosen: Counter[str] = Counter()
    before = await ext_proc_stats(session, front.admin_url)
    for _ in range(count):
        async with session.post(front.next_url() + "/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json"}) as response:
            await response.read()
            chosen[response.headers.get("x-specroute-backend", "-")] += 1
    after = await ext_proc_stats(session, front.admin_url)
    tally.served_by = " / ".join(f"{name} {n}" for name, n in sorted(chosen.items()))
    if after:
        tally.messages = ((after["sent"] - before["sent"]) / count,
                          (after["received"] - before["received"]) / count)


async def ext_proc_stats(session: aiohttp.ClientSession, admin_url: str) -> dict[str, int]:
    """Envoy's ext_proc message counters ({} without an Envoy admin to ask)."""
    if not admin_url:
        return {}
    async with session.get(admin_url + "/stats?filter=ext_proc.stream_msgs") as response:
        text = await response.text()
    counters = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return {kind: int(counters.get(f"http.inference.ext_proc.stream_msgs_{kind}", 0))
            for kind in ("sent", "received")}


async def latency_batch(front: Front, body: bytes, count: int, deadline: float, case: str
                        ) -> list[Sample]:
    """`count` requests one after the other (concurrency 1), tagged with their case for
    Envoy's timing log."""
    assert front.session is not None
    samples = []
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        samples.append(await one_request(front.session, front.next_url(), body, {TIMED: case}))
    return samples


async def closed_loop(front: Front, body: bytes, requests: int, concurrency: int,
                      deadline: float) -> tuple[int, float, dict[str, float]]:
    """(requests done, seconds, CPU seconds per role) of `concurrency` clients sending
    `requests` in all, each sending its next one when its last one is answered."""
    session = front.session
    assert session is not None
    await asyncio.gather(*(one_request(session, front.next_url(), body)
                           for _ in range(concurrency)))  # open the connections
    remaining = requests

    async def client() -> None:
        nonlocal remaining
        while remaining > 0 and time.monotonic() < deadline:
            remaining -= 1
            await one_request(session, front.next_url(), body)

    cpu_before = front.cpu()
    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    await asyncio.sleep(SETTLE_S)
    cpu_after = front.cpu()
    return requests - remaining, elapsed, {r: cpu_after[r] - cpu_before[r] for r in cpu_after}


async def grpc_round_trips(port: int, calls: int) -> list[float]:
    """Round trips (ms) of a grpc.health.v1 Check to the picker, one after the other: a
    unary call on a warm HTTP/2 connection, both ends grpc.aio (Envoy's end is C++)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        for _ in range(10):  # the connection, and the first calls' setup
            await stub.Check(request, timeout=5)
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            await stub.Check(request, timeout=5)
            times.append((time.perf_counter() - began) * 1000)
    return times


def shuffled(fronts: Sequence[Front]) -> list[Front]:
    order = list(fronts)
    random.shuffle(order)
    return order


async def measure_round(fronts: list[Front], cases: Sequence[str], args: argparse.Namespace,
                        tallies: dict[tuple[str, str], Tally], deadline: float) -> None:
    """One round: per size, every front's latency batch, then every front's closed loop,
    each in a new shuffled order (a drift of the shared machine hits them all)."""
    per_loop = max(args.requests // args.rounds, 1)
    for case in cases:
        kind, stream = CASES[case]
        body = make_body(kind, stream=stream)
        for front in shuffled(fronts):
            samples = await latency_batch(front, body, args.per_round, deadline, case)
            tallies[(front.name, case)].samples += samples
        for front in shuffled(fronts):
            loop_deadline = min(deadline, time.monotonic() + args.phase_seconds / args.rounds)
            done, seconds, cpu = await closed_loop(front, body, per_loop, args.concurrency,
                                                   loop_deadline)
            tally = tallies[(front.name, case)]
            tally.requests += done
            tally.seconds += seconds
            for role, spent in cpu.items():
                tally.cpu[role] = tally.cpu.get(role, 0.0) + spent


# --- the report ---------------------------------------------------------------------------------

def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def metric_p50(tally: Tally, metric: str) -> float:
    return p50([v for s in tally.samples if (v := getattr(s, metric)) is not None])


def added(tallies: dict[tuple[str, str], Tally], front: str, case: str, metric: str) -> float:
    return (metric_p50(tallies[(front, case)], metric)
            - metric_p50(tallies[(DIRECT, case)], metric))


def cpu_ms(tally: Tally, role: str) -> float:
    if role not in tally.cpu or not tally.requests:
        return float("nan")
    return tally.cpu[role] / tally.requests * 1000


def front_cpu_ms(tally: Tally) -> float:
    """CPU per request of the front's own processes (not the upstreams, not the client)."""
    fronts = [cpu_ms(tally, r) for r in ROLES if r != UPSTREAMS and r in tally.cpu]
    return sum(fronts) if fronts else float("nan")


def cell(value: float, text: str) -> str:
    return "-" if math.isnan(value) else text  # not measured for this front


def case_table(tallies: dict[tuple[str, str], Tally], case: str, concurrency: int,
               requests: int, names: Sequence[str] = FRONTS) -> list[str]:
    row = {name: tallies[(name, case)] for name in names}
    direct_p50 = metric_p50(row[DIRECT], "total_ms")
    lines = [f"### {CASE_TITLES[case]}", "", "| | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]

    def add(label: str, values: Iterator[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    add("added p50 (ms)", (f"p50 {direct_p50:.2f}" if n == DIRECT else
                           f"{added(tallies, n, case, 'total_ms'):+.2f}" for n in names))
    add("own time p50 (x-specroute-overhead-ms)",
        (cell(v, f"{v:.2f}") for v in (metric_p50(row[n], "own_ms") for n in names)))
    if CASES[case][1]:
        add("added lag per chunk (us)", ("-" if n == DIRECT else
            f"{added(tallies, n, case, 'chunk_lag_ms') * 1000:+.0f}" for n in names))
        add("added time to first byte (ms)", ("-" if n == DIRECT else
            f"{added(tallies, n, case, 'ttfb_ms'):+.2f}" for n in names))
    add(f"requests/s, c={concurrency}",
        (f"{row[n].requests / row[n].seconds:,.0f}" if row[n].seconds else "-" for n in names))
    for role in ROLES:
        add(f"CPU ms/request: {role}",
            (cell(v, f"{v:.3f}") for v in (cpu_ms(row[n], role) for n in names)))
    add("CPU ms/request: the front in all",
        (cell(v, f"**{v:.3f}**") for v in (front_cpu_ms(row[n]) for n in names)))
    add(f"closed-loop requests (of {requests})", (f"{row[n].requests:,}" for n in names))
    add(f"served by ({PROBES} probes)", (row[n].served_by or "-" for n in names))
    add("ext_proc messages per request (Envoy sent / got)",
        (f"{m[0]:.1f} / {m[1]:.1f}" if (m := row[n].messages) else "-" for n in names))
    add("Envoy's wait for the pick p50 (ms, its own timing)",
        (cell(v, f"{v:.2f}") for v in (timing(row[n], "pick_us") / 1000 for n in names)))
    add("Envoy's hold: answer headers / per body message p50 (us)",
        (f"{timing(row[n], 'answer_headers_us'):.0f} / {timing(row[n], PER_CHUNK):.0f}"
         if row[n].envoy_timing else "-" for n in names))
    return [*lines, ""]


def timing(tally: Tally, name: str) -> float:
    return tally.envoy_timing.get(name, math.nan)


def comparison(tallies: dict[tuple[str, str], Tally], case: str, round_trip: float) -> list[str]:
    """The picker's added time against the decision plus one gRPC round trip, and Envoy's
    data-plane cost with the filter against without it."""
    picker, rr = tallies[(PICKER, case)], tallies[(ROUND_ROBIN, case)]
    extra = added(tallies, PICKER, case, "total_ms") - added(tallies, ROUND_ROBIN, case, "total_ms")
    own = metric_p50(picker, "own_ms")
    expected = own + round_trip
    serial = own + WAITS * round_trip
    first = (f"{case}: picker added p50 - Envoy RR added p50 = {extra:.2f} ms; expected: "
             f"decision {own:.2f} + one gRPC round trip {round_trip:.2f} = {expected:.2f} ms, "
             f"measured {extra / expected:.1f}x that ({extra - expected:+.2f} ms); with {WAITS} "
             f"round trips {serial:.2f} ms ({extra / serial:.1f}x)")
    lines = [first]
    if picker.envoy_timing:
        pick = timing(picker, "pick_us") / 1000
        lines.append(
            f"{case}: as Envoy timed it, the pick came {pick:.2f} ms after the request's headers "
            f"went out, of which the picker's own time {own:.2f} ms: {pick - own:.2f} ms is the "
            f"stream and its messages; "
            + (f"Envoy held the answer's headers {timing(picker, 'answer_headers_us'):.0f} us "
               f"and each body message {timing(picker, PER_CHUNK):.0f} us for the picker's "
               "go-ahead (an answer it edits)" if "answer_headers_us" in picker.envoy_timing
               else "the answer was not held (watched, no edit)"))
    if CASES[case][1]:
        lag = (added(tallies, PICKER, case, "chunk_lag_ms")
               - added(tallies, ROUND_ROBIN, case, "chunk_lag_ms"))
        lines.append(f"{case}: picker lag per chunk - Envoy RR's = {lag * 1000:.0f} us; one "
                     f"gRPC round trip {round_trip * 1000:.0f} us: {lag / round_trip:.1f}x")
    with_filter, without = cpu_ms(picker, "Envoy"), cpu_ms(rr, "Envoy")
    lines.append(f"{case}: Envoy's CPU per request with the ext_proc filter {with_filter:.3f} ms, "
                 f"without {without:.3f} ms ({with_filter / without:.1f}x); the picker process "
                 f"{cpu_ms(picker, 'picker / proxy'):.3f} ms, the proxy "
                 f"{cpu_ms(tallies[(PROXY, case)], 'picker / proxy'):.3f} ms")
    return lines


def report(tallies: dict[tuple[str, str], Tally], cases: Sequence[str], round_trips: list[float],
           args: argparse.Namespace, names: Sequence[str] = FRONTS) -> str:
    round_trip = p50(round_trips)
    lines = []
    for case in cases:
        planned = max(args.requests // args.rounds, 1) * args.rounds
        lines += case_table(tallies, case, args.concurrency, planned, names)
    p90 = statistics.quantiles(round_trips, n=10)[-1] if len(round_trips) > 1 else float("nan")
    lines.append(f"one gRPC round trip to the picker (grpc.health.v1 Check, {len(round_trips)} "
                 f"calls): p50 {round_trip:.3f} ms, p90 {p90:.3f} ms")
    for case in cases:
        lines += comparison(tallies, case, round_trip)
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------------------------

async def main(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="specroute-bench-epp-"))
    started = Processes()
    names = (DIRECT, PICKER, *((BASELINE,) if args.baseline else ()), PROXY, ROUND_ROBIN)
    tallies = {(name, case): Tally() for name in names for case in args.sizes}
    round_trips: list[float] = []
    load_before = os.getloadavg()
    fronts: list[Front] = []
    try:
        fronts, grpc_port = await start_fronts(
            work, started, Path(args.baseline).resolve() if args.baseline else None)
        for front in fronts:
            front.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=CLIENT_TIMEOUT)
        for case in args.sizes:
            kind, stream = CASES[case]
            for front in (f for f in fronts if f.name in (PICKER, BASELINE, PROXY)):
                await probe(front, make_body(kind, stream=stream), PROBES,
                            tallies[(front.name, case)])
        for _ in range(args.rounds):
            if time.monotonic() > deadline:
                break
            round_trips += await grpc_round_trips(grpc_port, args.grpc_calls)
            await measure_round(fronts, args.sizes, args, tallies, deadline)
        for front in (f for f in fronts if f.timing_log is not None):
            assert front.timing_log is not None
            for case, timing in envoy_timings(front.timing_log).items():
                if (front.name, case) in tallies:
                    tallies[(front.name, case)].envoy_timing = timing
        print(f"endpoint picker, one run: {args.rounds} rounds, per front and size "
              f"{args.per_round} requests at concurrency 1 and {args.requests} at "
              f"concurrency {args.concurrency}, order shuffled per round; the upstreams answer "
              f"at once; SSE: {SSE_CHUNKS} chunks {SSE_INTERVAL_S * 1000:.0f} ms apart; load "
              f"average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n")
        print(report(tallies, args.sizes, round_trips, args, names))
    finally:
        for front in fronts:
            if front.session is not None:
                await front.session.close()
        started.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.epp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=list(CASES), default=list(CASES),
                        help="the bodies measured (default: all)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="interleaved rounds, order shuffled in each (4)")
    parser.add_argument("--per-round", type=int, default=25,
                        help="requests per front, size and round at concurrency 1 (25)")
    parser.add_argument("--requests", type=int, default=2000,
                        help="closed-loop requests per front and size, over all rounds (2000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="closed-loop clients (32)")
    parser.add_argument("--phase-seconds", type=float, default=40.0,
                        help="bound on one front's closed loops at one size, all rounds (40)")
    parser.add_argument("--grpc-calls", type=int, default=300,
                        help="gRPC health round trips to the picker per round (300)")
    parser.add_argument("--baseline", default="",
                        help="another checkout (git worktree add DIR COMMIT) whose picker runs "
                             "beside this one, behind its own Envoy (none)")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="wall-time bound on the measuring (900)")
    args = parser.parse_args(argv)
    if min(args.rounds, args.per_round, args.requests, args.concurrency, args.grpc_calls) < 1:
        parser.error("--rounds, --per-round, --requests, --concurrency and --grpc-calls "
                     "must be at least 1")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
