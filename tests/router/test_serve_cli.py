"""`specroute serve` as a user runs it: a real process, a real config file, stopped by PID."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import openai
import pytest
import yaml

from backends.local.simulator import MACHINES, SimState, create_sim_app
from tests.router.conftest import ServerFactory

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):  # bounded: 20 s
            assert process.poll() is None, "specroute serve exited early"
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered")


async def test_serve_routes_logs_and_stops_cleanly(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # a machine where speculation loses on every class (the shipped prior assumes none)
    machine = MACHINES["slow-verify"]
    mtp = await aiohttp_server(create_sim_app(SimState(profile="mtp", cost=machine)))
    plain = await aiohttp_server(create_sim_app(SimState(profile="plain", cost=machine)))
    config = tmp_path / "config.yaml"
    config.write_text(
        "listen: {host: 127.0.0.1, port: 1}\n"
        "backends:\n"
        f"  - {{name: mtp-0, engine: llamacpp, profile: mtp, url: 'http://127.0.0.1:{mtp.port}'}}\n"
        f"  - {{name: plain-0, engine: llamacpp, profile: plain, url: 'http://127.0.0.1:{plain.port}'}}\n"
        "tokenizer: false\n"
        "classifier: rules\n"
        "log: {path: decisions.jsonl}\n"
        "policy: policy.yaml\n"
    )
    # the shipped policy, but no Thompson draw: with one probe each, a draw may still explore
    # the thinly measured mtp instance, and this test is about what the probe measured
    policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    policy.setdefault("exploration", {})["max_regret"] = 0.0
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    port = _free_port()
    process = subprocess.Popen(  # noqa: ASYNC220  # forks and returns; every wait is bounded
        [sys.executable, "-m", "router", "serve", "--config", str(config), "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        await _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            model = (await response.json())["route_model"]
        # the startup probe measured both instances before the first request
        assert model["prior"] == "neutral"
        assert model["pace"]["plain"]["source"] == "probe"
        assert model["pace"]["plain"]["ms_per_token"] == pytest.approx(20.0, rel=0.05)
        assert model["pace"]["mtp"]["ms_per_token"] > 1.2 * model["pace"]["plain"]["ms_per_token"]
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        async with client:
            reply = await client.chat.completions.create(
                model="sim-model", temperature=0,
                messages=[{"role": "user", "content": "Write a Python function that adds two numbers."}],
            )
        assert reply.choices[0].message.content
    finally:
        os.kill(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr.decode()
    assert f"listening on http://127.0.0.1:{port}/v1" in stderr.decode()
    assert "paces_measured" in stderr.decode()
    # the neutral prior claims no machine: measuring another one is news, not a fault
    discounted = [line for line in stderr.decode().splitlines() if "prior_discounted" in line]
    assert discounted and all("[info" in line for line in discounted)
    lines = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    # two probes per instance (a copy-heavy and a free-form request), then the request
    assert [r["decision"]["reason"] for r in lines[:4]] == ["probe"] * 4
    assert sorted(r["request_id"] for r in lines[:4]) == [
        "probe_mtp-0_copy", "probe_mtp-0_free", "probe_plain-0_copy", "probe_plain-0_free"]
    assert len(lines) == 5
    record = lines[4]
    # measured at start: the first request goes to the faster instance, no exploration needed
    assert record["decision"]["backend"] == "plain-0" and not record["decision"]["explored"]
    assert record["classifier"]["class"] == "code"


def test_serve_refuses_to_start_on_a_bad_artifact(tmp_path: Path) -> None:
    bad = tmp_path / "model.npz"
    bad.write_bytes(b"not an artifact")
    config = tmp_path / "config.yaml"
    config.write_text(
        "backends:\n  - {name: a, profile: mtp, url: 'http://127.0.0.1:9'}\n"
        f"classifier: {bad}\ntokenizer: false\nlog: {{path: d.jsonl}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "router", "serve", "--config", str(config)],
        cwd=ROOT, capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert b"cannot start" in done.stderr and b"model.npz" in done.stderr
    assert b"Traceback" not in done.stderr


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "backends:\n  - {name: a, profile: mtp, url: 'http://127.0.0.1:9'}\n"
        "classifier: rules\ntokenizer: false\nlog: {path: d.jsonl}\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "router", "serve", "--config", str(config), "--port", str(port)],
            cwd=ROOT, capture_output=True, timeout=60, check=False,
        )
    assert done.returncode == 2
    assert b"cannot start" in done.stderr and b"Traceback" not in done.stderr
