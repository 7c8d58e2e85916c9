"""Traffic mixes for the learning benchmark, from request templates that are not in the
classifier's training corpus (none of its sources, no row of it): agent turns in multi-tool
assistant conversations with tool calls and results earlier in the history, code asks without
fences, technical questions, prose requests, and casual chat in English and Chinese.

Each request carries its true class in `metadata.bench_class` (the simulated engine reads it to
pace the reply; the router never does). Deterministic in the seed.

Mixes (class shares): `agent-heavy`, `chat-heavy`, `balanced`, and `sampled` (balanced, half of
the requests at temperature 0.7, the rest greedy). `make_edit_mix` (for `bench.arms`): code and
text edits (`router.ops.workload`'s functions and paragraphs, asked back whole with a rename or
a small change) beside chat and prose: `mixed`, `chat` (no edits), `edit` (edits only), and
`edit-story` (issue 50's batch bench: copy edits, a Python function renamed and returned whole,
beside short stories, half each).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

MIXES: Final[Mapping[str, Mapping[str, float]]] = {
    "agent-heavy": {"agent": 0.5, "code": 0.2, "technical": 0.15, "prose": 0.05, "chat": 0.1},
    "chat-heavy": {"agent": 0.05, "code": 0.1, "technical": 0.15, "prose": 0.25, "chat": 0.45},
    "balanced": {"agent": 0.2, "code": 0.2, "technical": 0.2, "prose": 0.2, "chat": 0.2},
    "sampled": {"agent": 0.2, "code": 0.2, "technical": 0.2, "prose": 0.2, "chat": 0.2},
}
SAMPLED_SHARE: Final = 0.5  # of the `sampled` mix's requests at temperature 0.7
ZH_CHAT_SHARE: Final = 0.4  # of chat turns in Chinese


@dataclass(frozen=True, slots=True)
class TrafficRequest:
    cls: str  # the true class
    lang: str
    body: dict[str, Any]


_TOOL_NAMES: Final = (
    ("set_reminder", "Create a reminder at a time", {"time": "string", "text": "string"}),
    ("get_weather", "Current weather for a city", {"city": "string"}),
    ("search_web", "Search the web", {"query": "string"}),
    ("send_email", "Send an e-mail", {"to": "string", "subject": "string", "body": "string"}),
    ("calendar_add", "Add a calendar event", {"title": "string", "start": "string"}),
    ("convert_currency", "Convert an amount", {"amount": "number", "from": "string", "to": "string"}),
    ("play_music", "Play a song or playlist", {"query": "string"}),
    ("book_table", "Book a restaurant table", {"place": "string", "people": "integer"}),
    ("get_stock", "A stock's last price", {"symbol": "string"}),
    ("translate", "Translate text", {"text": "string", "target": "string"}),
    ("list_files", "List files in a folder", {"path": "string"}),
    ("order_taxi", "Order a taxi", {"from": "string", "to": "string"}),
    ("smart_light", "Switch a light", {"room": "string", "on": "boolean"}),
    ("find_recipe", "Find a recipe", {"dish": "string"}),
    ("track_parcel", "Track a parcel", {"number": "string"}),
    ("create_note", "Save a note", {"text": "string"}),
    ("get_news", "Headlines on a topic", {"topic": "string"}),
    ("set_timer", "Start a timer", {"minutes": "integer"}),
    ("call_contact", "Phone a contact", {"name": "string"}),
)
_ASKS: Final = (
    ("set_reminder", "Set a reminder to apply sunscreen before lunch at 12:30."),
    ("get_weather", "Will I need an umbrella in Lisbon this afternoon?"),
    ("send_email", "Email Priya that the review moved to Thursday."),
    ("calendar_add", "Put the dentist on my calendar next Tuesday at 9."),
    ("convert_currency", "How much is 250 euros in yen right now?"),
    ("play_music", "Play something calm for studying."),
    ("book_table", "Get us a table for four at Rosa's tonight."),
    ("get_stock", "What's NVDA trading at?"),
    ("order_taxi", "I need a cab from the office to the airport."),
    ("smart_light", "Turn off the kitchen lights."),
    ("track_parcel", "Where's my parcel 7Q-2291?"),
    ("set_timer", "Timer for 12 minutes please."),
    ("find_recipe", "Find me a quick vegetarian curry."),
    ("create_note", "Note that the gate code is 4417."),
)
_CODE_ASKS: Final = (
    "write a {lang} function that {task}",
    "I need {lang} code that {task}",
    "can you give me a {lang} snippet which {task}",
    "implement in {lang}: something that {task}",
    "{lang}: a class that {task}, with a couple of tests",
)
_TASKS: Final = (
    "deduplicates a list while keeping order", "reads a TOML file into a dict",
    "retries an HTTP call with exponential backoff", "parses ISO dates from log lines",
    "rate-limits calls per user", "streams a large CSV and sums one column",
    "validates an IBAN", "computes a rolling median", "serialises a tree to JSON",
    "resizes images in a folder", "diffs two JSON documents", "tokenises arithmetic expressions",
)
_LANGS: Final = ("Python", "Go", "Rust", "TypeScript", "Java", "C#", "Kotlin", "bash")
_TECH: Final = (
    "Why does {x} matter for latency?", "What are the trade-offs of {x}?",
    "How does {x} work under the hood?", "Compare {x} with the usual alternative.",
    "When should I avoid {x}?",
)
_TOPICS: Final = (
    "write-ahead logging", "HTTP/2 multiplexing", "bloom filters", "vector clocks",
    "NUMA-aware scheduling", "LSM trees", "QUIC", "a service mesh", "column stores",
    "branch prediction", "speculative execution", "CRDTs", "the Linux page cache",
)
_PROSE: Final = (
    "Write a short story about {t}.", "A poem about {t}, please.", "Draft a wedding toast mentioning {t}.",
    "Write a diary entry from the point of view of {t}.", "Give me song lyrics about {t}.",
)
_PROSE_TOPICS: Final = (
    "a fox who runs a bakery", "the first snow in Kyoto", "a robot learning to paint",
    "two rivals stuck in a lift", "a lighthouse in fog", "an old violin", "the night market",
)
_CHAT_EN: Final = (
    "hey, how's it going?", "lol that's hilarious", "good morning!", "thanks a lot, you're great",
    "I'm bored, talk to me", "do you like rainy days?", "haha ok", "see you tomorrow!",
)
_CHAT_ZH: Final = (
    "嗨，最近怎么样？", "哈哈笑死我了", "晚安啦", "谢谢你呀", "今天下雨了，好烦",
    "你喜欢吃火锅吗？", "周末有什么打算？", "我好困啊",
)


def _tools(rng: random.Random, must: str) -> list[dict[str, Any]]:
    """4-19 tools attached, always including `must`."""
    chosen = rng.sample([t for t in _TOOL_NAMES if t[0] != must], rng.randint(3, 18))
    chosen.append(next(t for t in _TOOL_NAMES if t[0] == must))
    rng.shuffle(chosen)
    return [{"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {k: {"type": v} for k, v in props.items()},
                       "required": list(props)}}} for name, desc, props in chosen]


def _agent(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A turn in a multi-tool conversation: earlier calls and results in the history."""
    earlier = rng.sample(_ASKS, rng.randint(1, 3))
    tool, ask = rng.choice([a for a in _ASKS if a not in earlier])
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i, (name, text) in enumerate(earlier):
        call = f"call_{i}"
        messages += [
            {"role": "user", "content": text},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call, "type": "function",
                "function": {"name": name, "arguments": json.dumps({"q": text[:20]})}}]},
            {"role": "tool", "tool_call_id": call, "content": json.dumps({"ok": True})},
            {"role": "assistant", "content": "Done."},
        ]
    messages.append({"role": "user", "content": ask})
    return messages, {"tools": _tools(rng, tool)}


