"""The real SmolLM2 llama.cpp pair, launched through the supervisor for each test.

Skipped (with the reason) only when the cached build is absent and SPECROUTE_REQUIRE_LOCAL is
unset; `make test` builds the cache first, so in CI these tests always run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from backends.local.pair import find_pair, local_pair_specs
from backends.spec import BackendSpec
from backends.supervisor import Supervisor, SupervisorSettings
from tests.missing import SMOLLM2, skip_missing


def require_smollm2() -> None:
    if find_pair("smollm2") is not None:
        return
    skip_missing(SMOLLM2)


@dataclass
class Pair:
    plain: BackendSpec
    mtp: BackendSpec
    supervisor: Supervisor
    session: aiohttp.ClientSession
    changes: list[tuple[str, bool, str]]
    model: str


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    require_smollm2()
    plain, mtp = local_pair_specs("smollm2", ctx=2048, parallel=1)  # one request at a time
    changes: list[tuple[str, bool, str]] = []
    async with aiohttp.ClientSession() as session:
        supervisor = Supervisor(
            [plain, mtp], tmp_path / "logs", session=session,
            on_change=lambda *change: changes.append(change),
            settings=SupervisorSettings(health_interval_s=0.2, backoff_initial_s=0.2),
        )
        await supervisor.start()
        try:
            assert plain.launch is not None
            yield Pair(plain, mtp, supervisor, session, changes, Path(plain.launch.model).stem)
        finally:
            await supervisor.stop()
