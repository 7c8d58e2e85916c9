"""What pins a request before any class route is read: the client's own asks (the
`x-specroute-route` header, a model alias, an API key), decided here and nowhere else.

Pure: the policy and the request's context in, a `Pin` or None out; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from policies.policyfile.schema import Policy
from policies.policyfile.words import PROFILES


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Request facts that are not features: routing hints from headers and credentials."""

    header_route: str | None = None  # x-specroute-route: mtp | plain | auto | a named pool
    model: str = ""
    api_key_name: str | None = None


NO_CONTEXT: Final = RequestContext()  # immutable: one shared instance as the default


@dataclass(frozen=True, slots=True)
class Pin:
    """Where the client's request asks to go: a profile, or a named pool of the config."""

    target: str
    reason: str  # header | model | api_key
    rule: str  # the policy path that pinned it, e.g. "overrides.models.deepseek-reasoner"
    pool: bool = False  # `target` names a pool, not a profile


def request_pin(policy: Policy, context: RequestContext, pools: Collection[str] = ()) -> Pin | None:
    """The first of the header (a profile, or one of `pools`), the model alias and the API key
    that pins the request; None when none does (`auto` in the header pins nothing). These win
    over every other rule and a pinned request is never rewritten."""
    o = policy.overrides
    header = (context.header_route or "").strip()
    if o.header and header.lower() in PROFILES:
        return Pin(header.lower(), "header", "overrides.header")
    if o.header and header in pools:
        return Pin(header, "header", "overrides.header", pool=True)
    model = context.model.lower()
    if model in o.models:
        return Pin(o.models[model], "model", f"overrides.models.{model}")
    name = context.api_key_name
    if name and name in o.api_keys:
        return Pin(o.api_keys[name], "api_key", f"overrides.api_keys.{name}")
    return None
