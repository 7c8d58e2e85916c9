"""bench.routing_ceiling: what routing could gain on instances that batch, simulated."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.prediction_ceiling import Lived
from bench.routing_ceiling import (
    FitError,
    Held,
    Paces,
    alone,
    clairvoyant,
    cost_rule,
    drained,
    favourite,
    fit_batch_size,
    fit_paces,
    hand_rule,
    least_connections,
    main,
    rollout,
    sequences,
    simulate,
)
from decisionlog.records import Outcome, RouteRecord, to_json

CLASSES = ("code", "prose")


def _paces(weights: dict[tuple[str, str], tuple[float, float, float]],
           tokens: float = 100.0) -> Paces:
    """Two instances `a` and `b`; weights: (log s per token alone, slope beside code, beside
    prose)."""
    return Paces(("a", "b"), CLASSES, weights, dict.fromkeys(CLASSES, tokens),
                 dict.fromkeys(CLASSES, 0.5))


def _flat(seconds: float = 0.1, slope: float = 0.0) -> Paces:
    """Every request 0.1 s a token alone on either instance, slowed by each neighbour alike."""
    w = (math.log(seconds), slope, slope)
    return _paces({(i, c): w for i in "ab" for c in CLASSES})


def test_a_closed_loop_sends_the_next_request_as_each_is_answered() -> None:
    paces, lc = _flat(), least_connections(("a", "b"))
    four = ["code"] * 4
    run = simulate(paces, four, clients=2, slots=4, router=lc())
    assert run.makespan == pytest.approx(20.0)  # 10 s a request, two at a time
    assert run.choices == ("a", "b", "a", "b")  # ties in turn
    assert simulate(paces, four, 2, 4, alone("a")()).makespan == pytest.approx(20.0)
    # one slot: the second of each pair waits for the first
    assert simulate(paces, four, 2, 1, alone("a")()).makespan == pytest.approx(40.0)
    # side by side each runs at half its pace alone (slope 1: (1 + 1) ** 1)
    slowed = _flat(slope=1.0)
    assert simulate(slowed, four, 2, 4, alone("a")()).makespan == pytest.approx(40.0)
    assert simulate(slowed, four, 2, 4, lc()).makespan == pytest.approx(20.0)
    # the first requests go where `forced` says, the rest where the router does
    assert simulate(paces, four, 2, 4, lc(), forced=["b", "b"]).choices[:2] == ("b", "b")


def test_drained_says_when_each_request_on_an_instance_ends_if_no_more_came() -> None:
    held = [Held("code", 50.0, True), Held("prose", 100.0, False)]
    assert drained(_flat(), "a", held, slots=1) == pytest.approx([5.0, 15.0])
    assert drained(_flat(), "a", held, slots=2) == pytest.approx([5.0, 10.0])  # it runs now
    assert drained(_flat(), "a", [], slots=2) == []


def _split() -> Paces:
    """`a` serves code 2x faster than `b`, `b` serves prose 2x faster than `a`; a neighbour
    doubles a request's time."""
    fast, slow, slope = math.log(0.1), math.log(0.2), 1.0
    return _paces({("a", "code"): (fast, slope, slope), ("a", "prose"): (slow, slope, slope),
                   ("b", "code"): (slow, slope, slope), ("b", "prose"): (fast, slope, slope)})


def test_specroutes_rule_places_each_request_where_it_and_its_neighbours_finish_soonest(
        ) -> None:
    paces = _split()
    route = cost_rule(paces, slots=4)()
    empty: dict[str, list[Held]] = {"a": [], "b": []}
    assert route("code", empty) == "a" and route("prose", empty) == "b"
    # `a` busy with a long code request: a code request alone on `b` (20 s) beats joining it
    # (both slowed 2x: 20 s for it and 10 s more for the other)
    assert route("code", {"a": [Held("code", 100.0, True)], "b": []}) == "b"
    assert favourite(paces) in {("a", "b", "code"), ("b", "a", "prose")}


