"""config.yaml: validated once, unknown keys are errors with file and line, paths resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.cli import main
from router.config import ConfigError, load_config

GOOD = """\
listen: {host: 127.0.0.1, port: 9000}
backends:
  - {name: mtp-0, engine: llamacpp, profile: mtp, url: "http://127.0.0.1:8081/v1"}
  - {name: plain-0, engine: ds4, profile: plain, url: "http://127.0.0.1:8082"}
policy: my-policy.yaml
log: {path: logs/d.jsonl}
"""


def test_good_config_resolves_relative_paths(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    config = load_config(path)
    assert config.policy == str(tmp_path / "my-policy.yaml")
    assert config.log.path == str(tmp_path / "logs" / "d.jsonl")
    assert config.backends[0].base_url == "http://127.0.0.1:8081"
    assert config.default_backend_name == "mtp-0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "colour: blue\n", "config.yaml:7: colour: unknown key"),
        (GOOD.replace("profile: mtp,", "profile: fast,"), "config.yaml:3: backends.0.profile:"),
        (GOOD.replace('url: "http://127.0.0.1:8082"', 'ur: "x"'), "config.yaml:4: backends.1.ur: unknown key"),
        (GOOD.replace("name: plain-0", "name: mtp-0"), "backend names must be unique"),
        (GOOD.replace("port: 9000", "port: 99999"), "config.yaml:1: listen.port:"),
        ("backends: []\n", "config.yaml:1: backends:"),
        (GOOD + "replicas:\n  store: redis://127.0.0.1:6379/0\n  peers: 2\n",
         "config.yaml:9: replicas.peers: unknown key"),
        (GOOD + "replicas: {namespace: 'a b'}\n", "config.yaml:7: replicas.namespace:"),
        (GOOD + "load: {interval_s: 0}\n", "config.yaml:7: load.interval_s:"),
        (GOOD + "replicas: {store: 'localhost:6379'}\n", "config.yaml:7: replicas.store:"),
    ],
)
def test_bad_configs_are_located(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected.replace("config.yaml", str(path)) in str(info.value)


SPECULATING = """\
backends:
  - {name: plain-0, engine: ENGINE, profile: plain, url: "http://127.0.0.1:8082"}
  - name: spec-0
    engine: ENGINE
    speculation: SPECULATION
    launch: {model: m.gguf, port: 8090}
"""


@pytest.mark.parametrize(
    ("engine", "speculation", "expected"),
    [
        ("ds4", "{type: ngram-simple}",
         ("config.yaml:3: backends.1: Value error, engine 'ds4' has no speculation type "
          "'ngram-simple' (it has: mtp, none)")),
        ("llamacpp", "{type: draft, depth: 1}",
         ("config.yaml:3: backends.1: Value error, speculation type 'draft' needs a draft "
          "model: speculation.draft or launch.draft")),
        ("vllm", "{type: eagle3}",
         "config.yaml:3: backends.1: Value error, speculation type 'eagle3' needs a draft model"),
        ("llamacpp", "{type: ngram-simple, depth: 0}",
         "config.yaml:5: backends.1.speculation.depth:"),
    ],
)
def test_a_speculation_the_engine_cannot_run_is_located(
    tmp_path: Path, engine: str, speculation: str, expected: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SPECULATING.replace("ENGINE", engine).replace("SPECULATION", speculation))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected.replace("config.yaml", str(path)) in str(info.value)


@pytest.mark.parametrize("value", ["0", "-2", "2.5", '"4"', "true", "four"])
def test_slots_must_be_a_whole_count_of_at_least_one(tmp_path: Path, value: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD.replace("profile: plain,", f"profile: plain, slots: {value},"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}:4: backends.1.slots:" in str(info.value)


def test_declared_slots_load(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD.replace("profile: mtp,", "profile: mtp, slots: 4,"))
    assert [b.slots for b in load_config(path).backends] == [4, None]


def test_a_declared_speculation_loads_with_its_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SPECULATING.replace("ENGINE", "llamacpp").replace(
        "SPECULATION", "{type: ngram-mod, knobs: {ngram-mod-n-match: 24}}"))
    plain, ngram = load_config(path).backends
    assert (plain.spec_key, ngram.spec_key, ngram.profile) == ("plain", "ngram-mod", "mtp")
    assert ngram.speculation is not None and ngram.speculation.knobs == {"ngram-mod-n-match": 24}


def test_serve_refuses_a_bad_config_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD + "colour: blue\n")
    assert main(["serve", "--config", str(path)]) == 2
    assert "colour: unknown key" in capsys.readouterr().err


def test_shipped_config_is_valid() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "config.yaml")
    assert {b.profile for b in config.backends} == {"mtp", "plain"}
