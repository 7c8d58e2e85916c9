"""Request rewrites a policy route may ask for: the schema, and applying one to a parsed body.

Pure: no I/O, no clock, no globals. A rewrite changes only the request sent upstream; the
response is relayed as the backend wrote it. Each field is written where the endpoint (and,
for thinking, the engine) reads it:

| rewrite       | chat                                  | completions | messages     | responses          |
|---------------|---------------------------------------|-------------|--------------|--------------------|
| `model`       | `model`                               | `model`     | `model`      | `model`            |
| `thinking`    | ds4: `thinking.type`; others:         | (none)      | `thinking.type` (Anthropic) | as chat |
|               | `chat_template_kwargs.enable_thinking`|             |              |                    |
| `max_tokens`  | `max_tokens` (and `max_completion_tokens` when sent) | `max_tokens` | `max_tokens` | `max_output_tokens` |
| `temperature` | `temperature`                         | `temperature` | `temperature` | `temperature`    |

`max_tokens` is a cap: a smaller value the client sent is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from classifiers.features import Features

Endpoint = Literal["chat", "completions", "messages", "responses"]
ENDPOINTS: Final[tuple[Endpoint, ...]] = ("chat", "completions", "messages", "responses")
REWRITE_FIELDS: Final = ("model", "thinking", "max_tokens", "temperature")
# The rewrite fields each endpoint has (the others cannot be rewritten there).
ENDPOINT_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "chat": frozenset(REWRITE_FIELDS),
    "completions": frozenset({"model", "max_tokens", "temperature"}),
    "messages": frozenset(REWRITE_FIELDS),
    "responses": frozenset(REWRITE_FIELDS),
}
ENDPOINT_PATHS: Final[Mapping[str, str]] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}
# Engines whose thinking switch is ds4's own `thinking: {"type": ...}` on every endpoint; the
# others (llama.cpp, vLLM, SGLang, generic OpenAI-compatible) render it in the chat template.
_THINKING_FIELD_ENGINES: Final = frozenset({"ds4"})
_MAX_TOKENS_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "chat": ("max_tokens", "max_completion_tokens"),
    "completions": ("max_tokens",),
    "messages": ("max_tokens",),
    "responses": ("max_output_tokens",),
}


class Rewrite(BaseModel):
    """What a route changes in the request before it goes upstream (unset: left alone)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # printable ASCII, no spaces: the label goes into a response header
    model: str | None = Field(
        None, pattern=r"^[!-~]+$", max_length=200, description="set or replace `model`"
    )
    thinking: bool | None = Field(
        None, description="true: thinking on; false: off (in the engine's own field)"
    )
    max_tokens: int | None = Field(None, ge=1, description="cap the reply's length")
    temperature: float | None = Field(None, ge=0, le=2, description="set the temperature")

    def fields(self) -> tuple[str, ...]:
        """The rewrite fields this rewrite sets, in a fixed order."""
        return tuple(name for name in REWRITE_FIELDS if getattr(self, name) is not None)

    def label(self) -> str:
        """A short, stable text for headers, logs and arm names: `model=deepseek-chat,thinking=off`."""
        parts = []
        for name in self.fields():
            value = getattr(self, name)
            if name == "thinking":
                parts.append(f"thinking={'on' if value else 'off'}")
            elif name == "max_tokens":
                parts.append(f"max_tokens<={value}")
            else:
                parts.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
        return ",".join(parts)

    def length_label(self) -> str:
        """The label of the fields that change the answer's length (a model alias, thinking, a
        cap): arms that differ there are compared on the time to the whole answer."""
        return Rewrite(model=self.model, thinking=self.thinking, max_tokens=self.max_tokens).label()


def missing_fields(rewrite: Rewrite, endpoints: Iterable[str]) -> list[tuple[str, str]]:
    """(field, endpoint) for every field `rewrite` sets that one of `endpoints` does not have."""
    return [
        (name, endpoint)
        for endpoint in endpoints
        for name in rewrite.fields()
        if name not in ENDPOINT_FIELDS.get(endpoint, frozenset())
    ]


@dataclass(frozen=True, slots=True)
class Applied:
    """A rewrite applied to one request: the body to send, and what changed, for the log."""

    body: dict[str, Any]
    label: str  # the policy's rewrite, as in the x-specroute-rewrite header
    changes: Mapping[str, Any]  # rewrite field -> the value sent, where it differs
    before: Mapping[str, Any]  # rewrite field -> what the client sent (None: nothing)
    paths: tuple[str, ...]  # body members written, e.g. "chat_template_kwargs.enable_thinking"

    @property
    def changed(self) -> bool:
        return bool(self.paths)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "changes": dict(self.changes),
            "before": dict(self.before),
            "paths": list(self.paths),
        }


