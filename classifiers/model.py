"""The trained workload classifier at serving time: exported weights scored with numpy.

Scoring (`TrainedScorer.score`) is pure and cheap: hashed character n-grams of the bounded
text plus the standardised request features, one linear layer, a softmax. Serving sums the
layer field by field (each field text's share of the logits is remembered for the next request
that resends it, as agent loops do) and takes the softmax of the few class logits in plain
Python: per request that is a handful of numpy calls instead of ~25, each of which costs
microseconds on a proxy whose caches the network traffic keeps cold. No scikit-learn or
torch is imported here. `load_artifact` is the only I/O: it reads and validates an artifact
and refuses one built for another feature schema.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from classifiers import artifact
from classifiers.artifact import ArtifactError
from classifiers.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, Features, feature_values
from classifiers.language import guess_lang
from classifiers.ngrams import HashSettings, field_weights, seeded_fields
from classifiers.request_view import RequestView
from classifiers.scores import Scores

__all__ = ["DEFAULT_ARTIFACT", "ArtifactError", "TrainedScorer", "load_artifact", "numeric_row"]

DEFAULT_ARTIFACT: Final = Path(__file__).parent / "artifacts" / "workload-lr.npz"

# Count-like features enter the model as log1p(value); the rest as they are.
LOG_SCALED: Final = frozenset({"n_tools", "tool_schema_chars", "n_messages", "code_fences",
                               "max_tokens", "prompt_tokens", "last_user_tokens",
                               "system_chars"})
_LOG_MASK: Final = np.array([name in LOG_SCALED for name in FEATURE_NAMES])
_LOG_SCALED_AT: Final = tuple(i for i, m in enumerate(_LOG_MASK) if m)  # 8 of 27 positions

FloatArray = npt.NDArray[np.float32]


def numeric_row(values: Sequence[float]) -> FloatArray:
    """Features as the model reads them (before standardising)."""
    row = np.asarray(values, dtype=np.float32)
    return np.where(_LOG_MASK, np.log1p(np.maximum(row, 0.0)), row).astype(np.float32)


def _numeric_values(features: Features) -> list[float]:
    """`numeric_row` in plain Python, for one request (the same values up to float32 rounding):
    only the log-scaled positions are visited."""
    row: list[float] = list(feature_values(features))
    for i in _LOG_SCALED_AT:
        row[i] = math.log1p(max(row[i], 0.0))
    return row


# The agent share a turn with agent structure gets (the rest keeps the model's proportions).
STRUCTURE_AGENT: Final = 0.9


def _agent_by_structure(probs: list[float], agent: int) -> list[float]:
    """Unambiguous structure counts: at least STRUCTURE_AGENT on agent."""
    if probs[agent] >= STRUCTURE_AGENT:
        return probs
    rest = 1.0 - probs[agent]
    factor = (1.0 - STRUCTURE_AGENT) / rest if rest > 0 else 0.0
    scaled = [p * factor for p in probs]
    scaled[agent] = STRUCTURE_AGENT
    return scaled


class FieldShares:
    """Each recent field text's share of the logits (its n-grams' weight rows, weighted and
    summed), owned by one scorer: the shares depend on its weights (no global). An agent loop
    resends the same system prompt, tool names and last user turn with every tool result; only
    the context's tail is new. Bounded: `size` entries of a few thousand characters each (least
    recently used first out)."""

    def __init__(self, share: Callable[[int, str], tuple[float, ...]], size: int = 64) -> None:
        self.get = functools.lru_cache(maxsize=size)(share)

    def __len__(self) -> int:
        return self.get.cache_info().currsize


def text_share(w_text: FloatArray, settings: HashSettings, n_classes: int, seed: int,
               text: str) -> tuple[float, ...]:
    """One field's share of the logits: its n-grams' weight rows, weighted and summed."""
    idx, weights = field_weights(seed, text, settings)
    if not idx.size:
        return (0.0,) * n_classes
    # take gathers the same rows as `w_text[idx]`, faster than fancy indexing (the method: not
    # np.take's Python wrapper)
    return tuple((weights @ w_text.take(idx, axis=0)).tolist())


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
    # the text shares of recently seen field texts (system prompt, tool names, user turn)
    memo: FieldShares = field(init=False, compare=False, repr=False)
    # derived once from the weights: standardising folded into the numeric layer
    _w_num_scaled: npt.NDArray[np.float64] = field(init=False, compare=False, repr=False)
    _bias_folded: npt.NDArray[np.float64] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # ((x - mean) / scale) @ w + b == x @ (w / scale) + (b - (mean / scale) @ w)
        # float64, as the row built per request: no dtype to infer or promote per call
        object.__setattr__(self, "_w_num_scaled",
                           (self.w_num / self.num_scale[:, None]).astype(np.float64))
        object.__setattr__(self, "_bias_folded",
                           (self.bias - (self.num_mean / self.num_scale) @ self.w_num).astype(np.float64))
        object.__setattr__(self, "memo", FieldShares(
            functools.partial(text_share, self.w_text, self.settings, len(self.classes))))

    def score(self, view: RequestView, features: Features) -> Scores:
        probs = self._probabilities(view, features)
        if features.agent_structure and "agent" in self.classes:
            probs = _agent_by_structure(probs, self.classes.index("agent"))
        return Scores(top_class=self.classes[probs.index(max(probs))],
                      lang=guess_lang(view, features), scores=dict(zip(self.classes, probs)),
                      artifact=self.name)

    def probabilities(self, view: RequestView, features: Features) -> FloatArray:
        return np.array(self._probabilities(view, features), dtype=np.float32)

    def _probabilities(self, view: RequestView, features: Features) -> list[float]:
        row = np.array(_numeric_values(features), dtype=np.float64)
        logits: list[float] = (self._bias_folded + row @ self._w_num_scaled).tolist()
        for seed, text in seeded_fields(view, self.settings):
            if text:
                logits = [a + b for a, b in zip(logits, self.memo.get(seed, text))]
        top = max(logits)
        exp = [math.exp(x - top) for x in logits]
        total = sum(exp)
        return [e / total for e in exp]

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
    # Artifacts written before p_spec became the decision's (the shipped one among them) also
    # carry `class_value`, the classifier's old per-class p_spec map: its bytes are in their
    # recorded digest, so `artifact.load` reads and checks it; the scorer ignores it.
    return TrainedScorer(
        name=str(meta.get("name") or f"lr-{meta['weights_sha256'][:8]}"), path=path,
        mtime=mtime, classes=tuple(meta["classes"]), settings=settings, meta=meta,
        w_text=arrays["w_text"], w_num=arrays["w_num"], bias=arrays["bias"],
        num_mean=arrays["num_mean"], num_scale=arrays["num_scale"],
    )
