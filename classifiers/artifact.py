"""The model artifact on disk: one `.npz` holding weights and a JSON metadata record.

Writing is atomic (temp file, then `os.replace`), so a running proxy never reads half a file.
Reading validates everything (format, feature schema, shapes) before anything is used, and
fails with `ArtifactError` naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

FORMAT_VERSION: Final = 1
ARRAYS: Final = ("w_text", "w_num", "bias", "num_mean", "num_scale", "class_value")

FloatArray = npt.NDArray[np.float32]


class ArtifactError(ValueError):
    """The artifact is missing, corrupt, or was built for other features."""


@dataclass(frozen=True, slots=True)
class ArtifactData:
    meta: dict[str, Any]
    arrays: dict[str, FloatArray]


def weights_digest(arrays: dict[str, FloatArray]) -> str:
    digest = hashlib.sha256()
    for name in ARRAYS:
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def save(path: Path, meta: dict[str, Any], arrays: dict[str, FloatArray]) -> None:
    """Write the artifact atomically (the proxy may be reading the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    payload: dict[str, Any] = {name: np.asarray(arrays[name], dtype=np.float32)
                               for name in ARRAYS}
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
            arrays = {name: np.asarray(npz[name], dtype=np.float32) for name in ARRAYS}
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
        if arrays[name].shape != shape:
            raise ArtifactError(f"{path}: {name} has shape {arrays[name].shape}, expected {shape}")
        if not np.all(np.isfinite(arrays[name])):
            raise ArtifactError(f"{path}: {name} holds non-finite values")
    if meta.get("weights_sha256") != weights_digest(arrays):
        raise ArtifactError(f"{path}: weights do not match their recorded sha256 (corrupt)")
