"""bench.arms on the simulator, unpaced and tiny: the rows it prints and what they must hold."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.arms import (
    ARMS,
    FIRST,
    HEADER,
    HandRule,
    LeastConn,
    Pinned,
    Run,
    Served,
    copy_wins,
    drive_side_by_side,
    least_conn_every_start,
    least_conn_two_clients,
    main,
    oracle_ceiling,
    oracle_edits_on_ngram,
    oracle_one_client,
    oracle_open,
    oracle_two_clients,
    parse_load,
    replay_two_clients,
    soonest_two_clients,
    with_waits,
)
from bench.arms_batch import (
    batch_row,
    declared_slots,
    format_batch,
    log_errors,
    prediction_errors,
    summarize,
)
from bench.traffic import EDIT_MIXES, STORY, TrafficRequest, make_edit_mix
from decisionlog.records import Outcome, RouteRecord, to_json
from router.serve import start_site


def test_a_tiny_unpaced_run_prints_one_row_per_load_and_the_oracle_wins_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    code = main(["--machines", "cpu-pair", "--mixes", "mixed", "--max-tokens", "24",
                 "--requests", "12", "--time-scale", "0", "--loads", "1", "2", "open",
                 "--json", str(out)])
    assert code == 0  # nothing failed, nothing cut
    printed = capsys.readouterr().out
    assert HEADER in printed
    assert "== sim cpu-pair, mix mixed, max_tokens 24, 12 requests" in printed
    rows = json.loads(out.read_text())
    assert [r["load"] for r in rows] == ["1 client", "2 clients", "open loop"]
    for row in rows:
        assert set(row["totals"]) == set(ARMS)
        assert all(math.isfinite(v) and v >= 0 for v in row["totals"].values())
        assert row["best_single"] in ("plain", "ngram", "draft")
        assert set(row["edits_on_ngram"]) == {"auto", "least-conn", "oracle"}
        assert set(row["copy_wins_on_ngram"]) == {"auto", "least-conn"}
        assert row["failed"] == 0 and not row["cut"]
        assert set(row["service"]) == {"chat", "edit", "prose"}  # each class alone on each config
        assert all(set(times) == {"plain", "ngram", "draft"} for times in row["service"].values())
    # 2 clients: each dispatch replayed on the alone times, none better than the best one
    replayed = rows[1]["replayed"]
    assert set(replayed) == {"auto", "least-conn", "soonest", "best"}
    assert replayed["best"] == rows[1]["totals"]["oracle"]
    assert all(replayed[arm] >= replayed["best"] - 1e-9
               for arm in ("auto", "least-conn", "soonest"))
    assert "on the alone times: auto's dispatch" in printed
    alone = rows[0]["totals"]  # 1 client: each request on its fastest instance, in turn
    assert all(alone["oracle"] <= alone[config] for config in ("plain", "ngram", "draft"))


def test_configs_name_the_instances_that_take_part(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--configs plain ngram`: two instances, no draft anywhere in the rows."""
    out = tmp_path / "rows.json"
    code = main(["--machines", "cpu-pair", "--mixes", "mixed", "--max-tokens", "24",
                 "--requests", "12", "--time-scale", "0", "--loads", "1", "2",
                 "--configs", "plain", "ngram", "--json", str(out)])
    assert code == 0
    assert "configs plain, ngram;" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [r["load"] for r in rows] == ["1 client", "2 clients"]
    for row in rows:
        assert set(row["totals"]) == set(ARMS) - {"draft"}
        assert row["best_single"] in ("plain", "ngram")
        assert all(set(times) == {"plain", "ngram"} for times in row["service"].values())
    alone = rows[0]["totals"]
    assert all(alone["oracle"] <= alone[config] for config in ("plain", "ngram"))


def test_one_config_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--configs", "ngram"])
    assert exit_.value.code == 2
    assert "at least two configs" in capsys.readouterr().err


def _served(index: int, cls: str, backend: str, seconds: float) -> Served:
    return Served(index, cls, backend, 0.0, seconds)


