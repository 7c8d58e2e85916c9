"""The CLI commands, through a real argparse parser (the router adds them the same way)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from classifiers.classifier_commands import register


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
        assert set(result) >= {"class", "lang", "scores"}
        assert "p_spec" not in result  # the decision's to predict, not the classifier's
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


def test_train_writes_artifact_and_report(tmp_path: Path, tiny_corpus: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model.npz"
    code = _run(["train", "--corpus", str(tiny_corpus), "--out", str(out), "--max-iter", "50",
                 "--hash-dim", "4096"])
    assert code == 0
    captured = capsys.readouterr()
    assert out.exists() and (tmp_path / "model.report.md").exists()
    assert (tmp_path / "model.confusion.png").exists()
    printed = captured.out
    assert "heldout_real" in printed and "leave out" in printed
    from classifiers.model import load_artifact

    scorer = load_artifact(out)
    assert set(scorer.meta["training"]) == {"corpus_sha256", "C"}  # the corpus alone


def test_train_reads_no_decision_log(tmp_path: Path, tiny_corpus: Path) -> None:
    """Decision logs fed the classifier's own p_spec, which is gone: the option went with it."""
    with pytest.raises(SystemExit) as exit_info:
        _parser().parse_args(["train", "--corpus", str(tiny_corpus), "--logs", "d.jsonl"])
    assert exit_info.value.code == 2


def test_train_refuses_a_bad_hash_dim(tmp_path: Path, tiny_corpus: Path) -> None:
    assert _run(["train", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "m.npz"),
                 "--hash-dim", "1000"]) == 2
    assert not (tmp_path / "m.npz").exists()


def test_train_refuses_a_bad_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": 1}\n')
    assert _run(["train", "--corpus", str(corpus), "--out", str(tmp_path / "m.npz")]) == 1
