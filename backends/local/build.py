"""Build llama-server from the llama.cpp vendored in the pinned `llama-cpp-python` sdist.

Debian has no llama.cpp package and no hub is reachable: the sdist (PyPI) vendors llama.cpp
(commit 0c1e570) under `vendor/llama.cpp`. Only the `llama-server` target is built, with the
flag sets of `backends.local.flags` in turn (native without AMX, then AVX2 only). A binary is
cached only after it generated tokens on a small model (`backends.local.smoke`), under
`<cache>/llama-server-<commit>-<flag set>-<machine>-<cpu>/llama-server`; a set that failed
leaves `<that dir>.failed.json` and is skipped from then on. A second call returns at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from backends.local.cache import (
    LocalBackendError,
    Progress,
    exclusive,
    pip_download,
    run_streaming,
    sha256_file,
)
from backends.local.flags import FlagSet, flag_sets, server_dir_name
from backends.local.smoke import SMOKE_TOKENS, SmokeResult, smoke_test

SDIST_REQUIREMENT = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_CPP_COMMIT = "0c1e570"
BINARY = "llama-server"


def machine_tag(cpuinfo: str | None = None) -> str:
    """`x86_64-1a2b3c4d`: the architecture and a digest of the CPU model and its flags
    (GGML_NATIVE ties the binary to the CPU that built it)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    lines = sorted({line.strip() for line in cpuinfo.splitlines() if line.startswith(wanted)})
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:8]
    return f"{platform.machine() or 'unknown'}-{digest}"


def server_dir(root: Path, flags: FlagSet) -> Path:
    return root / server_dir_name(LLAMA_CPP_COMMIT, flags, machine_tag())


def failure_marker(root: Path, flags: FlagSet) -> Path:
    """Written when a binary of `flags` failed its smoke test: that set is not built again
    (delete the file to retry it)."""
    return root / f"{server_dir(root, flags).name}.failed.json"


def _flag_sets() -> tuple[FlagSet, ...]:
    return flag_sets(platform.machine())


def cached_server(root: Path) -> Path | None:
    """The built binary of the best flag set not known to fail, if cached (never builds)."""
    for flags in _flag_sets():
        binary = server_dir(root, flags) / BINARY
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
        if not failure_marker(root, flags).is_file():
            return None  # a better set is still untried: build it rather than settle
    return None


def server_summary(binary: Path) -> str:
    """One line: which binary, which llama.cpp and which flags (from its build-info.json)."""
    try:
        info = json.loads((binary.parent / "build-info.json").read_text())
        flags = f"{info['flag_set']} ({info['flag_summary']})"
    except (OSError, ValueError, KeyError):
        flags = "unknown flags (no build-info.json)"
    return f"llama-server {binary}, llama.cpp {LLAMA_CPP_COMMIT}, flags {flags}"


# (flags, empty work dir, log file, progress) -> the built, untested binary
Builder = Callable[[FlagSet, Path, Path, Progress], Path]


def ensure_llama_server(
    root: Path, progress: Progress, smoke_model: Path, *, jobs: int | None = None,
    build: Builder | None = None,
) -> Path:
    """The cached llama-server, building it first if needed (5-10 min on 2 cores).

    Each flag set is tried in turn: built, smoke-tested on `smoke_model`, and cached only if it
    generated tokens. Raises LocalBackendError naming every set tried and quoting the end of
    the last server log when none works.
    """
    found = cached_server(root)
    if found is not None:
        return found
    build = build or cmake_builder(root, jobs or os.cpu_count() or 2)
    with exclusive(root, "llama-server", progress):
        found = cached_server(root)  # another process may have built it while we waited
        if found is not None:
            return found
        failures: list[str] = []
        tail = ""
        for index, flags in enumerate(_flag_sets()):
            marker = failure_marker(root, flags)
            if marker.is_file():
                progress(f"skipping flags {flags.name}: they failed the smoke test before "
                         f"({marker}; delete it to retry)")
                failures.append(f"{flags.describe()}: {_marker_detail(marker)}")
                continue
            if index > 0:
                progress(f"rebuilding once with conservative flags: {flags.describe()}")
            binary, result = _build_and_smoke(root, flags, smoke_model, build, progress)
            if binary is not None:
                return binary
            failures.append(f"{flags.describe()}: {result.detail}")
            tail = result.log_tail or tail
        raise LocalBackendError(
            "no llama-server build works on this CPU. Flags tried:\n  " + "\n  ".join(failures)
            + (f"\nend of the last server log:\n{tail}" if tail else "")
        )


