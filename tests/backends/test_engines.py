"""Engine adapters: command lines with MTP-1 on and off, probes, request tweaks (pure tables)."""

from __future__ import annotations

from typing import Any

import pytest

from backends.engines import ADAPTERS, Command, EngineConfigError, adapter_for
from backends.spec import BackendSpec


def spec(engine: str, profile: str, **launch: Any) -> BackendSpec:
    fields = {"model": "M", "port": 9000, **launch}
    return BackendSpec.model_validate(
        {"name": "b", "engine": engine, "profile": profile, "launch": fields}
    )


HOST = ["--host", "127.0.0.1", "--port", "9000"]


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
          '{"method":"mtp","num_speculative_tokens":1}'], {}),
        ("vllm", "mtp", {"draft": "D"},
         ["vllm", "serve", "M", *HOST, "--speculative-config",
          '{"method":"draft_model","model":"D","num_speculative_tokens":1}'], {}),
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


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (spec("ds4", "mtp"), "ds4 with profile mtp needs launch.draft"),
        (spec("llamacpp", "mtp", spec_method="draft"), "spec_method 'draft' needs launch.draft"),
        (spec("openai", "plain"), "cannot be launched; give its 'url'"),
        (BackendSpec(name="b", engine="vllm", profile="mtp", url="http://h:1"),
         "has no 'launch' block"),
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
        ("llamacpp", {"stream": True}, True, CHAT,
         {"stream": True, "stream_options": {"include_usage": True}}, True, False),
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