def test_the_clairvoyant_is_never_worse_than_where_it_starts() -> None:
    paces, order = _split(), ["prose", "code"] * 3
    lc = least_connections(paces.instances)
    start = simulate(paces, order, 2, 4, lc())
    best = clairvoyant(paces, order, 2, 4, [start.choices])
    assert best.makespan <= start.makespan + 1e-9
    assert best.makespan < start.makespan  # least connections mixes the classes here
    assert simulate(paces, order, 2, 4, lc(), best.choices).makespan == pytest.approx(
        best.makespan)


def test_the_rollout_of_the_present_beats_least_connections_where_the_classes_split(
        ) -> None:
    paces, order = _split(), ["prose", "code"] * 4
    lc = simulate(paces, order, 2, 4, least_connections(paces.instances)()).makespan
    rolled = rollout(paces, order, 2, 4, random.Random(0), horizon=4)
    assert rolled.makespan < lc
    assert rolled.choices == ("b", "a") * 4  # each class where it is fastest


def test_a_hand_rule_holds_the_favoured_class_on_its_instance() -> None:
    paces = _paces({("a", "code"): (math.log(0.05), 0.0, 0.0),
                    ("a", "prose"): (math.log(0.1), 0.0, 0.0),
                    ("b", "code"): (math.log(0.1), 0.0, 0.0),
                    ("b", "prose"): (math.log(0.1), 0.0, 0.0)})
    assert favourite(paces) == ("a", "b", "code")
    route = hand_rule(paces, threshold=1)()
    busy = {"a": [Held("prose", 10.0, True)], "b": []}
    assert route("code", busy) == "a"  # always
    assert route("prose", busy) == "b"  # `a` has its one
    assert route("prose", {"a": [], "b": []}) == "a"


def _lived(rid: int, instance: str, cls: str, code: float, prose: float,
           spt: float) -> Lived:
    tokens = 100
    return Lived(f"r{rid}", instance, cls, tokens, spt * tokens * 1000.0, 0.0, 1.0, 1.0, 1.0,
                 beside_mean=(("code", code), ("prose", prose)))


def test_the_paces_are_fitted_per_instance_and_class_from_the_classes_beside() -> None:
    # a's requests slow with code beside them (slope 1), b's with prose (slope 0.5)
    truth = {("a", "code"): 0.05, ("a", "prose"): 0.08, ("b", "code"): 0.1, ("b", "prose"): 0.06}
    lived = []
    for k, ((instance, cls), alone_spt) in enumerate(truth.items()):
        for j in range(12):
            code, prose = j % 3, j // 3 % 4
            slowed = (1 + code) if instance == "a" else (1 + prose) ** 0.5
            lived.append(_lived(100 * k + j, instance, cls, code, prose, alone_spt * slowed))
    paces = fit_paces(lived)
    for (instance, cls), alone_spt in truth.items():
        assert paces.alone(instance, cls) == pytest.approx(alone_spt)
    assert paces.weights["a", "code"][1:] == pytest.approx((1.0, 0.0), abs=1e-9)
    assert paces.weights["b", "prose"][1:] == pytest.approx((0.0, 0.5), abs=1e-9)
    assert paces.seconds_per_token("a", "code", {"code": 1}) == pytest.approx(0.1)
    assert paces.tokens == {"code": 100, "prose": 100}
    assert paces.share == {"code": 0.5, "prose": 0.5}


def test_a_neighbour_never_makes_a_request_faster() -> None:
    # prose beside a request seems to speed it up: fitted as no effect
    lived = [_lived(100 * k + j, instance, cls, 0, j % 4, 0.1 / (1 + j % 4) ** 0.3)
             for k, (instance, cls) in enumerate([(i, c) for i in "ab" for c in CLASSES])
             for j in range(12)]
    paces = fit_paces(lived)
    assert all(min(w[1:]) >= 0.0 for w in paces.weights.values())
    assert paces.weights["a", "code"][2] == 0.0


def test_a_log_that_cannot_be_fitted_is_refused_with_the_reason() -> None:
    one = [_lived(i, "a", "code", 0, 0, 0.1) for i in range(10)]
    with pytest.raises(FitError, match="1 instance"):
        fit_paces(one)
    thin = [*one, *(_lived(20 + i, "b", "prose", 0, 0, 0.1) for i in range(10))]
    with pytest.raises(FitError, match="no request of class 'prose' on 'a'"):
        fit_paces(thin)


