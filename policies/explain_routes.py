"""`specroute policy explain`, for pool routes: the pool and rewrite a request gets, and what
the arms of each route have measured.

Pure: formatting only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.decision.arm_choice import metric_for, rank_arms, variant_stats, variants_of
from policies.decision.route import Routed
from policies.learner.arms import ArmsState
from policies.policyfile.pools import PoolRoute
from policies.policyfile.rewrite import apply_rewrite
from policies.policyfile.schema import Policy


def describe_route(
    routed: Routed, body: Mapping[str, Any], endpoint: str, engines: Mapping[str, str]
) -> list[str]:
    """The pool, the arm and the rewrite, with the body members it would write."""
    decision = routed.decision
    lines = [
        f"Pool: {routed.pool} (arm {routed.arm}; instance {decision.backend or 'none'}"
        + (", explored" if decision.explored else "") + ")"
    ]
    if routed.rewrite is None:
        return lines + ["Rewrite: none (the request goes upstream as the client sent it)"]
    engine = engines.get(decision.backend, "openai")
    applied = apply_rewrite(routed.rewrite, body, endpoint=endpoint, engine=engine)
    lines.append(f"Rewrite: {applied.label} (for a {engine} backend)")
    for path in applied.paths:
        value = _dig(applied.body, path)
        lines.append(f"  {path}: {value!r}")
    if not applied.changed:
        lines.append("  (the request already says so: sent unchanged)")
    return lines


def describe_arms(state: ArmsState, policy: Policy) -> list[str]:
    """Per route with several arms: each arm's requests, decode rate and time to the answer,
    best first by the route's metric."""
    routes = _arm_routes(policy)
    if not routes:
        return []
    lines = ["", f"Arms ({state.n_observations} requests measured):"]
    for rule, route, cls, lang in routes:
        variants = variants_of(route.choices)
        leads = [variant[0] for variant in variants]
        named = {variant[0].key: " | ".join(a.key for a in variant) for variant in variants}
        metric = metric_for(leads)
        stats = variant_stats(state, variants, cls, lang, policy.exploration.min_samples, metric)
        ranked = rank_arms(leads, stats, metric) if stats else leads
        by = "decode rate" if metric == "decode_tps" else "time to the answer"
        lines.append(f"  {rule} (compared on {by}; arms joined by | send the same request, "
                     "the soonest predicted finish picks among them per request):"
                     if len(variants) < len(route.choices) else f"  {rule} (compared on {by}):")
        for arm in ranked:
            s, name = stats.get(arm.key), named[arm.key]
            if s is None:
                lines.append(f"    {name:<48} no requests yet")
                continue
            lines.append(
                f"    {name:<48} {s.n:>5} requests  {s.decode_tps:7.1f} tok/s"
                f"  {s.total_ms:9.0f} ms to the answer  {s.completion_tokens:7.0f} tokens"
            )
    return lines


def _arm_routes(policy: Policy) -> list[tuple[str, PoolRoute, str, str]]:
    found = [(f"routes.{c}", r, c, "*") for c, r in policy.routes.items()]
    for lang, table in sorted(policy.languages.items()):
        found += [(f"languages.{lang}.{c}", r, c, lang) for c, r in table.items()]
    return [(rule, r, c, lang) for rule, r, c, lang in found
            if isinstance(r, PoolRoute) and len(r.choices) > 1]


def _dig(body: Mapping[str, Any], path: str) -> object:
    node: object = body
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node
