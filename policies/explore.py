"""Exploration: route a few requests against the current belief so that both arms stay measured.

Pure: the caller passes a uniform draw in [0, 1) (from its own `random.Random`).

Probability matching in the spirit of Thompson sampling: with a normal posterior on the bin's
speedup, the chance that the other profile is in fact faster is `P = Phi(-|speedup - 1| / se)`.
A request is routed against the belief with probability `rate * min(1, 2P)`: the full budget
where nothing is known (P = 1/2, or too few samples to trust), shrinking as evidence
accumulates, and none at all once `P` falls below `CONCLUSIVE`. Exploration only ever applies
to `auto` routes; a pinned route is the operator's word.

Cold start: while the other profile has served fewer than `min_samples` learnable requests on
the whole machine, its step costs cannot be fitted, nor any class's speedup; with no evidence
about an arm, Thompson sampling is a coin flip, so half of the auto-routed requests go to it.
This lasts a few requests (until both arms have `min_samples`) and is what lets the learner
see quickly that a machine never pays for speculation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from policies.learned import Belief, BinEstimate, LearnedState, normal_cdf
from policies.schema import Profile

# Below this chance of the belief being wrong, the evidence is conclusive: no exploration.
CONCLUSIVE: Final = 0.01
# The share of auto-routed requests sent to an arm the machine has too few samples of.
COLD_START_SHARE: Final = 0.5


@dataclass(frozen=True, slots=True)
class Exploration:
    profile: Profile  # the profile to use
    explored: bool  # routed against the belief
    probability: float  # the chance this request had of being routed against the belief


def contrary_chance(estimate: BinEstimate | None) -> float:
    """The posterior chance that the bin's speedup is on the other side of 1."""
    if estimate is None or not math.isfinite(estimate.se) or not math.isfinite(estimate.speedup):
        return 0.5
    if estimate.se <= 0:
        return 0.0
    return 1.0 - normal_cdf(abs(estimate.speedup - 1.0) / estimate.se)


def exploration_probability(
    belief: Belief | None, p_spec: float, rate: float, *, cold: bool = False
) -> float:
    """How likely a request at `p_spec` is to be routed against the belief (`cold`: the other
    profile is an arm the machine has too few samples of)."""
    if rate <= 0:
        return 0.0
    if cold:
        return max(rate, COLD_START_SHARE)
    if belief is None or not belief.trusted:
        return rate
    chance = contrary_chance(belief.bin_for(p_spec))
    if chance < CONCLUSIVE:
        return 0.0
    return rate * min(1.0, 2.0 * chance)


def explore(
    profile: Profile, belief: Belief | None, p_spec: float, rate: float, draw: float, *,
    cold: bool = False,
) -> Exploration:
    """The believed `profile`, or the other one when `draw` falls in the exploration budget."""
    if not 0.0 <= draw < 1.0:
        raise ValueError(f"draw must be uniform in [0, 1), got {draw!r}")
    probability = exploration_probability(belief, p_spec, rate, cold=cold)
    if draw < probability:
        return Exploration(other_profile(profile), True, probability)
    return Exploration(profile, False, probability)


def cold_arm(learned: LearnedState | None, believed: str, min_samples: int) -> bool:
    """Whether the profile other than `believed` (the one exploring would send a request to)
    has served fewer than `min_samples` learnable requests machine-wide."""
    other = "plain" if believed == "mtp" else "mtp"
    return (learned.arm_samples(other) if learned is not None else 0) < min_samples


def other_profile(profile: Profile) -> Profile:
    return "plain" if profile == "mtp" else "mtp"
