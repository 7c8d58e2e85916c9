"""What the proxy adds, side by side in one run against one fake upstream on loopback:

    direct                        the client talks to the upstream itself
    raw aiohttp pass-through      ~40 lines: read the body, forward it, relay the answer chunk by chunk
    nginx                         from apt, proxy_buffering off, client_body_buffer_size 1m
    specroute                     `specroute serve` with the shipped classifier and tokenizer,
                                  engine llamacpp, the decision log on disk

Each runs in its own process (the upstream too); the client is this process. Rounds are
interleaved and the order shuffled per round, because this machine is shared and noisy: only the
ratios and differences measured here, in one run, mean anything.

    .venv/bin/python -m bench.proxy_overhead                 # the full table (a few minutes)
    .venv/bin/python -m bench.proxy_overhead --quick         # fewer rounds, a smoke run
    .venv/bin/python -m bench.proxy_overhead --memory-requests 100000
    .venv/bin/python -m bench.proxy_overhead --baseline /tmp/base   # + specroute from another
                                                                    # checkout (git worktree add)

Measured: added p50 latency per body size (1 KB, 42 KB with 20 tool schemas and code fences,
285 KB), non-stream, concurrency 1; for SSE the added time to first byte and the added delay per
chunk (the upstream stamps each chunk with its send time on the shared monotonic clock); requests
per second at concurrency 32 with small bodies and the CPU time each target's processes spent per
request; specroute's resident memory over a long bounded run. Bounded: --rounds, --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
SSE_CHUNKS = 24
SSE_INTERVAL_S = 0.002
_STAMP = re.compile(rb'"t":(\d+)')


# --- the bodies -------------------------------------------------------------------------------

def _tool(i: int) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": f"workspace_tool_{i}",
        "description": "Reads, searches or edits files in the workspace; returns the result "
                       "with line numbers so that later edits can refer to them. " * 6,
        "parameters": {"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "start_line": {"type": "integer", "description": "First line, 1-based."},
            "end_line": {"type": "integer", "description": "Last line, inclusive."},
            "pattern": {"type": "string", "description": "A regular expression to search for."},
            "replacement": {"type": "string", "description": "Text that replaces the match."},
        }}}}


CODE = "```python\ndef merge(a, b):\n    out = []\n    while a and b:\n        out.append(a.pop(0) if a[0] < b[0] else b.pop(0))\n    return out + a + b\n```\n"


# The agent bodies: turns of history -> size (KiB, as sent)
TURNS: Final = {"42k": 8, "220k": 101, "285k": 132}


def make_body(kind: str, *, stream: bool, ask: int | None = None) -> bytes:
    """1k: a short chat; 42k: an agent turn with 20 tools and code; 220k and 285k: a long agent
    context. `ask` numbers the 1k question, so that no memo of an earlier ask serves it."""
    body: dict[str, Any] = {"model": "bench-model", "temperature": 0, "max_tokens": 64,
                            "stream": stream}
    if kind == "1k":
        number = "" if ask is None else f"Question {ask}: "
        body["messages"] = [
            {"role": "system", "content": "You are a helpful assistant. " * 8},
            {"role": "user", "content": number + "Explain how a hash map resolves collisions. " * 14}]
    else:
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent working in a repository. " * 20}]
        for i in range(TURNS[kind]):
            history += [
                {"role": "user", "content": f"Step {i}: fix the failing test.\n" + CODE * 6},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{i}", "type": "function", "function": {
                        "name": "workspace_tool_1", "arguments": json.dumps({"path": f"src/m{i}.py"})}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": CODE * 5},
            ]
        history.append({"role": "user", "content": "Now run the tests and fix what fails.\n" + CODE})
        body["messages"] = history
        body["tools"] = [_tool(i) for i in range(20)]
    return json.dumps(body).encode()


# --- roles run as child processes -------------------------------------------------------------

def run_upstream(port: int) -> None:
    """A fake OpenAI engine answering at once: JSON, or SSE chunks stamped with their send time."""
    reply = json.dumps({"id": "cmpl-bench", "object": "chat.completion", "created": 0,
                        "model": "bench-model", "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "word " * 40}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 40,
                                  "total_tokens": 140}}).encode()

    async def chat(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        if not body.get("stream"):
            return web.Response(body=reply, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(SSE_CHUNKS):
            await asyncio.sleep(SSE_INTERVAL_S)
            chunk = ('{"id":"cmpl-bench","object":"chat.completion.chunk","created":0,'
                     f'"model":"bench-model","t":{time.monotonic_ns()},"choices":[{{"index":0,'
                     f'"delta":{{"content":"w{i} "}},"finish_reason":null}}]}}')
            await response.write(b"data: " + chunk.encode() + b"\n\n")
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            await response.write(b'data: {"id":"cmpl-bench","object":"chat.completion.chunk",'
                                 b'"created":0,"model":"bench-model","choices":[],"usage":'
                                 b'{"prompt_tokens":100,"completion_tokens":24}}\n\n')
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench-model"}]})

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    install_uvloop()
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def run_raw(port: int, upstream: str) -> None:
    """The least a pass-through in aiohttp can do: forward the body, relay the answer as it comes."""

    async def session_ctx(app: web.Application) -> Any:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app["session"] = session
            yield

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with request.app["session"].post(
            upstream + request.path, data=body,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        ) as up:
            response = web.StreamResponse(status=up.status, headers={
                "Content-Type": up.headers.get("Content-Type", "application/json")})
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=64 * 2**20)
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/chat/completions", proxy)
    install_uvloop()
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# --- starting and stopping the targets --------------------------------------------------------

@dataclass
class Target:
    name: str
    url: str
    process: subprocess.Popen[bytes] | None = None
    cpu_pids: Callable[[], list[int]] = field(default=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(argv: list[str], log: Path, tree: Path = ROOT) -> subprocess.Popen[bytes]:
    handle = open(log, "wb")  # noqa: SIM115  # the child holds it
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree != ROOT else None
    return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=tree,
                            start_new_session=True, env=env)


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)  # its own session: the group is its children only
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


async def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.post(url + "/v1/chat/completions",
                                        data=make_body("1k", stream=False),
                                        headers={"Content-Type": "application/json"}) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready")


def write_nginx_conf(work: Path, port: int, upstream_port: int) -> Path:
    conf = work / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {work}/nginx-body;
    proxy_temp_path {work}/nginx-proxy;
    fastcgi_temp_path {work}/nginx-fastcgi;
    uwsgi_temp_path {work}/nginx-uwsgi;
    scgi_temp_path {work}/nginx-scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    upstream fake {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://fake;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering on;
        }}
    }}
}}
""")
    return conf


