"""What the learner has learned: the route model's evidence (policies.learner.routemodel, what the
decision uses) and, for `policy explain`, the dashboard and reports, per class and language the
measured speedup of `mtp` over `plain` in each `p_spec` bin, with its uncertainty and the
evidence behind it. Only the route model decides; the tables explain.

Pure: data, the depth-1 cost model's arithmetic, and JSON (de)serialisation. No I/O, no clock:
`created` is passed in by whoever learned it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from policies.learner.arms import EMPTY_ARMS, ArmsState, arms_as_json, arms_from_json
from policies.learner.routemodel import RouteEvidence

# 2: the route model's evidence (policies.learner.routemodel); 3: every pace in log(ms per token), the
# pace and the speedup learned jointly, startup probes counted; 4: the arms' sums in the same file
LEARNED_VERSION: Final = 4


@dataclass(frozen=True, slots=True)
class CostFit:
    """The machine's per-step costs (ms), fitted across classes; workload-independent."""

    t_plain_ms: float  # one plain decode step
    t_skip_ms: float  # a cycle the margin gate skipped: a plain step plus the draft
    t_verify_ms: float  # a verified cycle: the 2-row verify plus the draft
    n_plain: int
    n_mtp: int
    fit_error: float  # mean relative error of the fitted mtp decode time per request
    prefill_ms_per_token: Mapping[str, float] = field(default_factory=dict)  # profile -> ms
    mean_completion_tokens: float = 0.0
    # share of prompt tokens served from the KV cache, per profile: stickiness at work
    cached_share: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BinEstimate:
    """The predicted speedup for requests with `lo <= p_spec < hi`."""

    lo: float
    hi: float
    n_mtp: int
    n_plain: int
    speedup: float
    se: float  # infinite when the bin has seen nothing
    acceptance: float | None = None  # where the engine reports it
    spec_share: float | None = None


@dataclass(frozen=True, slots=True)
class Belief:
    """Everything learned about one class in one language (lang `*`: all languages pooled)."""

    cls: str
    lang: str
    method: str  # "cost_model" (acceptance reported) | "tps_ratio" (measured tokens/s only)
    n_mtp: int
    n_plain: int
    acceptance: float | None  # on verified cycles, where the engine reports it
    spec_share: float | None  # share of cycles that speculated (1 - gate skips)
    mtp_tps: float | None
    plain_tps: float | None
    speedup: float
    se: float
    trusted: bool  # enough samples (policy `exploration.min_samples`) on the arms it needs
    bins: tuple[BinEstimate, ...]

    @property
    def key(self) -> str:
        return f"{self.cls}/{self.lang}"


@dataclass(frozen=True, slots=True)
class LearnedState:
    created: str
    n_observations: int
    n_skipped: int  # not learnable: sampled or thinking decoding, failures, no timings
    min_samples: int
    cost: CostFit | None
    beliefs: Mapping[str, Belief]  # "class/lang" -> belief
    version: int = LEARNED_VERSION
    # What the decision's route model learned: sums over the log, combined with the policy's
    # machine prior when the decision is made (policies.learner.routemodel).
    evidence: RouteEvidence = field(default_factory=RouteEvidence)
    # What the routes' arms took, per class, as sums (policies.learner.arms).
    arms: ArmsState = EMPTY_ARMS
    through: str = ""  # timestamp of the newest record any accumulator took in


EMPTY_STATE: Final = LearnedState("", 0, 0, 30, None, {})


def predicted_speedup(
    acceptance: float, spec_share: float, t_plain: float, t_skip: float, t_verify: float
) -> float:
    """Speedup of MTP-1 over plain decoding by the depth-1 cost model (ARCHITECTURE.md)."""
    skip = 1.0 - spec_share
    tokens_per_cycle = skip + spec_share * (1.0 + acceptance)
    cycle_ms = skip * t_skip + spec_share * t_verify
    return tokens_per_cycle * t_plain / cycle_ms if cycle_ms > 0 else 0.0


def acceptance_for_speedup(
    speedup: float, spec_share: float, t_plain: float, t_skip: float, t_verify: float
) -> float:
    """The acceptance on verified cycles that gives `speedup` (1.0: the break-even)."""
    skip = 1.0 - spec_share
    cycle_ms = skip * t_skip + spec_share * t_verify
    tokens_per_cycle = speedup * cycle_ms / t_plain
    return (tokens_per_cycle - 1.0) / spec_share if spec_share > 0 else math.inf


# --- JSON ------------------------------------------------------------------------------------


def to_json(state: LearnedState) -> str:
    """Strict JSON (an infinite standard error is written as null, read back as infinite)."""
    data = asdict(replace(state, evidence=RouteEvidence(), arms=EMPTY_ARMS))
    data["evidence"] = state.evidence.as_json()
    data["arms"] = arms_as_json(state.arms)
    return json.dumps(_strict(data), indent=1, sort_keys=True, allow_nan=False)


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


class LearnedStateError(ValueError):
    """A learned-state file that cannot be read (wrong version, missing or bad fields)."""


def from_json(text: str) -> LearnedState:
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("the file must hold a JSON object")
        version = data.get("version")
        if version != LEARNED_VERSION:
            raise LearnedStateError(
                f"version {version!r}, expected {LEARNED_VERSION}: it is derived from the "
                "decision log, so relearn it (`specroute learn`, or the proxy's background "
                "learner rewrites it at its next run)")
        return _state_from(data)
    except LearnedStateError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise LearnedStateError(
            f"malformed learned state ({type(exc).__name__}: {exc}): it is derived from the "
            "decision log, so relearn it (`specroute learn`, or the proxy's background learner "
            "rewrites it at its next run)") from exc


def _state_from(data: Mapping[str, Any]) -> LearnedState:
    cost = data.get("cost")
    beliefs = {
        key: _belief_from(raw) for key, raw in dict(data["beliefs"]).items()
    }
    return LearnedState(
        created=str(data["created"]),
        n_observations=int(data["n_observations"]),
        n_skipped=int(data["n_skipped"]),
        min_samples=int(data["min_samples"]),
        cost=CostFit(**cost) if cost is not None else None,
        beliefs=beliefs,
        evidence=RouteEvidence.from_json(data["evidence"]),
        arms=arms_from_json(data["arms"]),
        through=str(data["through"]),
    )


def _belief_from(raw: Mapping[str, Any]) -> Belief:
    bins = tuple(BinEstimate(**{**b, "se": _inf_if_none(b["se"])}) for b in raw["bins"])
    if not bins:
        raise ValueError("a belief needs at least one bin")
    return Belief(**{**raw, "bins": bins, "se": _inf_if_none(raw["se"])})


def _inf_if_none(value: Any) -> float:
    return math.inf if value is None else float(value)
