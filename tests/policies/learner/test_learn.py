"""The pure learner on synthetic logs from known machines: does it route each class the way the
cost model says it should?"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from decisionlog.records import parse_line
from policies.learner.learn import Observation, fit_costs, learn
from policies.learner.learned import (
    Belief,
    BinEstimate,
    acceptance_for_speedup,
    predicted_speedup,
)
from policies.learner.observation import observation_from_record
from policies.learner.speedup import INPUTS
from policies.policyfile.schema import Assume
from tests.policies import synthetic
from tests.policies.synthetic import CPU_PAIR, GB10, Machine


def _bin(belief: Belief, p_spec: float) -> BinEstimate:
    return next(b for b in belief.bins if b.lo <= p_spec < b.hi)


def _routes(state_key_p: list[tuple[str, float]], machine: Machine, drafts: bool) -> dict[str, str]:
    obs = list(synthetic.observations(machine, 2000, seed=1))
    if not drafts:
        obs = [synthetic.without_draft_stats(o) for o in obs]
    state = learn(obs, min_samples=30)
    routes = {}
    for key, p_spec in state_key_p:
        belief = state.beliefs[key]
        assert belief.trusted
        routes[key] = "mtp" if _bin(belief, p_spec).speedup > 1.0 else "plain"
    return routes


GB10_EXPECTED = {
    "agent/en": "mtp",
    "code/en": "mtp",
    "technical/en": "mtp",
    "prose/en": "plain",
    "chat/zh": "plain",
}


@pytest.mark.parametrize("drafts", [True, False], ids=["cost_model", "tps_ratio"])
@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (GB10, GB10_EXPECTED),
        (CPU_PAIR, {key: "plain" for key in GB10_EXPECTED}),
    ],
    ids=["gb10", "cpu_pair"],
)
def test_learner_routes_each_class_like_the_machine_says(
    machine: Machine, expected: dict[str, str], drafts: bool
) -> None:
    # every p_spec a request of the class might carry must get the same route
    for p_spec in (0.05, 0.35, 0.65, 0.95):
        keys = [(key, p_spec) for key in expected]
        assert _routes(keys, machine, drafts) == expected


@pytest.mark.parametrize(
    ("key", "published"),
    [(f"{c}/{lang}", s) for (c, lang), s in synthetic.GB10_SPEEDUP.items()],
)
def test_predicted_speedup_recovers_the_published_number(key: str, published: float) -> None:
    state = learn(synthetic.observations(GB10, 3000, seed=2))
    belief = state.beliefs[key]
    assert belief.method == "cost_model"
    assert belief.speedup == pytest.approx(published, abs=0.012)
    assert 0 < belief.se < 0.01


def test_cost_fit_recovers_the_step_costs() -> None:
    cost = fit_costs(list(synthetic.observations(GB10, 3000, seed=3)))
    assert cost is not None
    assert cost.t_plain_ms == pytest.approx(68.0, rel=0.01)
    assert cost.t_verify_ms == pytest.approx(112.0, rel=0.04)
    assert cost.t_skip_ms == pytest.approx(72.0, rel=0.06)
    assert cost.fit_error < 0.03


@pytest.mark.parametrize(
    ("n", "trusted"),
    [(20, False), (400, True)],
)
def test_few_samples_are_not_trusted(n: int, trusted: bool) -> None:
    state = learn(synthetic.observations(GB10, n, seed=4), min_samples=30)
    assert state.beliefs["agent/*"].trusted is trusted


def test_threshold_falls_where_speedup_crosses_one_inside_a_class() -> None:
    # acceptance rises with p_spec; break-even acceptance sits at p_spec ~ 0.5
    rng = random.Random(5)
    even = acceptance_for_speedup(1.0, 0.56, 68.0, 72.0, 112.0)
    obs: list[Observation] = []
    for i in range(4000):
        p_spec = (i % 100) / 100 + 0.005
        machine = Machine(68.0, 72.0, 112.0, 0.56, {("code", "en"): even + (p_spec - 0.5) * 0.5})
        obs.extend(synthetic.observations(machine, 1, seed=rng.randrange(10**9)))
        obs[-1] = Observation(**{**_fields(obs[-1]), "p_spec": p_spec})
    state = learn(obs)
    code = state.beliefs["code/en"]
    crossing = next(b.lo for b in code.bins if b.speedup > 1.0)
    assert crossing in (0.4, 0.5)
    assert _bin(code, 0.15).speedup < 1 < _bin(code, 0.85).speedup


def _fields(o: Observation) -> dict[str, object]:
    return {name: getattr(o, name) for name in Observation.__dataclass_fields__}


@pytest.mark.parametrize(
    ("a", "share", "expected"),
    [(0.0, 1.0, 68 / 112), (1.0, 1.0, 2 * 68 / 112), (0.5, 0.0, 68 / 72)],
)
def test_speedup_formula(a: float, share: float, expected: float) -> None:
    assert predicted_speedup(a, share, 68.0, 72.0, 112.0) == pytest.approx(expected)


def test_acceptance_for_speedup_inverts_the_formula() -> None:
    a = acceptance_for_speedup(1.094, 0.56, 68.0, 72.0, 112.0)
    assert predicted_speedup(a, 0.56, 68.0, 72.0, 112.0) == pytest.approx(1.094)


def test_sampled_and_thinking_requests_are_not_learned() -> None:
    obs = list(synthetic.observations(GB10, 400, seed=7))
    sampled = [Observation(**{**_fields(o), "temperature": 0.7}) for o in obs]
    thinking = [Observation(**{**_fields(o), "thinking": True}) for o in obs]
    unsaid = [Observation(**{**_fields(o), "temperature": -1.0}) for o in obs]
    state = learn(obs + sampled + thinking + unsaid)
    assert (state.n_observations, state.n_skipped) == (400, 1200)
    state = learn(obs + sampled + thinking + unsaid, assume=Assume(temperature=0.0))
    assert (state.n_observations, state.n_skipped) == (800, 800)


def _record(**outcome: object) -> dict[str, object]:
    base: dict[str, object] = {
        "status": 200,
        "profile": "mtp",
        "completion_tokens": 100,
        "decode_tps": 14.0,
        "backend_tps": 15.0,
        "draft_n": 50,
        "draft_accepted": 45,
        "prompt_tokens": 300,
        "cached_tokens": 100,
        "ttft_ms": 900.0,
    }
    base.update(outcome)
    return {
        "schema_version": 1,
        "features": {"temperature": 0.0, "thinking": False, "thinking_unset": True},
        "classifier": {"class": "code", "lang": "en"},
        "decision": {"profile": "mtp", "p_spec": 0.8},
        "outcome": base,
    }


def observation_from_log(data: dict[str, object]) -> Observation | None:
    """The observation of one log line holding `data`, through the decision log's own parser."""
    line = {"ts": "2026-11-30T00:00:00.000Z", "request_id": "r", "endpoint": "chat", **data}
    record = parse_line(json.dumps(line))
    assert record is not None
    return observation_from_record(record)