def apply_rewrite(
    rewrite: Rewrite, body: Mapping[str, Any], *, endpoint: str, engine: str
) -> Applied:
    """`body` with `rewrite` applied for `endpoint` on an `engine` backend; raises ValueError
    for a field the endpoint does not have (the policy check rejects those beforehand)."""
    missing = missing_fields(rewrite, [endpoint])
    if missing:
        raise ValueError(f"{ENDPOINT_PATHS.get(endpoint, endpoint)} has no {missing[0][0]} field")
    new: dict[str, Any] = dict(body)
    changes: dict[str, Any] = {}
    before: dict[str, Any] = {}
    paths: list[str] = []
    if rewrite.model is not None:
        before["model"] = body.get("model")
        if body.get("model") != rewrite.model:
            new["model"] = changes["model"] = rewrite.model
            paths.append("model")
    if rewrite.temperature is not None:
        before["temperature"] = body.get("temperature")
        if body.get("temperature") != rewrite.temperature:
            new["temperature"] = changes["temperature"] = rewrite.temperature
            paths.append("temperature")
    if rewrite.max_tokens is not None:
        before["max_tokens"], written = _cap_max_tokens(new, endpoint, rewrite.max_tokens)
        if written:
            changes["max_tokens"] = rewrite.max_tokens
            paths += written
    if rewrite.thinking is not None:
        before["thinking"], written = _set_thinking(new, endpoint, engine, rewrite.thinking)
        if written:
            changes["thinking"] = rewrite.thinking
            paths += written
    return Applied(new, rewrite.label(), changes, before, tuple(paths))


def _cap_max_tokens(body: dict[str, Any], endpoint: str, cap: int) -> tuple[int | None, list[str]]:
    """Cap every length field the client sent (set the endpoint's own when none was)."""
    keys = _MAX_TOKENS_KEYS[endpoint]
    sent = {k: body[k] for k in keys if _is_int(body.get(k))}
    written = [k for k, v in sent.items() if v > cap] if sent else [keys[0]]
    for key in written:
        body[key] = cap
    return (min(sent.values()) if sent else None), written


def _set_thinking(
    body: dict[str, Any], endpoint: str, engine: str, on: bool
) -> tuple[bool | None, list[str]]:
    """Thinking on or off in the field the engine reads; (what the client asked, paths written)."""
    if endpoint == "messages" or engine in _THINKING_FIELD_ENGINES:
        current = body.get("thinking")
        asked = _thinking_type(current)
        written: list[str] = []
        if asked != on:
            kept = dict(current) if isinstance(current, Mapping) else {}
            if not on:
                kept.pop("budget_tokens", None)  # Anthropic: only for "enabled"
            body["thinking"] = {**kept, "type": "enabled" if on else "disabled"}
            written.append("thinking.type")
        if isinstance(body.get("think"), bool) and body["think"] != on:  # ds4's other switch
            body["think"] = on
            written.append("think")
        return asked, written
    kwargs = body.get("chat_template_kwargs")
    current_kwargs = dict(kwargs) if isinstance(kwargs, Mapping) else {}
    asked_kw = current_kwargs.get("enable_thinking")
    asked_bool = asked_kw if isinstance(asked_kw, bool) else None
    if asked_bool == on:
        return asked_bool, []
    body["chat_template_kwargs"] = {**current_kwargs, "enable_thinking": on}
    return asked_bool, ["chat_template_kwargs.enable_thinking"]


def _thinking_type(value: object) -> bool | None:
    if isinstance(value, Mapping):
        kind = value.get("type")
        return None if kind is None else kind != "disabled"
    return value if isinstance(value, bool) else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rewritten_features(features: Features, rewrite: Rewrite | None) -> Features:
    """The features of the request as it will be sent: the decoding settings a rewrite
    changes (temperature, thinking, length cap), so that the rules judge what the engine
    will run. The class and text features stay the client's."""
    if rewrite is None:
        return features
    update: dict[str, Any] = {}
    if rewrite.temperature is not None:
        update["temperature"] = rewrite.temperature
        update["greedy"] = rewrite.temperature <= 0
    thinking = rewrite.thinking
    if rewrite.model is not None and thinking is None:
        thinking = _MODEL_THINKING.get(rewrite.model.lower())
    if thinking is not None:
        update["thinking"], update["thinking_unset"] = thinking, False
    if rewrite.max_tokens is not None:
        current = features.max_tokens
        update["max_tokens"] = min(current, rewrite.max_tokens) if current else rewrite.max_tokens
    return dataclasses.replace(features, **update) if update else features


def logged_features_as_sent(
    features: Mapping[str, Any], rewrite: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """A record's features (the client's request) with the decoding settings its logged
    rewrite changed, for readers that judge how the request decoded (the learner)."""
    changes = rewrite.get("changes") if isinstance(rewrite, Mapping) else None
    if not isinstance(changes, Mapping) or not changes:
        return features
    sent = dict(features)
    if isinstance(changes.get("temperature"), (int, float)):
        sent["temperature"] = float(changes["temperature"])
    thinking = changes.get("thinking")
    if not isinstance(thinking, bool) and isinstance(changes.get("model"), str):
        thinking = _MODEL_THINKING.get(changes["model"].lower())
    if isinstance(thinking, bool):
        sent["thinking"], sent["thinking_unset"] = thinking, False
    return sent


# Model aliases that select a thinking mode (ds4), as `classifiers.features` reads them.
_MODEL_THINKING: Final[Mapping[str, bool]] = {"deepseek-chat": False, "deepseek-reasoner": True}
