"""`specroute policy explain`: the rules, the learned thresholds and the evidence behind them,
and the way one request goes through them, as lines of text.

Pure: formatting only.
"""

from __future__ import annotations

from collections.abc import Mapping

from classifiers.features import Features
from classifiers.scores import Scores
from policies.decide import Decision
from policies.explore import cold_arm, exploration_probability
from policies.learned import NEVER, Belief, CostFit, LearnedState, acceptance_for_speedup
from policies.pools import route_text
from policies.schema import Policy


def describe_policy(policy: Policy) -> list[str]:
    o, a = policy.overrides, policy.assume

    def pairs(table: Mapping[str, str]) -> str:
        return ", ".join(f"{k} -> {v}" for k, v in sorted(table.items())) or "(none)"

    routes = ", ".join(f"{c}: {route_text(r)}" for c, r in policy.routes.items()) or "(none)"
    formats = {str(k): v for k, v in o.response_format.items()}
    lines = [
        "Rules, in the order they are checked (the first that applies wins):",
        (
            f"  1. overrides.header           x-specroute-route: mtp|plain "
            f"({'honoured' if o.header else 'ignored'})"
        ),
        f"  2. overrides.models           {pairs(o.models)}",
        f"  3. overrides.api_keys         {pairs(o.api_keys)}",
        (
            f"  4. overrides.sampled          temperature > 0 -> {o.sampled or '(no rule)'}"
            f"  (unset temperature taken as {a.temperature:g})"
        ),
        (
            f"  5. overrides.thinking         thinking mode -> {o.thinking or '(no rule)'}"
            f"  (unset thinking taken as {'on' if a.thinking else 'off'})"
        ),
        f"  6. overrides.response_format  {pairs(formats)}",
        f"  7. routes                     {routes}; default: {policy.default}",
    ]
    for lang, table in sorted(policy.languages.items()):
        per_lang = ", ".join(f"{c}: {route_text(r)}" for c, r in table.items())
        lines.append(f"     languages.{lang:<13} {per_lang}")
    tables = [policy.routes, *policy.languages.values()]
    if any(not isinstance(r, str) for table in tables for r in table.values()):
        lines.append(
            "     pool routes: a pin (1-3) wins; otherwise the route's rewrite is applied first,"
            " 4-6 judge the request as sent, and apply only to the mtp, plain and auto pools"
        )
    e, s = policy.exploration, policy.stickiness
    lines += [
        f"  classifier failure -> {policy.fallback}",
        (
            f"Exploration: up to {e.rate:.0%} of auto-routed requests go against the belief;"
            f" a learned value counts after {e.min_samples} requests on each arm it needs."
        ),
        (
            f"Stickiness: {'on' if s.enabled else 'off'}; a conversation is forgotten after"
            f" {s.ttl_s:g} s idle; at most {s.max_conversations} remembered."
        ),
    ]
    return lines


def describe_state(state: LearnedState, policy: Policy, path: str) -> list[str]:
    if not state.beliefs:
        return [f"Learned state ({path}): nothing learned yet; auto routes use p_spec >= 0.5."]
    lines = [
        (
            f"Learned state ({path}, created {state.created or '?'}): "
            f"{state.n_observations} requests learned from, {state.n_skipped} skipped "
            "(sampled or thinking decoding)."
        )
    ]
    if state.cost is not None:
        lines += _describe_cost(state.cost)
    lines.append(
        f"  {'class/lang':<14} {'route':<6} {'method':<10} {'mtp':>5} {'plain':>5} "
        f"{'accept':>6} {'spec':>5} {'mtp t/s':>7} {'plain t/s':>9} {'speedup':>15} "
        f"{'threshold':>9} {'break-even':>10}  trusted"
    )
    for key, b in sorted(state.beliefs.items()):
        route = policy.route_for(b.cls, b.lang)[0] if b.lang != "*" else "-"
        lines.append(
            f"  {key:<14} {route:<6} {b.method:<10} {b.n_mtp:>5} {b.n_plain:>5} "
            f"{_num(b.acceptance, '.3f'):>6} {_num(b.spec_share, '.2f'):>5} "
            f"{_num(b.mtp_tps, '.1f'):>7} {_num(b.plain_tps, '.1f'):>9} "
            f"{b.speedup:>7.3f} ± {b.se:<5.3f} {_threshold(b.threshold):>9} "
            f"{_break_even(b, state.cost):>10}  {'yes' if b.trusted else 'no'}"
        )
    return lines


