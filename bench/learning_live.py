"""The learning benchmark over HTTP, in real time: the real proxy against nginx `least_conn`.

    .venv/bin/python -m bench.learning_live [--requests 120] [--clients 1 2] [--time-scale 0.1]

Two simulated engines of one machine (`--machine`, `simulator.MACHINES`; serial, paced at
`--time-scale` of real time), and in front of them, in turn on the same request sequence:
specroute (the shipped policy and classifier, a cold start from the policy's prior and the
startup probe, learning online from its own records) and nginx with `least_conn` (Debian's nginx, started on loopback with a config written
to a temp dir, stopped by PID); alternated A/B/A/B so that a drift of the shared machine hits
both. Throughput (completion tokens over wall time) is compared side by side. Without nginx
installed, an in-process least-connections proxy is not substituted: the run says so and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiohttp

from backends.local.simulator import MACHINES, create_sim_app
from backends.spec import BackendSpec
from bench.machines import POLICY_PATH, machine_states
from bench.traffic import MIXES, TrafficRequest, make_mix
from router.app import create_app
from router.config import Config, LearnConfig, LogConfig
from router.serve import start_site
from router.state import Deps

NGINX_CONF = """daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream pair {{ {upstream} }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://pair; proxy_http_version 1.1; proxy_buffering off;
                 proxy_read_timeout 600s;{reuse} }}
  }}
}}
"""
# Exceptions that fail one request of a load loop (refused, reset, a status, a body not JSON).
REQUEST_ERRORS = (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError)


def nginx_conf(tmp: Path, port: int, upstream_ports: Sequence[int],
               balance: str = "least_conn", keepalive: int = 0) -> str:
    """nginx on `port` in front of `upstream_ports`: `balance` names the method ("": round
    robin); `keepalive` idle connections are kept to the upstreams (0: a new one per request)."""
    upstream = [f"{balance};"] if balance else []
    upstream += [f"server 127.0.0.1:{p};" for p in upstream_ports]
    if keepalive:
        upstream.append(f"keepalive {keepalive};")
    reuse = ' proxy_set_header Connection "";' if keepalive else ""
    return NGINX_CONF.format(tmp=tmp, port=port, upstream=" ".join(upstream), reuse=reuse)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def completion_tokens(session: aiohttp.ClientSession, base_url: str,
                            body: dict[str, object]) -> int:
    """One chat completion; its completion tokens (a status >= 400 raises)."""
    async with session.post(f"{base_url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        data = await response.json()
        return int(data["usage"]["completion_tokens"])


async def closed_loop(base_url: str, requests: Sequence[TrafficRequest], clients: int,
                      deadline: float, failures: list[str] | None = None) -> tuple[int, float]:
    """(completion tokens, wall seconds) for `clients` closed-loop clients over `requests`. A
    failed request raises, or, given `failures`, is noted there and the client goes on."""
    queue = list(reversed(requests))
    tokens = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal tokens
        while queue and time.monotonic() < deadline:
            body = queue.pop().body
            try:
                # awaited before the add: `tokens += await ...` reads `tokens` before the await
                # and would lose what other clients added meanwhile
                got = await completion_tokens(session, base_url, body)
            except REQUEST_ERRORS as exc:
                if failures is None:
                    raise
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            tokens += got

    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return tokens, time.monotonic() - started


async def run(machine: str, mix: str, n: int, clients_list: Sequence[int], time_scale: float,
              seed: int,
              max_seconds: float) -> None:
    nginx = shutil.which("nginx")
    if nginx is None:
        print("nginx is not installed (apt-get install -y nginx): no live comparison")
        return
    requests = make_mix(mix, n, seed)
    sims = machine_states(machine)
    stops = []
    tmp = Path(tempfile.mkdtemp(prefix="specroute-live-"))
    process: asyncio.subprocess.Process | None = None
    deadline = time.monotonic() + max_seconds
    try:
        ports = {}
        for profile, state in sims.items():
            state.time_scale = time_scale
            _, ports[profile], stop = await start_site(create_sim_app(state))
            stops.append(stop)
        nginx_port = _free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(nginx_conf(tmp, nginx_port, [ports["mtp"], ports["plain"]]),
                        encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            nginx, "-c", str(conf), "-p", str(tmp),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await asyncio.sleep(0.5)
        print(f"\n== live, {machine}, {mix}, {n} requests per run, time scale {time_scale}")
        for clients in clients_list:
            ours = theirs = 0.0
            for turn in range(2):  # A/B/A/B
                proxy_url, stop_proxy = await _proxy(tmp / f"run-{clients}-{turn}", ports)
                try:
                    tokens, seconds = await closed_loop(proxy_url, requests, clients, deadline)
                finally:
                    await stop_proxy()
                ours += tokens / seconds
                tokens, seconds = await closed_loop(f"http://127.0.0.1:{nginx_port}", requests,
                                                    clients, deadline)
                theirs += tokens / seconds
            print(f"  {clients} client(s): specroute {ours / 2:.1f} tok/s (wall, paced), nginx "
                  f"least_conn {theirs / 2:.1f}; ratio {ours / theirs:.3f}")
    finally:
        if process is not None:  # stopped by its PID
            process.terminate()
            await asyncio.wait_for(process.wait(), timeout=10)
        for stop in stops:
            await stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def _proxy(
    workdir: Path, ports: dict[str, int]
) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A fresh proxy (cold start) with the shipped policy and classifier."""
    workdir.mkdir(parents=True)
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    config = Config(
        backends=[BackendSpec(name=f"{p}-0", profile=p, url=f"http://127.0.0.1:{ports[p]}")
                  for p in ("mtp", "plain")],
        policy=str(policy), tokenizer=False, classifier="default",
        log=LogConfig(path=str(workdir / "decisions.jsonl")), learn=LearnConfig(interval_s=0),
    )
    _, port, stop = await start_site(create_app(config, deps=Deps()))
    return f"http://127.0.0.1:{port}", stop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--requests", type=int, default=120, help="requests per run")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2], help="closed-loop clients")
    parser.add_argument("--mix", default="balanced", choices=list(MIXES))
    parser.add_argument("--machine", default="gb10", choices=list(MACHINES),
                        help="the simulated machine's step costs")
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="share of real time the simulated engines take")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-seconds", type=float, default=600.0, help="wall-time bound")
    args = parser.parse_args(argv)
    asyncio.run(run(args.machine, args.mix, args.requests, args.clients, args.time_scale, args.seed,
                    args.max_seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