def test_observation_from_log_reads_a_record() -> None:
    obs = observation_from_log(_record())
    assert obs is not None and obs.inputs is not None
    assert obs == Observation(
        "code", "en", 0.8, "mtp", 100, 15.0, 50, 45, 300, 100, 900.0, 0.0, None,
        inputs=obs.inputs, ts="2026-11-30T00:00:00.000Z", arm="mtp", measured_tps=14.0,
    )
    assert obs.paced and not obs.timed  # no total time logged: the arms learn nothing of it
    assert obs.inputs[0] == 1.0 and len(obs.inputs) == len(INPUTS)


@pytest.mark.parametrize(("cut", "timed"), [
    ({}, True),
    ({"client_disconnected": True}, False),
    ({"error": "mtp-0: stream broke: ServerDisconnectedError"}, False),  # a truncated answer
    ({"unobserved": True}, False),  # the picker stopped while it went on: its end unseen
])
def test_only_an_answer_that_ended_whole_times_its_arm(cut: dict[str, object],
                                                       timed: bool) -> None:
    obs = observation_from_log(_record(total_ms=5000.0, **cut))
    assert obs is not None and obs.paced  # its decode rate up to the cut is still a rate
    assert obs.timed is timed


@pytest.mark.parametrize(
    ("decision", "classifier", "p_spec"),
    [
        ({"p_spec": 0.8}, {}, 0.8),  # the decision's: the one p_spec there is
        ({"p_spec": 0.8}, {"p_spec": 0.2}, 0.8),  # it wins over an older classifier's
        ({"p_spec": None}, {"p_spec": 0.2}, 0.2),  # a record written before it was the decision's
        ({}, {"p_spec": 0.2}, 0.2),
        ({"p_spec": None}, {}, 0.5),  # neither: the middle
        ({"p_spec": 1.7}, {}, 1.0),
    ],
)
def test_the_learner_reads_the_decisions_p_spec_and_an_older_records_classifiers(
    decision: dict[str, object], classifier: dict[str, object], p_spec: float
) -> None:
    record = _record()
    record["decision"] = {"profile": "mtp", **decision}
    record["classifier"] = {"class": "code", "lang": "en", **classifier}
    obs = observation_from_log(record)
    assert obs is not None and obs.p_spec == pytest.approx(p_spec)


