"""specroute's routing policy: the policy file as declared (`policyfile`), the pure
per-request decision (`decision`) and the learner (`learner`), behind this surface: what
`router/` may use. Everything else in the package is internal to it."""

from __future__ import annotations

from policies.decision.ask import Ask, BackendState, State
from policies.decision.batching import batch_work
from policies.decision.decide import Decision
from policies.decision.finish import (
    IDLE_QUEUE,
    NOTHING_BEHIND,
    Behind,
    Queued,
    Running,
    queued_work,
)
from policies.decision.pins import RequestContext
from policies.decision.route import Routed, decide_route
from policies.decision.sessions import Held, SessionTable, conversation_key
from policies.explain import describe_model
from policies.learner.arm_rows import ArmRow, arm_rows, has_extra_arms
from policies.learner.arms import EMPTY_ARMS, ArmsState, learn_arms
from policies.learner.learned import LearnedState, predicted_speedup
from policies.learner.observation import (
    PROBE_REASON,
    Observation,
    observation_from_record,
    observations,
    wall_rate,
)
from policies.learner.pace import discount_note, far, paces, prior_note, prior_pace
from policies.learner.routemodel import PLAIN_CONFIG, RouteEvidence, RouteModel, observe
from policies.learner.shared import (
    EMPTY_SUMS,
    SharedSumsError,
    Sums,
    sums_from_json,
    sums_to_json,
    total_sums,
)
from policies.learner.speedup import MTP_CONFIG, PriorTerms, ScalarEvidence, class_inputs
from policies.policyfile.machine import NEUTRAL
from policies.policyfile.pools import POOL_NAME
from policies.policyfile.rewrite import Applied, apply_rewrite
from policies.policyfile.schema import Policy
from policies.policyfile.words import ROUTE_WORDS
from policies.store import DEFAULT_POLICY, PolicyStore, Snapshot, learn_to_file, learned_path_for

__all__ = [
    "DEFAULT_POLICY",
    "EMPTY_ARMS",
    "EMPTY_SUMS",
    "IDLE_QUEUE",
    "MTP_CONFIG",
    "NEUTRAL",
    "NOTHING_BEHIND",
    "PLAIN_CONFIG",
    "POOL_NAME",
    "PROBE_REASON",
    "ROUTE_WORDS",
    "Applied",
    "ArmRow",
    "ArmsState",
    "Ask",
    "BackendState",
    "Behind",
    "Decision",
    "Held",
    "LearnedState",
    "Observation",
    "Policy",
    "PolicyStore",
    "PriorTerms",
    "Queued",
    "RequestContext",
    "RouteEvidence",
    "RouteModel",
    "Routed",
    "Running",
    "ScalarEvidence",
    "SessionTable",
    "SharedSumsError",
    "Snapshot",
    "State",
    "Sums",
    "apply_rewrite",
    "arm_rows",
    "batch_work",
    "class_inputs",
    "conversation_key",
    "decide_route",
    "describe_model",
    "discount_note",
    "far",
    "has_extra_arms",
    "learn_arms",
    "learn_to_file",
    "learned_path_for",
    "observation_from_record",
    "observations",
    "observe",
    "paces",
    "predicted_speedup",
    "prior_note",
    "prior_pace",
    "queued_work",
    "sums_from_json",
    "sums_to_json",
    "total_sums",
    "wall_rate",
]
