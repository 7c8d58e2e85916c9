"""The completion-length regression: per request, not per class, from additive sums."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest

from classifiers.scores import CLASSES
from policies.learner.length import NOISE_SD, LengthModel
from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, gather, observe
from policies.policyfile.machine import NEUTRAL
from policies.policyfile.schema import Assume

ASSUME = Assume()
CODE = {"code": 0.95, "technical": 0.05}
# Both read as code: an edit that returns the quoted module whole, and a question about code.
EDIT = {"n_messages": 1, "prompt_tokens": 300, "code_fences": 1, "code_line_share": 0.8,
        "quoted_code_share": 0.9, "quoted_chars": 900, "edit_verb": True, "reemit_format": True}
QUESTION = {"n_messages": 1, "prompt_tokens": 20, "code_line_share": 0.0}


def _x(features: dict[str, object]) -> np.ndarray:
    return np.array(request_inputs(features, CODE))


def _served(features: dict[str, object], tokens: int, i: int, probe: bool = False,
            cls: str = "code", scores: dict[str, float] = CODE) -> Observation:
    return Observation(cls, "en", 0.5, "plain", tokens, 15.0, inputs=request_inputs(
        features, scores), ts=f"t{i:05d}", probe=probe)


def _mixed(n: int, seed: int) -> list[Observation]:
    """Edits of ~220 tokens and questions of ~25, alternating, a 20% spread on each."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        features, typical = (EDIT, 220) if i % 2 == 0 else (QUESTION, 25)
        out.append(_served(features, max(2, round(typical * math.exp(rng.gauss(0, 0.2)))), i))
    return out


def test_cold_every_request_is_the_priors_typical_completion() -> None:
    model = RouteModel(NEUTRAL, RouteEvidence())
    for features in (EDIT, QUESTION):
        assert model.completion_tokens(_x(features), 0) == pytest.approx(NEUTRAL.completion_tokens)
    assert model.completion_tokens(_x(EDIT), 64) == 64  # the request's max_tokens caps it


def test_one_class_two_lengths_each_request_its_own() -> None:
    log = _mixed(20, seed=1)
    model = RouteModel(NEUTRAL, gather(log, ASSUME))
    edit, question = model.completion_tokens(_x(EDIT), 0), model.completion_tokens(
        _x(QUESTION), 0)
    # the class mean would price both at ~120
    assert edit == pytest.approx(220, rel=0.25)
    assert question == pytest.approx(25, rel=0.35)
    mean = sum(o.completion_tokens for o in log) / len(log)
    assert question < mean / 3 < edit / 1.5