# Two more instances of two more speculation configs (`--configs 4`): what deciding among four
# configs costs beside deciding between two.
MORE_CONFIGS: Final = """
  - {{name: ngram-0, engine: llamacpp, speculation: {{type: ngram-simple}}, url: "{url}"}}
  - {{name: draft-0, engine: llamacpp, speculation: {{type: draft, depth: 1}}, url: "{url}"}}"""


def specroute_config(work: Path, port: int, upstream_port: int, *, plain_port: int = 0,
                     name: str = "", configs: int = 2) -> Path:
    """specroute's config for the benches: the shipped classifier and tokenizer, the decision
    log on disk. Both instances on `upstream_port`, or plain on its own `plain_port` (where a
    pick must reach another process); `name` keeps several configs in one work directory apart.
    `configs` 4: an n-gram and a draft-model instance too, on `upstream_port`."""
    prefix = f"{name}-" if name else ""
    config = work / f"{name or 'specroute'}.yaml"
    more = MORE_CONFIGS.format(url=f"http://127.0.0.1:{upstream_port}") if configs == 4 else ""
    config.write_text(f"""
listen: {{host: 127.0.0.1, port: {port}}}
backends:
  - {{name: mtp-0, engine: llamacpp, profile: mtp, url: "http://127.0.0.1:{upstream_port}"}}
  - {{name: plain-0, engine: llamacpp, profile: plain, url: "http://127.0.0.1:{plain_port or upstream_port}"}}{more}
default_backend: plain-0
classifier: default
tokenizer: true
log: {{path: {work}/{prefix}decisions.jsonl, rotate_mb: 100, keep: 2}}
supervisor: {{log_dir: {work}/{prefix}backends, startup_probe: false}}
learn: {{interval_s: 0}}
""")
    return config


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory (MB), or another of /proc/<pid>/status's sizes (VmHWM: its
    peak); NaN when it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return float("nan")
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- measuring ----------------------------------------------------------------------------------

