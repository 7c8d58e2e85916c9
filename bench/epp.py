"""What the endpoint picker costs, side by side in one run against two fake upstreams on loopback:

    direct                      the client talks to the upstreams itself (in turn)
    Envoy + picker              Envoy 1.40 running deploy/envoy/envoy.yaml (ORIGINAL_DST) with
                                `specroute epp --endpoints primary` as its ext_proc picker
    Envoy + do-nothing picker   the same, with bench.epp_floor as the picker: the same streams
                                and messages, no parsing, no decision (the floor)
    specroute proxy             `specroute serve` with the same config
    Envoy round robin           the same Envoy config without the ext_proc filter, its cluster
                                a STATIC ROUND_ROBIN one over the two upstreams (the rest as is)

The upstreams are bench.proxy_overhead's (one named `mtp`, one `plain`, engine llamacpp, so
the decision is the real one); the specroute config is that bench's (shipped classifier and
tokenizer, decision log on disk). Each role runs in its own process, the client is this one.
Rounds are interleaved and the order shuffled per round: only ratios and differences measured
here, in one run, mean anything.

    .venv/bin/python -m bench.epp                           # the full table (~6-7 minutes)
    .venv/bin/python -m bench.epp --rounds 1 --requests 200 --sizes 1k sse --clients 1 20
    .venv/bin/python -m bench.epp --baseline DIR  # and the picker of another checkout beside

Measured per body size (1 KB, 42 KB, 220 KB, 285 KB on request; SSE: 42 KB streamed, 24
chunks 2 ms apart, each stamped by the upstream): added p50 latency at concurrency 1 (p50
through the front minus p50 straight to the upstreams, same run); for SSE the added lag per
chunk and time to first byte; requests/s in a closed loop (--concurrency clients, --requests per
front and size, bounded by --phase-seconds); CPU per request of each process (/proc/<pid>/stat,
utime + stime); the `x-specroute-overhead-ms` header's p50 (the picker's or the proxy's own time
from the request's headers to its pick); one gRPC round trip to the picker (a grpc.health.v1
Check, p50). The sweep: per size and --clients level (1 20 60 150), a closed loop per front
(--sweep-requests, --sweep-seconds) for the added time to first byte (p50 through the front
minus direct's at the same concurrency) and requests/s. In every closed loop each client's
first request opens its connection and is not timed; requests/s and CPU are over the window in
which every client has a request in flight. Failed requests counted per front; the pickers' and
the proxy's RSS before, after each round and at peak; the issue's targets, met or missed.
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
    rss_mb,
    spawn,
    specroute_config,
    stop,
    wait_ready,
)

ORIGINAL_DST: Final = PICKER_CONFIG
EXT_PROC: Final = ("type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
                   "ExternalProcessor")  # the picker's filters, dropped for round robin
# the size name -> (make_body's kind, streamed)
CASES: Final = {"1k": ("1k", False), "42k": ("42k", False), "220k": ("220k", False),
                "285k": ("285k", False), "sse": ("42k", True)}
CASE_TITLES: Final = {"1k": "1 KB", "42k": "42 KB", "220k": "220 KB", "285k": "285 KB",
                      "sse": f"SSE (42 KB, {SSE_CHUNKS} chunks)"}
SIZES: Final = ("1k", "42k", "220k", "sse")  # the default run's (285k: the earlier runs')
CLIENTS: Final = (1, 20, 60, 150)  # the sweep's concurrent clients
DIRECT: Final = "direct"
PICKER: Final = "Envoy + picker"
FLOOR: Final = "Envoy + do-nothing picker"  # bench.epp_floor
PROXY: Final = "specroute proxy"
ROUND_ROBIN: Final = "Envoy round robin"
BASELINE: Final = "Envoy + picker, baseline"  # --baseline: the picker from another checkout
# --answer-floor: the do-nothing picker answering as specroute's picker does, with no decision
ANSWER_FLOOR: Final = "Envoy + do-nothing picker, specroute's answer"
FRONTS: Final = (DIRECT, PICKER, FLOOR, PROXY, ROUND_ROBIN)
UPSTREAMS: Final = "upstreams"
OWN: Final = "picker / proxy"  # the role of the front's own Python process
# the processes whose CPU is counted, as table rows, in this order
ROLES: Final = ("Envoy", OWN, UPSTREAMS)
CLIENT_TIMEOUT: Final = aiohttp.ClientTimeout(total=60)
# what a failed request raises in one_request (a status but 200, a reset, the timeout)
FAILURES: Final = (RuntimeError, aiohttp.ClientError, asyncio.TimeoutError)
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
# The targets (52): the picker against the do-nothing one in the same run
TARGET_ADDED_MS: Final = 0.3  # 1 KB: added p50 at most the floor's + this
TARGET_RPS_SHARE: Final = 0.8  # 1 KB: req/s at --concurrency at least this share of the floor's
TARGET_TTFT_RATIO: Final = 1.1  # 220 KB: added TTFT at most the floor's x this, at TTFT_LEVELS
TTFT_LEVELS: Final = (20, 60, 150)
TARGET_LAG_US: Final = 20.0  # SSE: added lag per chunk at most the floor's + this
# Bounded: the stores that grow with traffic (the online learner's pending observations, the
# memos) fill to their caps in the first rounds, then the RSS levels off. Judged on the last
# third of the rounds, which must add at most RSS_LEVEL; the growth from the first round on is
# reported beside it.
RSS_LEVEL: Final = 0.02
LEVEL_FROM: Final = 2 / 3  # the round after which the last third begins, as a share of them
# The Gateway API Inference Extension's published figures (another machine): v1.5.0's Go
# picker behind Istio, a near-instant backend, 220 KB prompts
GIE_TTFT_MS: Final = {20: 158.0, 60: 426.0, 150: 1141.0}
GIE_PLATEAU_RPS: Final = 130.0


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
    rss_mb: list[float] = field(default_factory=list)  # OWN's: before, then after each round

    def next_url(self) -> str:
        self.turn += 1
        return self.urls[self.turn % len(self.urls)]

    def cpu(self) -> dict[str, float]:
        return {role: cpu_seconds(pids) for role, pids in self.pids.items()}

    def note_rss(self) -> None:
        if OWN in self.pids:
            self.rss_mb.append(rss_mb(self.pids[OWN][0]))

    def peak_rss_mb(self) -> float:
        return rss_mb(self.pids[OWN][0], "VmHWM") if OWN in self.pids else math.nan


@dataclass
class Loop:
    """One closed loop: the requests recorded, the failures, and its window, while every
    client has a request in flight: from the first answer to the first client that stops
    sending (requests/s and CPU over the answers in it; not the loop's ramp or drain)."""

    limit_s: float  # the window's bound
    samples: list[Sample] = field(default_factory=list)
    failed: int = 0
    error: str = ""  # the first failure's
    answered: int = 0  # answers in the window
    began: float = 0.0
    until: float = math.inf  # monotonic: no request sent after it
    closed: bool = False
    seconds: float = 0.0
    cpu_before: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU seconds in the window

    async def send(self, front: Front, body: bytes, *, record: bool) -> None:
        assert front.session is not None
        try:
            sample = await one_request(front.session, front.next_url(), body)
        except FAILURES as exc:
            self.failed += 1
            self.error = self.error or f"{type(exc).__name__}: {exc}"[:200]
            return
        if not self.began:  # the window opens
            self.began, self.cpu_before = time.perf_counter(), front.cpu()
            self.until = time.monotonic() + self.limit_s
        elif not self.closed:
            self.answered += 1
        if record:
            self.samples.append(sample)

    def close(self, front: Front) -> None:
        """A client stops sending: the window ends (once)."""
        if self.closed or not self.began:
            return
        self.closed = True
        self.seconds = time.perf_counter() - self.began
        after = front.cpu()
        self.cpu = {role: after[role] - self.cpu_before[role] for role in after}


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
    failed: int = 0  # requests failed in the closed loops
    error: str = ""  # the first failure's

    def add(self, loop: Loop) -> None:
        """A closed loop's requests/s, CPU and failures (not its samples: the caller's)."""
        self.requests += loop.answered
        self.seconds += loop.seconds
        for role, spent in loop.cpu.items():
            self.cpu[role] = self.cpu.get(role, 0.0) + spent
        self.failed += loop.failed
        self.error = self.error or loop.error


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


def behind_envoy(work: Path, name: str, title: str, argv: list[str], grpc_port: int,
                 tree: Path, started: Processes, binary: Path) -> Front:
    """The picker `argv` (run from the checkout `tree`, its gRPC server on `grpc_port`) and an
    Envoy running that checkout's envoy.yaml in front of it (the processing modes go with the
    picker that answers them): the front `title`."""
    picker = spawn(argv, work / f"{name}.log", tree=tree)
    started.children.append(picker)
    listen = free_port()
    timing_log = work / f"envoy-{name}-timing.jsonl"
    config = render_config(tree / ORIGINAL_DST.relative_to(ROOT), LISTEN_PORT=listen,
                           PICKER_PORT=grpc_port, ADMIN_PORT=free_port())
    envoy = start_envoy(with_timing_log(config, timing_log), work / f"envoy-{name}",
                        binary=binary, concurrency=1)
    started.envoys.append(envoy)
    return Front(title, [f"http://127.0.0.1:{listen}"],
                 {"Envoy": [envoy.process.pid], OWN: [picker.pid]},
                 admin_url=envoy.admin_url, timing_log=timing_log)


def start_picker(work: Path, name: str, ports: Sequence[int], tree: Path, started: Processes,
                 binary: Path) -> tuple[Front, int]:
    """`specroute epp` from the checkout `tree` behind its own Envoy; the front and the
    picker's gRPC port."""
    grpc_port = free_port()
    picker_config = specroute_config(work, free_port(), ports[0], plain_port=ports[1], name=name)
    argv = [sys.executable, "-m", "router", "epp", "--config", str(picker_config),
            "--grpc-port", str(grpc_port), "--endpoints", "primary"]
    title = BASELINE if name == "baseline" else PICKER
    return behind_envoy(work, name, title, argv, grpc_port, tree, started, binary), grpc_port


def start_floor(work: Path, ports: Sequence[int], started: Processes, binary: Path,
                answer: str = "bare") -> Front:
    """bench.epp_floor, the do-nothing picker naming the upstreams in turn, behind its own
    Envoy running this checkout's envoy.yaml; `answer` "specroute": its answer shaped as
    specroute's picker's."""
    grpc_port = free_port()
    argv = [sys.executable, "-m", "bench.epp_floor", "--port", str(grpc_port),
            "--endpoints", ",".join(f"127.0.0.1:{port}" for port in ports), "--answer", answer]
    name, title = ("floor", FLOOR) if answer == "bare" else ("floor-answer", ANSWER_FLOOR)
    return behind_envoy(work, name, title, argv, grpc_port, ROOT, started, binary)


async def start_fronts(work: Path, started: Processes, baseline: Path | None = None,
                       answer_floor: bool = False) -> tuple[list[Front], int]:
    """Direct to the upstreams and the four fronts (one more with a baseline, one more with
    the answer-shaped floor), all ready; and the picker's gRPC port."""
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
    pickers.append(start_floor(work, ports, started, binary))
    if answer_floor:
        pickers.append(start_floor(work, ports, started, binary, answer="specroute"))
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
              {OWN: [proxy.pid], UPSTREAMS: upstream_pids}),
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
                      seconds: float, deadline: float) -> Loop:
    """`concurrency` clients, each sending its next request when its last one is answered,
    until `requests` are sent, `seconds` passed since the first answer or the run's deadline
    passed. Each client's first request opens its connection and is not recorded: every
    recorded one met the other clients' in flight (the loop's steady state, not its first
    burst)."""
    loop = Loop(seconds)
    remaining = requests

    async def client() -> None:
        nonlocal remaining
        await loop.send(front, body, record=False)
        while remaining > 0 and time.monotonic() < min(deadline, loop.until):
            remaining -= 1
            await loop.send(front, body, record=True)
        loop.close(front)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return loop


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


