"""One CLI: every command is registered, documented, and shows its defaults."""

from __future__ import annotations

import pytest

from router.cli import build_parser, main

COMMANDS = [
    ["serve"], ["demo"], ["backends", "up"], ["backends", "status"], ["backends", "down"],
    ["data", "build"], ["train"], ["classify"], ["policy", "check"], ["policy", "explain"],
    ["learn"], ["tail"], ["report"], ["epp"], ["epp", "render-envoy"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_defaults(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert f"usage: specroute {' '.join(command)}" in text
    if "--" in text.split("options:", 1)[-1].replace("--help", ""):
        assert "default" in text  # options show their defaults


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_policy_check_reports_lines(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "p.yaml"
    bad.write_text("routes:\n  chat: turbo\n")
    assert main(["policy", "check", str(bad)]) != 0
    captured = capsys.readouterr()
    assert f"{bad}:2: routes.chat" in captured.out + captured.err
