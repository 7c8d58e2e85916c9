"""The decision's time back to back and after the CPU has idled, in one process: why a picker's
decision costs more on the path of a lone request than in a loop.

At one client the picker idles between requests (Envoy, the client and the engine run in
between) and its code then runs on a CPU that has slowed down and lost its caches. This times
`plan_for` (the whole decision, as `specroute epp` and `serve` make it) on bench.epp's 1 KB body,
the ask repeated (as bench.epp sends it: the memos answer most of the classifier's work) and
new each time, back to back and after sleeping `--idle-ms` before each, side by side in one run.

    .venv/bin/python -m bench.decision_idle [--requests 2000] [--idle-ms 1 2.5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.proxy_overhead import make_body, specroute_config
from router.app import create_app
from router.config import load_config
from router.request.core import CORE
from router.request.lifecycle import plan_for
from router.serve import tune_gc

HEADERS = {":path": "/v1/chat/completions", "content-type": "application/json"}
WARMUP = 300


def timed(decide: Callable[[int], object], requests: int, idle_s: float) -> float:
    """The median decision in ms over `requests`, each after `idle_s` asleep (0: back to back)."""
    for i in range(WARMUP):
        decide(i)
    times = []
    for i in range(requests):
        if idle_s:
            time.sleep(idle_s)
        start = time.perf_counter()
        decide(WARMUP + i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.decision_idle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="decisions per cell")
    parser.add_argument("--idle-ms", type=float, nargs="+", default=[1.0, 2.5],
                        help="the idle gaps before each decision to compare with none")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="specroute-bench-idle-") as work:
        config = load_config(specroute_config(Path(work), 0, 1, plain_port=2))
        core = create_app(config)[CORE]
        total = WARMUP + args.requests
        cases = {"1 KB, the ask repeated": [make_body("1k", stream=False)] * total,
                 "1 KB, a new ask each": [make_body("1k", stream=False, ask=i)
                                          for i in range(total)]}
        tune_gc()
        gaps = [0.0, *(ms / 1000 for ms in args.idle_ms)]
        print(f"plan_for p50 (ms), {args.requests} decisions per cell; the ratio to back to back")
        print("| | back to back | " + " | ".join(f"after {ms:g} ms idle" for ms in args.idle_ms)
              + " |")
        print("|---|---|" + "---|" * len(args.idle_ms))
        for name, bodies in cases.items():
            def decide(i: int, bodies: list[bytes] = bodies) -> object:
                return plan_for(core, "chat", bodies[i], HEADERS, time.monotonic())
            ms = [timed(decide, args.requests, gap) for gap in gaps]
            cells = [f"{ms[0]:.3f}", *(f"{m:.3f} ({m / ms[0]:.1f}x)" for m in ms[1:])]
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
