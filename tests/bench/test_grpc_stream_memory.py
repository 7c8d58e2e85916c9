"""bench.grpc_stream_memory: a grpc.aio ext_proc server's RSS per stream, by how it ends."""

from __future__ import annotations

import math

import pytest

from bench.grpc_stream_memory import ENDINGS, Grown, main, measure


@pytest.mark.parametrize("ending", ENDINGS)
def test_every_stream_is_served_and_the_server_is_read_before_and_after(ending: str) -> None:
    grown = measure(ending, 120, warm=30)
    assert grown.ending == ending and grown.streams == 120  # none lost, none counted twice
    assert 0 < grown.before_mb < 4096 and 0 < grown.after_mb < 4096
    assert math.isfinite(grown.kb_per_stream)


def test_the_growth_is_per_stream_and_the_command_refuses_no_streams() -> None:
    assert Grown("cancel", 2000, 40.0, 41.0).kb_per_stream == pytest.approx(0.512)
    assert Grown("cancel", 0, 40.0, 41.0).kb_per_stream == 0.0
    with pytest.raises(SystemExit):
        main(["--streams", "0"])