@pytest.mark.parametrize(
    ("outcome", "observed"),
    [
        ({"status": 502}, False),
        ({"completion_tokens": 0}, False),
        ({"decode_tps": "fast", "backend_tps": None}, False),  # a wrong type: nothing read
        ({"backend_tps": None, "decode_tps": None}, True),  # no rate: no pace
        ({"profile": "", "draft_n": None}, True),  # no profile: no pace
        ({"completion_tokens": 1}, True),  # one token: no decode to time
    ],
)
def test_observation_from_log_skips_what_teaches_nothing(
    outcome: dict[str, object], observed: bool
) -> None:
    record = _record(**outcome)
    if outcome.get("profile") == "":
        record["decision"] = {}
    obs = observation_from_log(record)
    assert (obs is not None) is observed
    assert obs is None or not obs.paced


@pytest.mark.parametrize(
    ("outcome", "decision", "rate"),
    [
        ({}, {}, 100 / 8.0),  # 100 tokens in 8 s, prefill included
        ({"backend_tps": 30.0}, {}, 30.0),  # the engine's own rate first
        ({"decode_tps": 20.0}, {}, 20.0),  # then the proxy's, from a stream
        ({}, {"queue_ms": 2500.0}, None),  # it waited for a slot: its wall time is not decode
        ({"client_disconnected": True}, {}, None),  # cut: its end was never timed
        ({"error": "vllm-ngram: stream broke"}, {}, None),
        ({"unobserved": True}, {}, None),
        ({"total_ms": None}, {}, None),
        ({"completion_tokens": 1}, {}, None),
    ],
)
def test_an_answer_that_came_whole_without_a_rate_is_paced_by_its_wall_time(
    outcome: dict[str, object], decision: dict[str, object], rate: float | None
) -> None:
    # vLLM and SGLang report no decode rate, and a non-streamed answer's tokens all come at
    # once: without its wall rate the route model never learned from such traffic
    record = _record(**{"backend_tps": None, "decode_tps": None, "ttft_ms": None,
                        "total_ms": 8000.0, **outcome})
    record["decision"] = {"profile": "mtp", "p_spec": 0.8, **decision}
    obs = observation_from_log(record)
    if rate is None:
        assert obs is None or not obs.paced
    else:
        assert obs is not None and obs.paced
        assert obs.decode_tps == pytest.approx(rate)


@pytest.mark.parametrize(
    ("outcome", "first_ms"),
    [
        ({"ttft_ms": 900.0}, 900.0),  # streamed: the proxy's own
        ({}, 10_000.0 - 159 / 32.0 * 1000.0),  # whole: its time less the engine's decode
        ({"backend_tps": None}, None),  # no engine rate: no way to part prefill from decode
        ({"backend_tps": 10.0}, None),  # a decode longer than the answer: nothing left to read
        ({"client_disconnected": True}, None),  # cut: its end was never timed
        ({"total_ms": None}, None),
    ],
)
def test_an_answer_that_came_whole_times_its_prefill_as_its_time_less_its_decode(
    outcome: dict[str, object], first_ms: float | None
) -> None:
    # llama-server not streamed: the prefill of a 270-token edit on one CPU thread (~5 s of a
    # 10 s answer) was never learned, and every edit was predicted half its time
    record = _record(**{"ttft_ms": None, "backend_tps": 32.0, "decode_tps": None,
                        "completion_tokens": 160, "total_ms": 10_000.0, **outcome})
    obs = observation_from_log(record)
    assert obs is not None
    assert obs.ttft_ms == (None if first_ms is None else pytest.approx(first_ms))


