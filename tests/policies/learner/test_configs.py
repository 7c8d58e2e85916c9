"""Every speculation config its own arm: one regression learns each config's per-request
speedup against one plain pace, from what each kind of instance measured."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest

from policies.learner.observation import Observation, request_inputs
from policies.learner.routemodel import RouteEvidence, RouteModel, gather, observe
from policies.learner.speedup import MTP_CONFIG, UNLEARNED_SPREAD, Evidence, PriorTerms
from policies.policyfile.machine import GB10_DS4, NEUTRAL
from policies.policyfile.schema import Assume

ASSUME = Assume()
# A code edit that re-emits its quoted module (n-gram lookup copies it), and a story.
EDIT = {"n_messages": 1, "prompt_tokens": 900, "code_fences": 1, "code_line_share": 0.8,
        "quoted_code_share": 0.85, "quoted_chars": 3500, "edit_verb": True}
STORY = {"n_messages": 1, "prompt_tokens": 20}
CODE, PROSE = {"code": 0.9, "technical": 0.1}, {"prose": 0.9, "chat": 0.1}
PLAIN_MS = 68.0
# ms per token of each config, per request kind: n-gram 3.3x on the edit and a little slower on
# the story; the draft model slower on both (this machine's 2 CPU cores).
PACES = {"plain": {"edit": 68.0, "story": 67.0},
         "ngram-simple": {"edit": 20.6, "story": 70.5},
         "draft": {"edit": 110.0, "story": 115.0}}


def _observation(config: str, kind: str, rng: random.Random, i: int) -> Observation:
    features, scores = (EDIT, CODE) if kind == "edit" else (STORY, PROSE)
    ms = PACES[config][kind] * math.exp(rng.gauss(0.0, 0.05))
    return Observation("code" if kind == "edit" else "prose", "en", 0.5,
                       "plain" if config == "plain" else "mtp", 96, 1000.0 / ms,
                       inputs=request_inputs(features, scores), ts=f"t{i:05d}",
                       spec="" if config == "plain" else config)


def _log(n: int, seed: int = 1) -> list[Observation]:
    rng = random.Random(seed)
    return [_observation(config, kind, rng, i) for i in range(n)
            for config in PACES for kind in ("edit", "story")]


def _x(features: dict[str, object], scores: dict[str, float]) -> np.ndarray:
    return np.array(request_inputs(features, scores))


def test_each_config_learns_its_own_speedup_per_request() -> None:
    model = RouteModel(NEUTRAL, gather(_log(12), ASSUME))
    edit, story = _x(EDIT, CODE), _x(STORY, PROSE)
    ngram_edit = model.speedup(edit, "ngram-simple").speedup
    ngram_story = model.speedup(story, "ngram-simple").speedup
    assert ngram_edit == pytest.approx(68.0 / 20.6, rel=0.15)
    assert 0.85 < ngram_story < 1.1
    assert model.speedup(edit, "draft").speedup < 0.7
    assert model.speedup(story, "draft").speedup < 0.65
    # one pace for all: the plain instances' (68 and 65 ms on the two kinds)
    assert 60.0 < model.t_plain_ms < 72.0


def test_a_config_never_measured_is_its_prior_and_measuring_one_leaves_it_so() -> None:
    log = [o for o in _log(10) if o.config != "draft"]
    model = RouteModel(NEUTRAL, gather(log, ASSUME))
    unmeasured = model.speedup(_x(EDIT, CODE), "draft")
    fresh = RouteModel(NEUTRAL, RouteEvidence()).speedup(_x(EDIT, CODE), "draft")
    assert unmeasured.mean == pytest.approx(fresh.mean) and unmeasured.n == 0
    assert unmeasured.sd == pytest.approx(fresh.sd)
    assert model.measured("draft") == 0 and model.measured("ngram-simple") == 20


def test_the_machine_prior_describes_mtp_and_no_other_config() -> None:
    model = RouteModel(GB10_DS4, RouteEvidence())
    agent = {"agent": 1.0}
    x = _x({"n_tools": 3}, agent)
    assert model.speedup(x, MTP_CONFIG).speedup > 1.05
    assert model.speedup(x, "ngram-simple").speedup == pytest.approx(1.0)


def test_online_sums_equal_the_batch_and_survive_json() -> None:
    log = _log(8, seed=4)
    online = RouteEvidence()
    for o in log:
        online = observe(online, o, ASSUME)
    batch = gather(log, ASSUME)
    for config in ("ngram-simple", "draft"):
        np.testing.assert_allclose(online.greedy_of(config).xtx, batch.greedy_of(config).xtx)
    back = RouteEvidence.from_json(json.loads(json.dumps(batch.as_json())))
    assert back == batch
    a, b = gather(log[:30], ASSUME), gather(log[30:], ASSUME)
    np.testing.assert_allclose(a.merged(b).greedy_of("ngram-simple").xty,
                               batch.greedy_of("ngram-simple").xty)


def test_evidence_written_with_one_speculating_config_reads_as_mtp() -> None:
    evidence = gather(_log(3), ASSUME)
    data = evidence.as_json()
    old = {**data, "greedy": data["greedy"]["ngram-simple"],
           "sampled": [2, -3.0, 5.0]}  # the layout before configs: one greedy, one sampled
    back = RouteEvidence.from_json(old)
    assert back.configs == (MTP_CONFIG,)
    assert back.greedy_of(MTP_CONFIG) == evidence.greedy_of("ngram-simple")
    assert back.sampled_of(MTP_CONFIG).n == 2


def test_with_one_config_the_posterior_is_the_two_instance_model() -> None:
    """Adding other configs' evidence leaves what mtp and plain alone identify nearly as it
    was (they share the pace only)."""
    rng = random.Random(2)
    two = [replace(_observation(c, k, rng, i), spec="")
           for i in range(10) for c in ("plain", "draft") for k in ("edit", "story")]
    alone = RouteModel(NEUTRAL, gather(two, ASSUME))
    with_ngram = RouteModel(NEUTRAL, gather(two + [o for o in _log(10) if o.spec == "ngram-simple"],
                                            ASSUME))
    x = _x(STORY, PROSE)
    assert with_ngram.speedup(x).speedup == pytest.approx(alone.speedup(x).speedup, rel=0.02)


def test_prior_terms_keep_each_configs_block_once() -> None:
    terms = PriorTerms.of(NEUTRAL)
    first = terms.block("ngram-simple")
    assert terms.block("ngram-simple") is first
    assert Evidence.empty().n == 0


def test_a_config_measured_on_edits_only_is_still_unlearned_on_stories() -> None:
    # n-gram measured on 10 edits and nothing else: its story speedup is still the prior's
    # guess shifted by what the edits taught the machine-wide term; the edits' own is learned
    log = [o for o in _log(10) if o.config != "ngram-simple" or o.cls == "code"]
    model = RouteModel(NEUTRAL, gather(log, ASSUME))
    story = model.speedup(_x(STORY, PROSE), "ngram-simple")
    edit = model.speedup(_x(EDIT, CODE), "ngram-simple")
    assert story.unlearned and story.sd >= UNLEARNED_SPREAD * story.prior_sd > 0
    assert not edit.unlearned and edit.sd < UNLEARNED_SPREAD * edit.prior_sd
    # measured on stories too, it is learned there
    both = RouteModel(NEUTRAL, gather(_log(10), ASSUME)).speedup(_x(STORY, PROSE), "ngram-simple")
    assert not both.unlearned and both.prior_sd == pytest.approx(story.prior_sd)


def test_several_configs_at_once_predict_as_each_alone() -> None:
    model = RouteModel(NEUTRAL, gather([o for o in _log(6) if o.cls == "code"], ASSUME))
    for x in (_x(EDIT, CODE), _x(STORY, PROSE)):
        configs = ("draft", "ngram-simple", "never-measured")
        for together, config in zip(model.speedups(x, configs), configs, strict=True):
            alone = model.speedup(x, config)
            assert together.mean == pytest.approx(alone.mean)
            assert together.sd == pytest.approx(alone.sd)
            assert together.prior_sd == pytest.approx(alone.prior_sd) and alone.prior_sd > 0
            assert together.unlearned == alone.unlearned
