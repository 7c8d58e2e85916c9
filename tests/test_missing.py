"""The last line of a test run: what it skipped, why, and the one command that installs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.missing import CHROMIUM, ENVOY, REDIS, install_command, summary_line

ROOT = Path(__file__).resolve().parents[1]


def test_one_command_installs_every_missing_thing_apt_first() -> None:
    assert install_command([REDIS, ENVOY, CHROMIUM, REDIS], root=False) == (
        "sudo apt-get install -y chromium redis-server && make envoy")
    assert install_command([REDIS], root=True) == "apt-get install -y redis-server"


def test_the_line_counts_each_reason_and_names_the_command() -> None:
    redis = f"Skipped: redis-server is not installed [missing: redis-server]: {REDIS.install}"
    line = summary_line([redis, redis, "Skipped: a reason of its own"], root=False)
    assert line == ("skipped: 3 tests, 2 because redis-server is not installed, 1 because a "
                    "reason of its own; to run them: sudo apt-get install -y redis-server")
    assert summary_line([]) == "skipped: nothing"


def test_a_run_ends_with_that_line(tmp_path: Path) -> None:
    tests = tmp_path / "test_needs.py"
    tests.write_text(
        "import pytest\n"
        "from tests.missing import CHROMIUM, REDIS, skip_missing\n"
        "def test_redis_a(): skip_missing(REDIS)\n"
        "def test_redis_b(): skip_missing(REDIS)\n"
        "def test_chromium(): skip_missing(CHROMIUM)\n"
        "def test_runs(): assert True\n")
    env = {k: v for k, v in os.environ.items() if k != "SPECROUTE_REQUIRE_LOCAL"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.missing", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tests)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    sudo = "" if os.geteuid() == 0 else "sudo "
    assert done.stdout.strip().splitlines()[-1] == (
        "skipped: 3 tests, 2 because redis-server is not installed, 1 because Debian's chromium "
        f"is not installed; to run them: {sudo}apt-get install -y chromium redis-server")


def test_in_ci_a_missing_thing_fails_instead(tmp_path: Path) -> None:
    tests = tmp_path / "test_needs.py"
    tests.write_text("from tests.missing import REDIS, skip_missing\n"
                     "def test_redis(): skip_missing(REDIS)\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.missing", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tests)],
        cwd=ROOT, env={**os.environ, "SPECROUTE_REQUIRE_LOCAL": "1"}, capture_output=True,
        text=True, timeout=120, check=False)
    assert done.returncode == 1 and "SPECROUTE_REQUIRE_LOCAL is set" in done.stdout
