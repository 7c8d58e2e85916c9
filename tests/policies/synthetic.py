"""Synthetic decision logs drawn from the depth-1 cost model, for the learner's tests.

Two machines: the GB10 running ds4 (margin gate skips 44% of cycles; per-class acceptance set
so that the cost model gives the published per-class speedups) and the local CPU llama.cpp
pair (no gate, a verify costs about three plain steps: speculation never pays).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from policies.learner.learn import Observation
from policies.learner.learned import acceptance_for_speedup
from policies.learner.observation import request_inputs

# The published GB10 numbers: (class, lang) -> speedup of MTP-1 over plain.
GB10_SPEEDUP: Mapping[tuple[str, str], float] = {
    ("agent", "en"): 1.094,
    ("code", "en"): 1.065,
    ("technical", "en"): 1.044,
    ("prose", "en"): 0.964,
    ("chat", "zh"): 0.963,
}
# The centre of each class's drawn p_spec (the GB10 ranking: agent > code > technical > prose ~
# chat), so that the per-class tables see p_spec spread over bins as logged requests do.
P_SPEC_CENTRE: Mapping[str, float] = {
    "agent": 0.85,
    "code": 0.75,
    "technical": 0.6,
    "prose": 0.3,
    "chat": 0.3,
}


@dataclass(frozen=True, slots=True)
class Machine:
    t_plain_ms: float
    t_skip_ms: float
    t_verify_ms: float
    spec_share: float  # share of cycles verified (1 - margin-gate skips)
    acceptance: Mapping[tuple[str, str], float]


def _gb10() -> Machine:
    t_plain, t_skip, t_verify, share = 68.0, 72.0, 112.0, 0.56
    acceptance = {
        key: acceptance_for_speedup(speedup, share, t_plain, t_skip, t_verify)
        for key, speedup in GB10_SPEEDUP.items()
    }
    return Machine(t_plain, t_skip, t_verify, share, acceptance)


GB10 = _gb10()
# Measured on 2 CPU cores (notes/local-backend.md): plain ~25 tok/s, depth 1 ~15 tok/s.
CPU_PAIR = Machine(
    t_plain_ms=40.0,
    t_skip_ms=40.0,
    t_verify_ms=124.0,
    spec_share=1.0,
    acceptance={
        ("agent", "en"): 0.97,
        ("code", "en"): 0.90,
        ("technical", "en"): 0.77,
        ("prose", "en"): 0.64,
        ("chat", "zh"): 0.87,
    },
)


def observations(
    machine: Machine, n: int, seed: int = 0, mtp_share: float = 0.5, tokens: int = 200
) -> Iterator[Observation]:
    """`n` requests spread over the classes, each served by mtp with probability `mtp_share`."""
    rng = random.Random(seed)
    keys = sorted(machine.acceptance)
    for i in range(n):
        cls, lang = keys[i % len(keys)]
        p_spec = min(1.0, max(0.0, rng.gauss(P_SPEC_CENTRE[cls], 0.1)))
        inputs = request_inputs({"n_messages": 1}, {cls: 1.0})
        ts = f"2026-01-01T00:00:{i:07.3f}Z"
        if rng.random() < mtp_share:
            obs = _mtp(machine, rng, cls, lang, p_spec, tokens)
        else:
            ms = tokens * machine.t_plain_ms * rng.uniform(0.97, 1.03)
            obs = Observation(cls, lang, p_spec, "plain", tokens, tokens * 1000 / ms)
        yield replace(obs, inputs=inputs, ts=ts)


def _mtp(
    machine: Machine, rng: random.Random, cls: str, lang: str, p_spec: float, tokens: int
) -> Observation:
    acceptance = machine.acceptance[(cls, lang)]
    made = verified = accepted = 0
    ms = 0.0
    while made < tokens:
        if rng.random() >= machine.spec_share:
            made, ms = made + 1, ms + machine.t_skip_ms
            continue
        verified, ms = verified + 1, ms + machine.t_verify_ms
        hit = rng.random() < acceptance and made + 2 <= tokens
        accepted += hit
        made += 1 + hit
    ms *= rng.uniform(0.97, 1.03)
    return Observation(cls, lang, p_spec, "mtp", tokens, tokens * 1000 / ms, verified, accepted)


def without_draft_stats(obs: Observation) -> Observation:
    """What upstream ds4 logs: tokens/s only."""
    return replace(obs, draft_n=None, draft_accepted=None)
