"""The learner's one pass: observations in, one `LearnedState` out, every accumulator fed from
the same list: the route model's evidence (`policies.learner.routemodel`: what the decision
uses), the arms' sums (`policies.learner.arms`), and, for `policy explain`, the dashboard and
reports, the per-class tables below.

Pure: no I/O, no clock, no globals.

The per-class tables:
Where the `mtp` instance reports draft statistics, the learner fits the depth-1 cost model
(ARCHITECTURE.md): the machine's step costs (plain step, gate-skipped cycle, verified cycle) once,
across all classes, by least squares on each request's decode time; the workload's acceptance
and share of speculated cycles per class, language and `p_spec` bin. Where it reports none
(upstream ds4), it uses the measured tokens/s of each instance directly. Bin estimates are
shrunk toward their class's pooled estimate so thin bins borrow strength; every speedup
carries a standard error, which exploration reads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from policies.learner.arms import learn_arms
from policies.learner.learned import (
    Belief,
    BinEstimate,
    CostFit,
    LearnedState,
    predicted_speedup,
)
from policies.learner.observation import Observation
from policies.learner.routemodel import gather
from policies.policyfile.schema import Assume
from policies.policyfile.words import ANY_LANG, PROFILES

__all__ = ["N_BINS", "Observation", "fit_costs", "learn"]

N_BINS: Final = 10
# Pseudo-observations a bin borrows from its class (and a class from all classes).
SHRINK: Final = 5.0
# Weight of the prior "a gate-skipped cycle costs one plain step" in the step-cost fit, as a
# share of the data's own weight: enough to steady a collinear fit, too little to dominate.
PRIOR_WEIGHT: Final = 0.05


# --- statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Estimate:
    mean: float
    se: float
    n: int
    sd: float  # spread between requests, NaN when unknown


_UNKNOWN: Final = Estimate(math.nan, math.inf, 0, math.nan)


def _estimate(values: Sequence[float], prior: Estimate | None, k: float = SHRINK) -> Estimate:
    """Mean of `values` shrunk toward `prior` (worth `k` requests); its standard error counts
    only the group's own requests plus one, and is infinite for a group never seen."""
    n = len(values)
    mean = sum(values) / n if n else math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.nan
    if prior is None or not math.isfinite(prior.mean):
        if n == 0:
            return _UNKNOWN
        se = math.sqrt(var / n) if n > 1 else math.inf
        return Estimate(mean, se, n, math.sqrt(var) if n > 1 else math.nan)
    if n == 0:  # the prior is only a guess for a group never seen: no certainty from it
        return Estimate(prior.mean, math.inf, 0, prior.sd)
    shrunk = (n * mean + k * prior.mean) / (n + k)
    spreads: list[tuple[float, float]] = [(n, var)] if n > 1 else []
    if math.isfinite(prior.sd):
        spreads.append((k, prior.sd**2))
    if not spreads:
        return Estimate(shrunk, math.inf, n, math.nan)
    sd = math.sqrt(sum(w * v for w, v in spreads) / sum(w for w, _ in spreads))
    return Estimate(shrunk, sd / math.sqrt(n + 1), n, sd)


def _bin_of(p_spec: float, n_bins: int) -> int:
    return min(n_bins - 1, max(0, int(p_spec * n_bins)))


def _acceptance(o: Observation) -> float:
    return (o.draft_accepted or 0) / (o.draft_n or 1)


def _spec_share(o: Observation) -> float:
    verified = o.draft_n or 0
    skipped = max(0, o.completion_tokens - verified - (o.draft_accepted or 0))
    return verified / max(1, verified + skipped)


# --- the machine's step costs ----------------------------------------------------------------


def fit_costs(observations: Sequence[Observation]) -> CostFit | None:
    """Step costs from plain decode rates and the mtp requests' cycle counts, or None when
    either arm has no data."""
    plain = [o for o in observations if o.profile == "plain"]
    spec = [o for o in observations if o.has_draft_stats]
    if not plain or not spec:
        return None
    t_plain = sum(o.completion_tokens * o.ms_per_token for o in plain) / sum(
        o.completion_tokens for o in plain
    )
    t_skip, t_verify = _fit_cycle_costs(spec, t_plain)
    error = sum(abs(_cycle_time(o, t_skip, t_verify) / _decode_ms(o) - 1.0) for o in spec)
    return CostFit(
        t_plain_ms=t_plain,
        t_skip_ms=t_skip,
        t_verify_ms=t_verify,
        n_plain=len(plain),
        n_mtp=len(spec),
        fit_error=error / len(spec),
        prefill_ms_per_token=_prefill_rates(observations),
        mean_completion_tokens=sum(o.completion_tokens for o in observations) / len(observations),
        cached_share=_cached_shares(observations),
    )


def _decode_ms(o: Observation) -> float:
    return o.completion_tokens * o.ms_per_token


