"""One adapter per engine: how to launch it with MTP-1 on or off, probe it, and ask it for stats.

Pure: command lines, probe paths and request bodies are computed from the `BackendSpec`; nothing
here starts a process or opens a socket (the supervisor and the upstream client do).

| engine   | ready probe  | MTP-1 (profile `mtp`)                                              |
|----------|--------------|--------------------------------------------------------------------|
| ds4      | /v1/models   | `--mtp FILE --mtp-draft 1`, env `DS4_MTP_CONTINUOUS=1`              |
| llamacpp | /health      | `-md DRAFT --spec-type draft-simple --spec-draft-n-max 1` (or draft-mtp) |
| vllm     | /health      | `--speculative-config {"method":"mtp","num_speculative_tokens":1}`  |
| sglang   | /health      | `--speculative-algorithm EAGLE --speculative-num-steps 1 ...`      |
| openai   | /v1/models   | attach only: a server someone else runs                            |
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from backends.spec import BackendSpec, Engine, LaunchSpec
from backends.stats import SpecCounters

# Endpoints whose streamed form accepts `stream_options.include_usage` (OpenAI chunk format).
_USAGE_PATHS = ("/v1/chat/completions", "/v1/completions")


class EngineConfigError(ValueError):
    """A backend spec the engine cannot run (names the backend and the missing piece)."""


@dataclass(frozen=True, slots=True)
class Command:
    """What to exec: argv and the environment variables to add to the router's own."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Tweaked:
    """A request body prepared for the backend, and what was added that the client did not ask."""

    body: dict[str, Any]
    added_usage: bool = False  # strip the usage-only chunk (`"choices": []`) before the client
    added_meta_info: bool = False  # drop `meta_info` from what the client receives


@dataclass(frozen=True, slots=True)
class EngineAdapter:
    """The per-engine facts the supervisor and the upstream client need."""

    engine: Engine
    ready_path: str
    metrics_path: str  # Prometheus text endpoint; "" when the engine has none
    counters: SpecCounters | None  # global speculative counters, for deltas around a request
    asks_meta_info: bool = False  # SGLang: per-request stats only with `return_meta_info`

    @property
    def models_path(self) -> str:
        return "/v1/models"

    @property
    def can_launch(self) -> bool:
        return self.engine != "openai"

    def command(self, spec: BackendSpec) -> Command:
        """The command line that starts `spec` with MTP-1 on (profile mtp) or off (plain)."""
        launch = _launch_of(spec)
        builders = {
            "ds4": _ds4,
            "llamacpp": _llamacpp,
            "vllm": _vllm,
            "sglang": _sglang,
        }
        build = builders.get(self.engine)
        if build is None:
            raise EngineConfigError(
                f"backend {spec.name!r}: engine {self.engine!r} cannot be launched; give its 'url'"
            )
        argv, env = build(spec.name, launch, spec.profile == "mtp")
        return Command(argv=tuple(argv) + tuple(launch.args), env={**env, **launch.env})

    def request_tweaks(self, body: Mapping[str, Any], *, stream: bool, path: str) -> Tweaked:
        """`body` plus what makes the engine report its stats; the flags say what to strip."""
        new = dict(body)
        added_usage = stream and path in _USAGE_PATHS and not _client_wants_usage(body)
        if added_usage:
            options = body.get("stream_options")
            new["stream_options"] = {**(options if isinstance(options, Mapping) else {}),
                                     "include_usage": True}
        added_meta = self.asks_meta_info and path in _USAGE_PATHS and not body.get(
            "return_meta_info"
        )
        if added_meta:
            new["return_meta_info"] = True
        return Tweaked(body=new, added_usage=added_usage, added_meta_info=added_meta)


def _client_wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, Mapping) and bool(options.get("include_usage"))


def _launch_of(spec: BackendSpec) -> LaunchSpec:
    if spec.launch is None:
        raise EngineConfigError(f"backend {spec.name!r} has no 'launch' block (it is attached)")
    return spec.launch


def _uses_draft_model(name: str, launch: LaunchSpec) -> bool:
    """True: a separate draft model; False: the model's own MTP head."""
    if launch.spec_method == "draft" and not launch.draft:
        raise EngineConfigError(f"backend {name!r}: spec_method 'draft' needs launch.draft")
    if launch.spec_method == "auto":
        return bool(launch.draft)
    return launch.spec_method == "draft"


Built = tuple[list[str], dict[str, str]]


def _ds4(name: str, launch: LaunchSpec, mtp: bool) -> Built:
    argv = [launch.binary or "ds4-server", "-m", launch.model,
            "--host", launch.host, "--port", str(launch.port)]
    if not mtp:
        return argv, {}
    if not launch.draft:
        raise EngineConfigError(f"backend {name!r}: ds4 with profile mtp needs launch.draft "
                                "(the MTP .gguf file)")
    # Depth-1 continuous speculation (ds4 PR #371); --mtp-draft 1 is lossless.
    return argv + ["--mtp", launch.draft, "--mtp-draft", "1"], {"DS4_MTP_CONTINUOUS": "1"}


def _llamacpp(name: str, launch: LaunchSpec, mtp: bool) -> Built:
    argv = [launch.binary or "llama-server", "-m", launch.model,
            "--host", launch.host, "--port", str(launch.port), "--metrics"]
    if not mtp:
        return argv, {}
    if _uses_draft_model(name, launch):
        argv += ["-md", launch.draft, "--spec-type", "draft-simple"]
    else:
        argv += ["--spec-type", "draft-mtp"]
    return argv + ["--spec-draft-n-max", "1"], {}


def _vllm(name: str, launch: LaunchSpec, mtp: bool) -> Built:
    argv = [launch.binary or "vllm", "serve", launch.model,
            "--host", launch.host, "--port", str(launch.port)]
    if not mtp:
        return argv, {}
    config: dict[str, Any] = {"method": "mtp", "num_speculative_tokens": 1}
    if _uses_draft_model(name, launch):
        config = {"method": "draft_model", "model": launch.draft, "num_speculative_tokens": 1}
    return argv + ["--speculative-config", json.dumps(config, separators=(",", ":"))], {}


def _sglang(name: str, launch: LaunchSpec, mtp: bool) -> Built:
    # `binary` is the Python interpreter that has sglang installed.
    argv = [launch.binary or "python3", "-m", "sglang.launch_server",
            "--model-path", launch.model, "--host", launch.host, "--port", str(launch.port),
            "--enable-metrics"]
    if not mtp:
        return argv, {}
    algorithm = "EAGLE"
    if _uses_draft_model(name, launch):
        algorithm = "STANDALONE"
        argv += ["--speculative-draft-model-path", launch.draft]
    argv += ["--speculative-algorithm", algorithm, "--speculative-num-steps", "1",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"]
    return argv, {}


ADAPTERS: Mapping[str, EngineAdapter] = {
    "ds4": EngineAdapter("ds4", "/v1/models", "", None),
    "llamacpp": EngineAdapter(
        "llamacpp", "/health", "/metrics",
        SpecCounters(
            draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
            accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
        ),
    ),
    "vllm": EngineAdapter(
        "vllm", "/health", "/metrics",
        SpecCounters(
            draft_tokens="vllm:spec_decode_num_draft_tokens_total",
            accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        ),
    ),
    # SGLang exports only gauges (accept length/rate), no counters to difference.
    "sglang": EngineAdapter("sglang", "/health", "/metrics", None, asks_meta_info=True),
    "openai": EngineAdapter("openai", "/v1/models", "", None),
}


def adapter_for(spec: BackendSpec) -> EngineAdapter:
    return ADAPTERS[spec.engine]