def _describe_cost(cost: CostFit) -> list[str]:
    prefill = ", ".join(f"{p} {ms:.2f}" for p, ms in sorted(cost.prefill_ms_per_token.items()))
    cached = ", ".join(f"{p} {share:.0%}" for p, share in sorted(cost.cached_share.items()))
    return [
        (
            f"  step costs: plain {cost.t_plain_ms:.1f} ms, gate-skipped cycle"
            f" {cost.t_skip_ms:.1f} ms, verified cycle {cost.t_verify_ms:.1f} ms (fit error"
            f" {cost.fit_error:.1%}; {cost.n_plain} plain, {cost.n_mtp} mtp requests)"
        ),
        (
            f"  prefill ms per uncached prompt token: {prefill or '(not measured)'}; mean reply"
            f" {cost.mean_completion_tokens:.0f} tokens"
        ),
        f"  prompt tokens served from the KV cache (stickiness at work): {cached or '-'}",
    ]


def describe_request(
    policy: Policy,
    learned: LearnedState,
    features: Features,
    scores: Scores,
    decision: Decision,
) -> list[str]:
    temperature = "unset" if features.temperature < 0 else f"{features.temperature:g}"
    thinking = "unset" if features.thinking_unset else ("on" if features.thinking else "off")
    lines = [
        (
            f"Request: class {scores.top_class} (lang {scores.lang}), p_spec"
            f" {scores.p_spec:.2f}; temperature {temperature}, thinking {thinking},"
            f" ~{features.prompt_tokens} prompt tokens"
        ),
        f"Decision: {decision.profile} by {decision.rule} (reason {decision.reason}"
        + (f", threshold {_threshold(decision.threshold)})" if decision.threshold is not None
           else ")"),
    ]
    belief = learned.belief(scores.top_class, scores.lang)
    if decision.reason in ("learned", "p_spec"):
        if belief is not None:
            b = belief.bin_for(scores.p_spec)
            lines.append(
                f"  evidence ({belief.key}, p_spec bin [{b.lo:.1f}, {b.hi:.1f})): speedup"
                f" {b.speedup:.3f} ± {b.se:.3f} from {b.n_mtp} mtp and {b.n_plain} plain"
                f" requests{'' if belief.trusted else ' (not yet trusted)'}"
            )
            if b.acceptance is not None and b.spec_share is not None:
                lines.append(
                    f"  in that bin: acceptance {b.acceptance:.3f} on verified cycles,"
                    f" {b.spec_share:.0%} of cycles speculated ({belief.method})"
                )
        cold = cold_arm(learned, decision.profile, policy.exploration.min_samples)
        chance = exploration_probability(belief, scores.p_spec, policy.exploration.rate, cold=cold)
        lines.append(f"  chance of being routed against the belief to explore: {chance:.1%}"
                     + (" (cold start: too few samples of the other instance)" if cold else ""))
    return lines


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _threshold(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if value >= NEVER else f"{value:.2f}"


def _break_even(b: Belief, cost: CostFit | None) -> str:
    """The acceptance at which this class's speculation would break even."""
    if b.method != "cost_model" or cost is None or not b.spec_share:
        return "-"
    a = acceptance_for_speedup(1.0, b.spec_share, cost.t_plain_ms, cost.t_skip_ms, cost.t_verify_ms)
    return f"{a:.3f}" if a <= 1 else ">1"
