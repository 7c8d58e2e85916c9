"""The demo's embedded mixed workload (`router.ops.demo`): a few requests per class.

Each item carries its true class (what the reply will be like), so that a replay can report
per class and a simulated engine can pace each class by its own acceptance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

WEATHER_TOOL: Final = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
FILE_TOOLS: Final = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository."),
        ("write_file", "Write a file of the repository."),
        ("run_tests", "Run the test suite and return its output."),
    )
]


@dataclass(frozen=True, slots=True)
class WorkItem:
    true_class: str
    lang: str
    body: dict[str, Any]

    @property
    def key(self) -> str:
        """The last message's text: what a simulated engine recognises the item by."""
        return last_text(self.body)


def last_text(body: Mapping[str, Any]) -> str:
    """The text of a chat body's last message (the key `class_by_key` maps to a class)."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content") if isinstance(messages[-1], dict) else ""
    return content if isinstance(content, str) else str(content or "")


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


MIXED: Final[tuple[WorkItem, ...]] = (
    WorkItem("agent", "en", _chat("What's the weather in Lisbon right now?", tools=[WEATHER_TOOL])),
    WorkItem("agent", "en", _chat("Is it colder in Oslo or in Helsinki today?", tools=[WEATHER_TOOL])),
    WorkItem("agent", "en", {
        "messages": [
            {"role": "system", "content": "You are a coding agent. Use the tools to edit the repository."},
            {"role": "user", "content": "The test for parse_date fails; find out why and fix it."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "run_tests", "arguments": "{\"path\": \"tests\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "FAILED tests/test_dates.py::test_parse_date - ValueError"},
        ],
        "tools": FILE_TOOLS,
    }),
    WorkItem("agent", "zh", _chat("帮我查一下北京明天的天气", tools=[WEATHER_TOOL])),
    WorkItem("code", "en", _chat("Write a Python function that merges two sorted lists into one sorted list.")),
    WorkItem("code", "en", _chat("Fix this function:\n```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```\nIt crashes on an empty list.")),
    WorkItem("code", "en", _chat("Write a SQL query that returns the ten customers with the highest total order value.")),
    WorkItem("code", "zh", _chat("用 Python 写一个函数，判断一个字符串是不是回文。")),
    WorkItem("technical", "en", _chat("Explain how a B-tree keeps itself balanced on insertion.")),
    WorkItem("technical", "en", _chat("Why does TCP need a three-way handshake?")),
    WorkItem("technical", "en", _chat("What is the difference between a process and a thread?")),
    WorkItem("technical", "zh", _chat("什么是量子计算？请简单解释一下。")),
    WorkItem("prose", "en", _chat("Write a short story about a lighthouse keeper who finds a message in a bottle.")),
    WorkItem("prose", "en", _chat("Write a poem about autumn rain in the city.")),
    WorkItem("prose", "en", _chat("Draft a friendly email inviting my team to a Friday picnic.")),
    WorkItem("prose", "zh", _chat("写一首关于春天的小诗。")),
    WorkItem("chat", "zh", _chat("你好！最近怎么样？")),
    WorkItem("chat", "zh", _chat("谢谢你的帮助！")),
    WorkItem("chat", "zh", _chat("早上好，今天心情不错。")),
    WorkItem("chat", "en", _chat("Hi! How are you doing today?")),
)


def interleaved() -> list[WorkItem]:
    """The workload with classes taken in turn (and languages in turn within a class), so that
    any prefix covers every class."""
    return _round_robin([_round_robin(list(_group(items, "lang").values()))
                         for items in _group(MIXED, "true_class").values()])


def _group(items: Sequence[WorkItem], attribute: str) -> dict[str, list[WorkItem]]:
    groups: dict[str, list[WorkItem]] = {}
    for item in items:
        groups.setdefault(getattr(item, attribute), []).append(item)
    return groups


def _round_robin(groups: Sequence[Sequence[WorkItem]]) -> list[WorkItem]:
    rounds = max(len(group) for group in groups)
    return [group[r] for r in range(rounds) for group in groups if r < len(group)]


def requests_for(n: int, *, model: str, stream: bool = True, max_tokens: int = 64) -> list[WorkItem]:
    """`n` greedy requests cycling through the mixed workload (classes in turn), ready to send."""
    order = interleaved()
    items = []
    for i in range(n):
        item = order[i % len(order)]
        body = {**item.body, "model": model, "temperature": 0, "max_tokens": max_tokens, "stream": stream}
        items.append(WorkItem(item.true_class, item.lang, body))
    return items


def class_by_key() -> dict[str, str]:
    return {item.key: item.true_class for item in MIXED}
