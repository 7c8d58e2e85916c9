"""The model artifact on disk: one `.npz` holding weights and a JSON metadata record.

Writing is atomic (temp file, then `os.replace`), so a running proxy never reads half a file.
Reading validates everything (format, feature schema, arrays and their shapes, the weights'
digest) before anything is used, and fails with `ArtifactError` naming the file and what is
wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

FORMAT_VERSION: Final = 1
# The arrays an artifact must hold, and the only ones a new artifact is written with.
ARRAYS: Final = ("w_text", "w_num", "bias", "num_mean", "num_scale")
# What artifacts written before p_spec became the decision's (the shipped one among them) hold
# besides: `class_value`, the classifier's old per-class p_spec map. Their recorded digest
# covers it, so it is read and checked when present; nothing uses it.
LEGACY_ARRAYS: Final = ("class_value",)

FloatArray = npt.NDArray[np.float32]


class ArtifactError(ValueError):
    """The artifact is missing, corrupt, or was built for other features."""


@dataclass(frozen=True, slots=True)
class ArtifactData:
    meta: dict[str, Any]
    arrays: dict[str, FloatArray]


def _stored(names: Iterable[str]) -> tuple[str, ...]:
    """The arrays an artifact stores and its digest covers, in order: `ARRAYS`, then any
    legacy array among `names` (only an older artifact, or a copy of one, holds it)."""
    present = set(names)
    return (*ARRAYS, *(name for name in LEGACY_ARRAYS if name in present))


def weights_digest(arrays: dict[str, FloatArray]) -> str:
    digest = hashlib.sha256()
    for name in _stored(arrays):
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def save(path: Path, meta: dict[str, Any], arrays: dict[str, FloatArray]) -> None:
    """Write the artifact atomically (the proxy may be reading the old one). The trainer
    gives only `ARRAYS`, so a new artifact holds no legacy array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    payload: dict[str, Any] = {name: np.asarray(arrays[name], dtype=np.float32)
                               for name in _stored(arrays)}
    payload["meta"] = np.array(json.dumps(meta, sort_keys=True))
    np.savez_compressed(buffer, **payload)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)


def load(path: Path, *, schema_version: int, feature_names: tuple[str, ...]) -> ArtifactData:
    if not path.is_file():
        raise ArtifactError(f"{path}: no such artifact file")
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"]))
            present = [name for name in (*ARRAYS, *LEGACY_ARRAYS) if name in npz.files]
            arrays = {name: np.asarray(npz[name], dtype=np.float32) for name in present}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ArtifactError(f"{path}: not a readable classifier artifact ({exc})") from exc
    _check(path, meta, arrays, schema_version, feature_names)
    return ArtifactData(meta=meta, arrays=arrays)


def _check(path: Path, meta: Any, arrays: dict[str, FloatArray], schema_version: int,
           feature_names: tuple[str, ...]) -> None:
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path}: artifact format {meta.get('format_version')!r} is not "
                            f"{FORMAT_VERSION}")
    if meta.get("feature_schema_version") != schema_version:
        raise ArtifactError(
            f"{path}: built for feature schema {meta.get('feature_schema_version')!r}, this "
            f"code extracts schema {schema_version}: retrain with `specroute train`")
    if tuple(meta.get("feature_names", ())) != feature_names:
        raise ArtifactError(f"{path}: feature names differ from this code's; retrain")
    n_classes = len(meta.get("classes", ()))
    dim = int(meta.get("hash", {}).get("dim", -1))
    expected = {"w_text": (dim, n_classes), "w_num": (len(feature_names), n_classes),
                "bias": (n_classes,), "num_mean": (len(feature_names),),
                "num_scale": (len(feature_names),), "class_value": (n_classes,)}
    for name, shape in expected.items():
        if name not in arrays:
            if name in LEGACY_ARRAYS:  # only older artifacts hold it
                continue
            raise ArtifactError(f"{path}: no {name} array: not a complete classifier artifact")
        if arrays[name].shape != shape:
            raise ArtifactError(f"{path}: {name} has shape {arrays[name].shape}, expected {shape}")
        if not np.all(np.isfinite(arrays[name])):
            raise ArtifactError(f"{path}: {name} holds non-finite values")
    if meta.get("weights_sha256") != weights_digest(arrays):
        raise ArtifactError(f"{path}: weights do not match their recorded sha256 (corrupt)")
