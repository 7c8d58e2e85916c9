"""The policy commands of the `specroute` CLI: `policy check`, `policy explain`, `learn`.

The edge around the pure core: reads files, prints, reads the clock (to stamp learned state).
`learn` reads the decision log through `decisionlog.readers`, rotated files included.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from classifiers import rules
from classifiers.features import Features, extract
from classifiers.request_view import InvalidRequest, RequestView, view_request
from classifiers.scores import Scores
from decisionlog.readers import read_records
from policies.decide import BackendState, RequestContext, decide
from policies.explain import describe_model, describe_policy, describe_request, describe_state
from policies.observation import observations
from policies.routemodel import RouteModel
from policies.schema import Policy
from policies.store import DEFAULT_POLICY, PolicyStore, learn_to_file, learned_path_for, load_prior
from policies.yamlfile import ConfigError, load_model

Scorer = Callable[[RequestView, Features], Scores]
Formatter: Final = argparse.ArgumentDefaultsHelpFormatter


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    score: Scorer | None = None,
) -> None:
    """Add `policy check`, `policy explain` and `learn` to the CLI. `score` classifies a
    request for `policy explain --request` (default: the rule-based scorer)."""
    scorer = score or rules.score
    policy = subparsers.add_parser(
        "policy", help="check and explain routing policies", formatter_class=Formatter
    )
    verbs = policy.add_subparsers(dest="verb", metavar="VERB", required=True)
    check = verbs.add_parser(
        "check", help="validate a policy file (exit 1 with line-numbered errors)",
        formatter_class=Formatter,
    )
    check.add_argument("file", metavar="FILE", help="the policy YAML to validate")
    check.set_defaults(func=check_command)
    explain = verbs.add_parser(
        "explain", help="show the rules, the route model and the evidence behind it",
        formatter_class=Formatter,
    )
    explain.add_argument("--policy", default=DEFAULT_POLICY, help="policy file")
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
    explain.set_defaults(func=lambda args: explain_command(args, scorer))
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


def check_command(args: argparse.Namespace) -> int:
    try:
        policy = load_model(args.file, Policy)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return 1
    auto = sorted(c for c, r in policy.routes.items() if r == "auto")
    print(f"{args.file}: valid ({len(policy.routes)} class routes, auto: {', '.join(auto) or '-'};"
          f" prior {policy.prior}; exploration regret <= {policy.exploration.max_regret:.1%};"
          f" prefix cache {'counted' if policy.stickiness.enabled else 'ignored'})")
    return 0


def explain_command(args: argparse.Namespace, scorer: Scorer) -> int:
    try:
        store = PolicyStore(args.policy, args.learned)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    lines = describe_policy(store.policy)
    lines += [""] + describe_model(store.snapshot.model)
    lines += [""] + describe_state(store.learned, store.policy, str(store.learned_path))
    if args.request:
        try:
            body = json.loads(Path(args.request).read_text(encoding="utf-8"))
            view = view_request(args.endpoint, body)
        except (OSError, ValueError, InvalidRequest) as exc:
            print(f"{args.request}: cannot read the request: {exc}", file=sys.stderr)
            return 1
        lines += [""] + _explain_request(store.policy, store.snapshot.model, view, scorer)
    print("\n".join(lines))
    return 0


def _explain_request(
    policy: Policy, model: RouteModel, view: RequestView, scorer: Scorer
) -> list[str]:
    """The decision for one request with an idle mtp and an idle plain instance."""
    features = extract(view)
    scores = scorer(view, features)
    backends = (BackendState("mtp", "mtp"), BackendState("plain", "plain"))
    context = RequestContext(model=view.model)
    decision = decide(policy, features, scores, backends, context, model=model)
    return describe_request(features, scores, decision)


def learn_command(args: argparse.Namespace) -> int:
    try:
        policy = load_model(args.policy, Policy)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    try:
        learned_from = list(observations(read_records(args.logs)))
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
    print("\n".join(describe_model(model) + [""] + describe_state(state, policy, str(out))))
    return 0
