"""The policy commands of the `specroute` CLI: `policy check`, `policy explain`, `learn`.

The edge around the pure core: reads files, prints, reads the clock (to stamp learned state).
`learn` reads the decision log through `decisionlog.readers`, rotated files included.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from classifiers import rules
from classifiers.features import Features, extract
from classifiers.request_view import InvalidRequest, RequestView, view_request
from classifiers.scores import Scores
from decisionlog.readers import read_records
from fileio.yamlfile import ConfigError, load_model
from policies.decision.ask import Ask, BackendState, State
from policies.decision.pins import RequestContext
from policies.decision.route import decide_route
from policies.explain import describe_model, describe_policy, describe_request, describe_state
from policies.explain_routes import describe_arms, describe_route
from policies.learner.arms import ArmsState
from policies.learner.observation import Observation, observations
from policies.learner.routemodel import RouteModel
from policies.policyfile.pools import pool_context, pools_named
from policies.policyfile.schema import Policy
from policies.store import (
    DEFAULT_POLICY,
    PolicyStore,
    learn_to_file,
    learned_path_for,
    load_prior,
)

Scorer = Callable[[RequestView, Features], Scores]


@dataclass(frozen=True, slots=True)
class ConfigFacts:
    """What the policy commands need from a config.yaml (read by `router`, injected)."""

    policy: str
    pools: Mapping[str, Sequence[str]]
    backends: tuple[tuple[str, str, str], ...]  # (name, profile, engine)
    replica: str = ""  # with a shared store: this replica's id (its own learned file)


ConfigReader = Callable[[str], ConfigFacts]
Formatter: Final = argparse.ArgumentDefaultsHelpFormatter


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    score: Scorer | None = None,
    read_config: ConfigReader | None = None,
) -> None:
    """Add `policy check`, `policy explain` and `learn` to the CLI. `score` classifies a
    request for `policy explain --request` (default: the rule-based scorer); `read_config`
    reads a config.yaml for `--config` (the pools a policy may name)."""
    scorer = score or rules.score
    configs = read_config or _no_config
    policy = subparsers.add_parser(
        "policy", help="check and explain routing policies", formatter_class=Formatter
    )
    verbs = policy.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", help="validate a policy file (exit 1 with line-numbered errors)",
        formatter_class=Formatter,
    )
    check.add_argument(
        "file", metavar="FILE", nargs="?", default=None,
        help="the policy YAML to validate (default: the --config's policy)",
    )
    check.add_argument(
        "--config", default=None,
        help="config.yaml whose named pools the policy may route to (without it: mtp and "
        "plain only)",
    )
    check.set_defaults(func=lambda args: check_command(args, configs))
    explain = verbs.add_parser(
        "explain", help="show the rules, the route model and the evidence behind it",
        formatter_class=Formatter,
    )
    explain.add_argument(
        "--policy", default=None, help=f"policy file (default: the --config's, else {DEFAULT_POLICY})"
    )
    explain.add_argument(
        "--config", default=None, help="config.yaml: its pools and backends, for --request"
    )
    explain.add_argument(
        "--learned", default=None, help="learned state (default: next to the policy)"
    )
    explain.add_argument(
        "--request", default=None, help="a request body (JSON) to show the decision for"
    )
    explain.add_argument(
        "--endpoint", default="chat", choices=("chat", "completions", "messages", "responses"),
        help="the API the --request body is for",
    )
    explain.set_defaults(func=lambda args: explain_command(args, scorer, configs))
    learn_parser = subparsers.add_parser(
        "learn", help="learn the route model from decision logs", formatter_class=Formatter
    )
    learn_parser.add_argument("logs", nargs="+", metavar="LOG", help="decision log file(s)")
    learn_parser.add_argument(
        "--policy", default=DEFAULT_POLICY,
        help="policy file (its min_samples and assumptions apply)",
    )
    learn_parser.add_argument(
        "--out", default=None, help="learned state to write (default: next to the policy)"
    )
    learn_parser.set_defaults(func=learn_command)


def check_command(args: argparse.Namespace, read_config: ConfigReader) -> int:
    """Validate the policy; with `--config`, its routes may name that config's pools."""
    try:
        facts = read_config(args.config) if args.config else None
        path = args.file or (facts.policy if facts is not None else None)
        if path is None:
            print("specroute policy check: give FILE or --config", file=sys.stderr)
            return 2
        policy = load_model(path, Policy, context=pool_context(facts.pools if facts else ()))
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        if not args.config and any("no pool named" in p for p in exc.problems):
            print("(named pools live in config.yaml: check with --config CONFIG)", file=sys.stderr)
        return 1
    auto = sorted(c for c, r in policy.routes.items() if r == "auto")
    pools = sorted(set(pools_named(policy.routes)) | {
        p for table in policy.languages.values() for p in pools_named(table)
    })
    print(f"{path}: valid ({len(policy.routes)} class routes, auto: {', '.join(auto) or '-'};"
          f" pool routes: {', '.join(pools) or '-'}; prior {policy.prior};"
          f" exploration regret <= {policy.exploration.max_regret:.1%};"
          f" prefix cache {'counted' if policy.stickiness.enabled else 'ignored'})")
    return 0


