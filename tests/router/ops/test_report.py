"""`specroute report`: the Markdown table, the PNGs, and the labelled projection."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from decisionlog.writer import DecisionLog
from router.ops.ops_commands import register
from router.ops.projection import (
    PRESETS,
    ProjectionError,
    StepCosts,
    break_even_acceptance,
    project,
)
from router.ops.report import PROJECTION_BANNER, load_costs, run_report
from tests.decisionlog.examples import make_record

GB10 = PRESETS["gb10"]


@pytest.mark.parametrize(
    ("acceptance", "speedup"),
    [
        # tau = 0.44 + 0.56 * 1.97 = 1.5432; cycle = 0.44 * 72 + 0.56 * 112 = 94.4 ms
        (0.97, 1.5432 * 68 / 94.4),
        # tau = 0.44 + 0.56 * 1.5 = 1.28
        (0.5, 1.28 * 68 / 94.4),
        # tau = 1: every verify rejected
        (0.0, 68 / 94.4),
    ],
)
def test_gb10_projection_matches_hand_computation(acceptance: float, speedup: float) -> None:
    projection = project(acceptance, GB10)
    assert projection.speedup == pytest.approx(speedup)
    assert projection.tps_plain == pytest.approx(1000 / 68)
    assert projection.tps_mtp == pytest.approx(1000 / 68 * speedup)


def test_gb10_break_even_is_where_tau_pays_for_the_cycle() -> None:
    # tau * 68 = 94.4  ->  1 + a = (94.4 / 68 - 0.44) / 0.56
    assert break_even_acceptance(GB10) == pytest.approx((94.4 / 68 - 0.44) / 0.56 - 1, abs=1e-6)
    slow_verify = StepCosts(name="x", t_plain_ms=10, t_verify_ms=40, t_draft_ms=1, gate_skip=0)
    assert break_even_acceptance(slow_verify) is None


def test_projection_refuses_impossible_acceptance() -> None:
    with pytest.raises(ProjectionError):
        project(1.5, GB10)
    with pytest.raises(ProjectionError):
        project(0.9, GB10, gate_skip=1.0)


def test_a_class_the_gate_skips_more_projects_lower() -> None:
    # the same acceptance, the gate skipping more of the cycles: less of speculation's gain
    assert project(0.9, GB10, 0.7).speedup < project(0.9, GB10, 0.2).speedup
    assert project(0.9, GB10).gate_skip == GB10.gate_skip


def test_costs_from_yaml_and_errors_naming_the_field(tmp_path: Path) -> None:
    good = tmp_path / "h100.yaml"
    good.write_text("t_plain_ms: 20\nt_verify_ms: 24\nt_draft_ms: 1\ngate_skip: 0\n")
    costs = load_costs(str(good))
    assert costs.name == "h100" and costs.t_verify_ms == 24
    bad = tmp_path / "bad.yaml"
    bad.write_text("t_plain_ms: 20\nt_verify_ms: -1\nt_draft_ms: 1\ngate_skip: 0\nextra: 1\n")
    with pytest.raises(ProjectionError, match="t_verify_ms") as info:
        load_costs(str(bad))
    assert "extra" in str(info.value)
    with pytest.raises(ProjectionError, match="unknown cost model"):
        load_costs("tpu9")


def _write_log(path: Path) -> None:
    with DecisionLog(path) as log:
        for i in range(4):
            log.write_record(make_record(cls="code", tps=8.0, tokens=100, draft_n=40, accepted=36,
                                         request_id=f"c{i}"))
            log.write_record(make_record(cls="code", profile="plain", tps=10.0, tokens=100))
        log.write_record(make_record(cls="chat", tps=6.0, draft_n=50, accepted=25))
        log.write_record(make_record(cls="chat", profile="plain", tps=10.0))
        log.write("not a record")


def test_report_writes_table_plots_and_a_labelled_projection(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    _write_log(log)
    report, markdown, plots = run_report([str(log)], tmp_path / "out", project_onto="gb10",
                                         grouping="class")
    text = markdown.read_text()
    # code: 100 tokens from 40 verified cycles (36 accepted) and 24 gate-skipped ones
    assert "| code | 8 | 0 | 50% | 8.00 | 10.00 | 0.800x | 0.800x | 1.050x | 0.900 | 38% |" in text
    assert "| chat | 2 | 0 | 50% | 6.00 | 10.00 | 0.600x | 0.600x | 1.050x | 0.500 |" in text
    assert "1 malformed lines skipped" in text
    assert "## Arms" not in text  # only mtp and plain: nothing more to show
    assert f"## {PROJECTION_BANNER}: onto gb10" in text
    assert "**Projection, not a measurement.**" in text
    code = project(0.9, GB10, 24 / 64)  # the class's own gate-skip share, not the preset's
    assert code.gate_skip == pytest.approx(0.375)
    assert (f"| code | 0.900 | 38% | {code.tps_plain:.2f} | {code.tps_mtp:.2f} "
            f"| {code.speedup:.3f}x |") in text
    assert report.projections["chat"].speedup < 1 < report.projections["code"].speedup
    assert [p.name for p in plots] == ["tokens_per_second.png", "acceptance.png", "speedup.png"]
    for plot in plots:
        data = plot.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
        assert f"![{plot.stem}]({plot.name})" in text


def test_report_command_prints_markdown_and_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    log = tmp_path / "decisions.jsonl"
    _write_log(log)
    args = parser.parse_args(["report", str(log), "--out", str(tmp_path / "r"), "--by",
                              "class-lang"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "| code/en | 8 |" in out and "PROJECTION" not in out
    args = parser.parse_args(["report", str(tmp_path / "nope.jsonl")])
    assert args.func(args) == 2
    assert "no decision log" in capsys.readouterr().err


def test_report_shows_the_arms_beyond_mtp_and_plain(tmp_path: Path) -> None:
    arm = "nothink+model=deepseek-chat,thinking=off"
    log = tmp_path / "decisions.jsonl"
    with DecisionLog(log) as out:
        for i in range(3):
            chat = make_record(cls="chat", profile="plain", tps=14.0, tokens=60, request_id=f"n{i}")
            out.write_record(replace(chat, decision={**chat.decision, "pool": "nothink", "arm": arm},
                                     rewrite={"label": "model=deepseek-chat,thinking=off"}))
        out.write_record(make_record(cls="chat", profile="plain", tps=16.0, tokens=600))
    _, markdown, _ = run_report([str(log)], tmp_path / "out", project_onto=None, grouping="class")
    text = markdown.read_text()
    assert "## Arms, per class (pool and rewrite)" in text
    assert f"| chat | {arm} | 3 | 75% | 14.00 | 1000 | 60 |" in text
    assert "| chat | plain | 1 | 25% | 16.00 | 1000 | 600 |" in text