@dataclass
class Sample:
    total_ms: float
    ttfb_ms: float
    chunk_lag_ms: float | None  # median over the request's chunks
    # specroute's own time from reading the request to sending it upstream (its
    # x-specroute-overhead-ms: parse, classify, decide), None from the other targets
    own_ms: float | None = None


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes,
                      headers: Mapping[str, str] | None = None) -> Sample:
    started = time.perf_counter()
    lags: list[float] = []
    ttfb = 0.0
    async with session.post(url + "/v1/chat/completions", data=body,
                            headers={"Content-Type": "application/json", **(headers or {})}
                            ) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: status {response.status}: {(await response.read())[:200]!r}")
        own = response.headers.get("x-specroute-overhead-ms")
        pending = b""
        async for chunk in response.content.iter_any():
            now_ns = time.monotonic_ns()
            if not ttfb:
                ttfb = (time.perf_counter() - started) * 1000
            pending += chunk
            *events, pending = pending.split(b"\n\n")
            for event in events:
                stamp = _STAMP.search(event)
                if stamp:
                    lags.append((now_ns - int(stamp.group(1))) / 1e6)
    total = (time.perf_counter() - started) * 1000
    return Sample(total, ttfb, statistics.median(lags) if lags else None,
                  float(own) if own is not None else None)