def case_body(case: str) -> bytes:
    kind, stream = CASES[case]
    return make_body(kind, stream=stream)


Tallies = dict[tuple[str, str], Tally]  # (front, size) -> its tally
Sweep = dict[tuple[str, str, int], Tally]  # (front, size, clients) -> that loop's tally


async def measure_round(fronts: list[Front], cases: Sequence[str], args: argparse.Namespace,
                        tallies: Tallies, sweep: Sweep, deadline: float) -> None:
    """One round: per size, every front's latency batch, then every front's closed loop, then
    the sweep's, each in a new shuffled order (a drift of the shared machine hits them all)."""
    per_loop = max(args.requests // args.rounds, 1)
    for case in cases:
        body = case_body(case)
        for front in shuffled(fronts):
            samples = await latency_batch(front, body, args.per_round, deadline, case)
            tallies[(front.name, case)].samples += samples
        for front in shuffled(fronts):
            tallies[(front.name, case)].add(await closed_loop(
                front, body, per_loop, args.concurrency, args.phase_seconds / args.rounds,
                deadline))
        await sweep_round(fronts, case, body, args, sweep, deadline)


async def sweep_round(fronts: list[Front], case: str, body: bytes, args: argparse.Namespace,
                      sweep: Sweep, deadline: float) -> None:
    """The sweep's share of one round at one size: per --clients level, every front's closed
    loop (bounded by requests and seconds), its answers' times to first byte kept."""
    per_loop = max(args.sweep_requests // args.rounds, 1)
    for clients in args.clients:
        for front in shuffled(fronts):
            loop = await closed_loop(front, body, per_loop, clients,
                                     args.sweep_seconds / args.rounds, deadline)
            tally = sweep[(front.name, case, clients)]
            tally.add(loop)
            tally.samples += loop.samples


# --- the report ---------------------------------------------------------------------------------

def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def metric_p50(tally: Tally, metric: str) -> float:
    return p50([v for s in tally.samples if (v := getattr(s, metric)) is not None])


def gap(mine: Tally, direct: Tally, metric: str) -> float:
    return metric_p50(mine, metric) - metric_p50(direct, metric)


def added(tallies: Tallies, front: str, case: str, metric: str) -> float:
    return gap(tallies[(front, case)], tallies[(DIRECT, case)], metric)


def added_ttft(sweep: Sweep, front: str, case: str, clients: int) -> float:
    """The front's time to first byte p50 over direct's, at the same concurrency."""
    return gap(sweep[(front, case, clients)], sweep[(DIRECT, case, clients)], "ttfb_ms")


def rps(tally: Tally) -> float:
    return tally.requests / tally.seconds if tally.seconds else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


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
        (cell(v, f"{v:,.0f}") for v in (rps(row[n]) for n in names)))
    add("failed requests (closed loops)", (str(row[n].failed) for n in names))
    for role in ROLES:
        add(f"CPU ms/request: {role}",
            (cell(v, f"{v:.3f}") for v in (cpu_ms(row[n], role) for n in names)))
    add("CPU ms/request: the front in all",
        (cell(v, f"**{v:.3f}**") for v in (front_cpu_ms(row[n]) for n in names)))
    add(f"closed-loop answers in the window (of {requests} sent)",
        (f"{row[n].requests:,}" for n in names))
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
                 f"{cpu_ms(picker, OWN):.3f} ms, the proxy "
                 f"{cpu_ms(tallies[(PROXY, case)], OWN):.3f} ms")
    return lines