@pytest.mark.parametrize(
    ("features", "assume", "greedy"),
    [
        ({"temperature": 0.0}, Assume(), True),
        ({"temperature": 0.7}, Assume(), False),
        ({"temperature": -1}, Assume(temperature=1.0), False),
        ({"temperature": -1}, Assume(temperature=0.0), True),
        ({"temperature": 0.0, "thinking": True}, Assume(), False),
        ({"temperature": 0.0, "thinking_unset": True}, Assume(thinking=True), False),
    ],
)
def test_greedy_follows_the_policy_assumptions(
    features: dict[str, object], assume: Assume, greedy: bool
) -> None:
    record = _record()
    record["features"] = features
    obs = observation_from_log(record)
    assert obs is not None and obs.greedy(assume) is greedy


def test_prefill_rate_is_measured_per_uncached_token() -> None:
    rows = [_record(), _record(profile="plain", draft_n=None, draft_accepted=None)]
    obs = [o for o in map(observation_from_log, rows) if o is not None]
    cost = fit_costs(obs)
    assert cost is not None
    assert cost.prefill_ms_per_token == {"mtp": 4.5, "plain": 4.5}
    assert cost.cached_share == {"mtp": pytest.approx(1 / 3), "plain": pytest.approx(1 / 3)}
    assert math.isfinite(cost.t_verify_ms)


@pytest.mark.parametrize(
    ("machine", "trusted", "loses"),
    [(CPU_PAIR, True, True), (GB10, False, False)],
    ids=["cpu_pair", "gb10"],
)
def test_a_class_never_tried_on_mtp_is_decided_only_where_the_machine_forbids_it(
    machine: Machine, trusted: bool, loses: bool
) -> None:
    # prose is only ever served plain; the other classes show what the machine does
    obs = [
        o for o in synthetic.observations(machine, 1000, seed=8)
        if not (o.cls == "prose" and o.profile == "mtp")
    ]
    belief = learn(obs, min_samples=30).beliefs["prose/en"]
    assert belief.n_mtp == 0
    assert belief.trusted is trusted
    if loses:
        assert all(b.speedup < 1 and (1 - b.speedup) / b.se >= 3 for b in belief.bins)
    else:
        assert math.isinf(belief.se)


def test_one_sided_evidence_is_not_trusted_without_the_other_arm() -> None:
    only_mtp = [o for o in synthetic.observations(GB10, 500, seed=9) if o.profile == "mtp"]
    state = learn(only_mtp, min_samples=30)
    assert state.cost is None
    assert not any(b.trusted for b in state.beliefs.values())


LOCAL_POOL = Path(__file__).parents[1] / "data" / "local_pair_qwen.jsonl"


def _local_pair_observations() -> list[Observation]:
    """Measured by `bench/learning.py local --save-pool` on the 2-core CPU pair (Qwen2.5-Coder
    1.5B, 0.5B draft at depth 1): 40 mixed requests, each served by both instances."""
    out = []
    for line in LOCAL_POOL.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for profile, arm in row["arms"].items():
            out.append(Observation(
                row["cls"], row["lang"], row["p_spec"], profile, arm["tokens"],
                arm["tokens"] / arm["decode_ms"] * 1000, arm["draft_n"], arm["draft_accepted"],
            ))
    return out


def test_real_local_pair_measurements_route_everything_to_plain() -> None:
    state = learn(_local_pair_observations(), min_samples=5)
    assert state.cost is not None and state.cost.t_verify_ms > 2 * state.cost.t_plain_ms
    assert state.beliefs  # every class the classifier saw
    for belief in state.beliefs.values():
        assert belief.trusted and all(b.speedup < 1.0 for b in belief.bins), belief.key
        assert belief.speedup < 0.7
