"""Choosing a route's arm for one request: each (pool, rewrite) the route allows, compared on
what the learner's sums say of it (`policies.learner.arms`).

Pure: the arms' state and a uniform draw in, an `ArmChoice` out; no I/O, no clock, no globals.

Arms with the same rewrite send the same request, to different pools: together they are one
*variant* of the request, and which of their instances serves it is the finish rule's choice,
per request, from the route model (`policies.decision.route`), as it chooses among speculation
configs under `auto`. Only between variants is there a choice for the arms' sums to make, per
class: variants that leave the answer alike in length (a temperature) are compared on decode
rate; variants whose rewrites change the answer's length (thinking on or off, a different model
alias, a length cap) on the total time to the answer, as measured by the proxy. A route's first
variant is its default until every variant has `min_samples` requests of the class; exploration
only ever picks among the route's own arms, so it never sends a request into a rewrite the
policy did not allow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from policies.learner.arms import METRIC_DECODE, METRIC_TOTAL, ArmsState, ArmStats
from policies.learner.speedup import normal_cdf
from policies.policyfile.pools import Arm

CONCLUSIVE: Final = 0.01  # below this chance of the ranking being wrong: no exploration
COLD_START_SHARE: Final = 0.5  # share of a route's requests sent to its arms with too few samples


def variants_of(arms: Sequence[Arm]) -> list[tuple[Arm, ...]]:
    """The route's arms grouped by the request they send (their rewrite), in the route's order."""
    groups: dict[str, list[Arm]] = {}
    for arm in arms:
        groups.setdefault(arm.rewrite.label() if arm.rewrite is not None else "", []).append(arm)
    return [tuple(group) for group in groups.values()]


def metric_for(arms: Sequence[Arm]) -> str:
    """Decode rate when the arms' answers are alike in length (the same model, thinking mode and
    cap; a temperature may differ), else the total time to the answer."""
    shapes = {arm.rewrite.length_label() if arm.rewrite is not None else "" for arm in arms}
    return METRIC_DECODE if len(shapes) == 1 else METRIC_TOTAL


@dataclass(frozen=True, slots=True)
class ArmChoice:
    arm: Arm  # the chosen variant's first arm
    variant: tuple[Arm, ...]  # the arms that send this request: the finish rule picks among them
    explored: bool  # sent against the evidence (or to an arm with too few samples)
    probability: float  # the chance of exploring this request had
    trusted: bool  # every arm had min_samples: the evidence chose
    metric: str
    draw_left: float | None  # a fresh uniform draw for the next decision (None: none given)


def choose_arm(
    arms: Sequence[Arm],
    state: ArmsState,
    cls: str,
    lang: str,
    *,
    min_samples: int,
    rate: float,
    draw: float | None,
) -> ArmChoice:
    """The variant for one request: the best measured when every variant has `min_samples`
    requests of the class, else the route's first; maybe another of the route's, to explore."""
    if not arms:
        raise ValueError("a route needs at least one arm")
    variants = variants_of(arms)
    of_lead = {variant[0].key: variant for variant in variants}
    leads = [variant[0] for variant in variants]
    metric = metric_for(leads)
    if len(variants) == 1:
        return ArmChoice(leads[0], variants[0], False, 0.0, False, metric, draw)
    stats = variant_stats(state, variants, cls, lang, min_samples, metric)
    counts = {a.key: stats[a.key].samples(metric) if a.key in stats else 0 for a in leads}
    cold = [a for a in leads if counts[a.key] < min_samples]
    ranked = rank_arms(leads, stats, metric) if not cold else leads
    best, others = ranked[0], ranked[1:]
    probability, target = _exploration(best, others, cold, stats, metric, rate)
    trusted = not cold

    def chose(arm: Arm, explored: bool, left: float | None) -> ArmChoice:
        return ArmChoice(arm, of_lead[arm.key], explored, probability, trusted, metric, left)

    if draw is None:
        return chose(best, False, None)
    if draw < probability and target is not None:
        return chose(target, True, draw / probability)
    return chose(best, False, (draw - probability) / (1.0 - probability) if probability < 1 else 0.0)


def variant_stats(
    state: ArmsState, variants: Sequence[Sequence[Arm]], cls: str, lang: str, min_samples: int,
    metric: str,
) -> dict[str, ArmStats]:
    """Each variant's sums for the class, under its first arm's key."""
    return state.for_variants(cls, lang, [[a.key for a in v] for v in variants], min_samples,
                              metric)


def rank_arms(arms: Sequence[Arm], stats: Mapping[str, ArmStats], metric: str) -> list[Arm]:
    """Arms best first by `metric` (arms without stats last, in the route's order)."""
    def key(item: tuple[int, Arm]) -> tuple[float, int]:
        index, arm = item
        s = stats.get(arm.key)
        return (s.value(metric)[0] if s is not None else math.inf, index)

    return [arm for _, arm in sorted(enumerate(arms), key=key)]


def _exploration(
    best: Arm,
    others: Sequence[Arm],
    cold: Sequence[Arm],
    stats: Mapping[str, ArmStats],
    metric: str,
    rate: float,
) -> tuple[float, Arm | None]:
    """The chance of sending this request elsewhere, and where: a cold arm, else the runner-up."""
    if rate <= 0 or not others:
        return 0.0, None
    cold_others = [a for a in cold if a.key != best.key]
    if cold_others:
        least = min(cold_others, key=lambda a: stats[a.key].samples(metric) if a.key in stats else 0)
        return max(rate, COLD_START_SHARE), least
    runner = others[0]
    if cold:  # only the default arm is short of samples: it gets them; the rest, the budget
        return rate, runner
    chance = contrary_chance(stats[best.key], stats[runner.key], metric)
    if chance < CONCLUSIVE:
        return 0.0, runner
    return rate * min(1.0, 2.0 * chance), runner


def contrary_chance(best: ArmStats, runner: ArmStats, metric: str) -> float:
    """The chance that the runner-up is in fact better (normal approximation)."""
    (b, b_se), (r, r_se) = best.value(metric), runner.value(metric)
    se = math.hypot(b_se, r_se)
    if not math.isfinite(se):
        return 0.5
    if se <= 0:
        return 0.0
    return 1.0 - normal_cdf((r - b) / se)
