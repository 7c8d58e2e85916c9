"""The pure decision: rule order, then the soonest predicted finish over the allowed instances
(queue, prefill less the cached prefix, tokens at the instance's pace for this request)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifiers.copying import CopySignals
from classifiers.features import Features
from classifiers.scores import Scores
from policies.decision.ask import Ask, BackendState, State
from policies.decision.decide import Decision, decide, failover_order
from policies.decision.decide import request_inputs as decision_inputs
from policies.decision.finish import THIN_BELOW, InFlight, normal_draw
from policies.decision.pins import RequestContext
from policies.decision.sessions import Held
from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, gather
from policies.policyfile.machine import GB10_DS4, LOCAL_PAIR, NEUTRAL
from policies.policyfile.schema import Exploration, Overrides, Policy
from tests.policies import synthetic

FEATURES = Features(
    n_tools=0, tool_schema_chars=0, tool_choice_required=False, tool_choice_none=False,
    last_role_tool=False, last_role_assistant=False, history_has_tool=False, n_messages=1,
    code_fences=0, code_line_share=0.0, cjk_share=0.0, json_mode=False, temperature=0.0,
    greedy=True, thinking=False, thinking_unset=True, max_tokens=64, prompt_tokens=100,
    last_user_tokens=20, system_chars=0,
)
IDLE = (BackendState("mtp-0", "mtp"), BackendState("plain-0", "plain"))
POLICY = Policy(routes={c: "auto" for c in ("agent", "code", "technical", "prose", "chat")},
                default="auto")
GB10 = RouteModel(GB10_DS4, RouteEvidence())
CPU = RouteModel(LOCAL_PAIR, RouteEvidence())


def _scores(cls: str, lang: str = "en") -> Scores:
    return Scores(cls, lang, {cls: 1.0})


def _busy(name: str, profile: str, remaining_ms: float) -> BackendState:
    return BackendState(name, profile, inflight=1,
                        queue=(InFlight(predicted_ms=remaining_ms + 100.0, elapsed_ms=100.0),))


@pytest.mark.parametrize(
    ("policy", "features", "context", "profile", "reason"),
    [
        (POLICY, FEATURES, RequestContext(header_route="plain"), "plain", "header"),
        (POLICY.model_copy(update={"overrides": Overrides(models={"r1": "plain"})}), FEATURES,
         RequestContext(model="r1"), "plain", "model"),
        (POLICY, replace(FEATURES, temperature=0.7, greedy=False), RequestContext(), "plain",
         "sampled"),
        (POLICY, replace(FEATURES, thinking=True), RequestContext(), "plain", "thinking"),
        (POLICY.model_copy(update={"routes": {"agent": "plain"}}), FEATURES, RequestContext(),
         "plain", "class"),
        (POLICY, FEATURES, RequestContext(), "mtp", "finish"),
    ],
)
def test_rules_pin_a_profile_before_the_finish_rule(
    policy: Policy, features: Features, context: RequestContext, profile: str, reason: str
) -> None:
    d = decide(Ask(features, _scores("agent"), context), State(policy, GB10, IDLE))
    assert (d.profile, d.reason) == (profile, reason)
    assert d.backend == f"{profile}-0"


@pytest.mark.parametrize(
    ("model", "cls", "lang", "backend"),
    [
        (GB10, "agent", "en", "mtp-0"),  # +9.4% on the GB10
        (GB10, "technical", "en", "mtp-0"),
        (GB10, "prose", "en", "plain-0"),  # -3.6%
        (GB10, "chat", "zh", "plain-0"),
        (CPU, "agent", "en", "plain-0"),  # speculation loses on every class on 2 CPU cores
        (CPU, "code", "en", "plain-0"),
    ],
)
def test_a_cold_start_follows_the_machine_prior_not_a_coin(
    model: RouteModel, cls: str, lang: str, backend: str
) -> None:
    d = decide(Ask(FEATURES, _scores(cls, lang)), State(POLICY, model, IDLE))
    assert d.backend == backend and not d.explored
    assert d.speedup == pytest.approx(model.prior.class_speedup[cls], rel=1e-6)
    assert d.finish_ms[backend] == min(d.finish_ms.values())


def test_a_request_never_waits_on_a_busy_instance_while_a_slower_idle_one_is_sooner() -> None:
    busy_plain = (BackendState("mtp-0", "mtp"), _busy("plain-0", "plain", 2000.0))
    d = decide(Ask(FEATURES, _scores("prose")), State(POLICY, GB10, busy_plain))
    assert d.backend == "mtp-0"  # 3.6% slower, but 2 s sooner
    busy_mtp = (_busy("mtp-0", "mtp", 2000.0), BackendState("plain-0", "plain"))
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, busy_mtp))
    assert d.backend == "plain-0"


def test_an_instance_about_to_free_up_wins_when_its_pace_makes_up_the_wait() -> None:
    # 64 tokens of agent work: mtp saves ~64 * 68 * (1 - 1/1.094) ~ 370 ms over plain; both
    # instances hold one request, so the same number is expected to queue behind this one
    backends = (_busy("mtp-0", "mtp", 300.0), _busy("plain-0", "plain", 10.0))
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, backends))
    assert d.backend == "mtp-0" and d.queue_ms == pytest.approx(300.0)
    backends = (_busy("mtp-0", "mtp", 1000.0), _busy("plain-0", "plain", 10.0))
    assert decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, backends)).backend == "plain-0"


def test_a_busy_instance_counts_the_requests_expected_to_wait_behind_this_one() -> None:
    # mtp would finish this request ~320 ms sooner, but one request is expected to queue behind
    # it there (as many as it finds), and that one would wait its whole service
    backends = (_busy("mtp-0", "mtp", 50.0), BackendState("plain-0", "plain"))
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, backends))
    assert d.finish_ms["mtp-0"] < d.finish_ms["plain-0"] - 300.0
    assert d.backend == "plain-0"


def test_pools_of_any_size() -> None:
    backends = (_busy("mtp-0", "mtp", 3000.0), BackendState("mtp-1", "mtp"),
                _busy("plain-0", "plain", 3000.0), _busy("plain-1", "plain", 10.0))
    assert decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, backends)).backend == "mtp-1"
    pinned = decide(Ask(FEATURES, _scores("agent"), RequestContext(header_route="plain")), State(POLICY, GB10, backends))
    assert pinned.backend == "plain-1"


def test_the_cached_prefix_counts_against_moving_a_conversation() -> None:
    long_prompt = replace(FEATURES, prompt_tokens=20_000)
    held = Held("plain-0", "plain", turns=3, prompt_tokens=19_900, last_seen=0.0)
    d = decide(Ask(long_prompt, _scores("agent"), held=held), State(POLICY, GB10, IDLE))
    assert d.backend == "plain-0"  # re-prefilling 20k tokens elsewhere costs more than +9.4%
    unsticky = POLICY.model_copy(update={"stickiness": POLICY.stickiness.model_copy(
        update={"enabled": False})})
    assert decide(Ask(long_prompt, _scores("agent"), held=held), State(unsticky, GB10, IDLE)).backend == "mtp-0"


# High draws, all of which make mtp look faster than plain for a prose turn.
HIGH_DRAWS = [normal_draw(1.0 - 0.005 * (k + 0.5) / 400) for k in range(400)]


def _explored_share(ask: Ask, state: State, draws: list[float] = HIGH_DRAWS,
                    to: str = "mtp-0") -> float:
    """The share of `draws` whose decision explored (each to `to`)."""
    decisions = [decide(ask, state, z=z) for z in draws]
    assert all(d.explored == (d.backend == to) for d in decisions)
    return sum(d.explored for d in decisions) / len(decisions)


def _gb10(classes: tuple[str, ...], tokens: dict[str, int] | None = None) -> RouteModel:
    """A GB10 measured on these classes (both instances, not thin), each class's answers
    `tokens` long where given."""
    log = [replace(o, completion_tokens=(tokens or {}).get(o.cls, o.completion_tokens))
           for o in synthetic.observations(synthetic.GB10, 200, seed=4) if o.cls in classes]
    model = RouteModel(GB10_DS4, gather(log, POLICY.assume))
    assert min(model.measured("plain"), model.measured("mtp")) >= THIN_BELOW
    return model


def test_thompson_draws_explore_only_within_the_regret_bound() -> None:
    # prose: -3.6% predicted on mtp; a high draw makes mtp look faster
    gb10 = _gb10(("prose", "agent"))
    ask = Ask(FEATURES, _scores("prose"))
    median = decide(ask, State(POLICY, gb10, IDLE), z=0.0)
    assert median.backend == "plain-0" and not median.explored
    regret = median.finish_ms["mtp-0"] / median.finish_ms["plain-0"] - 1.0
    assert 0.03 < regret < 0.06
    generous = POLICY.model_copy(update={"exploration": Exploration(max_regret=0.1)})
    assert _explored_share(ask, State(generous, gb10, IDLE)) == 1.0  # within the bound: always
    assert _explored_share(ask, State(POLICY, gb10, IDLE)) == 0.0  # beyond the 2% bound
    off = POLICY.model_copy(update={"exploration": Exploration(max_regret=0.0)})
    assert _explored_share(ask, State(off, gb10, IDLE)) == 0.0


def test_a_draw_for_a_measured_plain_instance_is_not_followed() -> None:
    # technical: +4.4% predicted on mtp; a low draw makes plain look faster, but sending the
    # request there would teach nothing (plain has no speedup to learn; its pace is measured)
    gb10 = _gb10(("technical", "agent"))
    generous = POLICY.model_copy(update={"exploration": Exploration(max_regret=0.1)})
    low = [normal_draw(0.005 * (k + 0.5) / 400) for k in range(400)]
    ask = Ask(FEATURES, _scores("technical"))
    assert _explored_share(ask, State(generous, gb10, IDLE), low, to="plain-0") == 0.0
    # while plain is thin (never measured), a draw for it is followed
    thin = RouteModel(GB10_DS4, gather([o for o in synthetic.observations(
        synthetic.GB10, 200, seed=4, mtp_share=1.0) if o.cls == "technical"], POLICY.assume))
    assert thin.measured("plain") < THIN_BELOW
    assert _explored_share(ask, State(generous, thin, IDLE), low, to="plain-0") == 1.0


def test_a_draw_on_an_answer_longer_than_a_typical_one_has_a_tighter_bound() -> None:
    # the same ~3.7% regret on a prose turn, under a 6% bound: always explored while prose
    # answers are as long as the others; 1.5x the typical length or more, the bound is cut as
    # much, below the regret, and a high draw is not followed
    policy = POLICY.model_copy(update={"exploration": Exploration(max_regret=0.06)})
    alike = _gb10(("prose", "agent"))
    longer = _gb10(("prose", "agent"), tokens={"agent": 20})
    ask = Ask(replace(FEATURES, max_tokens=0), _scores("prose"))  # as long as the class's
    tokens = longer.completion_tokens(decision_inputs(ask.features, ask.scores), 0)
    assert tokens > 1.5 * longer.typical_tokens
    assert _explored_share(ask, State(policy, alike, IDLE)) == 1.0
    median = decide(ask, State(policy, longer, IDLE), z=0.0)
    regret = median.finish_ms["mtp-0"] / median.finish_ms["plain-0"] - 1.0
    bound = 0.06 * longer.typical_tokens / tokens
    assert bound < regret
    assert _explored_share(ask, State(policy, longer, IDLE)) == 0.0


def test_what_the_log_teaches_overrules_the_prior() -> None:
    # A CPU pair's outcomes under the GB10 prior: agent turns on mtp are far slower.
    cpu_log = list(synthetic.observations(synthetic.CPU_PAIR, 60, seed=2))
    model = RouteModel(GB10_DS4, gather(cpu_log, POLICY.assume))
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, model, IDLE))
    assert d.backend == "plain-0" and d.speedup is not None and d.speedup < 0.8


def test_sampled_requests_go_where_they_finish_soonest_when_not_pinned() -> None:
    free = POLICY.model_copy(update={"overrides": Overrides(sampled=None, thinking=None)})
    sampled = replace(FEATURES, temperature=0.8, greedy=False)
    backends = (BackendState("mtp-0", "mtp"), _busy("plain-0", "plain", 500.0))
    d = decide(Ask(sampled, _scores("agent")), State(free, GB10, backends))
    assert (d.backend, d.reason) == ("mtp-0", "finish")
    assert d.speedup == pytest.approx(GB10_DS4.sampled_speedup)


def test_no_healthy_instance_of_the_pinned_profile_fails_over() -> None:
    backends = (BackendState("mtp-0", "mtp", healthy=False), BackendState("plain-0", "plain"))
    d = decide(Ask(FEATURES, _scores("agent"), RequestContext(header_route="mtp")), State(POLICY, GB10, backends))
    assert (d.backend, d.reason) == ("plain-0", "header+unhealthy_failover")
    none = tuple(b._replace(healthy=False) for b in IDLE)
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, none))
    assert (d.backend, d.reason) == ("", "no_healthy_backend")


def test_the_record_carries_the_prediction() -> None:
    d = decide(Ask(FEATURES, _scores("agent")), State(POLICY, GB10, IDLE))
    record = d.as_dict()
    assert record["backend"] == "mtp-0" and record["queue_ms"] == 0.0
    assert record["tokens"] == 64.0  # max_tokens caps the expected reply
    assert set(record["finish_ms"]) == {"mtp-0", "plain-0"}  # type: ignore[arg-type]
    # how far the reply's length may stray, and its time there at max_tokens: what the pool
    # prices its time left by while it runs
    assert record["tokens_sd"] == round(GB10.completion_spread(np.array(d.inputs)), 3) > 0.0
    assert d.most_ms == pytest.approx(d.service_ms)  # the expected reply is max_tokens here
    longer = decide(Ask(replace(FEATURES, max_tokens=4096), _scores("agent")),
                    State(POLICY, GB10, IDLE))
    assert longer.most_ms > longer.service_ms
    unbounded = decide(Ask(replace(FEATURES, max_tokens=0), _scores("agent")),
                       State(POLICY, GB10, IDLE))
    assert unbounded.most_ms == 0.0  # no cap


def test_the_decision_priced_the_inputs_the_learner_reads_from_its_record() -> None:
    # scores with more than the log's 4 decimals: the decision reads them as the log has them
    scores = Scores("code", "en", {"code": 0.712345678, "chat": 0.287654321})
    d = decide(Ask(FEATURES, scores), State(POLICY, GB10, IDLE))
    logged = json.loads(json.dumps({"features": FEATURES.as_dict(), "scores": scores.as_dict()}))
    assert d.inputs is not None
    assert list(d.inputs) == list(request_inputs(logged["features"], logged["scores"]["scores"]))
    sampled = decide(Ask(replace(FEATURES, temperature=0.7, greedy=False), scores),
                     State(POLICY, GB10, IDLE))
    # a sampled request's speedup reads no input, its length does: the learner reads them too
    assert sampled.inputs is not None
    assert list(sampled.inputs) == list(d.inputs)


_COUNTS = st.integers(min_value=0, max_value=200_000)
_SHARES = st.sampled_from([0.0, 1e-4, 0.3333, 0.5, 0.9999, 1.0])
_COPY = st.builds(CopySignals, quoted_code_share=_SHARES, quoted_json_share=_SHARES,
                  quoted_text_share=_SHARES, quoted_chars=_COUNTS, edit_verb=st.booleans(),
                  reemit_format=st.booleans(), rename_sites=st.integers(0, 64))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.builds(replace, st.just(FEATURES), n_tools=st.integers(0, 40),
                 last_role_tool=st.booleans(), history_has_tool=st.booleans(),
                 code_fences=st.integers(0, 9), code_line_share=_SHARES, cjk_share=_SHARES,
                 json_mode=st.booleans(), prompt_tokens=_COUNTS, n_messages=st.integers(1, 60),
                 copy=_COPY),
       st.dictionaries(st.sampled_from(["agent", "code", "technical", "prose", "chat"]),
                       st.floats(0.0, 1.0), max_size=5))
def test_the_inputs_read_from_the_features_are_those_read_from_their_record(
    features: Features, probabilities: dict[str, float]
) -> None:
    scores = Scores("code", "en", probabilities)
    logged = json.loads(json.dumps({"features": features.as_dict(), "scores": scores.as_dict()}))
    read = decision_inputs(features, scores)
    assert read.tobytes() == request_inputs(logged["features"], logged["scores"]["scores"]).tobytes()


def test_failover_order_puts_the_choice_first_then_healthy_same_profile() -> None:
    backends = (BackendState("mtp-0", "mtp"), BackendState("mtp-1", "mtp", inflight=2),
                BackendState("plain-0", "plain"), BackendState("plain-1", "plain", healthy=False))
    order = failover_order(Decision("mtp", "mtp-1", "finish", "routes.code"), backends)
    assert order == ["mtp-1", "mtp-0", "plain-0", "plain-1"]


@pytest.mark.parametrize("temperature", [0.0, 0.7, -1.0])
def test_the_predicted_speedup_is_the_models_for_the_requests_inputs(temperature: float) -> None:
    """A sampled request's speedup reads no input (none is built for it); a greedy one's reads
    the request's features and scores: the same figures as asking the model with both."""
    from policies.decision.decide import _greedy_decoding, predict_speedup
    from policies.learner.speedup import inputs

    features = replace(FEATURES, temperature=temperature, greedy=temperature == 0.0)
    scores = _scores("code")
    model = RouteModel(GB10_DS4, gather(synthetic.observations(synthetic.CPU_PAIR, 200, seed=3),
                                           POLICY.assume))
    greedy = _greedy_decoding(POLICY, features)
    assert greedy == (temperature == 0.0)
    x = inputs(features.as_dict(), scores.scores)
    before = model.speedup(x) if greedy else model.sampled_speedup()
    assert predict_speedup(POLICY, features, scores, model) == before