def test_a_wide_spread_of_lengths_is_priced_at_their_mean_not_their_median() -> None:
    rng = random.Random(2)
    tokens = [max(2, round(60 * math.exp(rng.gauss(0, 1.0)))) for _ in range(400)]
    log = [_served(QUESTION, t, i) for i, t in enumerate(tokens)]
    model = RouteModel(NEUTRAL, gather(log, ASSUME))
    predicted = model.completion_tokens(_x(QUESTION), 0)
    median = sorted(tokens)[len(tokens) // 2]
    assert predicted == pytest.approx(sum(tokens) / len(tokens), rel=0.2)
    assert predicted > 1.3 * median
    assert model.length.noise_var == pytest.approx(1.0, rel=0.25)


def test_each_class_has_its_own_spread() -> None:
    # edits (code) return their quote within a few percent; stories (prose) run 14 to 400
    # tokens: one spread for both would inflate the edits and understate the stories' mean
    rng = random.Random(6)
    prose = {"prose": 0.95, "chat": 0.05}
    edits = [_served(EDIT, round(220 * math.exp(rng.gauss(0, 0.05))), i) for i in range(30)]
    stories = [max(2, round(80 * math.exp(rng.gauss(0, 1.3)))) for _ in range(30)]
    told = [_served(QUESTION, t, 100 + i, cls="prose", scores=prose)
            for i, t in enumerate(stories)]
    model = RouteModel(NEUTRAL, gather(edits + told, ASSUME))
    code_var, prose_var = (model.length.class_var[CLASSES.index(c)] for c in ("code", "prose"))
    assert code_var < 0.2 and prose_var > 0.6
    edit = model.completion_tokens(_x(EDIT), 0)
    story = model.completion_tokens(np.array(request_inputs(QUESTION, prose)), 0)
    assert edit == pytest.approx(220, rel=0.15)
    assert story == pytest.approx(sum(stories) / len(stories), rel=0.35)
    assert story > 1.5 * sorted(stories)[len(stories) // 2]


def test_the_spread_is_the_class_s_and_the_weights_uncertainty_at_the_request() -> None:
    # what a busy instance has left is priced from it (finish.time_left)
    rng = random.Random(6)
    prose = {"prose": 0.95, "chat": 0.05}
    edits = [_served(EDIT, round(220 * math.exp(rng.gauss(0, 0.05))), i) for i in range(30)]
    stories = [_served(QUESTION, max(2, round(80 * math.exp(rng.gauss(0, 1.3)))), 100 + i,
                       cls="prose", scores=prose) for i in range(30)]
    cold = RouteModel(NEUTRAL, RouteEvidence())
    model = RouteModel(NEUTRAL, gather(edits + stories, ASSUME))
    edit, story = _x(EDIT), np.array(request_inputs(QUESTION, prose))
    # cold, nothing is known: wider than the noise alone
    assert cold.completion_spread(edit) > NOISE_SD
    # learned: an edit within a few percent (its class's spread, little of the weights'), a
    # story about its class's 1.3
    assert model.completion_spread(edit) < 0.45
    assert model.completion_spread(story) > 1.0
    assert model.completion_spread(story) == pytest.approx(1.3, rel=0.25)
    assert model.completion_spread(edit) < cold.completion_spread(edit)
    # a request unlike any logged one (a huge prompt of casual chat) is known less well
    unlike = np.array(request_inputs({"n_messages": 9, "prompt_tokens": 6000,
                                      "casual_word_share": 0.9}, {"chat": 1.0}))
    assert model.completion_spread(unlike) > model.completion_spread(story)


def test_the_startup_probes_lengths_are_not_learned() -> None:
    # a probe stops at its own max_tokens: that says nothing of what such requests produce
    probes = [_served(EDIT, 64, i, probe=True) for i in range(6)]
    evidence = gather(probes, ASSUME)
    assert evidence.length == {}
    assert RouteModel(NEUTRAL, evidence).completion_tokens(_x(EDIT), 0) == pytest.approx(
        NEUTRAL.completion_tokens)


def test_the_sums_add_up_across_replicas_and_survive_json() -> None:
    log = _mixed(30, seed=3)
    online = RouteEvidence()
    for o in log:
        online = observe(online, o, ASSUME)
    halves = gather(log[:11], ASSUME).merged(gather(log[11:], ASSUME))
    whole = gather(log, ASSUME)
    for evidence in (online, halves):
        assert evidence.length["code"].n == whole.length["code"].n == 30
        assert np.allclose(evidence.length["code"].xtx, whole.length["code"].xtx)
        assert evidence.length["code"].yy == pytest.approx(whole.length["code"].yy)
    back = RouteEvidence.from_json(json.loads(json.dumps(whole.as_json())))
    assert back.length == whole.length
    # sums written before lengths were learned per request load with none learned
    old = {k: v for k, v in whole.as_json().items() if k != "length"}
    assert RouteEvidence.from_json(old).length == {}


def test_a_wild_extrapolation_stays_finite() -> None:
    model = LengthModel(256.0, gather(_mixed(20, seed=4), ASSUME).length)
    far = _x(EDIT) * 1e4
    assert math.isfinite(model.expected(far, 0)) and model.expected(far, 4096) <= 4096
    cold = LengthModel(256.0, {})
    assert cold.noise_var == pytest.approx(NOISE_SD**2)
    assert np.allclose(cold.class_var, NOISE_SD**2)


def test_plain_and_speculating_instances_teach_the_same_length() -> None:
    # the length is the request's, whichever instance served it
    log = _mixed(20, seed=5)
    on_ngram = [replace(o, spec="ngram-simple", profile="mtp") for o in log]
    a, b = gather(log, ASSUME).length, gather(on_ngram, ASSUME).length
    assert a == b
