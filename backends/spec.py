"""How a backend instance is described in config.yaml: typed, frozen, unknown keys rejected.

Pure data. A backend is either attached to (`url`) or launched by the supervisor (`launch`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Engine = Literal["ds4", "llamacpp", "vllm", "sglang", "openai"]
Profile = Literal["mtp", "plain"]
# How the mtp profile drafts: "auto" uses the draft model when `draft` is given, else the model's
# own MTP head; "draft" needs `draft`; "mtp" needs a model with MTP weights (or ds4's MTP file).
SpecMethod = Literal["auto", "draft", "mtp"]


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


class BackendSpec(_Strict):
    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    engine: Engine = "openai"
    profile: Profile
    url: str = Field("", description="base URL of a running server, e.g. http://127.0.0.1:8081")
    launch: LaunchSpec | None = None
    api_key: str = Field("", description="bearer token to send upstream (default: the client's)")

    @model_validator(mode="after")
    def _url_or_launch(self) -> BackendSpec:
        if bool(self.url) == (self.launch is not None):
            raise ValueError("give exactly one of 'url' (attach) or 'launch' (start it)")
        return self

    @property
    def base_url(self) -> str:
        """The server root (no trailing slash, no /v1)."""
        if self.launch is not None:
            return f"http://{self.launch.host}:{self.launch.port}"
        url = self.url.rstrip("/")
        return url.removesuffix("/v1")