ITEMS = [TrafficRequest("edit" if i % 2 else "chat", "en", {}) for i in range(12)]
# edits: 1 s on ngram, 3 s elsewhere; chat: 1 s on plain, 1.1 s on ngram, 2 s on draft
SERVICE = {
    "plain-0": {i: (3.0 if i % 2 else 1.0) for i in range(12)},
    "ngram-0": {i: (1.0 if i % 2 else 1.1) for i in range(12)},
    "draft-0": {i: (3.0 if i % 2 else 2.0) for i in range(12)},
}


def test_one_client_the_oracle_takes_each_requests_fastest_instance() -> None:
    assert oracle_one_client(SERVICE, range(12)) == pytest.approx(12 * 1.0)


def test_the_oracles_edits_are_those_fastest_on_ngram_after_the_first_ten() -> None:
    times = {"plain": [3.0] * 12, "ngram": [1.0] * 12, "draft": [2.0] * 12}
    times["plain"][11] = 0.5  # one later edit is fastest on plain; one early one (1) does not count
    times["plain"][1] = 0.5
    alone = {role: Run(tuple(_served(i, ITEMS[i].cls, role, t) for i, t in enumerate(ts)), False)
             for role, ts in times.items()}
    assert FIRST == 10  # the edits after it: 11 alone
    assert oracle_edits_on_ngram(alone) == 0.0
    times["plain"][11] = 3.0
    alone["plain"] = Run(tuple(_served(i, ITEMS[i].cls, "plain", t)
                               for i, t in enumerate(times["plain"])), False)
    assert oracle_edits_on_ngram(alone) == 1.0


def test_the_copy_wins_are_the_later_edits_ngram_served_clearly_faster_alone() -> None:
    times = {"plain": [3.0] * 12, "ngram": [1.0] * 12, "draft": [2.0] * 12}
    times["ngram"][11] = 1.85  # within COPY_WIN of the draft's 2.0: a close call, left out
    times["ngram"][1] = 5.0  # an early edit: the cold start, not counted either way
    alone = {role: Run(tuple(_served(i, ITEMS[i].cls, role, t) for i, t in enumerate(ts)), False)
             for role, ts in times.items()}
    later_edits = {i for i in range(FIRST, 12) if ITEMS[i].cls == "edit"}
    assert copy_wins(alone) == later_edits - {11}
    times["ngram"][11] = 1.7  # 15% faster than the next config: the copy paid
    alone["ngram"] = Run(tuple(_served(i, ITEMS[i].cls, "ngram", t)
                               for i, t in enumerate(times["ngram"])), False)
    assert copy_wins(alone) == later_edits
    assert copy_wins({"plain": alone["plain"], "draft": alone["draft"]}) == frozenset()


def test_under_load_the_ceiling_spreads_the_classes_and_bounds_every_instance() -> None:
    # 2 clients: the 6 edits on ngram (6 s) and the 6 chats on plain (6 s) run side by side
    assert oracle_ceiling(SERVICE, ITEMS, range(12), 2) == pytest.approx(6.0)
    # 3 clients: the clients no longer bind; moving work off the busiest instance pays until
    # every instance is as busy: 1.1 s chats on ngram and 2 s on draft share the load
    three = oracle_ceiling(SERVICE, ITEMS, range(12), 3)
    assert 4.0 < three < 6.0


def _service(times: Sequence[tuple[float, ...]]) -> dict[str, dict[int, float]]:
    """Instance `i{j}` -> request k -> `times[k][j]`."""
    return {f"i{j}": {k: t[j] for k, t in enumerate(times)} for j in range(len(times[0]))}


def _closed_loop(times: Sequence[tuple[float, ...]], choice: tuple[int, ...]) -> float:
    """2 clients sending in order, each instance first come first served: the makespan of one
    dispatch (`choice[k]`: request k's instance), simulated forward."""
    clients, free, end = [0.0, 0.0], [0.0] * len(times[0]), 0.0
    for k, j in enumerate(choice):
        sender = min(range(2), key=clients.__getitem__)
        free[j] = max(clients[sender], free[j]) + times[k][j]
        clients[sender] = free[j]
        end = max(end, free[j])
    return end


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.floats(0.1, 20.0), st.floats(0.1, 20.0)),
                min_size=1, max_size=7), st.sampled_from([2, 3]))
