"""bench.learning's virtual-time pool with batching instances, and bench.batching's report."""

from __future__ import annotations

import pytest

from backends.local.simulator import MACHINES
from bench.batching import main
from bench.learning import PAIR, Arm, Batching, LeastConn, measure, simulate
from bench.traffic import make_mix

CPU = MACHINES["cpu-batch"]


def _arm(ms: float, extra_ms: float = 0.0) -> Arm:
    return Arm(tokens=10, ms=ms, draft_n=None, draft_accepted=None, extra_ms=extra_ms)


def _next(pool: Batching) -> tuple[float, int]:
    due = pool.next_end()
    assert due is not None
    return due


def test_requests_decoding_together_each_take_the_batchs_time() -> None:
    pool = Batching(slots=4, cost=CPU)
    for index in range(4):
        pool.join(index, _arm(100.0), 0.0)
    end = _next(pool)
    assert end[0] == pytest.approx(364.0)  # 1 + 0.88 * 3 times a request alone
    assert pool.leave(end[1], end[0]) == 0.0  # each had its slot from the start


def test_past_the_slots_a_request_waits_then_runs_at_the_smaller_batch() -> None:
    pool = Batching(slots=2, cost=CPU)
    pool.join(0, _arm(100.0), 0.0)
    pool.join(1, _arm(200.0), 0.0)
    pool.join(2, _arm(100.0), 0.0)  # waits
    assert sorted(pool.running) == [0, 1] and len(pool.waiting) == 1
    first = _next(pool)
    assert first[0] == pytest.approx(188.0) and first[1] == 0
    pool.leave(0, first[0])
    assert pool.started[2] == pytest.approx(188.0)
    # request 1 has half its work left, request 2 all of its, at a batch of 2: they end together
    second = _next(pool)
    assert second[0] == pytest.approx(376.0) and second[1] == 1


def test_speculations_extra_work_is_dearer_in_a_batch() -> None:
    pool = Batching(slots=2, cost=CPU)
    pool.join(0, _arm(100.0, extra_ms=20.0), 0.0)
    pool.join(1, _arm(100.0), 0.0)
    # together, the plain one takes 1.88x its time alone, the mtp one 80 x 1.88 + 20 x 3 = 210.4
    assert _next(pool)[0] == pytest.approx(188.0) and _next(pool)[1] == 1
    pool.leave(1, 188.0)
    assert _next(pool)[0] == pytest.approx(188.0 + (1 - 188.0 / 210.4) * 100.0)


def test_the_pool_counts_the_batch_and_one_slot_is_fifo_as_before() -> None:
    items = measure(make_mix("balanced", 12, 7, 32), "cpu-batch")
    arrivals = [0.0] * len(items)  # all at once: 6 each, 4 decoding, 2 waiting
    fifo = simulate(items, PAIR, LeastConn(), arrivals_ms=arrivals)
    one = simulate(items, PAIR, LeastConn(), arrivals_ms=arrivals, slots=1, cost=CPU)
    assert one == fifo
    batched = simulate(items, PAIR, LeastConn(), arrivals_ms=arrivals, slots=4, cost=CPU)
    assert batched.tokens == fifo.tokens and batched.to_mtp == fifo.to_mtp
    assert batched.classes == fifo.classes
    # a near-linear batch serves about as fast as one at a time, all told
    assert 0.8 < batched.makespan_ms / fifo.makespan_ms < 1.3


def test_the_bench_prints_every_run_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--machines", "gpu-batch", "--requests", "20", "--loads", "0.5"])
    out = capsys.readouterr().out
    for name in ("specroute", "least_conn", "mtp-only", "plain-only", "always-mtp",
                 "always-plain", "to mtp:", "8 slots"):
        assert name in out
