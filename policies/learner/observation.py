"""One served request as the learner sees it, and how to take it from a decision-log record.

Pure: a frozen dataclass and a function of the record (`decisionlog.records`); no I/O.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from decisionlog.records import RouteRecord
from policies.learner.speedup import inputs as speedup_inputs
from policies.policyfile.rewrite import logged_features_as_sent
from policies.policyfile.schema import Assume
from policies.policyfile.words import PROFILES

# The decision reason of a startup probe's record (router/instances/pace_probe): the proxy timed a short
# greedy generation on the instance before any client request.
PROBE_REASON: Final = "probe"


@dataclass(frozen=True, slots=True)
class Observation:
    """One served request, as every accumulator of the learner needs it (built from a
    decision-log record): the route model and the per-class tables read the paced ones, the
    arms' sums those with a measured total time."""

    cls: str
    lang: str
    p_spec: float
    profile: str  # the profile of the instance that served it: "mtp" | "plain" (else unpaced)
    completion_tokens: int
    decode_tps: float  # decode tokens/s, the backend's own figure when it reports one (0: none)
    draft_n: int | None = None  # verified cycles (depth 1: one drafted token per cycle)
    draft_accepted: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    temperature: float = 0.0  # -1: the request did not say
    thinking: bool | None = False  # None: the request did not say
    # the speedup model's inputs (policies.learner.speedup), packed: one array of doubles, not a
    # tuple of float objects (~520 bytes an observation instead of ~1,000; the online model
    # keeps up to 20,000 of them, and packing them once spares it a copy of each)
    inputs: Sequence[float] | None = None
    queued: bool = False  # work was queued ahead of it on its instance when it was routed
    backend: str = ""
    ts: str = ""
    probe: bool = False  # the proxy's own startup probe of the instance's pace
    arm: str = ""  # the route's arm that served it (pool plus rewrite label), else the profile
    total_ms: float | None = None  # the whole request as the proxy measured it
    measured_tps: float | None = None  # the decode rate the proxy measured from the stream
    disconnected: bool = False  # the answer did not end whole: the client left, or it broke off
    spec: str = ""  # the serving instance's speculation config ('': its profile's shorthand)
    # the batch it decoded in: the mean number of requests served at once on its instance over
    # its life, itself included (records without one: 1, one at a time)
    batch: float = 1.0
    batch_start: float = 1.0  # the batch it joined, itself included (records without one: 1)

    @property
    def config(self) -> str:
        """The speculation config the route model learns this request's pace under: `plain`,
        `mtp` (the shorthand), or a declared config's key (`ngram-simple`, `draft`, ...)."""
        if self.spec:
            return self.spec
        return self.profile

    @property
    def paced(self) -> bool:
        """Whether it measures a pace: served by an mtp or plain instance, two tokens or more
        at a known decode rate (what the route model and the per-class tables learn from)."""
        return (self.profile in PROFILES and self.completion_tokens >= 2
                and self.decode_tps > 0 and math.isfinite(self.decode_tps))

    @property
    def timed(self) -> bool:
        """Whether it times its arm: an answer the client got whole, in a measured time."""
        total = self.total_ms
        return (not self.disconnected and bool(self.arm) and total is not None and total > 0
                and math.isfinite(total))

    @property
    def arm_tps(self) -> float | None:
        """The decode rate the arms compare: the proxy's own measure (the same for every
        engine), else the backend's."""
        rate = self.measured_tps or self.decode_tps
        return rate if rate > 0 and math.isfinite(rate) else None

    def greedy(self, assume: Assume) -> bool:
        """Whether the request decoded greedily without thinking (where speculation can pay),
        filling in what the request did not say from the policy's assumptions."""
        temperature = self.temperature if self.temperature >= 0 else assume.temperature
        thinking = assume.thinking if self.thinking is None else self.thinking
        return temperature <= 0 and not thinking

    @property
    def in_batch(self) -> bool:
        """It shared its instance with others at some point: a row of its batch terms."""
        return self.batch > 1.0 or self.batch_start > 1.0

    @property
    def ms_per_token(self) -> float:
        return 1000.0 / self.decode_tps

    @property
    def has_draft_stats(self) -> bool:
        return self.config == "mtp" and bool(self.draft_n)


