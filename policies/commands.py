"""The policy commands of the `specroute` CLI: `policy check`, `policy explain`, `learn`.

The edge around the pure core: reads files, prints, reads the clock (to stamp learned state).
`router.cli` calls `register(subparsers, read_observations=...)`; the reader of the decision
log is injected because the log's schema lives in `router` (a plain JSON-lines reader is the
default, for logs that are not rotated).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from classifiers import rules
from classifiers.features import Features, extract
from classifiers.request_view import InvalidRequest, RequestView, view_request
from classifiers.scores import Scores
from policies.arms import (
    EMPTY_ARMS,
    ArmObservation,
    ArmsState,
    arm_observation_from_log,
    learn_arms,
)
from policies.armstore import ARMS_SUFFIX, arms_path_for, read_arms, write_arms
from policies.decide import BackendState, RequestContext
from policies.explain import describe_policy, describe_request, describe_state
from policies.explain_routes import describe_arms, describe_route
from policies.learn import Observation, learn, observation_from_log
from policies.learned import LearnedState
from policies.pools import pool_context, pools_named
from policies.route import decide_route
from policies.schema import Policy
from policies.store import LEARNED_SUFFIX, PolicyStore, learned_path_for, write_learned
from policies.yamlfile import ConfigError, load_model

ObservationReader = Callable[[list[str]], Iterable[Observation]]
ArmReader = Callable[[list[str]], Iterable[ArmObservation]]
Scorer = Callable[[RequestView, Features], Scores]


@dataclass(frozen=True, slots=True)
class ConfigFacts:
    """What the policy commands need from a config.yaml (read by `router`, injected)."""

    policy: str
    pools: Mapping[str, Sequence[str]]
    backends: tuple[tuple[str, str, str], ...]  # (name, profile, engine)


ConfigReader = Callable[[str], ConfigFacts]
Formatter: Final = argparse.ArgumentDefaultsHelpFormatter
DEFAULT_POLICY: Final = str(Path(__file__).with_name("default.yaml"))


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    *,
    read_observations: ObservationReader | None = None,
    score: Scorer | None = None,
    read_config: ConfigReader | None = None,
    read_arm_observations: ArmReader | None = None,
) -> None:
    """Add `policy check`, `policy explain` and `learn` to the CLI. `score` classifies a
    request for `policy explain --request` (default: the rule-based scorer); `read_config`
    reads a config.yaml for `--config` (the pools a policy may name)."""
    reader = read_observations or read_jsonl_observations
    arm_reader = read_arm_observations or read_jsonl_arm_observations
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
        "explain", help="show the rules, learned thresholds and their evidence",
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
        "learn", help="learn the thresholds from decision logs", formatter_class=Formatter
    )
    learn_parser.add_argument("logs", nargs="+", metavar="LOG", help="decision log file(s)")
    learn_parser.add_argument(
        "--policy", default=DEFAULT_POLICY,
        help="policy file (its min_samples and assumptions apply)",
    )
    learn_parser.add_argument(
        "--out", default=None, help="learned state to write (default: next to the policy)"
    )
    learn_parser.set_defaults(func=lambda args: learn_command(args, reader, arm_reader))


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
          f" pool routes: {', '.join(pools) or '-'};"
          f" exploration {policy.exploration.rate:.0%};"
          f" stickiness {'on' if policy.stickiness.enabled else 'off'})")
    return 0


def explain_command(args: argparse.Namespace, scorer: Scorer, read_config: ConfigReader) -> int:
    try:
        facts = read_config(args.config) if args.config else None
        policy_path = args.policy or (facts.policy if facts is not None else DEFAULT_POLICY)
        store = PolicyStore(policy_path, args.learned, pools=facts.pools if facts else ())
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    arms = read_arms(arms_path_for(policy_path)) or EMPTY_ARMS
    lines = describe_policy(store.policy)
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
            store.policy, store.learned, arms, view, body, args.endpoint, scorer, facts
        )
    print("\n".join(lines))
    return 0


def _explain_request(
    policy: Policy,
    learned: LearnedState,
    arms: ArmsState,
    view: RequestView,
    body: dict[str, Any],
    endpoint: str,
    scorer: Scorer,
    facts: ConfigFacts | None,
) -> list[str]:
    features = extract(view)
    scores = scorer(view, features)
    backends = _backends(facts)
    context = RequestContext(model=view.model)
    routed = decide_route(
        policy, features, scores, backends, context, endpoint=endpoint, learned=learned, arms=arms
    )
    lines = describe_request(policy, learned, features, scores, routed.decision)
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


def learn_command(args: argparse.Namespace, reader: ObservationReader, arm_reader: ArmReader) -> int:
    try:
        policy = load_model(args.policy, Policy)
    except ConfigError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return 1
    try:
        observations = list(reader(list(args.logs)))
    except OSError as exc:
        print(f"specroute learn: cannot read the log: {exc}", file=sys.stderr)
        return 1
    if not observations:
        print("specroute learn: no usable records in the log(s); nothing written", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else learned_path_for(args.policy)
    state = learn_to_file(observations, policy, out, created=datetime.now(UTC).isoformat())
    arms = learn_arms(arm_reader(list(args.logs)))
    write_arms(_arms_out(out), arms)
    print("\n".join(describe_state(state, policy, str(out)) + describe_arms(arms, policy)))
    return 0


def _arms_out(learned_out: Path) -> Path:
    """Where the arms' stats go: beside the learned state (`x.learned.json` -> `x.arms.json`)."""
    stem = learned_out.name.removesuffix(LEARNED_SUFFIX).removesuffix(".json")
    return learned_out.with_name(stem + ARMS_SUFFIX)


def learn_to_file(
    observations: Iterable[Observation], policy: Policy, out: str | Path, *, created: str
) -> LearnedState:
    """Learn under `policy` and write the state atomically (the store then hot-reloads it).
    The router's background task calls this too (in an executor: it writes a file)."""
    state = learn(
        observations,
        min_samples=policy.exploration.min_samples,
        assume=policy.assume,
        created=created,
    )
    write_learned(out, state)
    return state


def read_jsonl_observations(paths: list[str]) -> Iterator[Observation]:
    """Observations from plain JSON-lines decision logs; lines that are not records are
    skipped."""
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                data = _json_object(line)
                observation = observation_from_log(data) if data is not None else None
                if observation is not None:
                    yield observation


def read_jsonl_arm_observations(paths: list[str]) -> Iterator[ArmObservation]:
    """What the arms' comparison needs, from plain JSON-lines decision logs."""
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                data = _json_object(line)
                observation = arm_observation_from_log(data) if data is not None else None
                if observation is not None:
                    yield observation


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
