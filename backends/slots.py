"""How many requests an instance serves at once (its slots), and where that count came from.

Pure: the engine's answers and the launch flags in, one `Slots` out; the fetch is
`backends.capability.engine_slots`, the caller (router/instances/supervision) hands the result
to the pool.

| engine   | what the engine reports                   | launch flags (when it reports none)    |
|----------|-------------------------------------------|----------------------------------------|
| ds4      | always 1 (one request at a time)          |                                        |
| llamacpp | `GET /props` total_slots, else the length | `-np`/`--parallel N` (-1 or absent:    |
|          | of `GET /slots`                           | the engine's auto, told by /props)     |
| vllm     |                                           | `--max-num-seqs N`                     |
| sglang   |                                           | `--max-running-requests N`             |
| openai   |                                           |                                        |

Then the declared `slots:`; else 1, with a note that none was reported. A declared count that
the engine (or its own flags) contradicts loses: the engine's is used and the warning says both
numbers and the field to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from backends.spec import BackendSpec

# engine -> the command-line flags that set its slots (the last one given wins)
SLOT_FLAGS: Final[Mapping[str, tuple[str, ...]]] = {
    "llamacpp": ("-np", "--parallel"),
    "vllm": ("--max-num-seqs", "--max_num_seqs"),
    "sglang": ("--max-running-requests", "--max_running_requests"),
}
# llama.cpp reads its flags from the environment too (a flag given wins)
SLOT_ENV: Final[Mapping[str, str]] = {"llamacpp": "LLAMA_ARG_N_PARALLEL"}
NONE_REPORTED: Final = ("the engine reports no slot count and none is declared: 1 assumed "
                        "(declare `slots:` if it serves more requests at once)")


class Slots(NamedTuple):
    """Requests served at once; where the count came from (engine, launch, declared, default);
    what contradicted the declared count, or why 1 is assumed ('' when nothing did)."""

    slots: int
    source: str
    warning: str = ""


def resolve_slots(engine: str, declared: int | None, reported: int | None,
                  launched: int | None) -> Slots:
    """The count an instance of `engine` serves at once: what the engine `reported`, else what
    its `launched` flags say, else the `declared` one, else 1 (ds4: always 1)."""
    if engine == "ds4":
        return Slots(1, "engine", _contradicted(declared, 1, "ds4 serves one request at a time"))
    if reported is not None:
        return Slots(reported, "engine",
                     _contradicted(declared, reported, f"the engine reports {reported}"))
    if launched is not None:
        return Slots(launched, "launch", _contradicted(
            declared, launched, f"its launch flags say {launched}", also="or launch.args"))
    if declared is not None:
        return Slots(declared, "declared")
    return Slots(1, "default", NONE_REPORTED)


def _contradicted(declared: int | None, used: int, why: str, also: str = "") -> str:
    if declared is None or declared == used:
        return ""
    fix = f"`slots:` {also}".rstrip()
    return f"slots: {declared} declared, but {why}: {used} used (fix or remove this backend's {fix})"


def slots_of(spec: BackendSpec, reported: int | None) -> Slots:
    """`resolve_slots` for a configured instance, its launch flags read from `spec`."""
    return resolve_slots(spec.engine, spec.slots, reported, launch_slots(spec))


def launch_slots(spec: BackendSpec) -> int | None:
    """What the flags of an instance specroute launches set (None: attached, not set, or the
    engine's auto, e.g. llama.cpp's `-np -1`)."""
    if spec.launch is None:
        return None
    found = flag_value(spec.launch.args, SLOT_FLAGS.get(spec.engine, ()))
    env = SLOT_ENV.get(spec.engine)
    if found is None and env is not None:
        found = spec.launch.env.get(env)
    return _count(found)


def flag_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of `names` in `args` (`--flag V` or `--flag=V`), None if absent."""
    found = None
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name not in names:
            continue
        if equals:
            found = value
        elif index + 1 < len(args):
            found = args[index + 1]
    return found


def _count(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else 0
    except ValueError:
        return None
    return value if value >= 1 else None


def props_slots(props: object) -> int | None:
    """llama.cpp's `GET /props` answer: its `total_slots` (None: absent or not a count)."""
    total = props.get("total_slots") if isinstance(props, Mapping) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total >= 1 \
        else None


def listed_slots(slots: object) -> int | None:
    """llama.cpp's `GET /slots` answer: one entry per slot (None: not a non-empty list)."""
    return len(slots) if isinstance(slots, list) and slots else None
