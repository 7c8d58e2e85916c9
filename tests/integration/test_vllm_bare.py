"""A real n-gram vLLM started without `--per-request-spec-decode-metrics` (by someone else,
attached by url): its answers carry `metrics: null`, so specroute reads its drafts from
vLLM's /metrics counters around a request that ran alone, prices it from what it measures,
and `/readyz` names the flag to add.

Its own instance, started and stopped by PID in this module (vLLM's `auto` CPU binding,
one core); skipped, naming `make vllm`, when vLLM is not cached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.engines import VLLM_PER_REQUEST_FLAG, adapter_for
from backends.local.vllm_pair import NGRAM, READY_TIMEOUT_S, TEST_MODEL, vllm_specs
from backends.spec import BackendSpec
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.state import Deps
from tests.integration.test_vllm import COPY
from tests.integration.vllm_fleet import require_vllm
from tests.router.conftest import ListSink, logged

pytestmark = pytest.mark.integration
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackendSpec]:
    """The n-gram instance, its command line without the per-request flag."""
    require_vllm()
    spec = vllm_specs((NGRAM,))[0]
    command = adapter_for(spec).command(spec)
    at = command.argv.index(VLLM_PER_REQUEST_FLAG)
    argv = [*command.argv[:at], *command.argv[at + 2:]]
    log = tmp_path_factory.mktemp("vllm-bare") / "vllm.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env={**os.environ, **command.env}, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    try:
        _wait_healthy(spec.base_url, process, log)
        yield spec
    finally:
        _stop_group(process)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {process.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"vLLM not healthy within {READY_TIMEOUT_S:.0f} s")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group we started (the server and its engine core), then SIGKILL."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


async def test_without_the_flag_it_is_priced_from_its_counters_and_readyz_says_so(
    bare: BackendSpec, aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    attached = BackendSpec(name="vllm-ngram", engine="vllm", speculation=NGRAM,
                           url=bare.base_url)
    config = Config(backends=[attached], default_backend="vllm-ngram", tokenizer=False,
                    log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
                    supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"),
                                                health_interval_s=60.0))  # the probe runs
    records = ListSink()
    proxy = await aiohttp_server(create_app(config, deps=Deps(sinks=(records,), explore=False,
                                                              record_interval_s=0.0)))
    url = f"http://127.0.0.1:{proxy.port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/readyz") as response:
            backend = (await response.json())["backends"][0]
        assert backend["drafts"] is True  # the probe's copy request, from the counters
        assert any(f"`{VLLM_PER_REQUEST_FLAG} summary`" in warning
                   for warning in backend["probe_warnings"]), backend["probe_warnings"]
        body = {"model": TEST_MODEL, "messages": [{"role": "user", "content": COPY}],
                "max_tokens": 40, "temperature": 0}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            answer = await response.json()
    assert answer["metrics"] is None  # what vLLM says without the flag
    outcome = (await logged(records, 1))[-1].outcome
    # the counters around a request that ran alone: its drafts all the same
    assert outcome.backend == "vllm-ngram" and outcome.spec_source == "prometheus"
    assert outcome.draft_n and outcome.draft_accepted is not None
    assert outcome.completion_tokens and outcome.total_ms > 0  # its pace, measured
