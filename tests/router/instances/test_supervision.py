"""Health from the supervisor's probes steers traffic; the start probe refuses a mismatched pair."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import aiohttp
from structlog.testing import capture_logs

from backends.local.simulator import SimState, create_sim_app
from backends.spec import Speculation
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.state import Deps
from tests.backends.test_supervisor import fake_spec
from tests.router.conftest import ServerFactory, start_stack
from tests.router.test_proxy_openai import GREEDY_TECH

ROOT = Path(__file__).resolve().parents[3]


async def test_unhealthy_backend_takes_no_traffic(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, health_interval_s=0.1)
    await stack.mtp_server.close()
    async with aiohttp.ClientSession() as session:
        ready: dict[str, object] = {}
        for _ in range(100):  # bounded: 10 s
            async with session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as response:
                ready = await response.json()
            if not ready["backends"][0]["healthy"]:  # type: ignore[index]
                break
            await asyncio.sleep(0.1)
        assert ready["ready"] is True  # plain-0 still serves
        assert ready["backends"][0]["healthy"] is False  # type: ignore[index]
        async with session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH) as response:
            assert response.status == 200
            assert response.headers["x-specroute-backend"] == "plain-0"
            assert response.headers["x-specroute-reason"] == "finish"  # only healthy ones count
        async with session.post(f"{stack.base_url}/chat/completions", json=GREEDY_TECH,
                                headers={"x-specroute-route": "mtp"}) as response:
            assert response.status == 200
            assert response.headers["x-specroute-backend"] == "plain-0"
            assert response.headers["x-specroute-reason"] == "header+unhealthy_failover"
    assert stack.last.outcome.failover_from == ()  # the dead instance was not even tried
    assert stack.last.decision["profile"] == "plain"


async def test_serve_refuses_a_pair_serving_different_models(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    mtp = await aiohttp_server(create_sim_app(SimState(profile="mtp", model="model-a")))
    plain = await aiohttp_server(create_sim_app(SimState(profile="plain", model="model-b")))
    config = tmp_path / "config.yaml"
    config.write_text(
        "backends:\n"
        f"  - {{name: m, engine: llamacpp, profile: mtp, url: 'http://127.0.0.1:{mtp.port}'}}\n"
        f"  - {{name: p, engine: llamacpp, profile: plain, url: 'http://127.0.0.1:{plain.port}'}}\n"
        "classifier: rules\ntokenizer: false\nlog: {path: d.jsonl}\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "router", "serve", "--config", str(config), "--port", "0",
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2
    text = stderr.decode()
    assert "cannot start" in text and "model-a" in text and "model-b" in text
    assert "Traceback" not in text


async def test_stopping_what_it_launched_is_one_info_line(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    """Shutdown stops the launched instances as asked: no `backend_unhealthy` warning each, one
    info line naming them all."""
    plain = fake_spec("plain-0")
    ngram = fake_spec("ngram-0").model_copy(update={
        "speculation": Speculation(type="ngram-simple"), "profile": "mtp"})
    config = Config(
        backends=[plain, ngram], default_backend="plain-0", classifier="rules", tokenizer=False,
        log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
        supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"), startup_probe=False),
    )
    with capture_logs() as events:
        server = await aiohttp_server(create_app(config, deps=Deps(explore=False)))
        await server.close()
    healthy = [e for e in events if e["event"] == "backend_healthy"]
    assert {(e["backend"], e["spec"]) for e in healthy} == {
        ("plain-0", "plain"), ("ngram-0", "ngram-simple")}
    assert [e for e in events if e["log_level"] in ("warning", "error")] == []
    stopped = [e for e in events if e["event"] == "backends_stopped"]
    assert [(e["log_level"], e["backends"]) for e in stopped] == [("info", ["plain-0", "ngram-0"])]
