"""config.yaml: typed, frozen, validated once at the boundary (unknown keys are errors).

Relative paths in the file are resolved against the file's directory, so that
`specroute serve --config /etc/specroute/config.yaml` works from anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from backends.spec import BackendSpec
from fileio.yamlfile import ConfigError, load_model
from policies import DEFAULT_POLICY, POOL_NAME, ROUTE_WORDS

SCORER_NAMES = ("default", "rules", "")  # not paths: resolved by classifiers.scorer


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Listen(_Strict):
    host: str = Field("127.0.0.1", description="address to listen on (loopback by default)")
    port: int = Field(8700, ge=0, le=65535, description="port; 0 picks a free one")


class LogConfig(_Strict):
    path: str = Field("logs/decisions.jsonl", description="the decision log (JSON Lines)")
    content: bool = Field(False, description="log prompt and completion text (off by default)")
    rotate_mb: float = Field(100.0, gt=0, description="rotate the log at this size")
    keep: int = Field(5, ge=1, description="rotated files to keep")


class Limits(_Strict):
    max_body_mb: float = Field(32.0, gt=0, description="largest request body accepted")
    connect_timeout_s: float = Field(10.0, gt=0, description="connecting to a backend")
    first_byte_timeout_s: float = Field(
        0.0, ge=0, description="wait for a backend's first byte (0: forever; prefills are long)"
    )

    @property
    def max_body_bytes(self) -> int:
        """The largest request body accepted, decoded, in bytes (both front ends)."""
        return int(self.max_body_mb * 2**20)


class SupervisorConfig(_Strict):
    log_dir: str = Field("logs/backends", description="stdout/stderr of launched backends")
    health_interval_s: float = Field(5.0, gt=0, description="health probe period")
    restart_after_failed_probes: int = Field(
        6, ge=0, description="kill and restart a launched backend that lives but fails this "
        "many health probes in a row (0: never)"
    )
    startup_probe: bool = Field(
        True, description="at start, check both profiles serve one model, time a copy-heavy "
        "and a free-form greedy request on each instance (the first measurements of their "
        "paces) and warn where a speculating instance drafts on neither"
    )


class AdminConfig(_Strict):
    token: str = Field(
        "", description="bearer token that opens /metrics and /dashboard to non-loopback "
        "clients ('': loopback clients only)"
    )


class LearnConfig(_Strict):
    interval_s: float = Field(
        300.0, ge=0, description="learn from the decision log this often (0: never)"
    )


class LoadConfig(_Strict):
    gauges: bool = Field(
        True, description="read each engine's own queue gauges from its /metrics (llama.cpp, "
        "vLLM, SGLang), so that requests others put on an instance count in the finish rule"
    )
    interval_s: float = Field(0.1, gt=0, description="how often the gauges are read")
    unheard_interval_s: float = Field(
        0.025, gt=0, description="how often they are read while the other replicas are not "
        "heard from (the store down): the gauges are then all a replica sees of the others' "
        "requests, and a staler view sends two requests to one instance more often (never "
        "slower than interval_s)"
    )
    timeout_s: float = Field(0.5, gt=0, description="a scrape slower than this is ignored")
    max_age_s: float = Field(
        1.0, gt=0, description="load seen longer ago than this (a gauge, or another replica's "
        "published requests) is no longer counted"
    )


class ReplicasConfig(_Strict):
    store: str = Field(
        "", pattern=r"^$|^(redis|rediss|unix)://.+",
        description="redis://host:port/db that the replicas share ('': one process, "
        "nothing shared)"
    )
    id: str = Field(
        "", description="this replica's name, the same across its restarts ('': the host name "
        "and listen port)"
    )
    namespace: str = Field(
        "specroute", pattern=r"^[A-Za-z0-9_.:-]+$",
        description="key prefix in the store: the replicas of one fleet share it (and one policy)"
    )
    sync_interval_s: float = Field(
        1.0, gt=0, description="publish this replica's learned sums and read the others' "
        "this often"
    )
    load_interval_s: float = Field(
        0.1, gt=0, description="besides at each request's start and end, publish this "
        "replica's in-flight requests this often (a replica not heard from for load.max_age_s "
        "no longer counts)"
    )
    timeout_s: float = Field(0.5, gt=0, description="a store call slower than this has failed")
    url: str = Field(
        "", pattern=r"^$|^https?://[^/]+$",
        description="where the other replicas reach this one (http://host:port); set, a "
        "request whose best instance is in another replica's share goes through that replica, "
        "which alone sends to its share and so knows its load exactly ('': never forwarded)"
    )


class Config(_Strict):
    listen: Listen = Field(default_factory=Listen)
    backends: list[BackendSpec] = Field(..., min_length=1)
    pools: dict[str, list[str]] = Field(
        default_factory=dict,
        description="named pools: name -> backend names (mtp and plain are built in: every "
        "instance of that profile); a policy route may name one",
    )
    default_backend: str = Field("", description="backend for other /v1/* paths (default: first)")
    policy: str = Field(DEFAULT_POLICY, description="routing policy YAML (hot-reloaded)")
    classifier: str = Field(
        "default",
        description="model artifact; 'default': the trained artifact shipped with specroute; "
        "'rules': the rule-based scorer",
    )
    tokenizer: bool = Field(True, description="count prompt tokens with the DeepSeek tokenizer")
    log: LogConfig = Field(default_factory=LogConfig)
    limits: Limits = Field(default_factory=Limits)
    supervisor: SupervisorConfig = Field(default_factory=SupervisorConfig)
    learn: LearnConfig = Field(default_factory=LearnConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    load: LoadConfig = Field(default_factory=LoadConfig)
    replicas: ReplicasConfig = Field(default_factory=ReplicasConfig)

    @model_validator(mode="after")
    def _names(self) -> Config:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique; repeated: {duplicates}")
        if self.default_backend and self.default_backend not in names:
            raise ValueError(f"default_backend {self.default_backend!r} is not a backend name")
        return self

    @field_validator("pools")
    @classmethod
    def _pools(cls, pools: dict[str, list[str]], info: ValidationInfo) -> dict[str, list[str]]:
        names = {b.name for b in info.data.get("backends") or []}
        for pool, members in pools.items():
            if pool in ROUTE_WORDS or not re.match(POOL_NAME, pool):
                raise ValueError(f"{pool!r} cannot name a pool (built in: mtp, plain; "
                                 "reserved: auto; letters, digits, '_', '.', '-')")
            if not members:
                raise ValueError(f"pool {pool!r} lists no backends")
            unknown = sorted(set(members) - names)
            if unknown:
                raise ValueError(f"pool {pool!r}: not backend names: {unknown}")
        return pools

    @model_validator(mode="after")
    def _config_pools(self) -> Config:
        taken = sorted(set(self.pools) & set(self.config_pools))
        if taken:
            raise ValueError(f"pool {taken[0]!r} is the built-in pool of the instances whose "
                             "speculation config has that key: name the pool otherwise")
        return self

    @property
    def config_pools(self) -> dict[str, list[str]]:
        """One built-in pool per speculation config besides mtp and plain (its key names it:
        `ngram-simple`, `draft`, ...): a route or a header may name a config as it names a pool."""
        pools: dict[str, list[str]] = {}
        for b in self.backends:
            if b.spec_key not in ROUTE_WORDS:
                pools.setdefault(b.spec_key, []).append(b.name)
        return pools

    @property
    def all_pools(self) -> dict[str, list[str]]:
        """The named pools and the speculation configs' built-in ones."""
        return {**self.pools, **self.config_pools}

    def pools_of(self, backend: str) -> frozenset[str]:
        """The pools `backend` belongs to: named ones, and its speculation config's."""
        return frozenset(pool for pool, members in self.all_pools.items() if backend in members)

    @property
    def default_backend_name(self) -> str:
        return self.default_backend or self.backends[0].name

    def resolved(self, base: Path) -> Config:
        """This config with relative file paths made absolute against `base`."""

        def absolute(value: str) -> str:
            if value in SCORER_NAMES:
                return value
            return str(value if not value or Path(value).is_absolute() else (base / value).resolve())

        return self.model_copy(
            update={
                "policy": absolute(self.policy),
                "classifier": absolute(self.classifier),
                "log": self.log.model_copy(update={"path": absolute(self.log.path)}),
                "supervisor": self.supervisor.model_copy(
                    update={"log_dir": absolute(self.supervisor.log_dir)}
                ),
            }
        )


def load_config(path: str | Path) -> Config:
    """Read, validate and resolve a config file; raises `ConfigError` with file:line: field."""
    config = load_model(path, Config)
    return config.resolved(Path(path).resolve().parent)


__all__ = ["Config", "ConfigError", "Limits", "Listen", "LoadConfig", "LogConfig",
           "ReplicasConfig", "load_config"]
