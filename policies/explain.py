"""`specroute policy explain`: the rules, the route model (machine prior, what the log taught,
the speedup model's weights) and the per-class evidence, and the way one request goes through
them, as lines of text.

Pure: formatting only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final

import numpy as np

from classifiers.features import Features
from classifiers.scores import CLASSES, Scores
from policies.decision.decide import Decision
from policies.learner.batch import PRIOR_CURVE, BatchCurve, BatchEvidence
from policies.learner.learned import Belief, CostFit, LearnedState, acceptance_for_speedup
from policies.learner.pace import Pace, paces, prior_note
from policies.learner.routemodel import PLAIN_CONFIG, RouteModel
from policies.learner.speedup import CLASS_INPUTS, INPUTS, MTP_CONFIG, Vector, class_inputs
from policies.policyfile.machine import MachinePrior
from policies.policyfile.pools import PoolRoute, route_text
from policies.policyfile.schema import Policy


def describe_policy(policy: Policy) -> list[str]:
    o, a = policy.overrides, policy.assume

    def pairs(table: Mapping[str, str]) -> str:
        return ", ".join(f"{k} -> {v}" for k, v in sorted(table.items())) or "(none)"

    routes = ", ".join(f"{c}: {route_text(r)}" for c, r in policy.routes.items()) or "(none)"
    formats = {str(k): v for k, v in o.response_format.items()}
    lines = [
        "Rules, in the order they are checked (the first that applies wins):",
        (
            f"  1. overrides.header           x-specroute-route: mtp|plain|a named pool "
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
        ("Then the healthy instance (of the pinned profile or pool, if any) with the soonest"
        " predicted finish: queued work + prefill of the uncached prompt + expected tokens x"
        " per-token time, plus the delay it imposes on as many requests as the instance holds"
        " (as many are expected to come while it is served): that service time, or for as"
        " many as there are idle instances elsewhere what the recent requests lost there."),
        (
            f"Exploration: Thompson draws of the speedup, followed when their expected regret is"
            f" at most {e.max_regret:.1%} of the best choice's cost (of a typical request's,"
            " when the answer is expected longer; within the speedup's spread where the config"
            " was not measured on such requests); never to a measured plain instance."
        ),
    ]
    if any(isinstance(r, PoolRoute) and len(r.choices) > 1 for table in tables
           for r in table.values()):
        lines.append(
            f"Arms: a route's first arm until each has {e.min_samples} requests of the class,"
            f" then the best measured; at most {e.arms_rate:.0%} of its requests try the others."
        )
    lines += [
        (
            f"Prefix cache: {'counted' if s.enabled else 'ignored'}; a conversation is forgotten"
            f" after {s.ttl_s:g} s idle; at most {s.max_conversations} remembered."
        ),
    ]
    return lines


def describe_model(model: RouteModel, configs: Iterable[str] = ()) -> list[str]:
    """The route model: the prior it starts from and what the log has taught it, per
    speculation config (those measured, and `configs`: the instances' own)."""
    p, e = model.prior, model.evidence
    prefill = ", ".join(f"{k} {model.prefill_ms_per_token(k):.2f} ({v.n} tokens)"
                        for k, v in sorted(e.prefill.items())) or "(prior only)"
    measured = paces(model, configs)
    counts = ", ".join(f"{e.n_config(pace.profile)} on {pace.profile}" for pace in measured)
    lines = [
        f"Route model: prior {p.name} ({p.source}); requests learned from: {counts}"
        + (f" (through {e.through})" if e.through else ""),
        *(_pace_line(pace, p) for pace in measured),
        f"  prefill ms per uncached token: {prefill} (prior {p.prefill_ms_per_token:g})",
        (f"  reply length: a regression over the request's inputs, from {sum(v.n for v in e.length.values())} requests"
         f" (probes aside), each within x{math.exp(math.sqrt(model.length.noise_var)):.2f} of"
         f" its prediction at one sd (prior {p.completion_tokens:g} tokens)"),
    ]
    for pace in measured[1:]:
        lines += _config_lines(model, pace.profile)
    return lines + _batch_lines(model)


# The batches `policy explain` shows each instance's per-token time at.
SHOWN_BATCHES: Final = (1, 2, 4, 8)


def _batch_lines(model: RouteModel) -> list[str]:
    """Each instance's per-token time against its batch, and each speculation config's batch
    term: how its instances' slope differs from the plain instances' (its gain fading, < 0)."""
    curves = {name: model.batch_curve(name) for name in sorted(model.evidence.batch)}
    measured = {name: c for name, c in curves.items() if c.measured}
    if not measured:
        return [("  per-token time against the batch: no record ran in a batch above 1 yet"
                f" (prior: x b^{PRIOR_CURVE.slope:.2f} ± {PRIOR_CURVE.sd:.2f})")]
    lines = ["  per-token time against the batch it decodes in (x its time alone, b^slope):"]
    for name, c in measured.items():
        shown = ", ".join(f"x{c.factor(b):.2f} at {b}" for b in SHOWN_BATCHES)
        lines.append(f"    {name:<18} {shown} (slope {c.slope:.2f} ± {c.sd:.2f}, n={c.n})")
    terms = batch_terms(model.evidence.batch, measured)
    if terms:
        lines.append("  speedup's batch term (config's slope less plain's; < 0: its gain fades): "
                     + ", ".join(f"{k} {v:+.2f}" for k, v in sorted(terms.items())))
    return lines


def batch_terms(sums: Mapping[str, BatchEvidence],
                curves: Mapping[str, BatchCurve]) -> dict[str, float]:
    """Per speculation config, the mean slope of its instances less the plain instances'."""
    by_config: dict[str, list[float]] = {}
    for name, curve in curves.items():
        config = sums[name].config if name in sums else ""
        if config:
            by_config.setdefault(config, []).append(curve.slope)
    plain = by_config.pop(PLAIN_CONFIG, None)
    if not plain:
        return {}
    base = sum(plain) / len(plain)
    return {config: sum(slopes) / len(slopes) - base for config, slopes in by_config.items()}


def _config_lines(model: RouteModel, config: str) -> list[str]:
    """One speculation config's predicted speedups per class and its feature weights."""
    p = model.prior
    lines = [(f"  predicted {config} speedup for a request wholly of one class (median, ± sd"
              " of log):")]
    for cls in CLASSES:
        prediction = model.posterior.predict(class_inputs(cls), config)
        prior = p.class_speedup.get(cls, 1.0) if config == MTP_CONFIG else 1.0
        lines.append(
            f"    {cls:<10} {prediction.speedup:6.3f} ± {prediction.sd:.3f}"
            f"  (prior {prior:.3f}); expected reply"
            f" {model.completion_tokens(class_inputs(cls), 0):.0f} tokens"
        )
    sampled = model.sampled_speedup(config)
    prior_sampled = p.sampled_speedup if config == MTP_CONFIG else 1.0
    lines.append(f"    sampled/thinking {sampled.speedup:.3f} ± {sampled.sd:.3f}"
                 f" (prior {prior_sampled:.3f})")
    weights = model.posterior.weights(config)
    shown = [n for n in INPUTS if n not in CLASS_INPUTS and n != "bias"]
    lines.append(f"  {config} feature weights on log-speedup (± sd): bias"
                 f" {weights['bias'][0]:+.3f} ± {weights['bias'][1]:.3f}; " + ", ".join(
                     f"{n} {weights[n][0]:+.3f} ± {weights[n][1]:.3f}" for n in shown))
    return lines


def _pace_line(pace: Pace, prior: MachinePrior) -> str:
    """One kind of instance's pace: the model's median and 1-sd range, and where it comes from."""
    what = ("plain step" if pace.profile == "plain"
            else f"{pace.profile} step (the average request served there)")
    source = {"prior": "the prior alone, nothing measured yet",
              "probe": f"{pace.probes} startup probe{'s' if pace.probes != 1 else ''}",
              "log": f"{pace.n} requests, {pace.probes} of them startup probes"}[pace.source]
    note = prior_note(prior, pace)
    return (f"  {what} {pace.ms_per_token:.3g} ms/token ({pace.low:.3g}-{pace.high:.3g}, 1 sd;"
            f" prior {pace.prior_ms_per_token:.3g}), from {source}" + (f"; {note}" if note else ""))


def _array(values: list[float]) -> Vector:
    return np.array(values, dtype=np.float64)


def describe_state(state: LearnedState, policy: Policy, path: str) -> list[str]:
    if not state.beliefs:
        return [f"Per-class evidence ({path}): nothing learned yet; the machine prior decides."]
    lines = [
        (
            f"Per-class evidence ({path}, created {state.created or '?'}): "
            f"{state.n_observations} requests learned from, {state.n_skipped} skipped "
            "(sampled or thinking decoding)."
        )
    ]
    if state.cost is not None:
        lines += _describe_cost(state.cost)
    lines.append(
        f"  {'class/lang':<14} {'route':<6} {'method':<10} {'mtp':>5} {'plain':>5} "
        f"{'accept':>6} {'spec':>5} {'mtp t/s':>7} {'plain t/s':>9} {'speedup':>15} "
        f"{'break-even':>10}  trusted"
    )
    for key, b in sorted(state.beliefs.items()):
        route = policy.route_for(b.cls, b.lang)[0] if b.lang != "*" else "-"
        lines.append(
            f"  {key:<14} {route:<6} {b.method:<10} {b.n_mtp:>5} {b.n_plain:>5} "
            f"{_num(b.acceptance, '.3f'):>6} {_num(b.spec_share, '.2f'):>5} "
            f"{_num(b.mtp_tps, '.1f'):>7} {_num(b.plain_tps, '.1f'):>9} "
            f"{b.speedup:>7.3f} ± {b.se:<5.3f} "
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
    features: Features,
    scores: Scores,
    decision: Decision,
) -> list[str]:
    temperature = "unset" if features.temperature < 0 else f"{features.temperature:g}"
    thinking = "unset" if features.thinking_unset else ("on" if features.thinking else "off")
    lines = [
        (
            f"Request: class {scores.top_class} (lang {scores.lang});"
            f" temperature {temperature}, thinking {thinking},"
            f" ~{features.prompt_tokens} prompt tokens"
        ),
        (f"Decision: {decision.backend or '(none)'} ({decision.profile}) by {decision.rule}"
        f" (reason {decision.reason})"),
    ]
    if decision.speedup is not None and decision.speedup_sd is not None:
        lo = decision.speedup * math.exp(-decision.speedup_sd)
        hi = decision.speedup * math.exp(decision.speedup_sd)
        pays = "" if decision.p_spec is None else f", p_spec {decision.p_spec:.2f} that it pays"
        lines.append(f"  predicted mtp speedup {decision.speedup:.3f} (1-sd range {lo:.3f} to"
                     f" {hi:.3f}{pays}); expected reply {decision.tokens:.0f} tokens")
    for name, finish in sorted(decision.finish_ms.items(), key=lambda kv: kv[1]):
        batch = decision.batches.get(name, 1)
        joined = f" (decoding in a batch of {batch})" if batch > 1 else ""
        lines.append(f"  predicted finish on {name}: {finish:.0f} ms{joined}")
    return lines


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _break_even(b: Belief, cost: CostFit | None) -> str:
    """The acceptance at which this class's speculation would break even."""
    if b.method != "cost_model" or cost is None or not b.spec_share:
        return "-"
    a = acceptance_for_speedup(1.0, b.spec_share, cost.t_plain_ms, cost.t_skip_ms, cost.t_verify_ms)
    return f"{a:.3f}" if a <= 1 else ">1"
