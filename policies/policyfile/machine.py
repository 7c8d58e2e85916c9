"""Machine priors: what the router assumes about a machine before its own log says otherwise.

Pure data: built-in profiles and the validation of a profile given as a mapping (the store
reads a profile file; nothing here does I/O). A prior is where a cold start begins, so that the
first requests are routed by what is known of such machines rather than by a coin: per-class
speedups of MTP-1 over plain decoding, the plain step time, the prefill rate and a typical
completion length, each with the spread the learner starts from.

`gb10-ds4`: a GB10 running ds4 (DeepSeek-V4-Flash), from the published per-class figures:
MTP-1 gives +9.4% on agent turns, +6.5% on code, +4.4% on technical text, -3.6% on prose and
-3.7% on Chinese chat (verify ~108 ms, draft ~4 ms, acceptance ~0.97 on verified cycles, the
margin gate skipping ~44% of cycles; plain decode ~13.7-15.6 tok/s). ds4 speculates only
greedy decoding: a sampled request runs at plain pace on the mtp instance.
`local-pair`: the README's measured Qwen2.5-Coder pair on 2 CPU cores, where a 2-token verify
costs about twice a plain step and speculation loses on every class.
`neutral` (the shipped default): nothing assumed; the startup probe and the log measure it all.
Every prior's pace is only a start: its `pace_sd` is wide, so this machine's own measurements
of both instances decide (`policies.learner.speedup`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from classifiers.scores import CLASSES


@dataclass(frozen=True, slots=True)
class MachinePrior:
    """What to believe before any request is measured (speedups are mtp over plain)."""

    name: str
    class_speedup: Mapping[str, float]  # class -> speedup on greedy decoding
    sampled_speedup: float  # temperature > 0 or thinking: what the mtp instance gives then
    t_plain_ms: float  # one plain decode step
    prefill_ms_per_token: float
    completion_tokens: float  # a typical completion when the request sets no max_tokens
    # Spreads the learner starts from, all in log space: of a class's log-speedup, of the
    # machine-wide shift of log-speedup, of one request's log(ms per token) around its
    # prediction, of the plain pace (how far this machine may be from `t_plain_ms`: another
    # model, engine or box is easily 3-10x off, and a few measurements must win over it).
    class_sd: float = 0.04
    shift_sd: float = 0.25
    noise_sd: float = 0.08
    pace_sd: float = 1.5
    source: str = ""  # where the figures come from
    extra: Mapping[str, float] = field(default_factory=dict)  # reported, not used: acceptance...

    def log_speedup(self, cls: str) -> float:
        return math.log(self.class_speedup.get(cls, 1.0))


GB10_DS4: Final = MachinePrior(
    name="gb10-ds4",
    class_speedup={"agent": 1.094, "code": 1.065, "technical": 1.044, "prose": 0.964,
                   "chat": 0.963},
    sampled_speedup=1.0,
    t_plain_ms=68.0,
    prefill_ms_per_token=2.0,
    completion_tokens=256.0,
    source="published ds4 MTP-1 figures on a GB10 (README)",
    extra={"t_verify_ms": 108.0, "t_draft_ms": 4.0, "acceptance": 0.97, "gate_skip": 0.44},
)

LOCAL_PAIR: Final = MachinePrior(
    name="local-pair",
    # README: Qwen2.5-Coder depth-1 / plain tok/s per class, 2 CPU cores
    class_speedup={"agent": 9.2 / 15.7, "code": 9.1 / 15.2, "technical": 5.7 / 13.3,
                   "prose": 5.3 / 14.6, "chat": 5.1 / 12.4},
    sampled_speedup=0.45,
    t_plain_ms=1000.0 / 14.3,
    prefill_ms_per_token=5.0,
    completion_tokens=64.0,
    class_sd=0.1,
    source="measured Qwen2.5-Coder llama.cpp pair on 2 CPU cores (README)",
    extra={"acceptance_code": 0.97, "acceptance_chat_zh": 0.63},
)

# Nothing known of the machine: speculation neither pays nor loses until measured, the pace
# anywhere within a factor of ~20 of 50 ms per token at 2 sd. The startup probe and the first
# requests measure both; exploration then follows the evidence.
NEUTRAL: Final = MachinePrior(
    name="neutral",
    class_speedup={c: 1.0 for c in CLASSES},
    sampled_speedup=1.0,
    t_plain_ms=50.0,
    prefill_ms_per_token=1.0,
    completion_tokens=256.0,
    class_sd=0.1,
    shift_sd=0.5,
    noise_sd=0.1,
    source="no machine assumed: every figure is measured here",
)

BUILTIN: Final[Mapping[str, MachinePrior]] = {
    p.name: p for p in (NEUTRAL, GB10_DS4, LOCAL_PAIR)}


class PriorFile(BaseModel):
    """A machine prior as a YAML/JSON file (`policy.prior: path/to/machine.yaml`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("file", description="a name for logs and `policy explain`")
    class_speedup: dict[str, float] = Field(
        description="class -> speedup of mtp over plain on greedy decoding (1.05: +5%)"
    )
    sampled_speedup: float = Field(1.0, gt=0, description="speedup on sampled/thinking decoding")
    t_plain_ms: float = Field(gt=0, description="one plain decode step, ms")
    prefill_ms_per_token: float = Field(1.0, ge=0, description="prefill cost per prompt token")
    completion_tokens: float = Field(256.0, gt=0, description="typical completion length")
    class_sd: float = Field(0.04, gt=0, description="uncertainty of a class's log-speedup")
    shift_sd: float = Field(0.25, gt=0, description="uncertainty of the machine-wide shift of "
                            "log-speedup")
    noise_sd: float = Field(0.08, gt=0, description="one request's spread of log(ms per token) "
                            "around its prediction")
    pace_sd: float = Field(1.5, gt=0, description="uncertainty of log(t_plain_ms): how far this "
                           "machine's plain pace may be from it")

    def prior(self, source: str) -> MachinePrior:
        unknown = sorted(set(self.class_speedup) - set(CLASSES))
        if unknown or any(v <= 0 for v in self.class_speedup.values()):
            raise ValueError(f"class_speedup: classes must be in {list(CLASSES)} with speedups > 0")
        data: dict[str, Any] = self.model_dump()
        return MachinePrior(**data, source=source)


def builtin_prior(name: str) -> MachinePrior | None:
    return BUILTIN.get(name)
