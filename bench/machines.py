"""The simulated pair every learning bench drives: the shipped policy, and the mtp and plain
instances of one simulated machine, with the acceptance per class that gives the GB10's
published speedups (`bench/learning`, `bench/learning_live`, `bench/replicas`, `bench/arms`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from backends.local.simulator import MACHINES, SimState
from policies.learner.learned import acceptance_for_speedup

GB10_SPEEDUP: Final = {"agent": 1.094, "code": 1.065, "technical": 1.044, "prose": 0.964,
                       "chat": 0.963}
POLICY_PATH: Final = Path(__file__).resolve().parent.parent / "policies" / "default.yaml"


def workload_acceptance() -> dict[str, float]:
    """Acceptance on verified cycles per class: what gives the GB10's published speedups under
    its step costs. A property of the text, not of the machine: every machine uses it."""
    cost = MACHINES["gb10"]
    share = 1 - cost.gate_skip
    steps = (cost.t_plain_ms, cost.t_plain_ms + cost.t_draft_ms, cost.t_verify_ms + cost.t_draft_ms)
    return {c: min(1.0, max(0.0, acceptance_for_speedup(s, share, *steps)))
            for c, s in GB10_SPEEDUP.items()}


def machine_states(machine: str) -> dict[str, SimState]:
    """The simulated pair on `machine`: ds4 on a GB10-like box speculates only greedy decoding,
    llama.cpp-like engines speculate sampled requests too."""
    cost = MACHINES[machine]
    greedy_only = machine.startswith("gb10")
    return {p: SimState(profile=p, cost=cost, acceptance=workload_acceptance(), reply_tokens=512,
                        class_of=_class_of, serial=True, greedy_only=greedy_only)
            for p in ("mtp", "plain")}


def _class_of(body: object) -> str:
    meta = body.get("metadata") if isinstance(body, dict) else None
    return str(meta.get("bench_class", "technical")) if isinstance(meta, dict) else "technical"
