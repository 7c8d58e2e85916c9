"""The finish rule among instances of several speculation configs: each priced at its own
config's predicted speedup for the request."""

from __future__ import annotations

from dataclasses import replace

import pytest

from classifiers.copying import CopySignals
from classifiers.features import Features
from classifiers.scores import Scores
from policies.decision.ask import Ask, BackendState, State
from policies.decision.decide import decide
from policies.decision.finish import InFlight, normal_draw, spread_draws
from policies.decision.route import decide_route
from policies.learner.routemodel import RouteEvidence, RouteModel, gather
from policies.policyfile.machine import NEUTRAL
from policies.policyfile.pools import pool_context
from policies.policyfile.schema import Assume, Policy
from tests.policies.decision.test_decide import FEATURES
from tests.policies.learner.test_arms import _spread, _state
from tests.policies.learner.test_configs import _log

BASE = replace(FEATURES, max_tokens=96, prompt_tokens=20)
EDIT = replace(BASE, code_fences=1, code_line_share=0.8, prompt_tokens=900,
               copy=CopySignals(quoted_code_share=0.85, quoted_chars=3500, edit_verb=True))
TRIO = (BackendState("plain-0", "plain"), BackendState("ngram-0", "mtp", spec="ngram-simple"),
        BackendState("draft-0", "mtp", spec="draft"))
POLICY = Policy(routes={c: "auto" for c in ("agent", "code", "technical", "prose", "chat")},
                default="auto")
LEARNED = RouteModel(NEUTRAL, gather(_log(12), Assume()))


@pytest.mark.parametrize(("features", "cls", "backend"), [
    (EDIT, "code", "ngram-0"),
    (BASE, "prose", "plain-0"),
])
def test_each_request_goes_to_the_config_that_finishes_it_soonest(
    features: Features, cls: str, backend: str
) -> None:
    ask = Ask(features, Scores(cls, "en", {cls: 0.9, "technical": 0.1}))
    decision = decide(ask, State(POLICY, LEARNED, TRIO))
    assert decision.backend == backend
    assert decision.config == {"ngram-0": "ngram-simple", "plain-0": "plain"}[backend]
    assert set(decision.speedups) == {"ngram-simple", "draft"}
    assert decision.speedups["draft"] < 0.8


@pytest.mark.parametrize(("remaining_ms", "backend"), [(300.0, "ngram-0"), (20_000.0, "plain-0")])
def test_an_edit_waits_for_a_busy_ngram_instance_only_while_that_is_sooner(
    remaining_ms: float, backend: str
) -> None:
    ask = Ask(EDIT, Scores("code", "en", {"code": 1.0}))
    queue = (InFlight(predicted_ms=remaining_ms + 100.0, elapsed_ms=100.0),)
    busy = (TRIO[0], TRIO[1]._replace(inflight=1, queue=queue), TRIO[2])
    assert decide(ask, State(POLICY, LEARNED, busy)).backend == backend


def test_the_first_config_draws_as_before_and_the_others_draw_apart() -> None:
    z = normal_draw(0.9)
    assert spread_draws(0.0, 3) == [0.0, 0.0, 0.0]
    first, *draws = spread_draws(z, 6)
    assert first == z and len(draws) == 5
    assert len({round(d, 6) for d in [z, *draws]}) == 6
    assert all(-6 < d < 6 for d in draws)


def test_with_nothing_measured_a_thin_config_is_drawn_and_the_median_is_plain() -> None:
    cold = RouteModel(NEUTRAL, RouteEvidence())
    ask = Ask(EDIT, Scores("code", "en", {"code": 1.0}))
    # ties go to plain at the posterior median: a draft costs power for nothing
    assert decide(ask, State(POLICY, cold, TRIO)).backend == "plain-0"
    explored = {decide(replace(ask, draw=u), State(POLICY, cold, TRIO),
                       z=normal_draw(u)).backend for u in (0.02, 0.3, 0.5, 0.7, 0.98)}
    assert {"ngram-0", "draft-0"} & explored


# --- configs as a route's arms: one variant, priced per request -------------------------------

POOLED = tuple(b._replace(pools=frozenset({b.spec})) if b.spec else b for b in TRIO)


@pytest.mark.parametrize(("features", "backend", "arm"), [
    (EDIT, "ngram-0", "ngram-simple"),
    (BASE, "plain-0", "plain"),
])
def test_configs_listed_as_arms_are_chosen_per_request_by_the_finish_rule(
    features: Features, backend: str, arm: str
) -> None:
    policy = Policy.model_validate({"routes": {"code": {"arms": ["ngram-simple", "plain"]}}},
                                   context=pool_context(["ngram-simple", "draft"]))
    # per class, the sums say plain decodes faster: within a variant they do not decide
    arms = _state(_spread("plain", 40, 20.0, 5000.0, cls="code")
                  + _spread("ngram-simple", 40, 12.0, 9000.0, cls="code"))
    assert arms.stats["code/*"]["plain"].n == 40
    routed = decide_route(Ask(features, Scores("code", "en", {"code": 1.0})),
                          State(policy, LEARNED, POOLED, arms=arms))
    assert (routed.decision.backend, routed.arm) == (backend, arm)
    assert routed.decision.reason == "arm" and routed.rewrite is None
    assert "draft-0" not in routed.decision.finish_ms  # not among the route's arms
    assert routed.order[0] == backend and set(routed.order) == {"plain-0", "ngram-0", "draft-0"}


def test_an_auto_route_records_the_config_that_served_as_its_arm() -> None:
    ask = Ask(EDIT, Scores("code", "en", {"code": 1.0}))
    routed = decide_route(ask, State(POLICY, LEARNED, POOLED))
    assert (routed.decision.backend, routed.arm, routed.pool) == ("ngram-0", "ngram-simple", "mtp")