def _code(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    ask = rng.choice(_CODE_ASKS).format(lang=rng.choice(_LANGS), task=rng.choice(_TASKS))
    return [{"role": "user", "content": ask}], {}


def _technical(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return [{"role": "user", "content": rng.choice(_TECH).format(x=rng.choice(_TOPICS))}], {}


def _prose(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return [{"role": "user", "content": rng.choice(_PROSE).format(t=rng.choice(_PROSE_TOPICS))}], {}


def _chat(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    zh = rng.random() < ZH_CHAT_SHARE
    return [{"role": "user", "content": rng.choice(_CHAT_ZH if zh else _CHAT_EN)}], {"_zh": zh}


_MAKERS: Final[Mapping[str, Callable[[random.Random], tuple[list[dict[str, Any]],
                                                            dict[str, Any]]]]] = {
    "agent": _agent, "code": _code, "technical": _technical, "prose": _prose, "chat": _chat,
}


def make_mix(mix: str, n: int, seed: int, max_tokens: int = 64) -> list[TrafficRequest]:
    """`n` distinct requests of a mix (a numbered user id keeps bodies distinct, so the
    simulated engine draws each its own gate skips and accepted drafts)."""
    rng = random.Random(f"{mix}/{seed}")
    shares = MIXES[mix]
    classes, weights = list(shares), list(shares.values())
    out = []
    for i in range(n):
        cls = rng.choices(classes, weights)[0]
        messages, extra = _MAKERS[cls](rng)
        zh = bool(extra.pop("_zh", False))
        sampled = mix == "sampled" and rng.random() < SAMPLED_SHARE
        body: dict[str, Any] = {
            "model": "bench-model", "messages": messages, "max_tokens": max_tokens,
            "temperature": 0.7 if sampled else 0, "user": f"u{i}",
            "metadata": {"bench_class": cls}, **extra,
        }
        out.append(TrafficRequest(cls, "zh" if zh else "en", body))
    return out


# --- edits beside chat and prose (bench.arms) ------------------------------------------------
# Class shares of `make_edit_mix`: code and text edits (a quoted function or paragraph asked
# back whole with a small change: prompt lookup's case) beside casual chat and prose.
EDIT_MIXES: Final[Mapping[str, Mapping[str, float]]] = {
    "mixed": {"edit": 0.5, "chat": 0.25, "prose": 0.25},
    "chat": {"chat": 0.5, "prose": 0.5},
    "edit": {"edit": 1.0},
    "edit-story": {"edit": 0.5, "prose": 0.5},
}
TEXT_EDIT_SHARE: Final = 0.2  # of edits on a paragraph of prose, the rest on Python


def _edit(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from router.ops.workload import EDIT_ASKS, FUNCTIONS, PARAGRAPHS, edit_ask, text_edit_ask

    if rng.random() < TEXT_EDIT_SHARE:
        return [{"role": "user", "content": text_edit_ask(rng.choice(PARAGRAPHS))}], {}
    ask = edit_ask(*rng.choice(FUNCTIONS), how=rng.randrange(len(EDIT_ASKS)))
    return [{"role": "user", "content": ask}], {}


def _copy_edit(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A function renamed and returned whole (a rename phrasing of `EDIT_ASKS`: the answer is
    the prompt's code again, prompt lookup's best case)."""
    from router.ops.workload import EDIT_ASKS, FUNCTIONS, edit_ask

    renames = [how for how, ask in enumerate(EDIT_ASKS) if "{new}" in ask]
    return [{"role": "user", "content": edit_ask(*rng.choice(FUNCTIONS),
                                                 how=rng.choice(renames))}], {}


def _story(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    return [{"role": "user", "content": STORY.format(t=rng.choice(_PROSE_TOPICS))}], {}


STORY: Final = "Write a short story about {t}."
# A mix's own makers, where its classes are narrower than `make_edit_mix`'s defaults
_EDIT_MIX_MAKERS: Final[Mapping[str, Mapping[str, Callable[[random.Random], tuple[
    list[dict[str, Any]], dict[str, Any]]]]]] = {
    "edit-story": {"edit": _copy_edit, "prose": _story},
}


def make_edit_mix(mix: str, n: int, seed: int, max_tokens: int = 96) -> list[TrafficRequest]:
    """`n` greedy requests of an `EDIT_MIXES` mix, each class its share of them exactly (as
    near as `n` allows), in a shuffled order, deterministic in the seed (a numbered user id
    keeps bodies distinct); the true class in `metadata.bench_class` as `make_mix`'s."""
    rng = random.Random(f"edits/{mix}/{seed}")
    makers = {"edit": _edit, "chat": _chat, "prose": _prose, **_EDIT_MIX_MAKERS.get(mix, {})}
    shares = EDIT_MIXES[mix]
    order = [cls for cls, share in shares.items() for _ in range(round(share * n))]
    order = (order + list(shares) * n)[:n]
    rng.shuffle(order)
    out = []
    for i, cls in enumerate(order):
        messages, extra = makers[cls](rng)
        zh = bool(extra.pop("_zh", False))
        body: dict[str, Any] = {
            "model": "bench-model", "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "user": f"u{i}", "metadata": {"bench_class": cls}, **extra,
        }
        out.append(TrafficRequest(cls, "zh" if zh else "en", body))
    return out
