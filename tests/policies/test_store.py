"""The hot-reloading store on real files, and the learned state's JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from fileio.yamlfile import ConfigError
from policies.learner.arms import EMPTY_ARMS
from policies.learner.learn import learn
from policies.learner.learned import EMPTY_STATE, LearnedStateError, from_json, to_json
from policies.store import PolicyStore, learned_path_for, write_learned
from tests.policies import synthetic

DEFAULT = Path(__file__).parents[2] / "policies" / "default.yaml"
STATE = learn(synthetic.observations(synthetic.GB10, 600, seed=21), created="2026-11-29T00:00Z")


def _write(path: Path, text: str) -> None:
    # a new inode each time, like an editor saving through a temp file
    temp = path.with_suffix(".tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(DEFAULT.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def test_learned_state_round_trips_through_json() -> None:
    assert from_json(to_json(STATE)) == STATE
    assert from_json(to_json(EMPTY_STATE)) == EMPTY_STATE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "JSON object"),
        ('{"version": 1}', "version 1"),
        ('{"version": 2, "created": ""}',
         ("version 2, expected 4: it is derived from the decision log, so relearn it")),
        ('{"version": 4, "created": ""}', "malformed"),
        ("not json", "malformed"),
    ],
)
def test_a_bad_learned_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(LearnedStateError, match=message):
        from_json(text)


def test_a_learned_file_from_a_route_model_with_other_inputs_is_refused_with_what_changed() -> None:
    # what an upgrade that adds a route-model input meets: yesterday's file, one input fewer
    data = json.loads(to_json(STATE))
    for evidence in data["evidence"]["greedy"].values():
        keep = [i for i, name in enumerate(evidence["inputs"]) if name != "copy_breaks"]
        evidence["inputs"] = [evidence["inputs"][i] for i in keep]
        evidence["xtx"] = [[evidence["xtx"][i][j] for j in keep] for i in keep]
        evidence["xty"] = [evidence["xty"][i] for i in keep]
    assert data["evidence"]["greedy"], "the state must hold a config's evidence to refuse"
    with pytest.raises(LearnedStateError, match=r"not there then: \['copy_breaks'\].*relearn it"):
        from_json(json.dumps(data))


def test_learned_path_sits_next_to_the_policy() -> None:
    assert learned_path_for("/etc/sr/default.yaml") == Path("/etc/sr/default.learned.json")


def test_store_starts_with_nothing_learned(policy_file: Path) -> None:
    store = PolicyStore(policy_file)
    assert store.learned == EMPTY_STATE
    assert store.policy.routes["agent"] == "auto"
    assert store.reload_if_changed(now=1.0) is False


def test_an_invalid_policy_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("routes:\n  agent: fast\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.yaml:2: routes.agent"):
        PolicyStore(path)


def test_store_swaps_in_a_valid_edit_and_keeps_the_last_good_on_a_bad_one(
    policy_file: Path,
) -> None:
    store = PolicyStore(policy_file)
    _write(policy_file, policy_file.read_text().replace("prose: auto", "prose: mtp"))
    assert store.reload_if_changed(now=2.0) is True
    assert store.policy.routes["prose"] == "mtp"
    assert store.snapshot.loaded_at == 2.0
    good = store.snapshot

    bad = policy_file.read_text().replace("max_regret: 0.02", "max_regret: 0.9")
    _write(policy_file, bad)
    with capture_logs() as logs:
        assert store.reload_if_changed(now=3.0) is False
        assert store.reload_if_changed(now=4.0) is False  # reported once, not every poll
    assert store.policy is good.policy
    failures = [e for e in logs if e["event"] == "policy_reload_failed"]
    assert len(failures) == 1
    line = bad.splitlines().index("  max_regret: 0.9") + 1
    assert failures[0]["file"] == str(policy_file)
    assert (failures[0]["line"], failures[0]["field"]) == (line, "exploration.max_regret")
    assert store.counters.failed["policy"] == 1 and store.counters.ok == 1


def test_store_reloads_the_learned_state_written_atomically(policy_file: Path) -> None:
    store = PolicyStore(policy_file)
    write_learned(learned_path_for(policy_file), STATE)
    assert store.reload_if_changed(now=5.0) is True
    assert store.learned == STATE
    assert not list(policy_file.parent.glob(".*.tmp"))  # the temp file was renamed away

    learned_path_for(policy_file).write_text('{"version": 1}', encoding="utf-8")
    with capture_logs() as logs:
        assert store.reload_if_changed(now=6.0) is False
    assert store.learned == STATE
    assert [e["kind"] for e in logs if e["event"] == "policy_reload_failed"] == ["learned"]

    learned_path_for(policy_file).unlink()
    store.reload_if_changed(now=7.0)
    assert store.learned == EMPTY_STATE  # forgetting is a change too


def test_the_machine_prior_is_a_builtin_or_a_file_and_a_bad_one_is_refused(
    policy_file: Path,
) -> None:
    store = PolicyStore(policy_file)
    assert store.snapshot.prior.name == "neutral"
    machine = policy_file.parent / "machine.yaml"
    machine.write_text("name: box\nclass_speedup: {agent: 0.5, prose: 0.4}\nt_plain_ms: 20\n",
                       encoding="utf-8")
    _write(policy_file, policy_file.read_text().replace("prior: neutral", "prior: machine.yaml"))
    assert store.reload_if_changed(now=1.0) is True
    assert store.snapshot.prior.name == "box"
    assert store.snapshot.model.t_plain_ms == pytest.approx(20.0)
    machine.write_text("class_speedup: {agent: 0.5}\nt_plain_ms: -1\n", encoding="utf-8")
    _write(policy_file, policy_file.read_text() + "\n")
    with capture_logs() as logs:
        assert store.reload_if_changed(now=2.0) is False
    assert store.snapshot.prior.name == "box"  # the last good prior stays
    assert any("machine.yaml:2: t_plain_ms" in p for e in logs for p in e.get("problems", []))
    _write(policy_file, policy_file.read_text().replace("prior: machine.yaml", "prior: nowhere"))
    assert store.reload_if_changed(now=3.0) is False


def test_a_corrupt_learned_file_at_start_is_ignored(policy_file: Path) -> None:
    learned_path_for(policy_file).write_text("{", encoding="utf-8")
    with capture_logs() as logs:
        store = PolicyStore(policy_file)
    assert store.learned == EMPTY_STATE
    assert logs[0]["event"] == "policy_reload_failed"


def test_learned_state_json_is_strict_even_with_unknown_bins() -> None:
    import json

    state = learn(synthetic.observations(synthetic.GB10, 200, seed=22))
    text = to_json(state)
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
    back = from_json(text)
    assert back == state
    assert any(b.se == float("inf") for belief in back.beliefs.values() for b in belief.bins)


def test_an_arms_file_from_before_one_store_is_named_and_not_read(policy_file: Path) -> None:
    old = policy_file.with_name(policy_file.stem + ".arms.json")
    old.write_text('{"n_observations": 3, "stats": {}}', encoding="utf-8")
    with capture_logs() as logs:
        store = PolicyStore(policy_file)
    warned = [e for e in logs if e["event"] == "arms_file_superseded"]
    assert warned and warned[0]["file"] == str(old)
    assert "relearned from the decision log" in warned[0]["detail"]
    assert store.learned.arms == EMPTY_ARMS