async def latency_table(targets: list[Target], rounds: int, per_round: int, deadline: float
                        ) -> dict[tuple[str, bool], dict[str, list[Sample]]]:
    results: dict[tuple[str, bool], dict[str, list[Sample]]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for kind in ("1k", "42k", "285k"):
            for stream in (False, True):
                body = make_body(kind, stream=stream)
                samples: dict[str, list[Sample]] = {t.name: [] for t in targets}
                for t in targets:  # warm connections, caches
                    for _ in range(5):
                        await one_request(session, t.url, body)
                for _ in range(rounds):
                    if time.monotonic() > deadline:
                        break
                    order = targets[:]
                    random.shuffle(order)
                    for t in order:
                        for _ in range(per_round):
                            samples[t.name].append(await one_request(session, t.url, body))
                results[(kind, stream)] = samples
    return results


async def throughput(target: Target, concurrency: int, requests: int, bodies: Sequence[bytes]
                     ) -> tuple[float, float]:
    """(requests/s, CPU ms per request of the target's processes), sending `bodies` in turn."""
    remaining = requests

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one_request(session, target.url, bodies[remaining % len(bodies)])

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm = bodies[-concurrency:]  # not among the measured ones when they are all distinct
        await asyncio.gather(*(one_request(session, target.url, warm[i % len(warm)])
                               for i in range(concurrency)))
        cpu_before = cpu_seconds(target.cpu_pids())
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(target.cpu_pids()) - cpu_before
    return requests / elapsed, cpu / requests * 1000


async def best_throughput(targets: list[Target], args: argparse.Namespace, bodies: Sequence[bytes]
                          ) -> dict[str, tuple[float, float]]:
    """Per target, the better of `throughput_rounds` runs (order shuffled per round)."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.throughput_rounds):
        order = targets[:]
        random.shuffle(order)
        for t in order:
            rps, cpu = await throughput(t, 32, args.throughput_requests, bodies)
            if t.name not in best or rps > best[t.name][0]:
                best[t.name] = (rps, cpu)
    return best


async def memory_run(target: Target, pid: int, requests: int, deadline: float) -> list[tuple[int, float]]:
    """specroute's RSS every tenth of the run: (requests so far, MB)."""
    points = [(0, rss_mb(pid))]
    bodies = [make_body("1k", stream=False), make_body("1k", stream=True), make_body("42k", stream=False)]
    done = 0
    step = max(requests // 10, 1)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        while done < requests and time.monotonic() < deadline:
            batch = min(step, requests - done)
            sem = asyncio.Semaphore(32)
            await asyncio.gather(*(_bounded(sem, session, target.url, bodies[i % len(bodies)])
                                   for i in range(batch)))
            done += batch
            points.append((done, rss_mb(pid)))
    return points


async def _bounded(sem: asyncio.Semaphore, session: aiohttp.ClientSession, url: str,
                   body: bytes) -> None:
    async with sem:
        await one_request(session, url, body)


# --- the report ---------------------------------------------------------------------------------

def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(targets: list[Target], lat: dict[tuple[str, bool], dict[str, list[Sample]]],
           tput: dict[str, dict[str, tuple[float, float]]], memory: list[tuple[int, float]]) -> str:
    proxies = [t.name for t in targets if t.name != "direct"]
    head = ("| | added p50, 1 KB | added p50, 42 KB | added p50, 285 KB | SSE added lag per "
            "chunk (42 KB) | SSE added TTFB (42 KB) | req/s, c=32 | CPU per request "
            "| req/s, c=32, every ask new | CPU per request, every ask new |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]

    def added(kind: str, stream: bool, name: str, metric: Callable[[Sample], float | None]) -> float:
        base = [v for s in lat[(kind, stream)]["direct"] if (v := metric(s)) is not None]
        mine = [v for s in lat[(kind, stream)][name] if (v := metric(s)) is not None]
        return p50(mine) - p50(base)

    for name in ["direct", *proxies]:
        cells = [name]
        for kind in ("1k", "42k", "285k"):
            cells.append("-" if name == "direct" else
                         f"+{added(kind, False, name, lambda s: s.total_ms):.2f} ms")
        if name == "direct":
            cells += ["-", "-"]
        else:
            cells.append(f"+{added('42k', True, name, lambda s: s.chunk_lag_ms) * 1000:.0f} us")
            cells.append(f"+{added('42k', True, name, lambda s: s.ttfb_ms):.2f} ms")
        for kind in ("same", "new"):
            rps, cpu = tput[kind].get(name, (float("nan"), float("nan")))
            cells += [f"{rps:,.0f}", "-" if name == "direct" else f"{cpu * 1000:,.0f} us"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if "raw aiohttp" in proxies and "specroute" in proxies:
        for kind in ("1k", "42k", "285k"):
            raw = added(kind, False, "raw aiohttp", lambda s: s.total_ms)
            ours = added(kind, False, "specroute", lambda s: s.total_ms)
            lines.append(f"specroute / raw aiohttp, added p50 at {kind}: {ours / raw:.2f}x")
        for kind in ("same", "new"):
            lines.append(f"specroute / raw aiohttp, req/s ({kind} ask): "
                         f"{tput[kind]['specroute'][0] / tput[kind]['raw aiohttp'][0]:.2f}x")
    if "specroute" in proxies:
        lines.append(_own_time_line(lat, "raw aiohttp" in proxies, added))
    if FOUR_CONFIGS in proxies:
        lines.append(_configs_line(lat))
    lines.append("direct p50 (ms): " + ", ".join(
        f"{kind} {p50([s.total_ms for s in lat[(kind, False)]['direct']]):.2f}"
        for kind in ("1k", "42k", "285k")))
    if memory:
        first, last = memory[1] if len(memory) > 1 else memory[0], memory[-1]
        lines.append(f"specroute RSS: {memory[0][1]:.1f} MB at start, {first[1]:.1f} MB after "
                     f"{first[0]:,} requests, {last[1]:.1f} MB after {last[0]:,} "
                     f"({(last[1] / first[1] - 1) * 100:+.1f}% over the last "
                     f"{last[0] - first[0]:,})")
    return "\n".join(lines)


def _own_time_line(lat: dict[tuple[str, bool], dict[str, list[Sample]]], with_raw: bool,
                   added: Callable[[str, bool, str, Callable[[Sample], float | None]], float]) -> str:
    """specroute's own decision time (parse, classify, decide: before any byte goes upstream)
    beside what "within 1.3x of raw" leaves for it: 0.3x the raw pass-through's added time."""
    cells = []
    for kind in ("1k", "42k", "285k"):
        own = p50([s.own_ms for s in lat[(kind, False)]["specroute"] if s.own_ms is not None])
        budget = (f" (1.3x of raw leaves {0.3 * added(kind, False, 'raw aiohttp', lambda s: s.total_ms):.2f})"
                  if with_raw else "")
        cells.append(f"{kind} {own:.2f}{budget}")
    return "specroute's own time before sending upstream, p50 (ms): " + ", ".join(cells)


FOUR_CONFIGS: Final = "specroute (4 configs)"


def _configs_line(lat: dict[tuple[str, bool], dict[str, list[Sample]]]) -> str:
    """The own time before sending upstream with four speculation configs over two's."""
    cells = []
    for kind in ("1k", "42k", "285k"):
        two, four = (p50([s.own_ms for s in lat[(kind, False)][name] if s.own_ms is not None])
                     for name in ("specroute", FOUR_CONFIGS))
        cells.append(f"{kind} {four:.3f} / {two:.3f} = {four / two:.2f}x")
    return "own time before sending upstream, 4 configs / 2, p50 (ms): " + ", ".join(cells)


async def main(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.max_seconds
    work = Path(tempfile.mkdtemp(prefix="specroute-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    me = [sys.executable, "-m", "bench.proxy_overhead"]  # run from ROOT (spawn's cwd)
    try:
        up_port = free_port()
        upstream = spawn([*me, "--role", "upstream", "--port", str(up_port)], work / "upstream.log")
        processes.append(upstream)
        up_url = f"http://127.0.0.1:{up_port}"
        await wait_ready(up_url)
        targets = [Target("direct", up_url, upstream, lambda: [upstream.pid])]

        raw_port = free_port()
        raw = spawn([*me, "--role", "raw", "--port", str(raw_port), "--upstream", up_url],
                    work / "raw.log")
        processes.append(raw)
        targets.append(Target("raw aiohttp", f"http://127.0.0.1:{raw_port}", raw,
                              lambda: [raw.pid]))

        nginx_bin = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        if nginx_bin and not args.skip_nginx:
            ng_port = free_port()
            conf = write_nginx_conf(work, ng_port, up_port)
            nginx = spawn([nginx_bin, "-c", str(conf), "-g", "daemon off;"], work / "nginx.log")
            processes.append(nginx)
            targets.append(Target("nginx", f"http://127.0.0.1:{ng_port}", nginx,
                                  lambda: [nginx.pid, *children(nginx.pid)]))
        else:
            print("nginx: not installed (apt-get install -y nginx) or skipped; left out",
                  file=sys.stderr)

        sr_port = free_port()
        config = specroute_config(work, sr_port, up_port)
        argv = [sys.executable, "-m", "router", "serve", "--config", str(config)]
        if args.profile:
            argv = [sys.executable, "-m", "cProfile", "-o", args.profile, "-m", "router", "serve",
                    "--config", str(config)]
        specroute = spawn(argv, work / "specroute.log")
        processes.append(specroute)
        targets.append(Target("specroute", f"http://127.0.0.1:{sr_port}", specroute,
                              lambda: [specroute.pid]))
        if args.configs == 4:  # the same proxy deciding among four speculation configs
            four_port = free_port()
            four_work = work / "four"
            four_work.mkdir()
            four = spawn([sys.executable, "-m", "router", "serve", "--config",
                          str(specroute_config(four_work, four_port, up_port, configs=4))],
                         work / "four.log")
            processes.append(four)
            targets.append(Target(FOUR_CONFIGS, f"http://127.0.0.1:{four_port}", four,
                                  lambda: [four.pid]))
        if args.baseline:  # the same bench against another checkout, e.g. before a change
            base_port = free_port()
            base_work = work / "base"
            base_work.mkdir()
            profiled = (["-m", "cProfile", "-o", f"{Path(args.profile).resolve()}.baseline"]
                        if args.profile else [])  # the same profile, to compare them by function
            base = spawn([sys.executable, *profiled, "-m", "router", "serve", "--config",
                          str(specroute_config(base_work, base_port, up_port))],
                         work / "base.log", tree=Path(args.baseline).resolve())
            processes.append(base)
            targets.append(Target("specroute (baseline)", f"http://127.0.0.1:{base_port}", base,
                                  lambda: [base.pid]))
        for t in targets[1:]:
            await wait_ready(t.url)

        lat = await latency_table(targets, args.rounds, args.per_round, deadline)
        # the same small body every time (what memos of recent asks see in an agent loop), and
        # a new question every time (chat traffic: no memo serves it)
        same = [make_body("1k", stream=False)]
        new = [make_body("1k", stream=False, ask=n) for n in range(args.throughput_requests + 32)]
        tput = {kind: await best_throughput(targets, args, bodies)
                for kind, bodies in (("same", same), ("new", new))}
        ours = next(t for t in targets if t.name == "specroute")
        memory = (await memory_run(ours, specroute.pid, args.memory_requests, deadline)
                  if args.memory_requests else [])
        print(f"proxy overhead, one run, {args.rounds} rounds x {args.per_round} requests per "
              f"target and case, order shuffled per round; upstream answers at once; SSE: "
              f"{SSE_CHUNKS} chunks {SSE_INTERVAL_S * 1000:.0f} ms apart\n")
        print(report(targets, lat, tput, memory))
    finally:
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=["bench", "upstream", "raw"], default="bench")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", default="")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=5)
    parser.add_argument("--throughput-requests", type=int, default=3000)
    parser.add_argument("--throughput-rounds", type=int, default=2)
    parser.add_argument("--memory-requests", type=int, default=20_000)
    parser.add_argument("--max-seconds", type=float, default=900.0, help="wall-time bound")
    parser.add_argument("--skip-nginx", action="store_true")
    parser.add_argument("--profile", default="",
                        help="run specroute under cProfile, stats here (the baseline's: .baseline)")
    parser.add_argument("--baseline", default="", help="also run specroute from this checkout")
    parser.add_argument("--configs", type=int, choices=[2, 4], default=2,
                        help="4: also run specroute deciding among four speculation configs")
    parser.add_argument("--quick", action="store_true", help="3 rounds, small counts")
    args = parser.parse_args()
    if args.role == "upstream":
        run_upstream(args.port)
    elif args.role == "raw":
        run_raw(args.port, args.upstream)
    else:
        if args.quick:
            args.rounds, args.per_round = 3, 3
            args.throughput_requests, args.throughput_rounds, args.memory_requests = 1000, 1, 2000
        asyncio.run(main(args))