def test_two_clients_the_oracle_is_the_best_of_every_dispatch(
    rows: list[tuple[float, float, float]], instances: int
) -> None:
    times = [row[:instances] for row in rows]
    service = _service(times)
    every = min(_closed_loop(times, choice)
                for choice in itertools.product(range(instances), repeat=len(times)))
    assert oracle_two_clients(service, range(len(times))) == pytest.approx(every)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.floats(0.1, 20.0), st.integers(0, 1)),
                min_size=1, max_size=12))
def test_a_replayed_dispatch_takes_what_it_takes_simulated_forward(
    rows: list[tuple[float, float, int]]
) -> None:
    times = [row[:2] for row in rows]
    choice = tuple(row[2] for row in rows)
    service = _service(times)
    dispatch = {k: f"i{j}" for k, j in enumerate(choice)}
    assert replay_two_clients(service, range(len(times)), dispatch) == pytest.approx(
        _closed_loop(times, choice))
    assert replay_two_clients(service, range(len(times)), {}) is None  # went nowhere timed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.floats(0.1, 20.0), st.integers(0, 1)),
                min_size=1, max_size=12))
def test_a_dispatch_that_never_waited_replays_as_least_conns_rule_from_its_first_instance(
    rows: list[tuple[float, float, int]]
) -> None:
    # the names as the run made them, whatever they were: never waiting, each request after the
    # first takes the idle instance, in the replay too
    times = [row[:2] for row in rows]
    service = _service(times)
    named = {k: f"i{row[2]}" for k, row in enumerate(rows)}
    never = dict.fromkeys(range(len(rows)), False)
    first = rows[0][2]
    assert replay_two_clients(service, range(len(rows)), named, never) == pytest.approx(
        least_conn_two_clients(service, range(len(rows)), start=first))
    assert least_conn_every_start(service, range(len(rows))) == pytest.approx(
        (least_conn_two_clients(service, range(len(rows)), 0)
         + least_conn_two_clients(service, range(len(rows)), 1)) / 2)


def test_the_soonest_finish_knowing_every_time_waits_when_that_is_sooner() -> None:
    # request 0 to i1 (2 s there), request 1 to idle i0 (1 s), then request 2 finds i1 with
    # 1 s left: 1 + 2 s there beats 20 s on idle i0
    service = _service([(20.0, 2.0), (1.0, 1.5), (20.0, 2.0)])
    assert soonest_two_clients(service, range(3)) == pytest.approx(4.0)
    # a tie goes to the idle instance
    assert soonest_two_clients(_service([(5.0, 2.0), (3.0, 1.0)]), range(2)) == (
        pytest.approx(3.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.floats(0.1, 20.0)), min_size=1, max_size=10))
def test_the_soonest_finish_knowing_every_time_simulated_forward(
    times: list[tuple[float, float]]
) -> None:
    # each request, as its client frees up, to the instance where it would end first
    clients, free, end = [0.0, 0.0], [0.0, 0.0], 0.0
    for row in times:
        sender = min(range(2), key=clients.__getitem__)
        at = clients[sender]
        j = min(range(2), key=lambda k: (max(at, free[k]) + row[k], free[k] > at, k))
        free[j] = max(at, free[j]) + row[j]
        clients[sender], end = free[j], max(end, free[j])
    service = _service(times)
    soonest = soonest_two_clients(service, range(len(times)))
    assert soonest == pytest.approx(end)
    assert soonest >= oracle_two_clients(service, range(len(times))) - 1e-9  # type: ignore[operator]