def _cycles(o: Observation) -> tuple[float, float]:
    verified = float(o.draft_n or 0)
    return max(0.0, o.completion_tokens - verified - (o.draft_accepted or 0)), verified


def _cycle_time(o: Observation, t_skip: float, t_verify: float) -> float:
    skipped, verified = _cycles(o)
    return skipped * t_skip + verified * t_verify


def _fit_cycle_costs(spec: Sequence[Observation], t_plain: float) -> tuple[float, float]:
    """Least squares of decode time on (skipped, verified) cycle counts, with a weak prior
    pulling the skipped-cycle cost toward a plain step. A skipped cycle runs a plain step and
    the draft, so it never costs less than a plain step: where the data say otherwise (few
    skips, as without a margin gate, and noisy timings) it is held at one plain step."""
    sxx = sxy = syy = bx = by = 0.0
    for o in spec:
        skipped, verified = _cycles(o)
        time = _decode_ms(o)
        sxx, sxy, syy = sxx + skipped * skipped, sxy + skipped * verified, syy + verified**2
        bx, by = bx + skipped * time, by + verified * time
    if syy <= 0:
        return t_plain, t_plain
    prior = PRIOR_WEIGHT * max(sxx, 1.0)
    sxx, bx = sxx + prior, bx + prior * t_plain
    det = sxx * syy - sxy * sxy
    t_skip = (bx * syy - by * sxy) / det if abs(det) > 1e-9 * sxx * syy else t_plain
    t_skip = max(t_skip, t_plain)
    t_verify = (by - sxy * t_skip) / syy
    return t_skip, max(t_verify, 1e-3)


def _prefill_rates(observations: Sequence[Observation]) -> dict[str, float]:
    rates: dict[str, float] = {}
    for profile in ("mtp", "plain"):
        pairs = [
            (o.ttft_ms, o.prompt_tokens - o.cached_tokens)
            for o in observations
            if o.profile == profile and o.ttft_ms is not None and o.prompt_tokens > o.cached_tokens
        ]
        tokens = sum(t for _, t in pairs)
        if tokens:
            rates[profile] = sum(ms for ms, _ in pairs) / tokens
    return rates


def _cached_shares(observations: Sequence[Observation]) -> dict[str, float]:
    shares: dict[str, float] = {}
    for profile in ("mtp", "plain"):
        served = [o for o in observations if o.profile == profile and o.prompt_tokens > 0]
        prompt = sum(o.prompt_tokens for o in served)
        if prompt:
            shares[profile] = sum(min(o.cached_tokens, o.prompt_tokens) for o in served) / prompt
    return shares


# --- beliefs ---------------------------------------------------------------------------------


def learn(
    observations: Iterable[Observation],
    *,
    min_samples: int = 30,
    assume: Assume | None = None,
    created: str = "",
    n_bins: int = N_BINS,
) -> LearnedState:
    """What the observations say about each class and language (and each class pooled).
    Only greedy, non-thinking requests are learned from (`assume`: the policy's defaults for
    requests that do not say)."""
    assume = assume or Assume()
    everything = list(observations)
    # the tables describe depth-1 speculation against none: other configs' requests (n-gram,
    # declared drafts) are the route model's alone
    usable = [o for o in everything if o.paced and o.greedy(assume) and o.config in PROFILES]
    cost = fit_costs(usable)
    groups: dict[tuple[str, str], list[Observation]] = defaultdict(list)
    for o in usable:
        groups[(o.cls, o.lang)].append(o)
        groups[(o.cls, ANY_LANG)].append(o)
    overall = _Priors.of(usable)
    beliefs = {
        f"{cls}/{lang}": _belief(cls, lang, group, cost, overall, min_samples, n_bins)
        for (cls, lang), group in sorted(groups.items())
    }
    return LearnedState(
        created=created,
        n_observations=len(usable),
        n_skipped=len(everything) - len(usable),
        min_samples=min_samples,
        cost=cost,
        beliefs=beliefs,
        evidence=gather(everything, assume),
        arms=learn_arms(everything),
        through=max((o.ts for o in everything), default=""),
    )


@dataclass(frozen=True, slots=True)
class _Priors:
    """Estimates over some population, toward which a smaller one is shrunk."""

    acceptance: Estimate | None
    spec_share: Estimate | None
    mtp_ms: Estimate | None
    plain_ms: Estimate | None

    @classmethod
    def of(cls, group: Sequence[Observation], parent: _Priors | None = None) -> _Priors:
        drafted = [o for o in group if o.has_draft_stats]
        mtp = [o.ms_per_token for o in group if o.profile == "mtp"]
        plain = [o.ms_per_token for o in group if o.profile == "plain"]
        p = parent or _Priors(None, None, None, None)
        return _Priors(
            acceptance=_estimate([_acceptance(o) for o in drafted], p.acceptance),
            spec_share=_estimate([_spec_share(o) for o in drafted], p.spec_share),
            mtp_ms=_estimate(mtp, p.mtp_ms),
            plain_ms=_estimate(plain, p.plain_ms),
        )


