"""A real n-gram (prompt lookup) llama-server beside a plain one, SmolLM2 on loopback: it drafts
on the capability probe's copy request and on nothing else, and the probe says it speculates;
and every flag the llama.cpp adapter writes is one the cached binary knows."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from backends.capability import capability_probe
from backends.engines import adapter_for
from backends.local.pair import find_pair, local_specs
from backends.spec import ENGINE_SPEC_TYPES, BackendSpec, LaunchSpec, Speculation
from backends.supervisor import Supervisor, SupervisorSettings
from tests.integration.conftest import require_smollm2

pytestmark = pytest.mark.integration

NGRAM = Speculation(type="ngram-simple")


@pytest.fixture
async def plain_and_ngram(
    tmp_path: Path,
) -> AsyncIterator[tuple[list[BackendSpec], aiohttp.ClientSession]]:
    require_smollm2()
    specs = local_specs("smollm2", ("plain", NGRAM), ctx=2048, parallel=1)
    async with aiohttp.ClientSession() as session:
        supervisor = Supervisor(specs, tmp_path / "logs", session=session,
                                on_change=lambda *change: None,
                                settings=SupervisorSettings(health_interval_s=0.5))
        await supervisor.start()
        try:
            yield specs, session
        finally:
            await supervisor.stop()


async def test_an_ngram_instance_drafts_on_the_copy_probe_only(
    plain_and_ngram: tuple[list[BackendSpec], aiohttp.ClientSession],
) -> None:
    specs, session = plain_and_ngram
    plain, ngram = specs
    result = await capability_probe(specs, session)
    assert result.ok and result.warnings == (), result.warnings
    copy, free = result.timed[ngram.name]["copy"], result.timed[ngram.name]["free"]
    assert (copy.report.draft_n or 0) > 0, copy.report  # the module it returns is in the prompt
    assert not free.report.draft_n  # a story is not
    assert result.drafts(ngram.name) is True and not result.drafted[plain.name]


def flags_of(lines: list[str]) -> set[str]:
    """The flags each line of a --help starts with (`-m,    --model FNAME  ...`: -m, --model)."""
    flags = set()
    for line in lines:
        for word in line.split():
            if not word.startswith("-"):
                break
            flags.add(word.rstrip(","))
    return flags


def test_every_flag_the_adapter_writes_is_in_the_binarys_help() -> None:
    require_smollm2()
    pair = find_pair("smollm2")
    assert pair is not None
    shown = subprocess.run([str(pair.server), "--help"], check=True, capture_output=True,
                           text=True, timeout=30).stdout
    lines = shown.splitlines()
    # the help still lists removed flags (--draft-max ...), each on a line that says so
    known = flags_of(lines) - flags_of([line for line in lines if "has been removed" in line])
    assert "--spec-draft-n-max" in known and "--draft-max" not in known
    for kind in sorted(ENGINE_SPEC_TYPES["llamacpp"]):
        depth = None if kind == "ngram-cache" else 2  # ngram-cache's bound is fixed
        spec = BackendSpec(name="b", engine="llamacpp",
                           speculation=Speculation(type=kind, depth=depth),
                           launch=LaunchSpec(binary=str(pair.server), model="M", draft="D",
                                             port=9000))
        argv = adapter_for(spec).command(spec).argv
        flags = [arg for arg in argv[1:] if arg.startswith("-")]
        assert set(flags) <= known, (kind, set(flags) - known)
        if "--spec-type" in argv:  # and its value is one the binary lists
            assert argv[argv.index("--spec-type") + 1] in shown, kind
