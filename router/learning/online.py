"""The learned state in force (the route model and the arms' sums), updated online as records
arrive.

The learned file (written by `specroute learn` or the background learner, hot-reloaded by the
policy store) holds the sums of the whole log up to its `through` timestamp; records
written since are added here in order, a batch at a time (what finished within
`Deps.record_interval_s`, 20 ms: one posterior rebuild per batch), so that requests are decided
with outcomes at most that old. When a newer learned file is swapped in, the records it already covers are dropped
from the online part (they are counted once). A record sink; no I/O.

With replicas (router/replicas/link), the model adds the other replicas' published sums
(`set_others`), and this replica's own sums (`own_sums`: its learned state plus what it added
since) are what it publishes. A restarted replica gets back the sums it had published
(`restore_own`): they stand for its learned state until a learned file covers more records (it
relearns its own log before its first publish, router/learning/relearn.relearn_own_log, so one does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Final

from aiohttp import web

from classifiers.scores import CLASSES
from decisionlog.records import RouteRecord
from policies import (
    EMPTY_ARMS,
    EMPTY_SUMS,
    MTP_CONFIG,
    PLAIN_CONFIG,
    ArmsState,
    Observation,
    PolicyStore,
    PriorTerms,
    RouteEvidence,
    RouteModel,
    ScalarEvidence,
    Snapshot,
    Sums,
    class_inputs,
    learn_arms,
    observation_from_record,
    observe,
    paces,
    prior_note,
)

# Records kept for re-applying after a reload (a learner that runs every few minutes sees far
# fewer in between).
MAX_PENDING: Final = 20_000


class OnlineModel:
    """The store's prior and evidence plus the records logged since; `model` is current."""

    sink_name = "online_model"  # names it where record-sink failures are counted

    def __init__(self, store: PolicyStore) -> None:
        self._store = store
        self._pending: deque[Observation] = deque(maxlen=MAX_PENDING)
        self._snapshot: Snapshot | None = None
        self._recent = RouteEvidence()
        self._recent_arms = EMPTY_ARMS
        self._arms = EMPTY_ARMS
        self._model: RouteModel | None = None
        self._terms: tuple[object, PriorTerms] | None = None  # (prior, its terms)
        self._others = EMPTY_SUMS  # the other replicas' published sums
        self._restored: Sums | None = None  # this replica's own, as it last published them
        self._fixed_sums: tuple[tuple[object, object, object], Sums] | None = None

    @property
    def model(self) -> RouteModel:
        return self._current()

    @property
    def arms(self) -> ArmsState:
        """The arms' sums: the learned file's plus the records added since."""
        self._current()
        return self._arms

    @property
    def online_records(self) -> int:
        """Records added since the learned state in force was learned."""
        self._current()
        return len(self._pending)

    def own_sums(self) -> Sums:
        """This replica's own sums (its learned state and the records added since): what it
        publishes to the other replicas."""
        snapshot = self._snapshot_in_force()
        recent_through = self._pending[-1].ts if self._pending else ""
        return self._base(snapshot).merged(Sums(self._recent, self._recent_arms, recent_through))

    def set_others(self, others: Sums) -> None:
        """The other replicas' sums, added to this replica's own from now on."""
        self._others = others
        snapshot = self._snapshot_in_force()
        self._model = self._build(snapshot)

    def restore_own(self, published: Sums) -> bool:
        """The sums this replica published before it restarted: its learned state while they
        cover more records than the learned file (records they cover are not added again).
        True when they took effect."""
        snapshot = self._snapshot_in_force()
        if published.through <= self._base(snapshot).through:
            return False
        self._restored = published
        self._rebase(snapshot, force=True)
        return True

    def _snapshot_in_force(self) -> Snapshot:
        self._current()
        assert self._snapshot is not None
        return self._snapshot

    def _base(self, snapshot: Snapshot) -> Sums:
        """The learned part: the learned file's sums, or the restored ones when newer."""
        learned = snapshot.learned
        if self._restored is not None and self._restored.through > learned.through:
            return self._restored
        return Sums(learned.evidence, learned.arms, learned.through)

    def _fixed(self, snapshot: Snapshot) -> Sums:
        """The learned part plus the other replicas': added once per change, not per batch."""
        key = (snapshot.learned, self._restored, self._others)
        cached = self._fixed_sums
        if cached is None or any(a is not b for a, b in zip(cached[0], key, strict=True)):
            base = self._base(snapshot)
            merged = base if self._others is EMPTY_SUMS else base.merged(self._others)
            self._fixed_sums = cached = (key, merged)
        return cached[1]

    def _current(self) -> RouteModel:
        """The model over the store's snapshot in force, rebased when that snapshot changed."""
        snapshot = self._store.snapshot
        if snapshot is not self._snapshot or self._model is None:
            self._rebase(snapshot)
        assert self._model is not None
        return self._model

    def write_record(self, record: RouteRecord) -> None:
        self.write_records((record,))

    def write_records(self, records: Sequence[RouteRecord]) -> None:
        """Add the records' observations in order; the posterior is rebuilt once per batch."""
        observations = [o for o in map(observation_from_record, records) if o is not None]
        if not observations:
            return
        self._pending.extend(observations)
        snapshot = self._store.snapshot
        if snapshot is not self._snapshot or self._model is None:
            self._rebase(snapshot)
            return
        recent = self._recent
        for observation in observations:
            recent = observe(recent, observation, snapshot.policy.assume)
        self._recent = recent
        self._recent_arms = self._recent_arms.merged(learn_arms(observations))
        self._model = self._build(snapshot)

    def _rebase(self, snapshot: Snapshot, *, force: bool = False) -> None:
        """A new snapshot: keep only the records its learned file does not cover (a new policy
        with the same learned state keeps everything added online: only the prior changes)."""
        if (not force and self._snapshot is not None
                and snapshot.learned is self._snapshot.learned):
            self._snapshot = snapshot
            self._model = self._build(snapshot)
            return
        through = self._base(snapshot).through
        kept = [o for o in self._pending if not through or o.ts > through]
        self._pending = deque(kept, maxlen=MAX_PENDING)
        recent = RouteEvidence()
        for observation in kept:
            recent = observe(recent, observation, snapshot.policy.assume)
        self._snapshot, self._recent = snapshot, recent
        self._recent_arms = learn_arms(kept)
        self._model = self._build(snapshot)

    def _build(self, snapshot: Snapshot) -> RouteModel:
        # The prior's terms are the same for every record until the prior itself changes.
        if self._terms is None or self._terms[0] is not snapshot.prior:
            self._terms = (snapshot.prior, PriorTerms.of(snapshot.prior))
        fixed = self._fixed(snapshot)
        evidence = fixed.evidence.merged(self._recent)
        self._arms = fixed.arms.merged(self._recent_arms)
        return RouteModel(snapshot.prior, evidence, self._terms[1])