def test_a_wait_is_replayed_as_a_wait_where_the_named_instance_is_idle_in_the_replay() -> None:
    # request 0 on i1 (ngram, 2 s), request 1 on i0 (1 s), then request 2: in the run it waited
    # for i1, named i1. In the replay i1 is busy at its send (1 s): it waits, ends at 4 s
    times = [(20.0, 2.0), (1.0, 1.5), (20.0, 2.0)]
    service = _service(times)
    named = {0: "i1", 1: "i0", 2: "i1"}
    assert replay_two_clients(service, range(3), named, {2: True}) == pytest.approx(4.0)
    # named i0 but recorded as a wait: the replay's busy instance is i1, so it waits there
    assert replay_two_clients(service, range(3), {**named, 2: "i0"}, {2: True}) == (
        pytest.approx(4.0))
    # named i1 but recorded as no wait (i1 was idle in the run): the idle one, i0, at 21 s
    assert replay_two_clients(service, range(3), named, {2: False}) == pytest.approx(21.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.floats(0.1, 20.0), st.floats(0.1, 20.0)),
                min_size=1, max_size=12), st.sampled_from([2, 3]))
def test_least_conns_rule_on_the_times_is_what_the_picker_would_send(
    rows: list[tuple[float, float, float]], instances: int
) -> None:
    # LeastConn itself, fed the requests as 2 clients free up, simulated forward
    times = [row[:instances] for row in rows]
    service = _service(times)
    names = list(service)
    picker = LeastConn(names)
    ends: list[tuple[float, str | None]] = [(0.0, None), (0.0, None)]  # each client: free at, on
    free, end = dict.fromkeys(names, 0.0), 0.0
    for k in range(len(times)):
        at, held = min(ends, key=lambda e: e[0])
        ends.remove((at, held))
        if held is not None:
            picker.release(held)
        name = picker.pick()
        free[name] = max(at, free[name]) + service[name][k]
        ends.append((free[name], name))
        end = max(end, free[name])
    assert least_conn_two_clients(service, range(len(times))) == pytest.approx(end)


def test_two_clients_the_oracle_waits_for_the_busy_instance_when_that_pays() -> None:
    # an edit on ngram (2 s; 20 on plain), a chat on plain (1 s), then another edit sent at 1 s
    # with only plain idle: least-connections ends it at 21 s, waiting 1 s for ngram at 4
    times = [(20.0, 2.0), (1.0, 1.5), (20.0, 2.0)]
    service = {"plain": {k: t[0] for k, t in enumerate(times)},
               "ngram": {k: t[1] for k, t in enumerate(times)}}
    assert oracle_two_clients(service, range(3)) == pytest.approx(4.0)
    assert _closed_loop(times, (1, 0, 0)) == pytest.approx(21.0)  # what least-conn sends
    assert oracle_ceiling(service, [ITEMS[0]] * 3, range(3), 2) == pytest.approx(4.0)


def test_open_loop_the_oracle_finishes_each_arrival_soonest() -> None:
    mean, later = oracle_open(SERVICE, range(12), [10.0 * i for i in range(12)])
    assert mean == pytest.approx(1.0) and later == pytest.approx(1.0)  # never a queue
    bunched, _ = oracle_open(SERVICE, range(12), [0.0] * 12)
    assert bunched > 1.0


def test_the_decision_log_tells_which_requests_were_sent_to_a_busy_instance(
        tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(RouteRecord(
        ts="2026-12-05T00:00:00.000Z", request_id=rid, endpoint="chat", model="m", stream=False,
        conversation="", features={}, classifier={}, decision={"queue_ms": q},
        outcome=Outcome(status=200), overhead_ms=0.1)) + "\n"
        for rid, q in (("r1", 0.0), ("r2", 812.5))))
    run = Run((Served(0, "edit", "ngram", 0.0, 1.0, request_id="r1"),
               Served(1, "edit", "ngram", 0.5, 2.0, request_id="r2"),
               Served(2, "chat", "", 0.6, 0.7, error="refused")), cut=False)
    assert [s.waited for s in with_waits(run, log).served] == [False, True, None]
    assert with_waits(run, tmp_path / "none.jsonl") == run  # no log: nothing known


def test_the_hand_rule_sends_edits_to_ngram_and_the_rest_there_below_its_threshold() -> None:
    rule = HandRule("ngram-0", "plain-0", 2)
    story, edit = TrafficRequest("prose", "en", {}), TrafficRequest("edit", "en", {})
    assert [rule.pick(story), rule.pick(story), rule.pick(story)] == [
        "ngram-0", "ngram-0", "plain-0"]  # two in flight on n-gram: the third goes to plain
    assert rule.pick(edit) == "ngram-0"  # an edit whatever the load
    rule.release("ngram-0")
    rule.release("ngram-0")
    assert rule.pick(story) == "ngram-0"
    assert HandRule("ngram-0", "plain-0", 0).pick(story) == "plain-0"  # the static split


