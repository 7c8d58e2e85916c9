"""How a backend instance is described in config.yaml: typed, frozen, unknown keys rejected.

Pure data. A backend is either attached to (`url`) or launched by the supervisor (`launch`).
Each instance runs one speculation config (`speculation`: its type, depth and the engine's own
knobs; `profile: mtp | plain` is the shorthand for depth-1 speculation or none). The config's
`key` is what the learner learns a speedup for: instances that share a key share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Engine = Literal["ds4", "llamacpp", "vllm", "sglang", "openai"]
Profile = Literal["mtp", "plain"]
# How the mtp profile drafts: "auto" uses the draft model when `draft` is given, else the model's
# own MTP head; "draft" needs `draft`; "mtp" needs a model with MTP weights (or ds4's MTP file).
SpecMethod = Literal["auto", "draft", "mtp"]

# Speculation types, by their engine-neutral names: a separate draft model, the model's own MTP
# head, EAGLE heads, prompt-lookup n-grams of several kinds, suffix trees.
SpecType = Literal[
    "none", "draft", "mtp", "eagle", "eagle3",
    "ngram", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache",
    "suffix",
]
# What each engine can run (backends/engines.py maps each to its flags). `openai` is attached,
# never launched: whatever its operator runs, declared for the learner's sake.
ENGINE_SPEC_TYPES: Final[Mapping[str, frozenset[str]]] = {
    "ds4": frozenset({"none", "mtp"}),
    "llamacpp": frozenset({"none", "draft", "mtp", "eagle3", "ngram-simple", "ngram-mod",
                           "ngram-map-k", "ngram-map-k4v", "ngram-cache"}),
    "vllm": frozenset({"none", "draft", "mtp", "eagle", "eagle3", "ngram", "suffix"}),
    "sglang": frozenset({"none", "draft", "mtp", "eagle", "eagle3", "ngram"}),
    "openai": frozenset({"none", "draft", "mtp", "eagle", "eagle3", "ngram", "ngram-simple",
                         "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache", "suffix"}),
}
# Types that need a draft model file (`speculation.draft`, else `launch.draft`).
DRAFT_MODEL_TYPES: Final = frozenset({"draft", "eagle", "eagle3"})
# The learner's keys of the shorthand profiles.
PLAIN_KEY: Final = "plain"
MTP_KEY: Final = "mtp"
KEY_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LaunchSpec(_Strict):
    """What the supervisor needs to start an engine with MTP-1 on or off."""

    binary: str = Field("", description="server executable; empty: the engine's usual name")
    model: str = Field(..., description="model weights path (or model id for vLLM/SGLang)")
    draft: str = Field("", description="draft model / MTP head path, for the mtp profile")
    spec_method: SpecMethod = Field(
        "auto", description="mtp profile: draft model ('draft'), MTP head ('mtp'), or 'auto'"
    )
    host: str = Field("127.0.0.1", description="address the engine listens on")
    port: int = Field(..., ge=1, le=65535)
    args: list[str] = Field(default_factory=list, description="extra command-line arguments")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    ready_timeout_s: float = Field(600.0, gt=0, description="how long to wait until ready")
    cwd: str = Field("", description="working directory of the process (empty: the router's)")


class Speculation(_Strict):
    """One instance's speculation config: what it drafts with, how deep, and the engine's own
    knobs (passed through as the engine spells them)."""

    type: SpecType = Field(..., description="how the instance drafts ('none': it does not)")
    depth: int | None = Field(
        None, ge=1, le=64, description="draft tokens per cycle at most (the engine's default "
        "when unset; 1 is MTP-1)"
    )
    draft: str = Field("", description="draft model or head path ('': launch.draft)")
    knobs: dict[str, int | float | str | bool] = Field(
        default_factory=dict, description="the engine's own options: llama.cpp `--spec-NAME "
        "VALUE`, keys of vLLM's --speculative-config, SGLang `--speculative-NAME VALUE`"
    )
    name: str = Field(
        "", pattern=r"^$|" + KEY_PATTERN[1:], description="the learner's key for this config "
        "('': its type, 'plain' for none); instances with one key share what is learned"
    )

    @property
    def key(self) -> str:
        if self.name:
            return self.name
        return PLAIN_KEY if self.type == "none" else self.type

    @property
    def speculates(self) -> bool:
        return self.type != "none"


class BackendSpec(_Strict):
    name: str = Field(..., min_length=1, pattern=KEY_PATTERN)
    engine: Engine = "openai"
    # the shorthand (mtp: depth-1 speculation, the method by launch.spec_method; plain: none),
    # or taken from `speculation` when that is given
    profile: Profile = Field(None, validate_default=False)  # type: ignore[call-overload]
    speculation: Speculation | None = None
    url: str = Field("", description="base URL of a running server, e.g. http://127.0.0.1:8081")
    launch: LaunchSpec | None = None
    api_key: str = Field("", description="bearer token to send upstream (default: the client's)")
    slots: int | None = Field(
        None, ge=1, strict=True, description="requests it serves at once (None: what the engine "
        "reports, else 1); an engine that reports another count is believed, with a warning"
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_of_speculation(cls, data: Any) -> Any:
        """`profile` follows from `speculation` when only that is given."""
        if not isinstance(data, Mapping) or data.get("profile") is not None:
            return data
        speculation = data.get("speculation")
        kind = (speculation.get("type") if isinstance(speculation, Mapping)
                else getattr(speculation, "type", None))
        if kind is None:
            return data  # the "profile: field required" error, below
        return {**data, "profile": "plain" if kind == "none" else "mtp"}

    @model_validator(mode="after")
    def _url_or_launch(self) -> BackendSpec:
        if self.profile is None:
            raise ValueError("give 'profile' (mtp or plain) or 'speculation' (its type)")
        if bool(self.url) == (self.launch is not None):
            raise ValueError("give exactly one of 'url' (attach) or 'launch' (start it)")
        spec = self.speculation
        if spec is None:
            return self
        if (self.profile == "mtp") != spec.speculates:
            raise ValueError(f"profile {self.profile!r} contradicts speculation type "
                             f"{spec.type!r} (mtp: a type that drafts; plain: none)")
        supported = ENGINE_SPEC_TYPES[self.engine]
        if spec.type not in supported:
            raise ValueError(f"engine {self.engine!r} has no speculation type {spec.type!r} "
                             f"(it has: {', '.join(sorted(supported))})")
        if (self.launch is not None and spec.type in DRAFT_MODEL_TYPES
                and not (spec.draft or self.launch.draft)):
            raise ValueError(f"speculation type {spec.type!r} needs a draft model: "
                             "speculation.draft or launch.draft")
        return self

    @property
    def spec_key(self) -> str:
        """The learner's name of this instance's speculation config."""
        if self.speculation is not None:
            return self.speculation.key
        return MTP_KEY if self.profile == "mtp" else PLAIN_KEY

    @property
    def base_url(self) -> str:
        """The server root (no trailing slash, no /v1)."""
        if self.launch is not None:
            return f"http://{self.launch.host}:{self.launch.port}"
        url = self.url.rstrip("/")
        return url.removesuffix("/v1")
