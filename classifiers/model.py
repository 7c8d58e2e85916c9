"""The trained workload classifier at serving time: exported weights scored with numpy.

Scoring (`TrainedScorer.score`) is pure and cheap: hashed character n-grams of the bounded
text plus the standardised request features, one linear layer, a softmax. No scikit-learn or
torch is imported here. `load_artifact` is the only I/O: it reads and validates an artifact
and refuses one built for another feature schema.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from classifiers import artifact
from classifiers.artifact import ArtifactError
from classifiers.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, Features
from classifiers.language import guess_lang
from classifiers.ngrams import FieldMemo, HashSettings, hashed
from classifiers.request_view import RequestView
from classifiers.scores import Scores

__all__ = ["DEFAULT_ARTIFACT", "ArtifactError", "TrainedScorer", "load_artifact", "numeric_row"]

DEFAULT_ARTIFACT: Final = Path(__file__).parent / "artifacts" / "workload-lr.npz"

# Count-like features enter the model as log1p(value); the rest as they are.
LOG_SCALED: Final = frozenset({"n_tools", "tool_schema_chars", "n_messages", "code_fences",
                               "max_tokens", "prompt_tokens", "last_user_tokens",
                               "system_chars"})
_LOG_MASK: Final = np.array([name in LOG_SCALED for name in FEATURE_NAMES])

FloatArray = npt.NDArray[np.float32]


def numeric_row(values: Sequence[float]) -> FloatArray:
    """Features as the model reads them (before standardising)."""
    row = np.asarray(values, dtype=np.float32)
    return np.where(_LOG_MASK, np.log1p(np.maximum(row, 0.0)), row).astype(np.float32)


# The agent share a turn with agent structure gets (the rest keeps the model's proportions).
STRUCTURE_AGENT: Final = 0.9


def _agent_by_structure(probs: FloatArray, agent: int) -> FloatArray:
    """Unambiguous structure counts: at least STRUCTURE_AGENT on agent."""
    if probs[agent] >= STRUCTURE_AGENT:
        return probs
    rest = 1.0 - float(probs[agent])
    scaled = probs * ((1.0 - STRUCTURE_AGENT) / rest if rest > 0 else 0.0)
    scaled[agent] = STRUCTURE_AGENT
    return scaled.astype(np.float32)


@dataclass(frozen=True, slots=True)
class TrainedScorer:
    """A loaded artifact; immutable, so the router swaps whole scorers on reload."""

    name: str  # e.g. "lr-1a2b3c4d"
    path: Path
    mtime: float  # of the file when loaded: the router reloads when it changes
    classes: tuple[str, ...]
    settings: HashSettings
    meta: Mapping[str, Any]
    w_text: FloatArray
    w_num: FloatArray
    bias: FloatArray
    num_mean: FloatArray
    num_scale: FloatArray
    class_value: FloatArray
    # n-grams of recently seen field texts (system prompt, tool names, user turn): same result
    memo: FieldMemo = field(default_factory=FieldMemo, compare=False, repr=False)

    def score(self, view: RequestView, features: Features) -> Scores:
        probs = self.probabilities(view, features)
        if features.agent_structure and "agent" in self.classes:
            probs = _agent_by_structure(probs, self.classes.index("agent"))
        scores = {c: float(p) for c, p in zip(self.classes, probs)}
        top = self.classes[int(np.argmax(probs))]
        return Scores(top_class=top, lang=guess_lang(view, features), scores=scores,
                      p_spec=float(np.clip(probs @ self.class_value, 0.0, 1.0)),
                      artifact=self.name)

    def probabilities(self, view: RequestView, features: Features) -> FloatArray:
        idx, weights = hashed(view, self.settings, self.memo)
        numeric = (numeric_row(features.vector()) - self.num_mean) / self.num_scale
        logits = self.bias + numeric @ self.w_num
        if idx.size:
            # np.take gathers the same rows as `w_text[idx]`, ~3x faster than fancy indexing
            logits = logits + weights @ np.take(self.w_text, idx, axis=0)
        exp = np.exp(logits - logits.max())
        probs: FloatArray = (exp / exp.sum()).astype(np.float32)
        return probs

    def changed_on_disk(self) -> bool:
        """True when the file was replaced since this scorer was loaded (or is gone)."""
        try:
            return os.stat(self.path).st_mtime != self.mtime
        except OSError:
            return True


def load_artifact(path: Path | str = DEFAULT_ARTIFACT) -> TrainedScorer:
    """Read and validate an artifact; `ArtifactError` when missing, corrupt or mismatched."""
    path = Path(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read artifact ({exc.strerror})") from exc
    data = artifact.load(path, schema_version=FEATURE_SCHEMA_VERSION,
                         feature_names=FEATURE_NAMES)
    meta, arrays = data.meta, data.arrays
    try:
        settings = HashSettings.from_dict(meta["hash"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: bad hash settings ({exc})") from exc
    return TrainedScorer(
        name=str(meta.get("name") or f"lr-{meta['weights_sha256'][:8]}"), path=path,
        mtime=mtime, classes=tuple(meta["classes"]), settings=settings, meta=meta,
        w_text=arrays["w_text"], w_num=arrays["w_num"], bias=arrays["bias"],
        num_mean=arrays["num_mean"], num_scale=arrays["num_scale"],
        class_value=arrays["class_value"],
    )
