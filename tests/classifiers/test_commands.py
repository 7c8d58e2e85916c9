"""The CLI commands, through a real argparse parser (the router adds them the same way)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from classifiers.commands import register
from decisionlog.writer import DecisionLog
from tests.decisionlog.examples import make_record


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specroute")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.mark.parametrize("argv", [["train", "--help"], ["classify", "--help"],
                                  ["data", "build", "--help"]])
def test_every_option_shows_its_default(argv: list[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    options = [line for line in out.splitlines() if line.strip().startswith("--")
               and "--help" not in line]
    assert options and "(default:" in out


def test_classify_writes_one_line_per_input(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        {"id": "a", "request": {"messages": [{"role": "user", "content": "你好"}]}},
        {"messages": [{"role": "user", "content": "Write a haiku about rain."}]},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    assert _run(["classify", str(source)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0]["id"] == "a" and out[0]["lang"] == "zh" and out[0]["class"] == "chat"
    assert "id" not in out[1] and out[1]["class"] == "prose"
    for result in out:
        assert set(result) >= {"class", "lang", "scores", "p_spec"}
        assert abs(sum(result["scores"].values()) - 1.0) < 1e-3


def test_classify_reports_bad_lines_and_fails(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"messages": []}\nnot json\n')
    assert _run(["classify", "--rules", str(source)]) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["line"] for o in out] == [1, 2] and all("error" in o for o in out)


def test_classify_refuses_a_bad_artifact(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("{}\n")
    assert _run(["classify", "--artifact", str(tmp_path / "none.npz"),
                 str(tmp_path / "in.jsonl")]) == 1


def test_train_writes_artifact_report_and_uses_logs(tmp_path: Path, tiny_corpus: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    served = make_record(cls="chat", lang="zh", profile="mtp", draft_n=10, accepted=9, tps=40.0)
    failed = make_record(cls="chat", lang="zh", status=502)
    logs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    with DecisionLog(logs[0]) as log:
        for record in [served] * 6 + [failed]:
            log.write_record(record)
    with DecisionLog(logs[1], rotate_mb=1e-4) as log:  # rotated: b.jsonl.1, ..., b.jsonl
        for record in [served] * 4:
            log.write_record(record)

    out = tmp_path / "model.npz"
    code = _run(["train", "--corpus", str(tiny_corpus), "--out", str(out), "--max-iter", "50",
                 "--hash-dim", "4096", "--logs", *map(str, logs)])
    assert code == 0
    captured = capsys.readouterr()
    assert "decision logs: 10 outcomes" in captured.err
    assert out.exists() and (tmp_path / "model.report.md").exists()
    assert (tmp_path / "model.confusion.png").exists()
    printed = captured.out
    assert "heldout_real" in printed and "leave out" in printed
    from classifiers.model import load_artifact

    scorer = load_artifact(out)
    assert scorer.meta["training"]["logged_outcomes"] == 10
    assert scorer.class_value[4] > 0.3  # chat's value moved up from its 0.3 prior


def test_train_refuses_a_bad_hash_dim(tmp_path: Path, tiny_corpus: Path) -> None:
    assert _run(["train", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "m.npz"),
                 "--hash-dim", "1000"]) == 2
    assert not (tmp_path / "m.npz").exists()


def test_train_refuses_a_bad_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": 1}\n')
    assert _run(["train", "--corpus", str(corpus), "--out", str(tmp_path / "m.npz")]) == 1
