"""Pools and the policy routes that name them.

Pure data and validation. A pool is a set of backend instances. `mtp` and `plain` are built in
(every instance of that profile); config.yaml may name more (`pools: {nothink: [ds4-plain]}`).
A class route in the policy is either a built-in route (`mtp`, `plain`, `auto`: every instance
of both competes on predicted finish) or a `PoolRoute`: a pool and an optional request rewrite,
or a list of such arms for the learner to choose among. A route may say which endpoints it applies
to; a rewrite must only touch fields those endpoints have.

Whether a named pool exists is a fact of config.yaml: validate the policy with
`context={"pools": names}` (see `pool_context`) to check it; without that context only the
name's form is checked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from policies.policyfile.rewrite import (
    ENDPOINT_FIELDS,
    ENDPOINT_PATHS,
    ENDPOINTS,
    Endpoint,
    Rewrite,
    missing_fields,
)
from policies.policyfile.words import ROUTE_WORDS

POOL_NAME: Final = r"^[A-Za-z0-9_.-]+$"
CONTEXT_KEY: Final = "pools"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def pool_context(pool_names: Iterable[str]) -> dict[str, Any]:
    """The validation context that makes a policy check that its pools exist."""
    return {CONTEXT_KEY: frozenset(pool_names)}


def _known_pool(name: str, info: ValidationInfo) -> str:
    context = info.context if isinstance(info.context, Mapping) else {}
    pools: Collection[str] | None = context.get(CONTEXT_KEY)
    if pools is not None and name not in ROUTE_WORDS and name not in pools:
        named = ", ".join(sorted(pools)) or "none"
        raise ValueError(
            f"no pool named {name!r} in the config (built in: mtp, plain, auto; named: {named})"
        )
    return name


class Arm(_Strict):
    """One (pool, rewrite) a route allows."""

    pool: str = Field(..., pattern=POOL_NAME, description="mtp, plain, auto or a named pool")
    rewrite: Rewrite | None = Field(None, description="what to change in the request")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"pool": value} if isinstance(value, str) else value

    @field_validator("pool")
    @classmethod
    def _pool_exists(cls, value: str, info: ValidationInfo) -> str:
        return _known_pool(value, info)

    @property
    def key(self) -> str:
        """The arm's name in logs and learned state: `plain`, `plain+model=deepseek-chat`."""
        label = self.rewrite.label() if self.rewrite is not None else ""
        return f"{self.pool}+{label}" if label else self.pool

    @property
    def builtin(self) -> bool:
        return self.pool in ROUTE_WORDS


class PoolRoute(_Strict):
    """A class route beyond `mtp | plain | auto`: a pool with a rewrite, or several arms."""

    endpoints: tuple[Endpoint, ...] = Field(
        ENDPOINTS, min_length=1, description="the endpoints this route applies to"
    )
    pool: str | None = Field(None, pattern=POOL_NAME, description="the pool (one arm)")
    rewrite: Rewrite | None = Field(None, description="what to change in the request")
    arms: tuple[Arm, ...] = Field((), description="or: the arms the learner chooses among")

    @field_validator("pool")
    @classmethod
    def _pool_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else _known_pool(value, info)

    @field_validator("rewrite")
    @classmethod
    def _rewrite_fits(cls, value: Rewrite | None, info: ValidationInfo) -> Rewrite | None:
        _check_fields(value, info.data.get("endpoints", ENDPOINTS), "")
        return value

    @field_validator("arms")
    @classmethod
    def _arms_fit(cls, arms: tuple[Arm, ...], info: ValidationInfo) -> tuple[Arm, ...]:
        endpoints = info.data.get("endpoints", ENDPOINTS)
        for index, arm in enumerate(arms):
            _check_fields(arm.rewrite, endpoints, f"{index}.rewrite.")
        keys = [arm.key for arm in arms]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"arms must differ; repeated: {repeated}")
        return arms

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"pool": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_form(self) -> PoolRoute:
        if (self.pool is None) == (not self.arms):
            raise ValueError("give either 'pool' (with an optional 'rewrite') or 'arms'")
        if self.arms and self.rewrite is not None:
            raise ValueError("with 'arms', give each arm its own 'rewrite'")
        if self.arms and len(self.arms) < 2:
            raise ValueError("'arms' needs at least two arms (one arm: use 'pool')")
        return self

    @property
    def choices(self) -> tuple[Arm, ...]:
        """The arms this route allows (one for a plain pool route)."""
        if self.arms:
            return self.arms
        assert self.pool is not None  # _one_form
        return (Arm(pool=self.pool, rewrite=self.rewrite),)

    def applies_to(self, endpoint: str) -> bool:
        return endpoint in self.endpoints


def _check_fields(rewrite: Rewrite | None, endpoints: Iterable[str], where: str) -> None:
    if rewrite is None:
        return
    missing = missing_fields(rewrite, endpoints)
    if missing:
        field, endpoint = missing[0]
        having = [e for e in ENDPOINTS if field in ENDPOINT_FIELDS[e]]
        raise ValueError(
            f"{where}{field}: {ENDPOINT_PATHS[endpoint]} has no {field} field; limit the route"
            f" to endpoints that have it (e.g. endpoints: [{', '.join(having)}])"
        )


def route_text(route: str | PoolRoute) -> str:
    """A route as one short text: `mtp`, `nothink+model=deepseek-chat` or `mtp | plain+...`,
    with the endpoints when the route does not apply to all."""
    if isinstance(route, str):
        return route
    text = " | ".join(arm.key for arm in route.choices)
    if tuple(route.endpoints) != ENDPOINTS:
        text += f" (on {', '.join(route.endpoints)})"
    return text


def pools_named(table: Mapping[str, Any]) -> list[str]:
    """The pool names a route table refers to (for listing, e.g. in `policy check`)."""
    names: list[str] = []
    for route in table.values():
        if isinstance(route, PoolRoute):
            names += [arm.pool for arm in route.choices]
    return names
