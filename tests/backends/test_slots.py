"""An instance's slots: the engine's report, its launch flags, the declared count, or 1."""

from __future__ import annotations

import pytest

from backends.slots import (
    NONE_REPORTED,
    Slots,
    flag_value,
    launch_slots,
    listed_slots,
    props_slots,
    resolve_slots,
    slots_of,
)
from backends.spec import BackendSpec, LaunchSpec

DS4_ONE = "slots: 4 declared, but ds4 serves one request at a time: 1 used"


@pytest.mark.parametrize(
    ("engine", "declared", "reported", "launched", "expected"),
    [
        # ds4: always one at a time, whatever is declared
        ("ds4", None, None, None, Slots(1, "engine")),
        ("ds4", 1, None, None, Slots(1, "engine")),
        ("ds4", 4, None, None, Slots(1, "engine", DS4_ONE)),
        # llama.cpp: the engine's report wins over the flags and the declared count
        ("llamacpp", None, 4, None, Slots(4, "engine")),
        ("llamacpp", 4, 4, None, Slots(4, "engine")),
        ("llamacpp", None, 4, 2, Slots(4, "engine")),
        # it reports nothing: the flags it was launched with, then the declared count
        ("llamacpp", None, None, 2, Slots(2, "launch")),
        ("llamacpp", 3, None, None, Slots(3, "declared")),
        ("llamacpp", None, None, None, Slots(1, "default", NONE_REPORTED)),
        ("vllm", None, None, 64, Slots(64, "launch")),
        ("sglang", 8, None, None, Slots(8, "declared")),
        ("openai", None, None, None, Slots(1, "default", NONE_REPORTED)),
        ("openai", 16, None, None, Slots(16, "declared")),
    ],
)
def test_the_count_and_where_it_came_from(
    engine: str, declared: int | None, reported: int | None, launched: int | None,
    expected: Slots,
) -> None:
    got = resolve_slots(engine, declared, reported, launched)
    assert (got.slots, got.source) == (expected.slots, expected.source)
    assert got.warning.startswith(expected.warning) and bool(got.warning) == bool(expected.warning)


@pytest.mark.parametrize(
    ("declared", "reported", "launched", "says"),
    [
        (2, 4, None, ("slots: 2 declared", "the engine reports 4", "4 used", "`slots:`")),
        (2, None, 8, ("slots: 2 declared", "its launch flags say 8", "8 used",
                      "`slots:` or launch.args")),
    ],
)
def test_a_contradicted_declaration_names_both_counts_and_the_field(
    declared: int, reported: int | None, launched: int | None, says: tuple[str, ...]
) -> None:
    got = resolve_slots("llamacpp", declared, reported, launched)
    assert got.slots == (reported or launched)
    assert all(part in got.warning for part in says), got.warning


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], None),
        (["--parallel", "2"], "2"),
        (["-np", "3"], "3"),
        (["--parallel=5"], "5"),
        (["-np", "2", "--parallel", "6"], "6"),  # the last one given, as the engine reads them
        (["--parallel"], None),  # no value after it
        (["--parallelism", "2"], None),
    ],
)
def test_flag_value(args: list[str], expected: str | None) -> None:
    assert flag_value(args, ("-np", "--parallel")) == expected


def _launched(engine: str, args: list[str], env: dict[str, str] | None = None,
              slots: int | None = None) -> BackendSpec:
    launch = LaunchSpec(model="m", port=8090, args=args, env=env or {})
    return BackendSpec(name="x", engine=engine, profile="plain", launch=launch,
                       slots=slots)


@pytest.mark.parametrize(
    ("engine", "args", "env", "expected"),
    [
        ("llamacpp", ["--parallel", "2"], {}, 2),
        ("llamacpp", ["-np", "-1"], {}, None),  # the engine's auto: /props tells
        ("llamacpp", [], {}, None),
        ("llamacpp", ["-np", "four"], {}, None),
        ("llamacpp", [], {"LLAMA_ARG_N_PARALLEL": "3"}, 3),
        ("llamacpp", ["-np", "2"], {"LLAMA_ARG_N_PARALLEL": "3"}, 2),  # the flag wins
        ("vllm", ["--max-num-seqs", "32"], {}, 32),
        ("vllm", ["--parallel", "2"], {}, None),  # not vLLM's flag
        ("sglang", ["--max-running-requests=48"], {}, 48),
        ("ds4", ["--parallel", "2"], {}, None),
    ],
)
def test_launch_slots_read_the_engines_own_flag(
    engine: str, args: list[str], env: dict[str, str], expected: int | None
) -> None:
    assert launch_slots(_launched(engine, args, env)) == expected


def test_an_attached_instance_has_no_launch_flags() -> None:
    spec = BackendSpec(name="x", engine="vllm", profile="plain", url="http://127.0.0.1:1",
                       slots=8)
    assert launch_slots(spec) is None
    assert slots_of(spec, None) == Slots(8, "declared")
    assert slots_of(_launched("vllm", ["--max-num-seqs", "8"], slots=8), None) == \
        Slots(8, "launch")


@pytest.mark.parametrize(
    ("props", "expected"),
    [({"total_slots": 4}, 4), ({"total_slots": 0}, None), ({"total_slots": True}, None),
     ({"total_slots": "4"}, None), ({}, None), ([], None), (None, None)],
)
def test_props_slots(props: object, expected: int | None) -> None:
    assert props_slots(props) == expected


@pytest.mark.parametrize(
    ("slots", "expected"),
    [([{"id": 0}, {"id": 1}], 2), ([], None), ({"id": 0}, None), (None, None)],
)
def test_listed_slots(slots: object, expected: int | None) -> None:
    assert listed_slots(slots) == expected
