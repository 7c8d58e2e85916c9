"""One served request as the learner sees it, and how to read it from a decision-log record.

Pure: a frozen dataclass and a parser of the record's JSON object (schema_version 1); no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.rewrite import logged_features_as_sent
from policies.schema import Assume


@dataclass(frozen=True, slots=True)
class Observation:
    """One served request, as the learner needs it (built from a decision-log record)."""

    cls: str
    lang: str
    p_spec: float
    profile: str  # the profile of the instance that served it: "mtp" | "plain"
    completion_tokens: int
    decode_tps: float  # decode tokens/s; the backend's own figure when it reports one
    draft_n: int | None = None  # verified cycles (depth 1: one drafted token per cycle)
    draft_accepted: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    temperature: float = 0.0  # -1: the request did not say
    thinking: bool | None = False  # None: the request did not say

    def greedy(self, assume: Assume) -> bool:
        """Whether the request decoded greedily without thinking (where speculation can pay),
        filling in what the request did not say from the policy's assumptions."""
        temperature = self.temperature if self.temperature >= 0 else assume.temperature
        thinking = assume.thinking if self.thinking is None else self.thinking
        return temperature <= 0 and not thinking

    @property
    def ms_per_token(self) -> float:
        return 1000.0 / self.decode_tps

    @property
    def has_draft_stats(self) -> bool:
        return self.profile == "mtp" and bool(self.draft_n)


def observation_from_log(data: Mapping[str, Any]) -> Observation | None:
    """An observation from one decision-log record as a JSON object (schema_version 1), or
    None when the request taught nothing (failed, no tokens, no decode rate)."""
    try:
        outcome, classifier = data["outcome"], data["classifier"]
        features = logged_features_as_sent(data.get("features") or {}, data.get("rewrite"))
        decision = data.get("decision") or {}
        profile = str(outcome.get("profile") or decision.get("profile") or "")
        tokens = int(outcome.get("completion_tokens") or 0)
        tps = float(outcome.get("backend_tps") or outcome.get("decode_tps") or 0.0)
        if outcome.get("status") != 200 or profile not in ("mtp", "plain"):
            return None
        if tokens < 2 or not tps > 0 or not math.isfinite(tps) or not classifier.get("class"):
            return None
        return Observation(
            cls=str(classifier["class"]),
            lang=str(classifier.get("lang") or "en"),
            p_spec=min(1.0, max(0.0, float(classifier.get("p_spec", 0.5)))),
            profile=profile,
            completion_tokens=tokens,
            decode_tps=tps,
            draft_n=_int_or_none(outcome.get("draft_n")),
            draft_accepted=_int_or_none(outcome.get("draft_accepted")),
            prompt_tokens=int(outcome.get("prompt_tokens") or 0),
            cached_tokens=int(outcome.get("cached_tokens") or 0),
            ttft_ms=_float_or_none(outcome.get("ttft_ms")),
            temperature=float(features.get("temperature", -1)),
            thinking=_thinking(features),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _thinking(features: Mapping[str, Any]) -> bool | None:
    if features.get("thinking"):
        return True
    return None if features.get("thinking_unset", True) else False


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
