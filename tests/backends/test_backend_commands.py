"""`specroute backends up --detach | status | down` as real processes, with fake engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from backends.backend_commands import state_path
from tests.backends.test_supervisor import REPO, alive, fake_spec


def cli(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "tests.backends.cli_driver", "backends", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def wait_until(check: object, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.05)
    return False


def test_up_detach_status_down(tmp_path: Path) -> None:
    config = tmp_path / "specs.json"
    specs = [fake_spec("a"), fake_spec("b")]
    config.write_text(json.dumps([spec.model_dump() for spec in specs]))
    logs = tmp_path / "logs"

    up = cli(tmp_path, "up", "--config", str(config), "--detach", "--log-dir", str(logs),
             "--health-interval", "0.2")
    try:
        _check_detached(tmp_path, config, up)
    finally:
        cli(tmp_path, "down", "--config", str(config))  # never leave the supervisor behind


def _check_detached(tmp_path: Path, config: Path, up: subprocess.CompletedProcess[str]) -> None:
    assert up.returncode == 0, up.stderr
    assert "supervisor pid" in up.stdout
    state = state_path(str(config), tmp_path / "cache" / "specroute")
    recorded = json.loads(state.read_text())
    pids = {name: row["pid"] for name, row in recorded["backends"].items()}
    supervisor = recorded["supervisor_pid"]
    assert set(pids) == {"a", "b"} and all(alive(pid) for pid in pids.values())

    again = cli(tmp_path, "up", "--config", str(config), "--detach")
    assert again.returncode == 1 and "already run under supervisor pid" in again.stderr

    status = cli(tmp_path, "status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stdout
    rows = json.loads(status.stdout)
    assert {name: (row["healthy"], row["pid"]) for name, row in rows.items()} == {
        "a": (True, pids["a"]), "b": (True, pids["b"])}
    assert {row["spec"] for row in rows.values()} == {"plain"}

    # a backend killed behind the supervisor's back is restarted and its new PID recorded
    os.kill(pids["a"], signal.SIGKILL)
    assert wait_until(lambda: json.loads(state.read_text())["backends"]["a"]["pid"]
                      not in (None, pids["a"]) and
                      json.loads(state.read_text())["backends"]["a"]["healthy"])
    new_a = json.loads(state.read_text())["backends"]["a"]["pid"]

    down = cli(tmp_path, "down", "--config", str(config))
    assert down.returncode == 0 and "stopped 2 backend(s)" in down.stdout
    assert not state.exists()
    assert wait_until(lambda: not any(alive(p) for p in (supervisor, new_a, pids["b"])))

    after = cli(tmp_path, "status", "--config", str(config))
    assert after.returncode == 1 and "False" in after.stdout
    assert after.stdout.split()[:3] == ["name", "spec", "engine"]  # the config, not `profile`
    assert "nothing to stop" in cli(tmp_path, "down", "--config", str(config)).stdout


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "specs.json"
    config.write_text(json.dumps([{"name": "x", "profile": "mtp", "engine": "ds4",
                                   "launch": {"model": "m", "port": 1}}]))
    result = cli(tmp_path, "up", "--config", str(config))
    assert result.returncode == 2
    assert "ds4 with profile mtp needs launch.draft" in result.stderr