def sweep_table(sweep: Sweep, case: str, levels: Sequence[int], names: Sequence[str]
                ) -> list[str]:
    """Per front and clients level: the added time to first byte p50, requests/s, failures."""
    title = (f"### {CASE_TITLES[case]}, by concurrent clients: added time to first byte "
             "p50 (direct: its own), requests/s, failed")
    lines = [title, "",
             "| | " + " | ".join(f"{c} clients" for c in levels) + " |",
             "|---|" + "---|" * len(levels)]
    for name in names:
        cells = []
        for clients in levels:
            tally = sweep[(name, case, clients)]
            ttft = (f"TTFT {metric_p50(tally, 'ttfb_ms'):.2f} ms" if name == DIRECT
                    else f"{added_ttft(sweep, name, case, clients):+.2f} ms")
            failed = f", **{tally.failed} failed**" if tally.failed else ""
            cells.append(f"{ttft}, {rps(tally):,.0f}/s{failed}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def verdict(ok: bool, *values: float) -> str:
    return "not measured" if any(math.isnan(v) for v in values) else ("met" if ok else "missed")


def target_1k(tallies: Tallies, concurrency: int) -> list[str]:
    pick, floor = (added(tallies, n, "1k", "total_ms") for n in (PICKER, FLOOR))
    pick_rps, floor_rps = (rps(tallies[(n, "1k")]) for n in (PICKER, FLOOR))
    share = ratio(pick_rps, floor_rps)
    return [f"1 KB, added p50 <= the do-nothing picker's + {TARGET_ADDED_MS} ms: {pick:+.2f} ms "
            f"against {floor:+.2f} ({pick - floor:+.2f}): "
            + verdict(pick <= floor + TARGET_ADDED_MS, pick, floor),
            *answer_split(tallies, pick, floor),
            f"1 KB, requests/s at c={concurrency} >= {TARGET_RPS_SHARE:.0%} of the do-nothing "
            f"picker's: {pick_rps:,.0f} against {floor_rps:,.0f} ({share:.0%}): "
            + verdict(share >= TARGET_RPS_SHARE, share)]


def answer_split(tallies: Tallies, pick: float, floor: float) -> list[str]:
    """With --answer-floor: how much of the picker's added time its answer's shape takes (the
    do-nothing picker answering as it does, no decision) and how much is left to its own work."""
    if (ANSWER_FLOOR, "1k") not in tallies:
        return []
    shaped = added(tallies, ANSWER_FLOOR, "1k", "total_ms")
    return [(f"  of it, 1 KB: specroute's answer with no decision {shaped - floor:+.2f} ms "
             f"(the do-nothing picker answering as specroute's does: {shaped:+.2f}), the "
             f"decision and the picker's own work {pick - shaped:+.2f} ms")]


def failures(tallies: Tallies, sweep: Sweep, name: str, case: str, levels: Sequence[int]
             ) -> tuple[int, str]:
    """The front's failed requests at one size, all its closed loops; the first's error."""
    loops = [tallies[(name, case)], *(sweep[(name, case, c)] for c in levels)]
    return sum(t.failed for t in loops), next((t.error for t in loops if t.error), "")


def target_220k(tallies: Tallies, sweep: Sweep, args: argparse.Namespace,
                names: Sequence[str]) -> list[str]:
    lines = []
    for clients in (c for c in TTFT_LEVELS if c in args.clients):
        pick, floor = (added_ttft(sweep, n, "220k", clients) for n in (PICKER, FLOOR))
        lines.append(f"220 KB, {clients} clients, added TTFT <= the do-nothing picker's x "
                     f"{TARGET_TTFT_RATIO}: {pick:+.2f} ms against {floor:+.2f} "
                     f"({ratio(pick, floor):.2f}x): "
                     + verdict(pick <= floor * TARGET_TTFT_RATIO, pick, floor))
    failed = {name: failures(tallies, sweep, name, "220k", args.clients) for name in names}
    lines.append(f"220 KB, no failed request (c={args.concurrency} and every sweep level), per "
                 "front: " + ", ".join(f"{n} {k}" for n, (k, _) in failed.items())
                 + f": {verdict(failed[PICKER][0] == 0)}")
    lines += [f"  {n}'s first failure: {error}" for n, (_, error) in failed.items() if error]
    return lines + gie(sweep, args.clients)


def gie(sweep: Sweep, levels: Sequence[int]) -> list[str]:
    """This run's 220 KB sweep beside GIE's published figures (another machine)."""
    shown = [c for c in GIE_TTFT_MS if c in levels]
    if not shown:
        return []
    at = " / ".join(map(str, shown))

    def row(name: str) -> str:
        tallies = [sweep[(name, "220k", c)] for c in shown]
        return (f"{name} " + " / ".join(f"{metric_p50(t, 'ttfb_ms'):,.1f}" for t in tallies)
                + " ms, " + " / ".join(f"{rps(t):,.0f}" for t in tallies) + " req/s")

    return ["  beside GIE v1.5.0's published figures (ANOTHER MACHINE: its Go picker behind "
            "Istio, a near-instant backend, 220 KB prompts): TTFT "
            + " / ".join(f"{GIE_TTFT_MS[c]:,.0f}" for c in shown)
            + f" ms at {at} clients, throughput plateau ~{GIE_PLATEAU_RPS:.0f} req/s",
            f"  this machine, TTFT p50 through the front (not added) and req/s at {at} clients: "
            + "; ".join(row(n) for n in (PICKER, FLOOR, DIRECT))]


def target_sse(tallies: Tallies) -> list[str]:
    pick, floor = (added(tallies, n, "sse", "chunk_lag_ms") * 1000 for n in (PICKER, FLOOR))
    return [f"SSE, added lag per chunk <= the do-nothing picker's + {TARGET_LAG_US:.0f} us: "
            f"{pick:+.0f} us against {floor:+.0f} ({pick - floor:+.0f}): "
            + verdict(pick <= floor + TARGET_LAG_US, pick, floor)]


def failed_requests(tallies: Tallies, sweep: Sweep, cases: Sequence[str],
                    args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """Per front, its failed requests at each size (every closed loop) and the first error."""
    lines = []
    for name in names:
        counted = {case: failures(tallies, sweep, name, case, args.clients) for case in cases}
        if any(k for k, _ in counted.values()):
            error = next(e for _, e in counted.values() if e)
            lines.append(f"failed requests, {name}: " + ", ".join(
                f"{case} {k}" for case, (k, _) in counted.items()) + f"; the first: {error}")
    return lines or ["failed requests: none"]


def memory(fronts: Sequence[Front]) -> list[str]:
    """Each Python front's RSS over the run; the picker's bounded: the last third of the rounds
    adds at most RSS_LEVEL to its RSS."""
    lines = []
    for front in (f for f in fronts if f.rss_mb):
        rss = front.rss_mb
        line = (f"{front.name}, RSS (MB): {rss[0]:.1f} before the rounds, after each "
                + " / ".join(f"{v:.1f}" for v in rss[1:])
                + f", peak (VmHWM) {front.peak_rss_mb():.1f}")
        # every front's growth beside the picker's verdict: the do-nothing picker's is the
        # gRPC server's own, with nothing kept per request
        line += "; " + bounded(rss, judged=front.name == PICKER)
        lines.append(line)
    return lines


def bounded(rss: Sequence[float], judged: bool = True) -> str:
    """An RSS series (before the rounds, then after each): its growth from the first round,
    and over the last third of the rounds, where `judged` with the verdict on it (levelled
    off: at most RSS_LEVEL)."""
    rounds = len(rss) - 1
    if rounds < 3:
        return f"bounded: not judged ({rounds} round{'s' if rounds != 1 else ''}, at least 3)"
    start = round(rounds * LEVEL_FROM)
    last = f"round {rounds}" if start + 1 == rounds else f"rounds {start + 1}-{rounds}"
    levelled = rss[-1] / rss[start] - 1
    grown = f"{rss[-1] / rss[1] - 1:+.1%} from the first round to the last"
    if not judged:
        return f"{grown}, {levelled:+.1%} over {last}"
    return (f"{grown}; bounded ({last} add at most {RSS_LEVEL:.0%}: {levelled:+.1%}): "
            f"{verdict(levelled <= RSS_LEVEL, levelled)}")


def targets(tallies: Tallies, sweep: Sweep, fronts: Sequence[Front], cases: Sequence[str],
            args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The issue's targets: specroute's picker against the do-nothing one, this run."""
    lines = ["", "targets (issue 52), specroute's picker against the do-nothing picker:"]
    if "1k" in cases:
        lines += target_1k(tallies, args.concurrency)
    if "220k" in cases:
        lines += target_220k(tallies, sweep, args, names)
    if "sse" in cases:
        lines += target_sse(tallies)
    lines += failed_requests(tallies, sweep, cases, args, names)
    lines += memory(fronts)
    lines.append(f"picker CPU per request at c={args.concurrency} (ms), specroute's / the "
                 "do-nothing picker's: " + ", ".join(
                     f"{case} {cpu_ms(tallies[(PICKER, case)], OWN):.3f} / "
                     f"{cpu_ms(tallies[(FLOOR, case)], OWN):.3f}" for case in cases))
    return lines


def report(tallies: Tallies, sweep: Sweep, fronts: Sequence[Front], cases: Sequence[str],
           round_trips: list[float], args: argparse.Namespace,
           names: Sequence[str] = FRONTS) -> str:
    round_trip = p50(round_trips)
    lines = []
    for case in cases:
        planned = max(args.requests // args.rounds, 1) * args.rounds
        lines += case_table(tallies, case, args.concurrency, planned, names)
        lines += sweep_table(sweep, case, args.clients, names)
    p90 = statistics.quantiles(round_trips, n=10)[-1] if len(round_trips) > 1 else float("nan")
    lines.append(f"one gRPC round trip to the picker (grpc.health.v1 Check, {len(round_trips)} "
                 f"calls): p50 {round_trip:.3f} ms, p90 {p90:.3f} ms")
    for case in cases:
        lines += comparison(tallies, case, round_trip)
    lines += targets(tallies, sweep, fronts, cases, args, names)
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------------------------

async def main(args: argparse.Namespace) -> None:
    began = time.monotonic()
    deadline = began + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="specroute-bench-epp-"))
    started = Processes()
    names = (DIRECT, PICKER, *((BASELINE,) if args.baseline else ()), FLOOR,
             *((ANSWER_FLOOR,) if args.answer_floor else ()), PROXY, ROUND_ROBIN)
    tallies = {(name, case): Tally() for name in names for case in args.sizes}
    sweep = {(name, case, clients): Tally()
             for name in names for case in args.sizes for clients in args.clients}
    round_trips: list[float] = []
    load_before = os.getloadavg()
    fronts: list[Front] = []
    try:
        fronts, grpc_port = await start_fronts(
            work, started, Path(args.baseline).resolve() if args.baseline else None,
            args.answer_floor)
        for front in fronts:
            front.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=CLIENT_TIMEOUT)
        for case in args.sizes:
            for front in (f for f in fronts
                          if f.name in (PICKER, BASELINE, FLOOR, ANSWER_FLOOR, PROXY)):
                await probe(front, case_body(case), PROBES, tallies[(front.name, case)])
        for front in fronts:
            front.note_rss()
        for _ in range(args.rounds):
            if time.monotonic() > deadline:
                break
            round_trips += await grpc_round_trips(grpc_port, args.grpc_calls)
            await measure_round(fronts, args.sizes, args, tallies, sweep, deadline)
            for front in fronts:
                front.note_rss()
        for front in (f for f in fronts if f.timing_log is not None):
            assert front.timing_log is not None
            for case, timing in envoy_timings(front.timing_log).items():
                if (front.name, case) in tallies:
                    tallies[(front.name, case)].envoy_timing = timing
        print(f"endpoint picker, one run: {args.rounds} rounds, per front and size "
              f"{args.per_round} requests at concurrency 1 and {args.requests} at "
              f"concurrency {args.concurrency}; the sweep: up to {args.sweep_requests} requests "
              f"or {args.sweep_seconds:g} s per front, size and level at "
              f"{' / '.join(map(str, args.clients))} clients; order shuffled per round; the "
              f"upstreams answer at once; SSE: {SSE_CHUNKS} chunks "
              f"{SSE_INTERVAL_S * 1000:.0f} ms apart; load average {load_before[0]:.2f} before, "
              f"{os.getloadavg()[0]:.2f} after; {time.monotonic() - began:.0f} s\n")
        print(report(tallies, sweep, fronts, args.sizes, round_trips, args, names))
    finally:
        for front in fronts:
            if front.session is not None:
                await front.session.close()
        started.stop_all()
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.epp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=list(CASES), default=list(SIZES),
                        help=f"the bodies measured ({' '.join(SIZES)})")
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
    parser.add_argument("--clients", nargs="+", type=int, default=list(CLIENTS),
                        help="the sweep's concurrent clients "
                             f"({' '.join(map(str, CLIENTS))})")
    parser.add_argument("--sweep-requests", type=int, default=2000,
                        help="the sweep's recorded requests per front, size and level, over "
                             "all rounds (2000)")
    parser.add_argument("--sweep-seconds", type=float, default=3.0,
                        help="bound on the sweep's loops per front, size and level, all "
                             "rounds, each from its first answer (3)")
    parser.add_argument("--grpc-calls", type=int, default=300,
                        help="gRPC health round trips to the picker per round (300)")
    parser.add_argument("--baseline", default="",
                        help="another checkout (git worktree add DIR COMMIT) whose picker runs "
                             "beside this one, behind its own Envoy (none)")
    parser.add_argument("--answer-floor", action="store_true",
                        help="also the do-nothing picker answering as specroute's does (no "
                             "decision): splits the picker's added time into its answer's and "
                             "its own work's")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="wall-time bound on the measuring (600)")
    args = parser.parse_args(argv)
    if min(args.rounds, args.per_round, args.requests, args.concurrency, args.grpc_calls,
           args.sweep_requests, *args.clients) < 1:
        parser.error("--rounds, --per-round, --requests, --concurrency, --grpc-calls, "
                     "--sweep-requests and --clients must be at least 1")
    args.clients = sorted(set(args.clients))
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