def _paced(profile: str, ms_per_token: float, i: int) -> Observation:
    return Observation("chat", "en", 0.3, profile, 32, 1000 / ms_per_token,
                       inputs=request_inputs(FEATURES.as_dict(), {"chat": 1.0}), ts=f"t{i:05d}")


def _share_to(model: RouteModel, name: str, n: int = 200) -> float:
    draws = [normal_draw((i + 0.5) / n) for i in range(n)]
    chosen = [decide(Ask(FEATURES, _scores("chat")), State(POLICY, model, IDLE), z=z).backend
              for z in draws]
    return chosen.count(name) / n


def test_an_instance_judged_from_the_prior_alone_gets_measured() -> None:
    # mtp measured 60 times, plain never: the mean is the prior's guess of the plain pace (it
    # says mtp is faster), but the draw is wide and, the plain instance being thin, followed
    mtp_only = [_paced("mtp", 17.8, i) for i in range(60)]
    thin = RouteModel(NEUTRAL, gather(mtp_only, POLICY.assume))
    assert decide(Ask(FEATURES, _scores("chat")), State(POLICY, thin, IDLE)).backend == "mtp-0"
    assert _share_to(thin, "plain-0") > 0.1
    # measured: plain is 2.6x faster, and a clear winner is not explored away from
    measured = RouteModel(NEUTRAL, gather(
        mtp_only + [_paced("plain", 6.9, 60 + i) for i in range(THIN_BELOW)], POLICY.assume))
    assert _share_to(measured, "plain-0") == 1.0


def test_a_thin_instance_that_loses_clearly_is_rarely_drawn() -> None:
    # one probe each (thin both), mtp 2.6x slower: the draw almost never picks it
    probed = RouteModel(NEUTRAL, gather([_paced("plain", 6.9, 0), _paced("mtp", 17.8, 1)],
                                        POLICY.assume))
    assert _share_to(probed, "mtp-0") <= 0.01
