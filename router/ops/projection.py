"""What measured acceptance would give on another machine's cost model (a projection, not a
measurement): `specroute report --project-onto gb10|FILE.yaml`.

Pure: the step-cost model (pydantic, validated once), the named presets, and the arithmetic,
which is the learner's (`policies.learner.learned.predicted_speedup`, ARCHITECTURE.md's depth-1 cost model):
tokens per cycle `tau = s + (1 - s)(1 + a)`, speedup
`tau * t_plain / (s (t_plain + t_draft) + (1 - s)(t_verify + t_draft))`, `s` the share of cycles
the margin gate skips and `a` the acceptance on verified cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from policies import predicted_speedup


class StepCosts(BaseModel):
    """One machine's per-step decode costs, in milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", description="what the projection is labelled with")
    t_plain_ms: float = Field(gt=0, description="one plain decode step")
    t_verify_ms: float = Field(gt=0, description="the 2-row verify of one drafted token")
    t_draft_ms: float = Field(ge=0, description="the MTP head's draft")
    gate_skip: float = Field(
        ge=0, lt=1, description="share of cycles the margin gate skips (0 without a gate)"
    )

    def label(self) -> str:
        return (
            f"{self.name}: t_plain {self.t_plain_ms:g} ms, t_verify {self.t_verify_ms:g} ms, "
            f"t_draft {self.t_draft_ms:g} ms, gate skip {self.gate_skip:g}"
        )


# ARCHITECTURE.md, measured on a GB10 with ds4: plain decode ~13.7-15.6 tok/s (t_plain ~68 ms),
# verify ~108 ms, draft ~4 ms, the margin gate skipping ~44% of cycles.
PRESETS: Final[Mapping[str, StepCosts]] = {
    "gb10": StepCosts(name="gb10", t_plain_ms=68.0, t_verify_ms=108.0, t_draft_ms=4.0,
                      gate_skip=0.44),
}


class ProjectionError(ValueError):
    """A cost model that cannot be used (unknown preset, invalid fields)."""


def preset(name: str) -> StepCosts:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ProjectionError(f"unknown cost model {name!r} (known: {known}, or a YAML file)")


@dataclass(frozen=True, slots=True)
class Projection:
    acceptance: float
    gate_skip: float
    tokens_per_cycle: float
    speedup: float
    tps_plain: float
    tps_mtp: float


def project(acceptance: float, costs: StepCosts, gate_skip: float | None = None) -> Projection:
    """Tokens/s on each profile and the speedup that `acceptance` would give on `costs`, with
    the margin gate skipping `gate_skip` of cycles (default: the cost model's one share)."""
    if not 0.0 <= acceptance <= 1.0:
        raise ProjectionError(f"acceptance must be within [0, 1], got {acceptance}")
    skip = costs.gate_skip if gate_skip is None else gate_skip
    if not 0.0 <= skip < 1.0:
        raise ProjectionError(f"gate skip share must be within [0, 1), got {skip}")
    costs = costs.model_copy(update={"gate_skip": skip})
    spec_share = 1.0 - costs.gate_skip
    speedup = predicted_speedup(
        acceptance,
        spec_share,
        costs.t_plain_ms,
        costs.t_plain_ms + costs.t_draft_ms,
        costs.t_verify_ms + costs.t_draft_ms,
    )
    tps_plain = 1000.0 / costs.t_plain_ms
    return Projection(
        acceptance=acceptance,
        gate_skip=costs.gate_skip,
        tokens_per_cycle=costs.gate_skip + spec_share * (1.0 + acceptance),
        speedup=speedup,
        tps_plain=tps_plain,
        tps_mtp=tps_plain * speedup,
    )


def break_even_acceptance(costs: StepCosts) -> float | None:
    """The acceptance where the projected speedup is 1 (None when no acceptance reaches it)."""
    lo, hi = 0.0, 1.0
    if project(hi, costs).speedup < 1.0:
        return None
    if project(lo, costs).speedup >= 1.0:
        return 0.0
    for _ in range(50):  # bisection: speedup grows with acceptance
        middle = (lo + hi) / 2
        lo, hi = (middle, hi) if project(middle, costs).speedup < 1.0 else (lo, middle)
    return hi
