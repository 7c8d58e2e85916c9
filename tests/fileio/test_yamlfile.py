"""Located validation errors: file, line and field, for every YAML we read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fileio.yamlfile import ConfigError, load_model, parse_model
from policies.policyfile.pools import pool_context
from policies.policyfile.schema import Policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("routes:\n  chat: fast\n", "p.yaml:2: routes.chat.pool: Value error, no pool named 'fast'"),
        ("routes:\n  chat: 3\n", "p.yaml:2: routes.chat: Input should be a valid dictionary"),
        ("schema_version: 1\nfoo: 1\n", "p.yaml:2: foo: unknown key"),
        ("routes:\n  poetry: mtp\n", "p.yaml:1: routes: Value error, unknown class(es) ['poetry']"),
        ("overrides:\n  header: true\n  sampld: plain\n", "p.yaml:3: overrides.sampld: unknown key"),
        ("exploration:\n  max_regret: 2\n",
         "p.yaml:2: exploration.max_regret: Input should be less than or equal to 0.5"),
        ("routes: [1, 2\n", "p.yaml:"),
        ("- a\n- b\n", "p.yaml:1: the file must hold a mapping at the top level"),
    ],
)
def test_errors_are_located(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_model(text, Policy, path="p.yaml", context=pool_context([]))
    assert any(problem.startswith(expected) for problem in info.value.problems), info.value.problems


def test_empty_file_gives_the_defaults() -> None:
    assert parse_model("", Policy) == Policy()


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(tmp_path / "nope.yaml", Policy)
    assert "cannot read" in str(info.value)


def test_shipped_default_policy_is_valid() -> None:
    policy = load_model(Path(__file__).resolve().parents[2] / "policies" / "default.yaml", Policy)
    assert policy.route_for("chat", "zh")[0] == "auto"  # the finish rule decides
    assert policy.prior == "neutral"  # no machine assumed: the ds4 set-up names gb10-ds4
    gb10 = load_model(Path(__file__).resolve().parents[2] / "policies" / "ds4-gb10.yaml", Policy)
    assert gb10.prior == "gb10-ds4"
