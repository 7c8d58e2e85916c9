"""Build llama-server from the llama.cpp vendored in the pinned `llama-cpp-python` sdist.

Debian has no llama.cpp package and no hub is reachable: the sdist (PyPI) vendors llama.cpp
(commit 0c1e570) under `vendor/llama.cpp`. Only the `llama-server` target is built, with the
native CPU flags, so the result is cached per machine and CPU:
`<cache>/llama-server-<commit>-<machine>-<cpu>/llama-server`. A second call returns at once.
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
from pathlib import Path

from backends.localcache import (
    LocalBackendError,
    Progress,
    exclusive,
    pip_download,
    run_streaming,
    sha256_file,
)

SDIST_REQUIREMENT = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_CPP_COMMIT = "0c1e570"
BINARY = "llama-server"

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # ON downloads a web UI at build time, which fails offline
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


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


def server_dir(root: Path) -> Path:
    return root / f"llama-server-{LLAMA_CPP_COMMIT}-{machine_tag()}"


def cached_server(root: Path) -> Path | None:
    """The built binary if it is in the cache, else None (never builds)."""
    binary = server_dir(root) / BINARY
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure_llama_server(root: Path, progress: Progress, *, jobs: int | None = None) -> Path:
    """The cached llama-server binary, building it first if needed (5-10 min on 2 cores)."""
    found = cached_server(root)
    if found is not None:
        return found
    with exclusive(root, "llama-server", progress):
        found = cached_server(root)  # another process may have built it while we waited
        if found is not None:
            return found
        _require_tools()
        sdist = _ensure_sdist(root, progress)
        return _build(root, sdist, progress, jobs or os.cpu_count() or 2)


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


def _build(root: Path, sdist: Path, progress: Progress, jobs: int) -> Path:
    final = server_dir(root)
    work = Path(tempfile.mkdtemp(prefix=".build-llama-server-", dir=root))
    log = root / "logs" / f"llama-server-build-{time.strftime('%Y%m%dT%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        progress(f"building llama-server (llama.cpp {LLAMA_CPP_COMMIT}) with {jobs} jobs; "
                 f"log: {log}")
        source = _unpack(sdist, work)
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run_streaming(["cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS],
                      progress, prefix="  cmake: ", keep=lambda line: "Error" in line, log=log)
        # Ninja prints "[12/206] Building ...", make "[ 12%] Building ...": that is the progress.
        run_streaming(["cmake", "--build", str(build), "-j", str(jobs), "--target", BINARY],
                      progress, prefix="  ", keep=lambda line: line.startswith("["), log=log)
        return _install(build / "bin" / BINARY, final, log, time.monotonic() - started, progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _unpack(sdist: Path, work: Path) -> Path:
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    source = work / SDIST_FILE.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise LocalBackendError(f"{sdist} has no vendor/llama.cpp/CMakeLists.txt")
    return source


def _install(built: Path, final: Path, log: Path, seconds: float, progress: Progress) -> Path:
    """Move the binary into a temporary sibling of `final`, then rename it into place."""
    if not built.is_file():
        raise LocalBackendError(f"the build finished but {built} is missing (log: {log})")
    staging = Path(tempfile.mkdtemp(prefix=".install-llama-server-", dir=final.parent))
    shutil.move(str(built), staging / BINARY)
    (staging / "build-info.json").write_text(json.dumps({
        "commit": LLAMA_CPP_COMMIT, "sdist": SDIST_REQUIREMENT, "sdist_sha256": SDIST_SHA256,
        "machine": machine_tag(), "cmake_flags": list(CMAKE_FLAGS),
        "build_seconds": round(seconds, 1), "log": str(log),
    }, indent=2) + "\n")
    if final.exists():  # a broken earlier install (no binary): we hold the lock, replace it
        shutil.rmtree(final)
    os.replace(staging, final)
    progress(f"built {final / BINARY} in {seconds:.0f}s")
    return final / BINARY
