"""`specroute policy check | explain` and `specroute learn`, run through a real parser."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from decisionlog.records import Outcome, RouteRecord, to_json
from policies.learner.learn import Observation
from policies.learner.learned import from_json
from policies.policy_commands import register
from policies.store import DEFAULT_POLICY, learned_path_for
from tests.policies import synthetic


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specroute")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


def _log_line(o: Observation) -> str:
    """A decision-log record carrying what the learner reads, as the proxy writes it."""
    return to_json(RouteRecord(
        ts="2026-11-30T12:00:00.000Z", request_id="r", endpoint="chat", model="m", stream=True,
        conversation="c",
        features={"temperature": 0.0, "thinking": False, "thinking_unset": True},
        classifier={"class": o.cls, "lang": o.lang, "scores": {o.cls: 1.0}},
        decision={"profile": o.profile, "backend": f"{o.profile}-0", "reason": "learned",
                  "p_spec": o.p_spec},
        outcome=Outcome(
            status=200, profile=o.profile, completion_tokens=o.completion_tokens,
            decode_tps=o.decode_tps, backend_tps=o.decode_tps, draft_n=o.draft_n,
            draft_accepted=o.draft_accepted, prompt_tokens=400, cached_tokens=0, ttft_ms=800.0,
        ),
        overhead_ms=0.5,
    ))


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(Path(DEFAULT_POLICY).read_text(encoding="utf-8"), encoding="utf-8")
    return path


def test_check_accepts_the_shipped_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["policy", "check", DEFAULT_POLICY]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("agent: auto", "agent: 3"), ":{line}: routes.agent: Input should be"),
        (("  max_regret: 0.02", "  max_regret: 0.02\n  budget: 3"),
         "exploration.budget: unknown key"),
        (("routes:", "routes: ["), "invalid YAML"),
    ],
)
def test_check_rejects_with_line_numbers(
    policy_file: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], expected: str
) -> None:
    text = policy_file.read_text().replace(*edit, 1)
    policy_file.write_text(text, encoding="utf-8")
    line = 1 + next(i for i, row in enumerate(text.splitlines()) if edit[1].split("\n")[0] in row)
    assert _run(["policy", "check", str(policy_file)]) == 1
    assert expected.format(line=line) in capsys.readouterr().err


def test_learn_writes_state_next_to_the_policy_and_explain_shows_it(
    tmp_path: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "decisions.jsonl"
    # a CPU pair's outcomes under the GB10 prior: the log must overrule the prior
    policy_file.write_text(policy_file.read_text().replace("prior: neutral", "prior: gb10-ds4"))
    observations = list(synthetic.observations(synthetic.CPU_PAIR, 400, seed=31))
    lines = [_log_line(o) for o in observations]
    log.write_text("\n".join(lines + ["not json", "[]"]) + "\n", encoding="utf-8")
    assert _run(["learn", str(log), "--policy", str(policy_file)]) == 0
    state = from_json(learned_path_for(policy_file).read_text(encoding="utf-8"))
    assert state.n_observations == 400
    assert state.evidence.greedy_of("mtp").n == sum(o.profile == "mtp" for o in observations)
    assert state.evidence.plain.n == sum(o.profile == "plain" for o in observations)
    printed = capsys.readouterr().out
    assert "Route model: prior gb10-ds4" in printed and "Per-class evidence" in printed
    assert "reply length: a regression over the request's inputs, from 400 requests" in printed

    request = tmp_path / "request.json"
    request.write_text(json.dumps({
        "model": "m", "temperature": 0,
        "messages": [{"role": "user", "content": "Write a Python function that parses a CSV."}],
    }), encoding="utf-8")
    assert _run(["policy", "explain", "--policy", str(policy_file), "--request", str(request)]) == 0
    out = capsys.readouterr().out
    assert "overrides.sampled" in out and "agent/en" in out
    assert "Route model: prior gb10-ds4" in out
    assert "plain step 40 ms/token" in out  # the CPU pair's pace, not the prior's 68
    assert "Request: class code" in out
    assert "Decision: plain (plain) by routes.code (reason finish)" in out
    code = next(row for row in out.splitlines() if row.strip().startswith("code "))
    assert float(code.split()[1]) < 0.8  # learned: ~0.5 on the CPU pair, prior 1.065


def test_explain_without_learned_state(
    policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["policy", "explain", "--policy", str(policy_file)]) == 0
    out = capsys.readouterr().out
    assert "nothing learned yet" in out
    assert "agent       1.000 ± " in out  # the neutral prior's figure, before any evidence
    assert "plain step 50 ms/token" in out and "from the prior alone" in out


def test_learn_refuses_an_empty_log(
    tmp_path: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_text("", encoding="utf-8")
    assert _run(["learn", str(log), "--policy", str(policy_file)]) == 1
    assert "no usable records" in capsys.readouterr().err
    assert not learned_path_for(policy_file).exists()


def test_explain_reports_an_unreadable_request(
    tmp_path: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.json"
    assert _run(["policy", "explain", "--policy", str(policy_file), "--request", str(missing)]) == 1
    assert "cannot read the request" in capsys.readouterr().err


def test_every_option_shows_its_default() -> None:
    parser = argparse.ArgumentParser(prog="specroute")
    register(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit):
        parser.parse_args(["learn", "--help"])