def observation_from_record(record: RouteRecord) -> Observation | None:
    """The one extractor: an observation from one decision-log record, or None when the request
    taught nothing (failed, no class, no token). Fields are as the reader parsed them from a
    JSON line, so a value of the wrong type also gives None."""
    outcome, classifier = record.outcome, record.classifier
    try:
        features = logged_features_as_sent(record.features, record.rewrite)
        profile = str(outcome.profile or record.decision.get("profile") or "")
        tokens = int(outcome.completion_tokens or 0)
        if outcome.status != 200 or tokens < 1 or not classifier.get("class"):
            return None
        return Observation(
            cls=str(classifier["class"]),
            lang=str(classifier.get("lang") or "en"),
            p_spec=_p_spec(record),
            profile=profile,
            completion_tokens=tokens,
            decode_tps=_decode_rate(record, tokens),
            draft_n=_int_or_none(outcome.draft_n),
            draft_accepted=_int_or_none(outcome.draft_accepted),
            prompt_tokens=int(outcome.prompt_tokens or 0),
            cached_tokens=int(outcome.cached_tokens or 0),
            ttft_ms=_first_token_ms(record, tokens),
            temperature=float(features.get("temperature", -1)),
            thinking=_thinking(features),
            inputs=(record.inputs if record.inputs is not None
                    else request_inputs(features, classifier.get("scores"))),
            queued=bool(record.decision.get("queue_ms") or 0),
            backend=str(outcome.backend or record.decision.get("backend") or ""),
            ts=str(record.ts or ""),
            probe=record.decision.get("reason") == PROBE_REASON,
            arm=str(record.decision.get("arm") or profile),
            total_ms=_float_or_none(outcome.total_ms),
            measured_tps=_float_or_none(outcome.decode_tps),
            # an error after a 200 is an answer that broke off (backends/upstream), and one whose
            # end nobody saw (the picker stopped): cut short too
            disconnected=_cut(record),
            spec=str(outcome.spec or ""),
            batch=_batch(outcome.batch_mean),
            batch_start=_batch(outcome.batch_start),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def request_inputs(features: Mapping[str, Any], scores: Any) -> array[float]:
    """The speedup model's inputs from a record's features and class scores, packed."""
    table = scores if isinstance(scores, Mapping) else None
    return array("d", speedup_inputs(features, table).tobytes())


def observations(records: Iterable[RouteRecord]) -> Iterator[Observation]:
    """What the learner needs from each record; records that taught nothing are dropped."""
    for record in records:
        observation = observation_from_record(record)
        if observation is not None:
            yield observation


def _p_spec(record: RouteRecord) -> float:
    """The decision's p_spec (the route model's probability that speculation paid); records
    written before it was the decision's carry the classifier's."""
    value = record.decision.get("p_spec")
    if value is None:
        value = record.classifier.get("p_spec", 0.5)
    return min(1.0, max(0.0, float(value if value is not None else 0.5)))


def _thinking(features: Mapping[str, Any]) -> bool | None:
    if features.get("thinking"):
        return True
    return None if features.get("thinking_unset", True) else False


def _decode_rate(record: RouteRecord, tokens: int) -> float:
    """The answer's decode rate: the engine's, else the proxy's (first to last streamed token),
    else, for an answer that came whole with no rate (vLLM and SGLang not streamed), its
    `wall_rate` when it was sent to a free slot and ended whole (a wait for a slot, or the
    answer cut, is in its wall time but no decode's)."""
    outcome = record.outcome
    rate = outcome.backend_tps or outcome.decode_tps
    if rate is not None:
        return float(rate)
    if _cut(record) or record.decision.get("queue_ms") or outcome.total_ms is None:
        return 0.0
    return wall_rate(tokens, float(outcome.total_ms)) or 0.0


def _first_token_ms(record: RouteRecord, tokens: int) -> float | None:
    """The time to the first token: the proxy's, from a stream; else, for an answer that came
    whole from an engine that reports its decode rate (llama.cpp), its time less that decode
    (what teaches the prefill's cost where no client streams)."""
    outcome = record.outcome
    if outcome.ttft_ms is not None:
        return float(outcome.ttft_ms)
    rate, total = outcome.backend_tps, outcome.total_ms
    if not rate or rate <= 0 or total is None or tokens < 2 or _cut(record):
        return None
    first = float(total) - (tokens - 1) / float(rate) * 1000.0
    return first if first > 0.0 else None


def _cut(record: RouteRecord) -> bool:
    """Its end was not seen whole: the client left, it broke off, or the picker stopped."""
    outcome = record.outcome
    return bool(outcome.client_disconnected or outcome.error or outcome.unobserved)


def wall_rate(tokens: int, elapsed_ms: float) -> float | None:
    """Tokens a second over an answer's whole wall time, its prefill included: an underestimate
    of the decode rate (None: nothing to time)."""
    return tokens / elapsed_ms * 1000.0 if elapsed_ms > 0 and tokens >= 2 else None


def _batch(value: Any) -> float:
    """The logged mean batch, at least 1 (absent, an older record: 1)."""
    batch = _float_or_none(value)
    return batch if batch is not None and math.isfinite(batch) and batch >= 1.0 else 1.0


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