def explain_command(args: argparse.Namespace, scorer: Scorer, read_config: ConfigReader) -> int:
    try:
        facts = read_config(args.config) if args.config else None
        policy_path = args.policy or (facts.policy if facts is not None else DEFAULT_POLICY)
        learned = args.learned or (learned_path_for(policy_path, facts.replica)
                                   if facts is not None and facts.replica else None)
        store = PolicyStore(policy_path, learned, pools=facts.pools if facts else ())
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    arms = store.learned.arms
    lines = describe_policy(store.policy)
    lines += [""] + describe_model(store.snapshot.model)
    lines += [""] + describe_state(store.learned, store.policy, str(store.learned_path))
    lines += describe_arms(arms, store.policy)
    if args.request:
        try:
            body = json.loads(Path(args.request).read_text(encoding="utf-8"))
            view = view_request(args.endpoint, body)
        except (OSError, ValueError, InvalidRequest) as exc:
            print(f"{args.request}: cannot read the request: {exc}", file=sys.stderr)
            return 1
        lines += [""] + _explain_request(
            store.policy, store.snapshot.model, arms, view, body, args.endpoint, scorer, facts
        )
    print("\n".join(lines))
    return 0


def _explain_request(
    policy: Policy,
    model: RouteModel,
    arms: ArmsState,
    view: RequestView,
    body: dict[str, Any],
    endpoint: str,
    scorer: Scorer,
    facts: ConfigFacts | None,
) -> list[str]:
    """The decision for one request with an idle mtp and an idle plain instance."""
    features = extract(view)
    scores = scorer(view, features)
    backends = _backends(facts)
    context = RequestContext(model=view.model)
    routed = decide_route(Ask(features, scores, context, endpoint),
                          State(policy, model, backends, arms))
    lines = describe_request(features, scores, routed.decision)
    engines = {name: engine for name, _, engine in facts.backends} if facts else {}
    return lines + describe_route(routed, body, endpoint, engines)


def _backends(facts: ConfigFacts | None) -> list[BackendState]:
    """The config's instances (with their pools), or one of each profile without a config."""
    if facts is None:
        return [BackendState("mtp", "mtp"), BackendState("plain", "plain")]
    return [
        BackendState(name, profile, pools=frozenset(
            p for p, members in facts.pools.items() if name in members
        ))
        for name, profile, _ in facts.backends
    ]


def _no_config(path: str) -> ConfigFacts:
    raise ConfigError(path, [f"{path}: --config needs the specroute CLI (router) to read it"])


def learn_command(args: argparse.Namespace) -> int:
    try:
        policy = load_model(args.policy, Policy)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    try:
        learned_from = _observations(args.logs)
    except OSError as exc:
        print(f"specroute learn: cannot read the log: {exc}", file=sys.stderr)
        return 1
    if not learned_from:
        print("specroute learn: no usable records in the log(s); nothing written", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else learned_path_for(args.policy)
    state = learn_to_file(learned_from, policy, out, created=datetime.now(UTC).isoformat())
    try:
        model = RouteModel(load_prior(policy, args.policy), state.evidence)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    print("\n".join(describe_model(model) + [""] + describe_state(state, policy, str(out))
                    + describe_arms(state.arms, policy)))
    return 0


def _observations(logs: list[str]) -> list[Observation]:
    """Everything the learner's accumulators need, in one pass over the logs."""
    return list(observations(read_records(logs)))
