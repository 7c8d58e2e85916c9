"""The classifier's holder hot-reloads the artifact through the one file reloader: a new
artifact is swapped in, a bad one leaves the old in force and is counted once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from classifiers.model import DEFAULT_ARTIFACT
from router.learning.scorer_holder import ScorerHolder


def _replace(path: Path, source: Path | None = None, data: bytes = b"") -> None:
    temp = path.with_name("incoming.npz")
    if source is not None:
        shutil.copyfile(source, temp)
    else:
        temp.write_bytes(data)
    os.replace(temp, path)


def test_a_new_artifact_is_swapped_in_and_a_bad_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "model.npz"
    shutil.copyfile(DEFAULT_ARTIFACT, path)
    holder = ScorerHolder(str(path))
    first = holder.current
    assert holder.reload_if_changed() is False
    _replace(path, data=b"not an artifact")
    assert holder.reload_if_changed() is False and holder.reload_if_changed() is False
    assert holder.current is first and holder.reloads_failed == 1
    _replace(path, source=DEFAULT_ARTIFACT)
    assert holder.reload_if_changed() is True
    assert holder.current is not first and holder.current.name == first.name
    assert (holder.reloads_ok, holder.reloads_failed) == (1, 1)


def test_named_scorers_watch_no_file() -> None:
    holder = ScorerHolder("rules")
    assert holder.reload_if_changed() is False and holder.reloads_failed == 0
