"""Training the workload classifier: corpus rows -> design matrix -> logistic regression ->
exported numpy weights (the artifact).

Imports scikit-learn and scipy (the `train` extra); the serving path never imports this module.
The artifact holds the classifier alone: whether speculation pays is the route model's to
predict, from what the decision log teaches it (`policies.learner`), not the trainer's.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp  # type: ignore[import-untyped]
from sklearn.exceptions import ConvergenceWarning  # type: ignore[import-untyped]
from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from classifiers import artifact
from classifiers.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION, TokenCounter, extract
from classifiers.model import numeric_row
from classifiers.ngrams import HashSettings, hashed
from classifiers.request_view import view_request
from classifiers.scores import CLASSES
from classifiers.training.data.rows import Row

FloatArray = npt.NDArray[np.float32]
# Leave-one-source-out chose it: at C=2 the weak left-out sources score higher than at 8
# (chitchat 0.58 against 0.56, evalscope 0.68 against 0.56) at the same held-out figure.
DEFAULT_C: Final = 2.0


@dataclass(frozen=True, slots=True)
class Encoded:
    """Rows turned into model inputs (numeric part unstandardised)."""

    numeric: FloatArray  # (n, n_features)
    text: Any  # scipy CSR (n, dim)
    labels: npt.NDArray[np.int64]

    def subset(self, mask: npt.NDArray[np.bool_]) -> Encoded:
        return Encoded(self.numeric[mask], self.text[mask], self.labels[mask])


@dataclass(frozen=True, slots=True)
class Fitted:
    """Exportable weights in serving layout (classes in `CLASSES` order)."""

    w_text: FloatArray
    w_num: FloatArray
    bias: FloatArray
    num_mean: FloatArray
    num_scale: FloatArray

    def probabilities(self, data: Encoded) -> FloatArray:
        numeric = (data.numeric - self.num_mean) / self.num_scale
        logits = numeric @ self.w_num + data.text @ self.w_text + self.bias
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        probs: FloatArray = (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)
        return probs


def encode(rows: Sequence[Row], settings: HashSettings,
           count_tokens: TokenCounter | None) -> Encoded:
    numeric = np.zeros((len(rows), len(FEATURE_NAMES)), dtype=np.float32)
    indptr, indices, values = [0], [], []
    for i, row in enumerate(rows):
        view = view_request("chat", dict(row.request))
        numeric[i] = numeric_row(extract(view, count_tokens).vector())
        idx, weights = hashed(view, settings)
        indices.append(idx)
        values.append(weights)
        indptr.append(indptr[-1] + idx.size)
    text = sp.csr_matrix((np.concatenate(values), np.concatenate(indices), np.array(indptr)),
                         shape=(len(rows), settings.dim), dtype=np.float32)
    text.sum_duplicates()
    labels = np.array([CLASSES.index(r.label) for r in rows], dtype=np.int64)
    return Encoded(numeric, text, labels)


def fit(data: Encoded, c: float = DEFAULT_C, max_iter: int = 400) -> Fitted:
    mean = data.numeric.mean(axis=0)
    scale = data.numeric.std(axis=0)
    scale = np.where(scale < 1e-6, 1.0, scale).astype(np.float32)
    numeric = (data.numeric - mean) / scale
    design = sp.hstack([sp.csr_matrix(numeric), data.text], format="csr")
    model = LogisticRegression(C=c, max_iter=max_iter, class_weight="balanced", tol=1e-4)
    if len(np.unique(data.labels)) < 3:
        raise ValueError("training needs rows of at least three classes")
    # One BLAS thread: on a busy two-core machine, spinning BLAS threads slow L-BFGS 2-3x.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        # the iteration cap is deliberate: held-out scores, not the optimiser, decide it
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(design, data.labels)
    coef = np.zeros((len(CLASSES), design.shape[1]), dtype=np.float32)
    bias = np.full(len(CLASSES), -30.0, dtype=np.float32)  # a class absent from training
    for k, label in enumerate(model.classes_):
        coef[label] = model.coef_[k]
        bias[label] = model.intercept_[k]
    n_num = len(FEATURE_NAMES)
    return Fitted(w_text=np.ascontiguousarray(coef[:, n_num:].T),
                  w_num=np.ascontiguousarray(coef[:, :n_num].T), bias=bias,
                  num_mean=mean.astype(np.float32), num_scale=scale)


def artifact_meta(fitted: Fitted, settings: HashSettings, corpus_sha256: str,
                  metrics: Mapping[str, Any], c: float
                  ) -> tuple[dict[str, Any], dict[str, FloatArray]]:
    arrays = {"w_text": fitted.w_text, "w_num": fitted.w_num, "bias": fitted.bias,
              "num_mean": fitted.num_mean, "num_scale": fitted.num_scale}
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
    digest = artifact.weights_digest(arrays)
    meta = {
        "format_version": artifact.FORMAT_VERSION,
        "name": f"lr-{digest[:8]}",
        "model": "multinomial logistic regression (hashed char n-grams + request features)",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "classes": list(CLASSES),
        "hash": settings.as_dict(),
        "training": {"corpus_sha256": corpus_sha256, "C": c},
        "metrics": dict(metrics),
        "weights_sha256": digest,
    }
    return meta, arrays
