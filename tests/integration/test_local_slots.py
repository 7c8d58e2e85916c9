"""The real llama-server tells its slots on /props: the proxy shows them on /readyz, the engine's
auto (no --parallel) and a count asked for alike, and believes the engine over a wrong
`slots:`."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from backends.local.pair import local_specs
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.state import Deps
from tests.integration.conftest import require_smollm2
from tests.router.conftest import ServerFactory


async def test_readyz_shows_what_llama_server_reports(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    require_smollm2()
    (auto,) = local_specs("smollm2", ("plain",), ctx=2048, threads=1)
    (two,) = local_specs("smollm2", ("plain",), ctx=2048, threads=1, parallel=2)
    two = two.model_copy(update={"name": "smollm2-two"})
    assert auto.base_url != two.base_url
    auto = auto.model_copy(update={"slots": 1})  # declared wrong: the engine is believed
    config = Config(
        backends=[auto, two], default_backend=auto.name, classifier="rules", tokenizer=False,
        log=LogConfig(path=str(tmp_path / "decisions.jsonl")),
        supervisor=SupervisorConfig(log_dir=str(tmp_path / "backends"), startup_probe=False),
    )
    server = await aiohttp_server(create_app(config, deps=Deps(explore=False)))
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{server.port}/readyz") as response:
        backends = {b["name"]: b for b in (await response.json())["backends"]}
    first, second = backends[auto.name], backends["smollm2-two"]
    assert (first["slots"], first["slots_source"]) == (4, "engine")  # llama-server's auto
    assert "slots: 1 declared" in first["slots_warning"]
    assert (second["slots"], second["slots_source"]) == (2, "engine")
    assert "slots_warning" not in second