def _belief(
    cls: str,
    lang: str,
    group: Sequence[Observation],
    cost: CostFit | None,
    overall: _Priors,
    min_samples: int,
    n_bins: int,
) -> Belief:
    n_mtp = sum(o.profile == "mtp" for o in group)
    n_plain = sum(o.profile == "plain" for o in group)
    drafted = sum(o.has_draft_stats for o in group)
    use_cost_model = cost is not None and drafted >= n_mtp / 2
    pooled = _Priors.of(group, overall)
    by_bin: list[list[Observation]] = [[] for _ in range(n_bins)]
    for o in group:
        by_bin[_bin_of(o.p_spec, n_bins)].append(o)
    ceiling = _ceiling(cost, min_samples) if use_cost_model else None
    bins = []
    for index, members in enumerate(by_bin):
        priors = _Priors.of(members, pooled)
        speedup, se = _bounded(_speedup(priors, cost if use_cost_model else None), ceiling)
        bins.append(
            BinEstimate(
                lo=index / n_bins,
                hi=(index + 1) / n_bins,
                n_mtp=sum(o.profile == "mtp" for o in members),
                n_plain=sum(o.profile == "plain" for o in members),
                speedup=speedup,
                se=se,
                acceptance=_finite(priors.acceptance) if use_cost_model else None,
                spec_share=_finite(priors.spec_share) if use_cost_model else None,
            )
        )
    speedup, se = _bounded(_speedup(pooled, cost if use_cost_model else None), ceiling)
    plain_evidence = cost.n_plain if use_cost_model and cost is not None else n_plain
    return Belief(
        cls=cls,
        lang=lang,
        method="cost_model" if use_cost_model else "tps_ratio",
        n_mtp=n_mtp,
        n_plain=n_plain,
        acceptance=_finite(pooled.acceptance),
        spec_share=_finite(pooled.spec_share),
        mtp_tps=_tps(pooled.mtp_ms),
        plain_tps=_tps(pooled.plain_ms),
        speedup=speedup,
        se=se,
        trusted=ceiling is not None
        or (n_mtp >= min_samples and plain_evidence >= min_samples),
        bins=tuple(bins),
    )


def _ceiling(cost: CostFit | None, min_samples: int) -> float | None:
    """The best speedup any workload could get on this machine (every cycle verified, every
    draft accepted), when the step costs are trusted and that best is still a loss; else None.
    Then no class needs samples of its own to be routed to plain: the machine has decided.
    (Gate-skipped cycles only pull a workload toward plain speed, as a skipped cycle costs at
    least a plain step.)"""
    if cost is None or min(cost.n_plain, cost.n_mtp) < min_samples:
        return None
    best = predicted_speedup(1.0, 1.0, cost.t_plain_ms, cost.t_skip_ms, cost.t_verify_ms)
    return best if best < 1.0 else None


def _bounded(estimate: tuple[float, float], ceiling: float | None) -> tuple[float, float]:
    """Cap a speedup at the machine's ceiling; under a ceiling below 1 the verdict is certain
    (three standard errors at most from the ceiling to break-even)."""
    speedup, se = estimate
    if ceiling is None:
        return speedup, se
    return min(speedup, ceiling), min(se, (1.0 - ceiling) / 3.0)


def _speedup(p: _Priors, cost: CostFit | None) -> tuple[float, float]:
    """Predicted speedup and its standard error: by the cost model when it is fitted and the
    engine reports acceptance, else as the ratio of measured per-token times."""
    if cost is not None and p.acceptance is not None and p.spec_share is not None:
        a, s = p.acceptance, p.spec_share
        if math.isfinite(a.mean) and math.isfinite(s.mean):
            args = (cost.t_plain_ms, cost.t_skip_ms, cost.t_verify_ms)
            value = predicted_speedup(a.mean, s.mean, *args)
            d_a = predicted_speedup(a.mean + 1e-4, s.mean, *args) - value
            d_s = predicted_speedup(a.mean, s.mean + 1e-4, *args) - value
            se = math.hypot(d_a / 1e-4 * a.se, d_s / 1e-4 * s.se)
            return value, se if math.isfinite(se) else math.inf
    if p.mtp_ms is None or p.plain_ms is None:
        return 1.0, math.inf
    m, q = p.mtp_ms, p.plain_ms
    if not (math.isfinite(m.mean) and math.isfinite(q.mean)) or m.mean <= 0:
        return 1.0, math.inf
    value = q.mean / m.mean
    return value, value * math.hypot(q.se / q.mean, m.se / m.mean)


def _finite(e: Estimate | None) -> float | None:
    return e.mean if e is not None and math.isfinite(e.mean) else None


def _tps(e: Estimate | None) -> float | None:
    return 1000.0 / e.mean if e is not None and math.isfinite(e.mean) and e.mean > 0 else None