def test_the_batch_row_holds_the_best_hand_rule_to_the_best_static_arm() -> None:
    totals = {"auto": 200.0, "plain": 300.0, "ngram": 240.0, "least-conn": 265.0,
              "hand-0": 260.0, "hand-3": 230.0}
    row = batch_row("4 clients", 4, totals, ("plain", "ngram"), [], frozenset(), None, None)
    assert row.hand == {"hand-0": 260.0, "hand-3": 230.0}
    assert row.hand_x_best == pytest.approx(240.0 / 230.0)
    assert set(row.makespan) == {"least-conn", "plain", "ngram", "auto"}  # no static arm
    printed = format_batch([row])
    assert "hand-3" in printed and f"{240 / 230:.3f}" in printed


def test_least_connections_takes_the_emptiest_instance_ties_in_turn() -> None:
    lc = LeastConn(["a", "b", "c"])
    first = [lc.pick() for _ in range(3)]
    assert first == ["a", "b", "c"]
    lc.release("b")
    assert lc.pick() == "b"


@pytest.mark.parametrize("mix", list(EDIT_MIXES))
def test_each_mix_has_its_classes_in_their_shares_in_both_windows(mix: str) -> None:
    items = make_edit_mix(mix, 24, 7)
    shares = EDIT_MIXES[mix]
    for cls, share in shares.items():
        assert sum(r.cls == cls for r in items) == round(share * 24)
    assert {r.body["metadata"]["bench_class"] for r in items} == set(shares)
    if mix == "mixed":
        assert any(r.cls == "edit" for r in items[FIRST:])


async def test_side_by_side_sends_each_request_to_every_arm_in_rotated_turns_one_at_a_time(
) -> None:
    seen: list[tuple[str, str]] = []  # (route, conversation) in the order they arrived
    inflight = [0, 0]  # now, most

    async def answer(request: web.Request) -> web.Response:
        inflight[0] += 1
        inflight[1] = max(inflight)
        route = request.headers["x-specroute-route"]
        seen.append((route, request.headers["x-specroute-conversation"]))
        await asyncio.sleep(0.03 if route == "slow" else 0.005)
        inflight[0] -= 1
        return web.json_response({}, headers={"x-specroute-backend": route})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    _, port, stop = await start_site(app)
    url = f"http://127.0.0.1:{port}"
    try:
        items = [TrafficRequest("chat", "en", {"n": i}) for i in range(4)]
        runs = await drive_side_by_side({"a": (url, Pinned("slow")), "b": (url, Pinned("fast"))},
                                        items, "t", time.monotonic() + 30)
    finally:
        await stop()
    assert inflight[1] == 1  # one request in flight in all
    assert [route for route, _ in seen] == ["slow", "fast", "fast", "slow"] * 2  # turns rotate
    assert seen[0][1] == "t-a-0" and seen[2][1] == "t-b-1"
    for name, backend in (("a", "slow"), ("b", "fast")):
        run = runs[name]
        assert [s.index for s in run.served] == [0, 1, 2, 3] and not run.cut
        assert {s.backend for s in run.served} == {backend}
        # its own clock: each request sent when its last one on this arm was answered
        assert all(later.sent == earlier.done for earlier, later in zip(run.served, run.served[1:]))
    one = parse_load("1")
    assert runs["a"].total(one) > 4 * 0.03 > runs["b"].total(one)  # the other arm's time not counted


# --- issue 50: instances of several slots --------------------------------------------------