def test_orders_keep_the_mix_and_are_the_same_for_a_seed() -> None:
    paces = _flat()
    orders = sequences(paces, requests=7, count=3, seed=1)
    assert all(sorted(o).count("code") + sorted(o).count("prose") == 7 for o in orders)
    assert all(abs(o.count("code") - o.count("prose")) == 1 for o in orders)
    assert orders == sequences(paces, 7, 3, 1) and orders != sequences(paces, 7, 3, 2)


EPOCH = datetime(2026, 12, 6, tzinfo=UTC)


def _record(rid: str, instance: str, cls: str, start_s: float, total_ms: float) -> RouteRecord:
    end = EPOCH + timedelta(seconds=start_s + total_ms / 1000.0)
    return RouteRecord(
        ts=end.isoformat(timespec="milliseconds").replace("+00:00", "Z"), request_id=rid,
        endpoint="chat", model="m", stream=False, conversation="", features={},
        classifier={"class": cls}, decision={"reason": "header", "queue_ms": 0.0},
        outcome=Outcome(status=200, backend=instance, total_ms=total_ms, completion_tokens=100),
        overhead_ms=0.1)


def test_the_command_fits_a_log_and_prints_the_measured_runs_beside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = []
    for i in range(24):  # one at a time, then in pairs: each instance's pace alone and beside
        instance, cls = ("qwen-plain", "qwen-ngram")[i % 2], CLASSES[i // 2 % 2]
        pace = {"qwen-plain": 8_000.0, "qwen-ngram": 5_000.0 if cls == "code" else 9_000.0}
        records.append(_record(f"r{i}", instance, cls, 20.0 * i, pace[instance]))
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(r) + "\n" for r in records))
    arms = tmp_path / "arms.json"
    arms.write_text(json.dumps([{"load": "2 clients", "batch": {"makespan": {
        "least-conn": 50.0, "plain": 60.0, "ngram": 40.0, "auto": 45.0},
        "hand": {"hand-0": 55.0}}}]))
    assert main([str(log), "--arms", str(arms), "--clients", "2", "--requests", "6",
                 "--orders", "2", "--clairvoyant-orders", "1"]) == 0
    out = capsys.readouterr().out
    assert "the favoured class: code on qwen-ngram" in out
    assert "measured 1.250 (ngram)" in out and "measured 0.833 (plain)" in out
    assert "measured 0.909 (hand-0)" in out and "specroute  measured 1.111" in out
    assert "clairvoyant" in out and "present, its end unknown" in out
    assert "the same, by batch size" in out
    assert main([str(tmp_path / "none.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    only = tmp_path / "one.jsonl"
    only.write_text("".join(to_json(r) + "\n" for r in records[::2]))
    assert main([str(only)]) == 2
    assert "routing needs two" in capsys.readouterr().err
    assert main([str(log), "--clients", "0"]) == 2


def test_the_batch_size_fit_prices_every_neighbour_alike() -> None:
    # a's requests slow with code beside them only: by size, a story beside it counts as much
    lived = []
    for k, (instance, cls) in enumerate([(i, c) for i in "ab" for c in CLASSES]):
        for j in range(12):
            code, prose = j % 3, j // 3 % 4
            lived.append(_lived(100 * k + j, instance, cls, code, prose,
                                0.1 * (1 + code if instance == "a" else 1.0)))
    exact = fit_paces(lived)
    by_size = fit_batch_size(lived, exact)
    assert by_size.size_only
    assert by_size.seconds_per_token("a", "code", {"prose": 2}) == pytest.approx(
        by_size.seconds_per_token("a", "code", {"code": 2}))
    assert exact.seconds_per_token("a", "code", {"prose": 2}) == pytest.approx(0.1)
    assert by_size.seconds_per_token("a", "code", {"prose": 2}) > 0.12
    assert by_size.weights["b", "code"][1] == pytest.approx(0.0, abs=1e-9)  # b never slows
