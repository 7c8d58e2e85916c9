"""`specroute demo --engine vllm`: the real plain + n-gram vLLM pair on the CPU, measured, then
routed on auto (`make vllm`; skipped without it, required in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.local.vllm import find_all
from backends.local.vllm_pair import BENCH_MODEL
from router.ops.demo import run_demo
from tests.missing import VLLM, skip_missing


def test_the_vllm_demo_measures_both_instances_then_routes_on_auto(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if find_all(models=(BENCH_MODEL,)) is None:
        skip_missing(VLLM)
    assert run_demo(backends="local", engine="vllm", requests=2, max_tokens=16, min_samples=1,
                    out=str(tmp_path)) == 0
    printed = capsys.readouterr().out
    assert "two real vLLM instances" in printed
    assert all(f"{name} ms/tok" in printed for name in ("vllm-plain", "vllm-ngram"))
    records = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    workload = [r for r in records if not r["request_id"].startswith("probe_")]
    assert len(workload) == 6 and all(r["outcome"]["status"] == 200 for r in workload)
    assert {r["outcome"]["spec"] for r in workload} >= {"plain", "ngram"}