def _build_and_smoke(
    root: Path, flags: FlagSet, smoke_model: Path, build: Builder, progress: Progress
) -> tuple[Path | None, SmokeResult]:
    """Build with `flags` in a scratch directory and smoke-test the result; install it into
    the cache only when it works, else leave a failure marker."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    log = root / "logs" / f"llama-server-build-{flags.name}-{stamp}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-llama-server-", dir=root))
    started = time.monotonic()
    try:
        progress(f"building llama-server (llama.cpp {LLAMA_CPP_COMMIT}), flags "
                 f"{flags.describe()}; log: {log}")
        try:
            built = build(flags, work, log, progress)
        except LocalBackendError as error:
            # no server log to quote: the build's own log holds the compiler's output
            result = SmokeResult(False, f"the build failed: {str(error).splitlines()[0]}", "")
            return None, result
        seconds = time.monotonic() - started
        progress(f"built in {seconds:.0f}s; smoke test: {smoke_model.name}, "
                 f"{SMOKE_TOKENS} tokens")
        result = smoke_test(built, smoke_model, root / "logs" / f"llama-server-smoke-{flags.name}"
                            f"-{stamp}.log")
        if not result.ok:
            progress(f"smoke test FAILED with flags {flags.name}: {result.detail}")
            _write_marker(root, flags, result)
            return None, result
        progress(f"smoke test passed: {result.detail}")
        return _install(built, root, flags, log, seconds, result, progress), result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_marker(root: Path, flags: FlagSet, result: SmokeResult) -> None:
    failure_marker(root, flags).write_text(json.dumps({
        "flag_set": flags.name, "cmake_flags": list(flags.cmake_flags), "detail": result.detail,
        "log_tail": result.log_tail, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2) + "\n")


def _marker_detail(marker: Path) -> str:
    try:
        return str(json.loads(marker.read_text())["detail"])
    except (OSError, ValueError, KeyError):
        return "failed earlier"


def cmake_builder(root: Path, jobs: int) -> Builder:
    """The real build: the pinned sdist's vendored llama.cpp, only the server target."""

    def build(flags: FlagSet, work: Path, log: Path, progress: Progress) -> Path:
        _require_tools()
        source = _unpack(_ensure_sdist(root, progress), work)
        out = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run_streaming(["cmake", "-S", str(source), "-B", str(out), *generator,
                       *flags.cmake_flags],
                      progress, prefix="  cmake: ", keep=lambda line: "Error" in line, log=log)
        # Ninja prints "[12/206] Building ...", make "[ 12%] Building ...": that is the progress.
        run_streaming(["cmake", "--build", str(out), "-j", str(jobs), "--target", BINARY],
                      progress, prefix="  ", keep=lambda line: line.startswith("["), log=log)
        built = out / "bin" / BINARY
        if not built.is_file():
            raise LocalBackendError(f"the build finished but {built} is missing (log: {log})")
        return built

    return build


def _require_tools() -> None:
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        raise LocalBackendError(
            f"building llama-server needs {', '.join(missing)}: "
            "apt-get install cmake g++ (and optionally ninja-build)"
        )


def _ensure_sdist(root: Path, progress: Progress) -> Path:
    dest = root / "downloads" / "llama-cpp-python"
    sdist = dest / SDIST_FILE
    if not sdist.is_file():
        pip_download([SDIST_REQUIREMENT], dest, progress, source=True)
    actual = sha256_file(sdist)
    if actual != SDIST_SHA256:
        sdist.unlink()
        raise LocalBackendError(
            f"{sdist}: sha256 {actual} is not the pinned {SDIST_SHA256}; removed, retry"
        )
    return sdist


def _unpack(sdist: Path, work: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    source = work / SDIST_FILE.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise LocalBackendError(f"{sdist} has no vendor/llama.cpp/CMakeLists.txt")
    return source


def _install(
    built: Path, root: Path, flags: FlagSet, log: Path, seconds: float, smoke: SmokeResult,
    progress: Progress,
) -> Path:
    """Move the tested binary into a temporary sibling of its cache dir, then rename it in."""
    final = server_dir(root, flags)
    staging = Path(tempfile.mkdtemp(prefix=".install-llama-server-", dir=root))
    shutil.move(str(built), staging / BINARY)
    (staging / "build-info.json").write_text(json.dumps({
        "commit": LLAMA_CPP_COMMIT, "sdist": SDIST_REQUIREMENT, "sdist_sha256": SDIST_SHA256,
        "machine": machine_tag(), "flag_set": flags.name, "flag_summary": flags.summary,
        "cmake_flags": list(flags.cmake_flags), "build_seconds": round(seconds, 1),
        "smoke_test": smoke.detail, "log": str(log),
    }, indent=2) + "\n")
    if final.exists():  # a broken earlier install (no binary): we hold the lock, replace it
        shutil.rmtree(final)
    os.replace(staging, final)
    progress(f"cached {final / BINARY}")
    return final / BINARY
