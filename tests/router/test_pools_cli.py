"""Named pools in config.yaml, and `policy check | explain --config` and `learn` with pools."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from policies.learner.learned import EMPTY_STATE, from_json, to_json
from router.cli import main
from router.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
DS4_CONFIG = ROOT / "config.ds4-gb10.yaml"
DS4_POLICY = ROOT / "policies" / "ds4-gb10.yaml"
BACKENDS = """\
backends:
  - {name: mtp-0, engine: ds4, profile: mtp, url: "http://127.0.0.1:8081"}
  - {name: plain-0, engine: ds4, profile: plain, url: "http://127.0.0.1:8082"}
"""


def test_the_shipped_ds4_config_declares_its_pool_and_policy() -> None:
    config = load_config(DS4_CONFIG)
    assert config.pools == {"nothink": ["ds4-plain"]}
    assert config.policy == str(DS4_POLICY)
    assert config.pools_of("ds4-plain") == frozenset({"nothink"})


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        ("pools:\n  mtp: [plain-0]\n", "c.yaml:4: pools: Value error, 'mtp' cannot name a pool"),
        ("pools:\n  fast: [plain-9]\n", "c.yaml:4: pools: Value error, pool 'fast': not backend names: ['plain-9']"),
        ("pools:\n  fast: []\n", "c.yaml:4: pools: Value error, pool 'fast' lists no backends"),
    ],
)
def test_bad_pools_are_located(tmp_path: Path, pools: str, expected: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BACKENDS + pools)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_check_accepts_the_ds4_policy_with_its_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", "--config", str(DS4_CONFIG)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "pool routes: nothink" in out


def test_check_without_the_config_knows_no_named_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "check", str(DS4_POLICY)]) == 1
    err = capsys.readouterr().err
    line = next(i for i, text in enumerate(DS4_POLICY.read_text().splitlines(), 1)
                if "pool: nothink" in text)
    assert f"{DS4_POLICY}:{line}: routes.chat.pool: Value error, no pool named 'nothink'" in err
    assert "--config" in err


def _write(tmp_path: Path, policy_text: str) -> Path:
    shutil.copy(DS4_CONFIG, tmp_path / "config.yaml")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "ds4-gb10.yaml").write_text(policy_text)
    return tmp_path / "config.yaml"


def test_check_rejects_thinking_on_completions_and_a_missing_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DS4_POLICY.read_text()
    bad = text.replace("endpoints: [chat, messages, responses]", "endpoints: [chat, completions]")
    config = _write(tmp_path, bad.replace("prose: plain", "prose: slowpool"))
    assert main(["policy", "check", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    policy = tmp_path / "policies" / "ds4-gb10.yaml"
    lines = bad.splitlines()
    rewrite_line = next(i for i, t in enumerate(lines, 1) if "rewrite:" in t and "deepseek" in t)
    prose_line = next(i for i, t in enumerate(lines, 1) if "prose:" in t and not t.startswith("#"))
    assert (f"{policy}:{rewrite_line}: routes.chat.rewrite: Value error, thinking:"
            " /v1/completions has no thinking field") in err
    assert f"{policy}:{prose_line}: routes.prose.pool: Value error, no pool named 'slowpool'" in err


def test_explain_shows_the_pool_and_the_rewrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "body.json"
    request.write_text(json.dumps({"model": "deepseek-v4-flash", "messages": [
        {"role": "user", "content": "hey! how's your day going?"}]}))
    assert main(["policy", "explain", "--config", str(DS4_CONFIG), "--learned",
                 str(tmp_path / "none.learned.json"), "--request", str(request)]) == 0
    out = capsys.readouterr().out
    assert "Pool: nothink (arm nothink+model=deepseek-chat,thinking=off; instance ds4-plain)" in out
    assert "Rewrite: model=deepseek-chat,thinking=off (for a ds4 backend)" in out
    assert "thinking.type: 'disabled'" in out
    code = tmp_path / "code.json"
    code.write_text(json.dumps({"model": "deepseek-v4-flash", "temperature": 0,
                                "thinking": {"type": "disabled"}, "messages": [
        {"role": "user", "content": "Write a Python function that reverses a list."}]}))
    assert main(["policy", "explain", "--config", str(DS4_CONFIG), "--learned",
                 str(tmp_path / "none.learned.json"), "--request", str(code)]) == 0
    out = capsys.readouterr().out
    assert "Pool: mtp (arm mtp; instance ds4-mtp)" in out and "Rewrite: none" in out


def test_learn_writes_the_arms_next_to_the_learned_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arm = "nothink+model=deepseek-chat,thinking=off"
    rows = [
        {"schema_version": 1, "ts": "2026-01-01T00:00:00.000Z", "request_id": f"r{i}",
         "endpoint": "chat", "model": "m", "stream": False, "conversation": "c",
         "features": {"temperature": 0.0, "thinking": False, "thinking_unset": False},
         "classifier": {"class": "chat", "lang": "en", "scores": {"chat": 1.0}, "p_spec": 0.3},
         "decision": {"profile": "plain", "backend": "ds4-plain", "pool": "nothink",
                      "arm": arm if i % 2 else "plain"},
         "outcome": {"status": 200, "profile": "plain", "completion_tokens": 50 + i,
                     "decode_tps": 14.0 + i % 3, "total_ms": 3000.0 + 100 * i},
         "overhead_ms": 1.0}
        for i in range(12)
    ]
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    policy = tmp_path / "p.yaml"
    policy.write_text("routes:\n  chat: plain\n")
    assert main(["learn", str(log), "--policy", str(policy)]) == 0
    state = from_json((tmp_path / "p.learned.json").read_text()).arms  # one file holds it all
    assert not (tmp_path / "p.arms.json").exists()
    assert state.n_observations == 12
    assert state.stats["chat/en"][arm].n == 6 and state.stats["chat/en"]["plain"].n == 6


def test_the_pool_examples_of_docs_routing_are_valid() -> None:
    """The YAML docs/routing.md gives to copy (the README's before it became a user's manual)
    validates as it stands."""
    from fileio.yamlfile import parse_model
    from policies.policyfile.pools import pool_context
    from policies.policyfile.schema import Policy
    from router.config import Config

    readme = (ROOT / "docs" / "routing.md").read_text(encoding="utf-8")
    section = readme.split("## Pools and rewrites", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:]]
    assert len(blocks) == 3
    example, config_text, policy_text = blocks
    policy = parse_model(example, Policy, path="README", context=pool_context(["bulk", "nothink"]))
    assert len(policy.routes) == 4
    config = parse_model(config_text, Config, path="README")
    assert config.pools == {"nothink": ["ds4-plain"]}
    ds4 = parse_model(policy_text, Policy, path="README", context=pool_context(config.pools))
    shipped = parse_model(DS4_POLICY.read_text(), Policy, path="shipped",
                          context=pool_context(config.pools))
    assert ds4.routes == shipped.routes and ds4.overrides == shipped.overrides
    assert ds4.assume == shipped.assume and ds4.prior == shipped.prior == "gb10-ds4"


def test_explain_shows_what_each_arm_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from policies.learner.arms import learn_arms
    from policies.learner.observation import Observation
    from policies.store import write_learned

    arm = "nothink+model=deepseek-chat,thinking=off"
    chat = ("  chat:\n    pool: nothink\n    endpoints: [chat, messages, responses]\n"
            "    rewrite: {model: deepseek-chat, thinking: false}\n")
    arms = ("  chat:\n    endpoints: [chat, messages, responses]\n    arms:\n      - plain\n"
            "      - {pool: nothink, rewrite: {model: deepseek-chat, thinking: false}}\n")
    assert chat in DS4_POLICY.read_text()
    config = _write(tmp_path, DS4_POLICY.read_text().replace(chat, arms))
    observations = [Observation("chat", "en", 0.3, "plain", 60, 14.0 + i % 2, arm=arm,
                                total_ms=2500.0 + i) for i in range(40)]
    observations += [Observation("chat", "en", 0.3, "plain", 600, 15.0 + i % 2, arm="plain",
                                 total_ms=20000.0 + i) for i in range(40)]
    learned = tmp_path / "policies" / "ds4-gb10.learned.json"
    write_learned(learned, replace(EMPTY_STATE, arms=learn_arms(observations)))
    assert main(["policy", "check", "--config", str(config)]) == 0
    assert main(["policy", "explain", "--config", str(config), "--learned", str(learned)]) == 0
    out = capsys.readouterr().out
    assert "routes.chat (compared on time to the answer):" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if "compared on time" in line)
    assert lines[first + 1].split()[:2] == [arm, "40"]  # the faster answer ranks first
    assert lines[first + 2].split()[:2] == ["plain", "40"]


def test_explain_reads_the_replica_s_own_learned_file(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "default.yaml"
    shutil.copy(ROOT / "policies" / "default.yaml", policy)
    config = tmp_path / "config.yaml"
    config.write_text(BACKENDS + f"policy: {policy}\n"
                      "replicas: {store: 'redis://127.0.0.1:6399/0', id: r1}\n")
    (tmp_path / "default.learned.json").write_text(to_json(EMPTY_STATE))  # another's
    assert main(["policy", "explain", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"({tmp_path / 'default.learned.r1.json'}" in out
    assert f"({tmp_path / 'default.learned.json'}" not in out
