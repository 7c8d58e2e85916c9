"""The cached llama-server passes the same smoke test its build had to pass, with the flags
recorded beside it (no AMX kernels on x86)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from backends.local.flags import flag_sets
from backends.local.pair import find_pair
from backends.local.smoke import SMOKE_TOKENS, smoke_test
from tests.integration.conftest import require_smollm2

pytestmark = pytest.mark.integration


def test_the_cached_binary_generates_tokens_and_says_how_it_was_built(tmp_path: Path) -> None:
    require_smollm2()
    pair = find_pair("smollm2")
    assert pair is not None
    result = smoke_test(pair.server, pair.target, tmp_path / "smoke.log")
    assert result.ok, f"{result.detail}\n{result.log_tail}"
    assert result.detail.startswith(f"generated {SMOKE_TOKENS} tokens")
    info = json.loads((pair.server.parent / "build-info.json").read_text())
    known = {flags.name: flags for flags in flag_sets(platform.machine())}
    assert info["flag_set"] in known
    assert info["cmake_flags"] == list(known[info["flag_set"]].cmake_flags)
    assert info["smoke_test"].startswith("generated")
    if platform.machine() == "x86_64":
        assert not any("amx" in flag.lower() and "-mno-amx" not in flag and "=OFF" not in flag
                       for flag in info["cmake_flags"])
