"""What a route's rewrite adds to the proxy's work before the first upstream byte: applying the
rewrite to the parsed body and re-encoding it, against parsing alone (which every routed request
pays), measured side by side on 32 KB and 300 KB chat bodies.

    .venv/bin/python -m bench.rewrite_overhead [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.classifier_latency import agentic_body
from policies.policyfile.rewrite import Rewrite, apply_rewrite

REWRITE = Rewrite(model="deepseek-chat", thinking=False, max_tokens=1024)


def _median_ms(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _rewrite_and_encode(body: dict[str, Any]) -> bytes:
    applied = apply_rewrite(REWRITE, body, endpoint="chat", engine="ds4")
    return json.dumps(applied.body, ensure_ascii=False).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="timed runs per measurement")
    args = parser.parse_args()
    repeat = max(5, min(args.repeat, 500))  # bounded
    print(f"{'body':>8} {'parse ms':>9} {'rewrite+encode ms':>18} {'ratio':>6}")
    for size in (32_000, 300_000):
        raw = json.dumps(agentic_body(size)).encode()
        body = json.loads(raw)
        parse = _median_ms(partial(json.loads, raw), repeat)
        rewrite = _median_ms(partial(_rewrite_and_encode, body), repeat)
        print(f"{len(raw) // 1000:>6}KB {parse:>9.3f} {rewrite:>18.3f} {rewrite / parse:>6.2f}")


if __name__ == "__main__":
    main()
