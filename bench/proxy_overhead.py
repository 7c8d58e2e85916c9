"""The proxy's added latency: the same simulated backend, called directly and through specroute,
interleaved in one run (this machine is noisy), reported as medians and a ratio.

    .venv/bin/python -m bench.proxy_overhead [--requests 200] [--stream]

Bounded: at most --requests pairs and --max-seconds of wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp

from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, LogConfig
from router.serve import start_site
from router.state import Deps

BODY = {
    "model": "sim-model",
    "temperature": 0,
    "max_tokens": 16,
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. " * 200},
        {"role": "user", "content": "Explain how a hash map resolves collisions. " * 50},
    ],
}


async def _timed_post(session: aiohttp.ClientSession, url: str, stream: bool) -> tuple[float, float]:
    started = time.perf_counter()
    async with session.post(url, json={**BODY, "stream": stream}) as response:
        await response.read()
        overhead = float(response.headers.get("x-specroute-overhead-ms", "nan"))
    return (time.perf_counter() - started) * 1000, overhead


async def main(requests: int, stream: bool, max_seconds: float, log_dir: str) -> None:
    sim = SimState(profile="plain", reply_tokens=16)
    _, sim_port, stop_sim = await start_site(create_sim_app(sim))
    spec = BackendSpec(name="plain-0", profile="plain", url=f"http://127.0.0.1:{sim_port}")
    config = Config(backends=[spec], log=LogConfig(path=f"{log_dir}/bench-decisions.jsonl"))
    _, proxy_port, stop_proxy = await start_site(create_app(config, deps=Deps()))
    direct_url = f"http://127.0.0.1:{sim_port}/v1/chat/completions"
    proxy_url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
    direct: list[float] = []
    proxied: list[float] = []
    overheads: list[float] = []
    deadline = time.perf_counter() + max_seconds
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(10):  # warm both paths (connections, tokenizer caches)
                await _timed_post(session, direct_url, stream)
                await _timed_post(session, proxy_url, stream)
            for i in range(requests):
                if time.perf_counter() > deadline:
                    break
                order = [(direct_url, direct), (proxy_url, proxied)]
                for url, sink in order if i % 2 == 0 else reversed(order):
                    latency, overhead = await _timed_post(session, url, stream)
                    sink.append(latency)
                    if url == proxy_url:
                        overheads.append(overhead)
    finally:
        await stop_proxy()
        await stop_sim()
    d, p = statistics.median(direct), statistics.median(proxied)
    body_kb = len(str(BODY)) / 1024
    print(f"requests: {len(direct)} pairs, stream={stream}, body ~{body_kb:.0f} KB, simulated backend")
    print(f"median latency direct        : {d:8.3f} ms")
    print(f"median latency through proxy : {p:8.3f} ms")
    print(f"ratio proxy/direct           : {p / d:8.3f}")
    print(f"added by the proxy (median)  : {p - d:8.3f} ms")
    print(f"x-specroute-overhead-ms      : {statistics.median(overheads):8.3f} ms (median; parse,"
          " features, score, decide)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="request pairs (default 200)")
    parser.add_argument("--stream", action="store_true", help="stream the replies")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="wall-time bound (default 60)")
    parser.add_argument("--log-dir", default="bench/out", help="where the decision log goes")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.stream, args.max_seconds, args.log_dir))
