"""Classifier latency on this machine: features plus scoring for 32 KB and 300 KB requests,
model load time, and the artifact's recorded macro-F1 figures.

Targets (issue 4): features + scoring <= 0.3 ms median at 32 KB and <= 2 ms at 300 KB on one
core; model load < 1 s; macro-F1 >= 0.90 on held-out real rows, >= 0.85 on the Chinese slice.
`json.loads` of the same body is timed side by side as a yardstick for how busy the machine is.

    .venv/bin/python -m bench.classifier_latency [--artifact PATH] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from classifiers.features import TokenCounter, extract
from classifiers.model import DEFAULT_ARTIFACT, TrainedScorer, load_artifact
from classifiers.request_view import view_request
from classifiers.tokenizer import load_counter

_SYSTEM = ("You are a coding agent in the user's repository. Read files before editing them, "
           "run the tests after each change, and report briefly. ") * 20
_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} a file or run a command in the workspace",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "content": {"type": "string"}}}}}
    for name in ("read_file", "write_file", "edit_file", "list_files", "search", "run")]
_CODE = "def handler(request):\n    data = request.json()\n    return {'ok': True, **data}\n"
_PROSE = "The proxy routes each request to the backend that will decode it faster. "
_ZH = "请帮我解释一下这个函数为什么在高并发下会出错，并给出修改建议。"


def agentic_body(size: int) -> dict[str, Any]:
    """A coding-agent request: long system prompt, file tools, tool results, of ~`size` bytes."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": _SYSTEM},
                                      {"role": "user", "content": "Fix the failing test."}]
    n = 0
    while len(json.dumps(messages)) < size:
        call_id = f"call_{n}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"m{n}.py"})}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": _CODE * 40})
        n += 1
    return {"model": "any", "messages": messages, "tools": _TOOLS}


def chat_body(size: int) -> dict[str, Any]:
    """A long multi-turn conversation (English and Chinese) ending in a user turn."""
    messages: list[dict[str, Any]] = []
    turn = 0
    while len(json.dumps(messages, ensure_ascii=False)) < size:
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": (_ZH if turn % 3 == 0 else _PROSE) * 30})
        turn += 1
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": _ZH})
    return {"model": "any", "messages": messages}


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def time_case(name: str, body: dict[str, Any], target: float, scorer: TrainedScorer,
              count: TokenCounter, repeat: int) -> None:
    raw = json.dumps(body, ensure_ascii=False)
    view = view_request("chat", body)
    features = extract(view, count)
    t_json = median_ms(lambda: json.loads(raw), repeat)
    t_view = median_ms(lambda: view_request("chat", body), repeat)
    t_feat = median_ms(lambda: extract(view, count), repeat)
    t_score = median_ms(lambda: scorer.score(view, features), repeat)
    t_both = median_ms(lambda: scorer.score(view, extract(view, count)), repeat)
    print(f"{name:22} {len(raw.encode()):8d} {t_json:10.3f} {t_view:7.3f} {t_feat:9.3f} "
          f"{t_score:7.3f} {t_both:10.3f} {target:7.1f} {t_both / t_json:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT, help="model artifact")
    parser.add_argument("--repeat", type=int, default=500, help="timed runs per case")
    args = parser.parse_args()

    start = time.perf_counter()
    scorer = load_artifact(args.artifact)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    count = load_counter()
    tokenizer_s = time.perf_counter() - start
    print(f"artifact {scorer.name} ({args.artifact.stat().st_size / 1e6:.2f} MB): "
          f"load {load_s * 1000:.0f} ms (target < 1000); tokenizer load {tokenizer_s * 1000:.0f} ms")
    print(f"{'case':22} {'bytes':>8} {'json.loads':>10} {'view':>7} {'features':>9} "
          f"{'score':>7} {'feat+score':>10} {'target':>7} {'ratio/json':>10}  (median ms)")
    for size, target in ((32_000, 0.3), (300_000, 2.0)):
        for name, make in (("agentic", agentic_body), ("chat en+zh", chat_body)):
            time_case(f"{name} {size // 1000}KB", make(size), target, scorer, count, args.repeat)
    metrics = scorer.meta.get("metrics", {})
    print("recorded evaluation (held-out families; see the report beside the artifact):")
    for key in ("heldout_real", "heldout_zh_real", "heldout_zh_all", "heldout_all"):
        if key in metrics:
            m = metrics[key]
            print(f"  {key:16} n={m['n']:5d} macro-F1={m['macro_f1']:.3f} "
                  f"accuracy={m['accuracy']:.3f}")
    for source, f1 in (metrics.get("leave_one_source_out") or {}).items():
        print(f"  leave out {source:22} macro-F1={f1:.3f}")


if __name__ == "__main__":
    main()
