"""The route model: evidence as additive sums, the speedup bandit's posterior, the priors."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest

from policies.decision.finish import InFlight, queued_ms
from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, gather, observe
from policies.learner.speedup import INPUTS, PriorTerms, class_inputs
from policies.policyfile.machine import GB10_DS4, LOCAL_PAIR, NEUTRAL, MachinePrior, PriorFile
from policies.policyfile.schema import Assume
from tests.policies import synthetic

ASSUME = Assume()
# An agent turn the classifier misreads as chat: tools attached, tool calls in the history.
MISREAD_AGENT = {"n_tools": 7, "history_has_tool": True, "n_messages": 9, "prompt_tokens": 900}
PLAIN_CHAT = {"n_messages": 1, "prompt_tokens": 12}
CHAT_SCORES = {"chat": 0.9, "prose": 0.1}


def _x(features: dict[str, object], scores: dict[str, float]) -> np.ndarray:
    return np.array(request_inputs(features, scores))


def _served(features: dict[str, object], scores: dict[str, float], speedup: float,
            rng: random.Random, i: int) -> list[Observation]:
    """One request served on each instance at GB10 pace (68 ms plain step)."""
    inputs = request_inputs(features, scores)
    jitter = math.exp(rng.gauss(0.0, 0.05))
    base = Observation("chat", "en", 0.3, "plain", 64, 1000 / 68.0, inputs=inputs,
                       ts=f"t{i:05d}")
    return [base, replace(base, profile="mtp", decode_tps=1000 / 68.0 * speedup * jitter)]


def test_outcomes_over_the_features_correct_what_the_classifier_misreads() -> None:
    rng = random.Random(3)
    evidence = RouteEvidence()
    prior = RouteModel(GB10_DS4, evidence)
    assert prior.speedup(_x(MISREAD_AGENT, CHAT_SCORES)).speedup < 1.0  # read as chat
    for i in range(40):
        for o in _served(MISREAD_AGENT, CHAT_SCORES, 1.094, rng, i):
            evidence = observe(evidence, o, ASSUME)
        for o in _served(PLAIN_CHAT, CHAT_SCORES, 0.963, rng, i):
            evidence = observe(evidence, o, ASSUME)
    model = RouteModel(GB10_DS4, evidence)
    agent = model.speedup(_x(MISREAD_AGENT, CHAT_SCORES))
    chat = model.speedup(_x(PLAIN_CHAT, CHAT_SCORES))
    assert agent.speedup > 1.05 and chat.speedup < 0.99
    assert agent.sd < prior.speedup(_x(MISREAD_AGENT, CHAT_SCORES)).sd / 2


def test_online_updates_equal_the_batch_sums_and_survive_json() -> None:
    observations = list(synthetic.observations(synthetic.GB10, 300, seed=5))
    online = RouteEvidence()
    for o in observations:
        online = observe(online, o, ASSUME)
    batch = gather(observations, ASSUME)
    assert np.allclose(online.greedy_of("mtp").xtx, batch.greedy_of("mtp").xtx)
    assert np.allclose(online.greedy_of("mtp").xty, batch.greedy_of("mtp").xty)
    assert online.plain == batch.plain and online.through == batch.through
    assert online.completion == batch.completion and online.prefill == batch.prefill
    assert online.length.keys() == batch.length.keys()
    assert sum(e.n for e in batch.length.values()) == len(observations)
    for cls, sums in batch.length.items():
        assert online.length[cls].n == sums.n and np.allclose(online.length[cls].xty, sums.xty)
    halves = gather(observations[:100], ASSUME).merged(gather(observations[100:], ASSUME))
    assert np.allclose(halves.greedy_of("mtp").xtx, batch.greedy_of("mtp").xtx)
    back = RouteEvidence.from_json(json.loads(json.dumps(batch.as_json())))
    assert back == batch
    bad = {**batch.as_json(), "greedy": {**batch.as_json()["greedy"], "inputs": ["bias"]}}
    with pytest.raises(ValueError, match="inputs"):
        RouteEvidence.from_json(bad)


def test_the_plain_step_prefill_and_reply_length_are_learned_over_the_prior() -> None:
    observations = [replace(o, prompt_tokens=500, ttft_ms=250.0)
                    for o in synthetic.observations(synthetic.GB10, 200, seed=6, tokens=120)]
    queued = [replace(o, ttft_ms=9000.0, queued=True) for o in observations[:50]]
    model = RouteModel(LOCAL_PAIR, gather(observations + queued, ASSUME))
    assert model.t_plain_ms == pytest.approx(68.0, rel=0.02)  # the GB10's, not the CPU prior's
    # 0.5 ms/token measured, the prior's 5.0 worth three requests; the queued ones skipped
    assert 0.5 < model.prefill_ms_per_token("plain") < 0.7
    assert model.completion_tokens(class_inputs("agent"), 0) == pytest.approx(120, rel=0.05)
    assert model.completion_tokens(class_inputs("agent"), 64) == 64
    # a typical request over every class: 120 tokens, the prior's worth three requests
    assert model.typical_tokens == pytest.approx(
        (250 * 120 + 3 * LOCAL_PAIR.completion_tokens) / 253)
    assert RouteModel(LOCAL_PAIR, RouteEvidence()).typical_tokens == LOCAL_PAIR.completion_tokens


def test_the_prefill_rate_weighs_each_prompt_by_its_tokens() -> None:
    # in a batch, a short prompt's first token waits for its neighbours' prompts: 40 tokens,
    # 2 s (50 ms a token); a 270-token prompt alone takes 20 ms a token. Weighted by tokens the
    # rate is the time over the tokens (as the report's), not the mean of the two figures.
    base = Observation("prose", "en", 0.3, "plain", 100, 20.0, ts="t0")
    short = [replace(base, prompt_tokens=40, ttft_ms=2000.0, ts=f"s{i}") for i in range(4)]
    long = [replace(base, prompt_tokens=270, ttft_ms=5400.0, ts=f"l{i}") for i in range(4)]
    evidence = gather(short + long, ASSUME)
    rate = RouteModel(NEUTRAL, evidence).prefill_ms_per_token("plain")
    measured = (4 * 2000.0 + 4 * 5400.0) / (4 * 40 + 4 * 270)
    assert rate == pytest.approx(measured, rel=0.1) and rate < 0.8 * (50.0 + 20.0) / 2
    assert evidence.prefill["plain"].n == 4 * 40 + 4 * 270  # its tokens
    online = RouteEvidence()
    for o in short + long:
        online = observe(online, o, ASSUME)
    assert online.prefill == evidence.prefill
    # sums written when each prompt weighed one are not read as tokens: relearned from the log
    older = {**evidence.as_json(), "prefill": {"plain": [8, 280.0, 9000.0]}}
    del older["prefill_by_token"]
    assert RouteEvidence.from_json(older).prefill == {}


def test_sampled_requests_have_their_own_speedup() -> None:
    sampled = [replace(o, temperature=0.7) for o in synthetic.observations(
        synthetic.CPU_PAIR, 200, seed=8)]
    model = RouteModel(GB10_DS4, gather(sampled, ASSUME))
    assert model.evidence.greedy_of("mtp").n == 0 and model.evidence.sampled_of("mtp").n > 50
    assert model.sampled_speedup().speedup < 0.8
    assert model.speedup(_x(PLAIN_CHAT, {"code": 1.0})).speedup == pytest.approx(1.065)


def test_a_prior_file_is_validated() -> None:
    prior = PriorFile(class_speedup={"agent": 1.2}, t_plain_ms=30).prior("machine.yaml")
    assert prior.log_speedup("agent") == pytest.approx(math.log(1.2))
    assert prior.log_speedup("prose") == 0.0
    with pytest.raises(ValueError, match="class_speedup"):
        PriorFile(class_speedup={"poetry": 1.2}, t_plain_ms=30).prior("x")
    assert len(INPUTS) == len(request_inputs({}, None))


@pytest.mark.parametrize(
    ("inflight", "expected"),
    [
        ((), 0.0),
        ((InFlight(1000.0, 400.0),), 600.0),
        ((InFlight(1000.0, 2000.0),), 200.0),  # overran: still busy, a fifth more
        ((InFlight(1000.0, 100.0), InFlight(3000.0, 900.0)), 2100.0 + 1000.0),
    ],
)
def test_queued_work_is_served_one_at_a_time_oldest_first(
    inflight: tuple[InFlight, ...], expected: float
) -> None:
    assert queued_ms(inflight) == pytest.approx(expected)


def test_a_model_built_with_the_priors_terms_kept_is_the_same_model() -> None:
    rng = random.Random(3)
    observations = [o for i in range(20) for o in _served(MISREAD_AGENT, CHAT_SCORES, 1.2, rng, i)]
    evidence = gather(observations, ASSUME)
    fresh = RouteModel(GB10_DS4, evidence)
    kept = RouteModel(GB10_DS4, evidence, PriorTerms.of(GB10_DS4))
    assert np.array_equal(fresh.posterior.cov, kept.posterior.cov)
    assert np.array_equal(fresh.posterior.mean, kept.posterior.mean)
    x = _x(MISREAD_AGENT, CHAT_SCORES)
    assert fresh.speedup(x) == kept.speedup(x)
    assert kept.speedup(x).n == 20


def _paced(profile: str, ms_per_token: float, i: int, scores: dict[str, float]) -> Observation:
    return Observation("chat", "en", 0.3, profile, 32, 1000 / ms_per_token,
                       inputs=request_inputs(PLAIN_CHAT, scores), ts=f"t{i:05d}")


@pytest.mark.parametrize("prior", [GB10_DS4, NEUTRAL, LOCAL_PAIR])
def test_the_speedup_is_measured_between_the_instances_not_against_the_priors_pace(
    prior: MachinePrior,
) -> None:
    # the pair: plain 6.9 ms/token (2 requests), mtp 17.8 (58 requests); under the
    # GB10 prior (68 ms) the old model believed mtp 1.43x faster
    log = [_paced("plain", 6.9, i, CHAT_SCORES) for i in range(2)]
    log += [_paced("mtp", 17.8, 2 + i, CHAT_SCORES) for i in range(58)]
    model = RouteModel(prior, gather(log, ASSUME))
    assert model.t_plain_ms == pytest.approx(6.9, rel=0.1)
    speedup = model.speedup(_x(PLAIN_CHAT, CHAT_SCORES))
    assert speedup.speedup == pytest.approx(6.9 / 17.8, rel=0.15)
    assert speedup.sample(3.0) < 1.0  # not even a 3-sd draw sends it to the slower instance


def test_three_observations_of_a_pace_far_from_the_prior_win_over_it() -> None:
    for ms in (68.0 / 3, 68.0 * 3, 6.9):
        model = RouteModel(GB10_DS4, gather([_paced("plain", ms, i, CHAT_SCORES)
                                             for i in range(3)], ASSUME))
        assert model.t_plain_ms == pytest.approx(ms, rel=0.05)
        assert model.pace_source("plain") == "log"


def test_an_instance_never_measured_leaves_the_speedup_uncertain() -> None:
    # only mtp measured: the speedup is as uncertain as the plain pace, so the Thompson draw
    # sends requests to plain; once plain is measured, it is known
    mtp_only = [_paced("mtp", 17.8, i, CHAT_SCORES) for i in range(60)]
    thin = RouteModel(NEUTRAL, gather(mtp_only, ASSUME)).speedup(_x(PLAIN_CHAT, CHAT_SCORES))
    both = mtp_only + [_paced("plain", 6.9, 60 + i, CHAT_SCORES) for i in range(5)]
    known = RouteModel(NEUTRAL, gather(both, ASSUME)).speedup(_x(PLAIN_CHAT, CHAT_SCORES))
    assert thin.sd > 0.3 and known.sd < 0.06
    assert known.speedup == pytest.approx(6.9 / 17.8, rel=0.1)


def test_probes_are_counted_as_the_source_of_a_pace() -> None:
    probe = replace(_paced("plain", 6.9, 0, CHAT_SCORES), probe=True)
    model = RouteModel(GB10_DS4, gather([probe], ASSUME))
    assert model.pace_source("plain") == "probe" and model.pace_source("mtp") == "prior"
    assert model.evidence.probes == {"plain": 1}
    later = RouteModel(GB10_DS4, observe(model.evidence, _paced("plain", 7.0, 1, CHAT_SCORES),
                                         ASSUME))
    assert later.pace_source("plain") == "log" and later.evidence.probes == {"plain": 1}
    assert RouteEvidence.from_json(json.loads(json.dumps(later.evidence.as_json()))) == later.evidence


@pytest.mark.parametrize(
    ("ask", "expected"),
    [
        ({"edit_verb": True}, 0.8),  # asked to edit what it quotes
        ({"reemit_format": True}, 0.8),  # asked to give it back whole
        ({}, 0.0),  # quotes it, asks neither: a question about it
    ],
)
def test_a_reply_that_copies_what_is_quoted_is_told_by_the_ask(
    ask: dict[str, bool], expected: float
) -> None:
    features = {"quoted_text_share": 0.8, "quoted_chars": 600, **ask}
    inputs = dict(zip(INPUTS, request_inputs(features, None), strict=True))
    assert inputs["edit_of_quoted"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("features", "expected"),
    [
        ({"rename_sites": 4, "quoted_chars": 900}, 4 * 100 / 900),  # a local variable renamed
        ({"rename_sites": 1, "quoted_chars": 3500}, 100 / 3500),  # a module's function renamed
        ({"rename_sites": 90, "quoted_chars": 900}, 1.0),  # capped: broken everywhere
        ({"rename_sites": 2}, 1.0),  # sites with nothing quoted: all of it breaks
        ({"quoted_chars": 900}, 0.0),  # no rename
    ],
)
def test_where_a_rename_breaks_the_copy_is_a_density(features: dict[str, int], expected: float) -> None:
    inputs = dict(zip(INPUTS, request_inputs(features, None), strict=True))
    assert inputs["copy_breaks"] == pytest.approx(expected)