def test_a_tiny_run_at_several_slots_prints_the_batch_figures_after_the_warm_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    code = main(["--machines", "cpu-batch", "--mixes", "edit-story", "--max-tokens", "24",
                 "--requests", "12", "--time-scale", "0", "--loads", "1", "4", "8",
                 "--configs", "plain", "ngram", "--slots", "4", "--warmup", "6",
                 "--hand-rules", "0", "3", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "4 slots each; 12 requests per run after 6 to warm auto up" in printed
    assert "batch figures (issue 50" in printed
    rows = json.loads(out.read_text())
    assert [r["load"] for r in rows] == ["1 client", "4 clients", "8 clients"]
    for row in rows:
        batch = row["batch"]
        assert batch["slots"] == 4
        assert set(batch["makespan"]) == {"least-conn", "plain", "ngram", "auto"}
        assert batch["makespan"]["auto"] == row["totals"]["auto"]
        assert batch["best"] in ("least-conn", "plain", "ngram")
        assert set(batch["hand"]) == (set() if row["load"] == "1 client" else {"hand-0", "hand-3"})
        # the measured requests' records only: not the 6 warm-up requests, nor the probe's
        assert batch["prediction"] is None or batch["prediction"]["n"] <= 12


def test_at_one_slot_no_slots_are_declared_in_the_proxys_config() -> None:
    assert declared_slots(1) is None  # what the engine reports, as before --slots
    assert declared_slots(4) == 4


def test_the_prediction_error_is_of_the_measured_requests_whose_finish_was_predicted(
        tmp_path: Path) -> None:
    def record(rid: str, decision: dict[str, float], total: float | None,
               error: str = "") -> RouteRecord:
        return RouteRecord(
            ts="2026-12-06T00:00:00.000Z", request_id=rid, endpoint="chat", model="m",
            stream=False, conversation="", features={}, classifier={}, decision=decision,
            outcome=Outcome(status=502 if error else 200, error=error, total_ms=total),
            overhead_ms=0.1)

    records = [
        record("w1", {"queue_ms": 0.0, "service_ms": 100.0}, 1000.0),  # the warm-up's
        record("r1", {"queue_ms": 500.0, "service_ms": 700.0}, 1000.0),  # 20% over
        record("r2", {"queue_ms": 0.0, "service_ms": 1500.0}, 2000.0),  # 25% under
        record("r3", {"service_ms": 900.0}, 1000.0),  # pinned: no queue predicted
        record("r4", {"queue_ms": 0.0, "service_ms": 900.0}, None, error="refused"),
        record("r5", {"queue_ms": 1000.0, "service_ms": 3000.0}, 1000.0),  # 300% over
    ]
    measured = {"r1", "r2", "r3", "r4", "r5"}
    assert prediction_errors(records, measured) == pytest.approx([0.2, 0.25, 3.0])
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(r) + "\n" for r in records))
    served = [Served(i, "edit", "ngram-0", 0.0, 1.0, request_id=rid)
              for i, rid in enumerate(sorted(measured))]
    summary = log_errors(log, served)
    assert summary is not None and summary.n == 3
    assert (summary.median, summary.p90) == pytest.approx((0.25, 3.0))
    assert log_errors(tmp_path / "none.jsonl", served) is None


def test_the_steady_errors_are_of_the_requests_whose_batch_came_out_as_predicted() -> None:
    def record(rid: str, predicted: int | None, lived: float | None) -> RouteRecord:
        decision: dict[str, float] = {"queue_ms": 0.0, "service_ms": 800.0}
        if predicted is not None:
            decision["batch"] = predicted
        return RouteRecord(
            ts="2026-12-06T00:00:00.000Z", request_id=rid, endpoint="chat", model="m",
            stream=False, conversation="", features={}, classifier={}, decision=decision,
            outcome=Outcome(status=200, total_ms=1000.0, batch_mean=lived), overhead_ms=0.1)

    records = [record("same", 3, 3.2), record("grew", 2, 3.6), record("older", None, 2.0),
               record("unknown", 2, None)]
    ids = {"same", "grew", "older", "unknown"}
    assert prediction_errors(records, ids) == pytest.approx([0.2] * 4)
    assert prediction_errors(records, ids, steady=True) == pytest.approx([0.2])  # "same" only


