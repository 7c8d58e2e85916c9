"""The local instances as launch specs, one per speculation config, from a cache laid out on disk
(the binary is a stub: nothing is started here; tests/integration launches the real ones)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from backends.engines import adapter_for
from backends.local.build import server_dir
from backends.local.cache import LocalBackendError
from backends.local.flags import flag_sets
from backends.local.pair import THREE, LocalConfig, local_pair_specs, local_specs
from backends.slots import Slots, slots_of
from backends.spec import Speculation
from tests.backends.local.cached import lay_out_qwen_cache


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    lay_out_qwen_cache(tmp_path)
    return tmp_path


def test_three_instances_plain_ngram_and_the_draft_model(cache: Path) -> None:
    plain, ngram, draft = local_specs("qwen", THREE, ports=(8101, 8102, 8103), root=cache,
                                      threads=1, ctx=1024)
    server = str(server_dir(cache, flag_sets(platform.machine())[0]) / "llama-server")
    target = str(cache / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    small = str(cache / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    # no --parallel: llama-server's own slots (its auto, told on /props)
    tail = ("--ctx-size", "1024", "--threads", "1",
            "--alias", "qwen2.5-coder-1.5b-instruct-q4_k_m")

    def argv(port: int, *spec: str) -> tuple[str, ...]:
        return (server, "-m", target, "--host", "127.0.0.1", "--port", str(port), "--metrics",
                *spec, *tail)

    assert [(s.name, s.spec_key, s.profile) for s in (plain, ngram, draft)] == [
        ("qwen-plain", "plain", "plain"), ("qwen-ngram-simple", "ngram-simple", "mtp"),
        ("qwen-draft", "draft", "mtp")]
    assert [adapter_for(s).command(s).argv for s in (plain, ngram, draft)] == [
        argv(8101), argv(8102, "--spec-type", "ngram-simple"),
        argv(8103, "-md", small, "--spec-type", "draft-simple", "--spec-draft-n-max", "1")]


def test_slots_asked_for_are_the_launch_flag(cache: Path) -> None:
    (one,) = local_specs("qwen", ("plain",), ports=(8101,), root=cache, threads=1, parallel=1)
    (auto,) = local_specs("qwen", ("plain",), ports=(8101,), root=cache, threads=1)
    assert one.launch is not None and auto.launch is not None
    assert one.launch.args[:4] == ["--ctx-size", "4096", "--parallel", "1"]
    assert "--parallel" not in auto.launch.args
    assert (slots_of(one, None), slots_of(auto, None).source) == (Slots(1, "launch"), "default")


def test_the_pair_is_plain_and_the_shorthand_mtp(cache: Path) -> None:
    pair = local_pair_specs("qwen", plain_port=8101, mtp_port=8102, root=cache, threads=1)
    same = local_specs("qwen", ("plain", "mtp"), ports=(8101, 8102), root=cache, threads=1)
    assert pair == same and [s.name for s in pair] == ["qwen-plain", "qwen-mtp"]
    # the shorthand mtp is the depth-1 draft model: the same command as the declared config
    declared = local_specs("qwen", (Speculation(type="draft", depth=1),), ports=(8102,),
                           root=cache, threads=1)[0]
    assert adapter_for(declared).command(declared) == adapter_for(pair[1]).command(pair[1])


def test_ports_left_out_are_free_and_apart(cache: Path) -> None:
    specs = local_specs("qwen", THREE, ports=(8101,), root=cache)
    ports = [s.launch.port for s in specs if s.launch is not None]
    assert ports[0] == 8101 and len(set(ports)) == 3 and 0 not in ports
    threads = {s.launch.args[s.launch.args.index("--threads") + 1]
               for s in specs if s.launch is not None}
    assert len(threads) == 1 and int(threads.pop()) >= 1


def test_a_config_with_its_own_draft_and_name(cache: Path) -> None:
    own = Speculation(type="draft", draft="/models/other.gguf", depth=2, name="other-draft")
    (spec,) = local_specs("qwen", (own,), ports=(8101,), root=cache, threads=1)
    assert spec.name == "qwen-other-draft" and spec.spec_key == "other-draft"
    argv = adapter_for(spec).command(spec).argv
    assert argv[argv.index("-md") + 1] == "/models/other.gguf"


@pytest.mark.parametrize(
    ("configs", "message"),
    [(("plain", Speculation(type="none")), "two local instances would share a name"),
     ((Speculation(type="ngram-mod"), Speculation(type="ngram-mod")), "share a name")],
)
def test_two_configs_of_one_name_are_refused(
    cache: Path, configs: tuple[LocalConfig, ...], message: str
) -> None:
    with pytest.raises(LocalBackendError, match=message):
        local_specs("qwen", configs, root=cache)


def test_an_uncached_pair_names_the_command_to_run(tmp_path: Path) -> None:
    with pytest.raises(LocalBackendError, match="ensure smollm2"):
        local_specs("smollm2", THREE, root=tmp_path)