def model_status(model: RouteModel, configs: Iterable[str] = ()) -> dict[str, Any]:
    """The speedup model for the dashboard and metrics: per speculation config (those measured
    and `configs`) and class, the predicted speedup of a request wholly of that class with its
    1-sd range; the prior; the evidence; the weights. The top level's `classes`, `sampled` and
    `weights` are the first config's (`mtp` when there is one)."""
    measured = pace_status(model, configs)
    names = [name for name in measured["pace"] if name != PLAIN_CONFIG]
    first = MTP_CONFIG if MTP_CONFIG in names else names[0]
    per_config = {name: _config_status(model, name) for name in names}
    return {
        "prior": model.prior.name,
        "observations": model.evidence.n_speculating,
        "t_plain_ms": model.t_plain_ms,
        **measured,
        **per_config[first],
        "configs": per_config,
    }


def _config_status(model: RouteModel, config: str) -> dict[str, Any]:
    classes: dict[str, dict[str, float]] = {}
    for cls in CLASSES:
        p = model.posterior.predict(class_inputs(cls), config)
        prior = model.prior.class_speedup.get(cls, 1.0) if config == MTP_CONFIG else 1.0
        classes[cls] = {"value": p.speedup, "low": p.sample(-1.0), "high": p.sample(1.0),
                        "prior": prior}
    sampled = model.sampled_speedup(config)
    weights = model.posterior.weights(config).items()
    return {
        "sampled": {"value": sampled.speedup, "low": sampled.sample(-1.0),
                    "high": sampled.sample(1.0),
                    "n": model.evidence.sampled.get(config, ScalarEvidence()).n},
        "classes": classes,
        "weights": {name: {"mean": m, "sd": s} for name, (m, s) in weights},
    }


def pace_status(model: RouteModel, configs: Iterable[str] = ()) -> dict[str, Any]:
    """The paces the decisions use, per speculation config, where they come from (prior,
    probe, log), and what they say of the prior (`/readyz`, the dashboard)."""
    measured = paces(model, configs)
    notes = [note for note in (prior_note(model.prior, p) for p in measured) if note]
    return {"prior": model.prior.name, "pace": {p.profile: p.as_dict() for p in measured},
            "prior_notes": notes}


ONLINE = web.AppKey("online", OnlineModel)