@pytest.mark.parametrize(("errors", "median", "p90"), [
    ([0.1, 0.5, 0.2, 0.05, 0.3], 0.2, 0.5),  # rank ceil(4.5) = 5: the largest
    ([0.4, 0.1, 0.3, 0.2], 0.25, 0.4),
    ([0.01 * k for k in range(1, 21)], 0.105, 0.18),  # rank 18 of 20
    ([0.3], 0.3, 0.3),
])
def test_the_error_summary_is_the_median_and_the_nearest_rank_90th_percentile(
        errors: list[float], median: float, p90: float) -> None:
    summary = summarize(errors)
    assert summary is not None and summary.n == len(errors)
    assert summary.median == pytest.approx(median) and summary.p90 == pytest.approx(p90)
    assert summarize([]) is None


def test_the_batch_row_holds_auto_to_the_best_static_arm_and_counts_its_copy_edits() -> None:
    totals = {"auto": 200.0, "plain": 300.0, "ngram": 240.0, "least-conn": 265.0,
              "oracle": 150.0}
    auto = [Served(i, "edit", "ngram-0" if i != 3 else "plain-0", 0.0, 1.0) for i in range(6)]
    row = batch_row("4 clients", 4, totals, ("plain", "ngram"), auto,
                    frozenset({1, 3, 5, 9}), "ngram-0", None)
    assert row.best == "ngram"  # the oracle is no static arm
    assert row.auto_x_best == pytest.approx(1.2)
    assert row.copy_edits == 4
    assert row.copy_edits_on_ngram == pytest.approx(2 / 3)  # 9 was not served; 3 went to plain
    assert set(row.makespan) == {"least-conn", "plain", "ngram", "auto"}
    printed = format_batch([row])
    assert "1.200 (ngram)" in printed and "67% of 4" in printed
    assert batch_row("4 clients", 4, totals, ("plain", "ngram"), auto, frozenset({1}), None,
                     None).copy_edits_on_ngram is None  # no n-gram instance


def test_with_a_warm_up_the_copy_edits_count_from_the_first_request() -> None:
    times = {"plain": [3.0] * 12, "ngram": [1.0] * 12}
    alone = {role: Run(tuple(_served(i, ITEMS[i].cls, role, t) for i, t in enumerate(ts)), False)
             for role, ts in times.items()}
    edits = {i for i in range(12) if ITEMS[i].cls == "edit"}
    assert copy_wins(alone, first=0) == edits
    assert copy_wins(alone) == {i for i in edits if i >= FIRST}


def test_at_several_slots_the_ceiling_lets_each_instance_serve_that_many_at_once() -> None:
    # 4 clients: one slot each, an instance is busy 5 s at least; two slots, the clients
    # bind: 12 s of the least work over 4 clients
    assert oracle_ceiling(SERVICE, ITEMS, range(12), 4) == pytest.approx(5.0)
    assert oracle_ceiling(SERVICE, ITEMS, range(12), 4, slots=2) == pytest.approx(3.0)
    # 3 clients: 5 s at one slot each; at two, the clients bind again (12 s over 3)
    assert oracle_ceiling(SERVICE, ITEMS, range(12), 3) == pytest.approx(5.0)
    assert oracle_ceiling(SERVICE, ITEMS, range(12), 3, slots=2) == pytest.approx(4.0)


def test_the_edit_story_mix_is_copy_edits_and_stories() -> None:
    items = make_edit_mix("edit-story", 24, 7, 160)
    assert sum(r.cls == "edit" for r in items) == 12 == sum(r.cls == "prose" for r in items)
    for r in items:
        text = r.body["messages"][0]["content"]
        assert r.body["max_tokens"] == 160
        if r.cls == "edit":
            assert "rename" in text.lower() and "```python" in text
        else:
            assert text.startswith(STORY.split("{", 1)[0])


def test_the_vllm_pair_takes_plain_and_ngram_only(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from bench.arms import main

    with pytest.raises(SystemExit) as refused:
        main(["--backends", "real", "--engine", "vllm", "--configs", "plain", "draft",
              "--loads", "1", "--requests", "11", "--out", str(tmp_path / "out")])
    assert "--configs plain ngram" in str(refused.value)
    assert "(vllm)" in capsys.readouterr().out  # said before anything was launched
