"""The supervisor against real child processes (tests/backends/fake_engine.py) and a real
simulated engine: start, restart with backoff, health transitions, clean stop, no orphans."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec, LaunchSpec
from backends.supervisor import BackendStartError, BackendStatus, Supervisor, SupervisorSettings

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_spec(name: str, *args: str, ready_timeout_s: float = 20.0) -> BackendSpec:
    """A llamacpp launch whose command line (`python -m MODEL ...`) runs the fake engine."""
    launch = LaunchSpec(binary=sys.executable, model="tests.backends.fake_engine",
                        port=free_port(), args=list(args), cwd=str(REPO),
                        ready_timeout_s=ready_timeout_s)
    return BackendSpec(name=name, engine="llamacpp", profile="plain", launch=launch)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists" until reaped by its parent; it runs nothing any more.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


async def eventually(check: Callable[[], bool], seconds: float = 30.0) -> None:
    """Poll `check` (bounded) so tests wait for effects, never assert on durations."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {seconds}s")
        await asyncio.sleep(0.05)


async def serving_again(supervisor: Supervisor, name: str, old_pid: int) -> None:
    """Wait (bounded) until `name` is healthy again under a new process."""
    await eventually(lambda: supervisor.state(name).healthy
                     and supervisor.state(name).pid not in (None, old_pid))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def test_start_serves_logs_and_stop_leaves_no_process(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    grandchild_file = tmp_path / "grandchild.pid"
    spec = fake_spec("one", "--grandchild-pidfile", str(grandchild_file), "--ready-after", "0.3")
    supervisor = Supervisor(
        [spec], tmp_path / "logs", session=session,
        settings=SupervisorSettings(health_interval_s=0.1),
    )
    await supervisor.start()
    status = supervisor.state("one")
    assert status.healthy and status.launched and status.pid is not None
    pid, grandchild = status.pid, int(grandchild_file.read_text())
    assert alive(pid) and alive(grandchild)
    log = Path(status.log_path).read_text()
    assert "specroute starts:" in log and f"fake engine pid {pid}" in log

    await supervisor.stop()
    await eventually(lambda: not alive(pid) and not alive(grandchild))
    assert supervisor.state("one").healthy is False and supervisor.state("one").pid is None


async def test_killed_process_is_restarted_with_exponential_backoff(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    starts = tmp_path / "starts"
    spec = fake_spec("flaky", "--starts-file", str(starts), "--fail-starts", "3")
    delays: list[float] = []
    changes: list[tuple[str, bool]] = []

    async def record_sleep(seconds: float) -> None:
        delays.append(seconds)

    supervisor = Supervisor(
        [spec], tmp_path, session=session, backoff_sleep=record_sleep,
        settings=SupervisorSettings(health_interval_s=0.1, backoff_initial_s=0.5,
                                    backoff_max_s=1.5),
        on_change=lambda name, healthy, reason: changes.append((name, healthy)),
    )
    await supervisor.start()
    first_pid = supervisor.state("flaky").pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    # starts 2, 3 and 4 exit at once; start 5 serves again
    await serving_again(supervisor, "flaky", first_pid)
    status = supervisor.state("flaky")
    assert status.restarts == 4
    assert delays == [0.5, 1.0, 1.5, 1.5]  # doubled after each failure, capped
    assert int(starts.read_text()) == 5
    assert changes == [("flaky", True), ("flaky", False), ("flaky", True)]
    await supervisor.stop()
    assert status.pid is not None
    await eventually(lambda: not alive(status.pid or 0))


async def test_sigterm_ignored_escalates_to_sigkill(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    spec = fake_spec("stubborn", "--ignore-term")
    supervisor = Supervisor(
        [spec], tmp_path, session=session, settings=SupervisorSettings(stop_grace_s=0.5),
    )
    await supervisor.start()
    pid = supervisor.state("stubborn").pid
    assert pid is not None
    await supervisor.stop()
    assert not alive(pid)


async def test_hung_process_is_killed_and_restarted(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    hang = tmp_path / "hang"
    spec = fake_spec("hung", "--hang-file", str(hang))
    reasons: list[str] = []

    async def no_wait(seconds: float) -> None:
        reasons.append(supervisor.state("hung").last_error)  # what the restart was for

    supervisor = Supervisor(
        [spec], tmp_path, session=session, backoff_sleep=no_wait,
        settings=SupervisorSettings(health_interval_s=0.05, probe_timeout_s=0.2,
                                    failures_to_restart=3),
    )
    await supervisor.start()
    first_pid = supervisor.state("hung").pid
    assert first_pid is not None
    hang.touch()  # alive, listening, answering nothing
    await eventually(lambda: not alive(first_pid))
    hang.unlink()
    await serving_again(supervisor, "hung", first_pid)
    assert supervisor.state("hung").restarts == 1
    assert reasons and reasons[0].startswith("hung: 3 probes failed")
    await supervisor.stop()


async def test_a_restart_still_loading_is_not_taken_for_hung(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """Loading a model takes minutes: probes failing meanwhile are the loader's business."""
    spec = fake_spec("loading", "--ready-after", "1.0")

    async def no_wait(seconds: float) -> None:
        pass

    supervisor = Supervisor(
        [spec], tmp_path, session=session, backoff_sleep=no_wait,
        settings=SupervisorSettings(health_interval_s=0.05, probe_timeout_s=0.2,
                                    failures_to_restart=2),
    )
    await supervisor.start()
    first_pid = supervisor.state("loading").pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    await serving_again(supervisor, "loading", first_pid)
    assert supervisor.state("loading").restarts == 1  # ~20 failed probes while it loaded
    await supervisor.stop()


async def test_an_engine_that_answers_is_never_restarted_for_hanging(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    spec = fake_spec("steady")
    supervisor = Supervisor(
        [spec], tmp_path, session=session,
        settings=SupervisorSettings(health_interval_s=0.02, failures_to_restart=1),
    )
    await supervisor.start()
    pid = supervisor.state("steady").pid
    await asyncio.sleep(0.5)  # about 25 probes, every one answered
    assert supervisor.state("steady").pid == pid and supervisor.state("steady").restarts == 0
    await supervisor.stop()


async def test_exit_before_ready_refuses_to_start_with_the_log(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    spec = fake_spec("broken", "--port", "not-a-number")  # argparse error, exit code 2
    supervisor = Supervisor([spec], tmp_path, session=session)
    with pytest.raises(BackendStartError, match=r"'broken' exited with code 2(.|\n)*invalid int"):
        await supervisor.start()


async def test_never_ready_times_out_and_is_killed(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    spec = fake_spec("slow", "--never-ready", ready_timeout_s=1.0)
    supervisor = Supervisor([spec], tmp_path, session=session)
    with pytest.raises(BackendStartError, match="not ready after 1s"):
        await supervisor.start()
    pid = int((tmp_path / "slow.log").read_text().split("fake engine pid ")[1].split()[0])
    assert not alive(pid)


async def test_missing_binary_is_a_clear_error(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    launch = LaunchSpec(binary=str(tmp_path / "no-such-server"), model="m", port=free_port())
    spec = BackendSpec(name="ghost", engine="llamacpp", profile="plain", launch=launch)
    with pytest.raises(BackendStartError, match="cannot run"):
        await Supervisor([spec], tmp_path, session=session).start()


async def test_attached_backend_goes_unhealthy_and_comes_back(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    port = free_port()
    runner = web.AppRunner(create_sim_app(SimState(profile="plain")))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    spec = BackendSpec(name="remote", engine="llamacpp", profile="plain",
                       url=f"http://127.0.0.1:{port}")
    changes: list[tuple[str, bool, str]] = []
    supervisor = Supervisor(
        [spec], tmp_path, session=session, on_change=lambda *change: changes.append(change),
        settings=SupervisorSettings(health_interval_s=0.05, probe_timeout_s=1.0,
                                    failures_to_unhealthy=2),
    )
    await supervisor.start()
    try:
        assert supervisor.state("remote") == BackendStatus(
            "remote", "plain", launched=False, healthy=True)
        await runner.cleanup()
        await eventually(lambda: not supervisor.state("remote").healthy)
        assert "remote" in changes[-1][0] and changes[-1][1] is False
        assert "ClientConnectorError" in supervisor.state("remote").last_error

        runner = web.AppRunner(create_sim_app(SimState(profile="plain")))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await eventually(lambda: supervisor.state("remote").healthy)
        assert [healthy for _, healthy, _ in changes] == [True, False, True]
    finally:
        await supervisor.stop()
        await runner.cleanup()


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """A router killed with SIGKILL runs no cleanup; PR_SET_PDEATHSIG still ends its backends."""
    port = free_port()
    script = textwrap.dedent(f"""
        import asyncio, sys, aiohttp
        from backends.spec import BackendSpec, LaunchSpec
        from backends.supervisor import Supervisor
        async def main():
            launch = LaunchSpec(binary=sys.executable, model="tests.backends.fake_engine",
                                port={port}, cwd={str(REPO)!r})
            spec = BackendSpec(name="child", engine="llamacpp", profile="plain", launch=launch)
            async with aiohttp.ClientSession() as session:
                supervisor = Supervisor([spec], {str(tmp_path)!r}, session=session)
                await supervisor.start()
                print(supervisor.state("child").pid, flush=True)
                await asyncio.sleep(600)
        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
    finally:
        parent.kill()
        parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)
