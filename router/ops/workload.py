"""The demo's embedded mixed workload (`router.ops.demo`): a few requests per class.

Each item carries its true class (what the reply will be like), so that a replay can report
per class and a simulated engine can pace each class by its own acceptance. The `edit` class
quotes a Python function (or a paragraph) and asks for it back whole with a small change: most
of the answer is in the prompt, where prompt-lookup (n-gram) speculation finds it.
`FUNCTIONS`, `PARAGRAPHS` and the asks are what `bench.arms` draws its edits from too.
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


# Real-looking Python, 20-40 lines each: (the function, an identifier in it, a new name for it).
FUNCTIONS: Final[tuple[tuple[str, str, str], ...]] = (
    ('''def fetch_json(session, url, *, attempts=4, backoff=0.5, timeout=10.0):
    """GET `url` and decode its JSON body, retrying refused connections and 5xx answers."""
    delay = backoff
    last_error = None
    for attempt in range(1, attempts + 1):
        try:
            response = session.get(url, timeout=timeout)
        except ConnectionError as error:
            last_error = error
        else:
            if response.status_code < 500:
                response.raise_for_status()
                return response.json()
            last_error = RuntimeError(f"{url}: HTTP {response.status_code}")
        if attempt == attempts:
            break
        log.warning("attempt %d of %d for %s failed: %s", attempt, attempts, url, last_error)
        time.sleep(delay)
        delay = min(delay * 2, 8.0)
    raise RuntimeError(f"{url}: gave up after {attempts} attempts") from last_error''',
     "fetch_json", "get_json"),
    ('''def summarize_orders(orders, *, currency="EUR", since=None):
    """Totals per customer of the paid orders in `currency`, largest first."""
    totals = {}
    counts = {}
    for order in orders:
        if order["status"] != "paid":
            continue
        if order["currency"] != currency:
            continue
        if since is not None and order["paid_at"] < since:
            continue
        customer = order["customer_id"]
        amount = sum(line["price"] * line["quantity"] for line in order["lines"])
        amount -= order.get("discount", 0)
        totals[customer] = totals.get(customer, 0) + amount
        counts[customer] = counts.get(customer, 0) + 1
    rows = [
        {"customer": customer, "total": round(total, 2), "orders": counts[customer]}
        for customer, total in totals.items()
    ]
    rows.sort(key=lambda row: row["total"], reverse=True)
    return rows''', "totals", "revenue"),
    ('''def load_settings(path, defaults=None):
    """Read KEY=VALUE lines from `path` over `defaults`; ints and booleans are converted."""
    settings = dict(defaults or {})
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{number}: expected KEY=VALUE, got {raw.strip()!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            if not key.isidentifier():
                raise ValueError(f"{path}:{number}: {key!r} is not a valid key")
            if value.lower() in ("true", "yes", "on"):
                settings[key] = True
            elif value.lower() in ("false", "no", "off"):
                settings[key] = False
            elif value.lstrip("-").isdigit():
                settings[key] = int(value)
            else:
                settings[key] = value.strip('"')
    return settings''', "load_settings", "read_settings"),
    ('''class RateLimiter:
    """At most `rate` calls per `per` seconds for each key (a sliding window)."""

    def __init__(self, rate, per=1.0, clock=time.monotonic):
        self.rate = rate
        self.per = per
        self.clock = clock
        self.calls = collections.defaultdict(collections.deque)

    def allow(self, key):
        now = self.clock()
        window = self.calls[key]
        while window and now - window[0] >= self.per:
            window.popleft()
        if len(window) >= self.rate:
            return False
        window.append(now)
        return True

    def wait_time(self, key):
        window = self.calls[key]
        if len(window) < self.rate:
            return 0.0
        return max(0.0, self.per - (self.clock() - window[0]))''', "RateLimiter", "SlidingLimiter"),
)
PARAGRAPHS: Final = (
    ("Our team met on Tuesday to reveiw the quarterly roadmap. We agreed that the billing "
     "migration comes first, because the old system will loose vendor support in March. The "
     "search redesign moves to the next quarter, and the mobile app keeps its current scope. "
     "Please send any concerns to Priya before Friday, so that she can update the plan and "
     "share it with the wider group."),
    ("The museum opens at nine on weekdays and at ten on weekends. Tickets can be bought at the "
     "door or online, where they are slightly cheaper. Guided tours leave every hour from the "
     "main hall; they last about fourty minutes and are included in the ticket price. The cafe "
     "on the top floor has a view of the river and serves lunch untill three."),
)
EDIT_ASKS: Final = (
    "Rename `{old}` to `{new}` in this code and return the whole code:",
    "Please rename {old} to {new} below and give me the complete updated code.",
    "Refactor: rename `{old}` to `{new}`. Return the full code, nothing else.",
    "Add a short comment above the trickiest line of this code and return it whole:",
)


def edit_ask(function: str, old: str, new: str, how: int = 0) -> str:
    """An ask to edit `function` and return it whole, in one of `EDIT_ASKS`' phrasings."""
    ask = EDIT_ASKS[how % len(EDIT_ASKS)].format(old=old, new=new)
    return f"{ask}\n\n```python\n{function}\n```"


def text_edit_ask(paragraph: str) -> str:
    """An ask to correct a quoted paragraph and return it whole."""
    return f"Fix the spelling mistakes in this paragraph and return it whole:\n\n> {paragraph}\n"


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
    WorkItem("edit", "en", _chat(edit_ask(*FUNCTIONS[0]))),
    WorkItem("edit", "en", _chat(edit_ask(*FUNCTIONS[2], how=2))),
    WorkItem("edit", "en", _chat(text_edit_ask(PARAGRAPHS[0]))),
    WorkItem("edit", "en", _chat("Fix this function:\n```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```\nIt crashes on an empty list.")),
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


def requests_for(n: int, *, model: str, stream: bool = True, max_tokens: int = 64,
                 edit_tokens: int = 0) -> list[WorkItem]:
    """`n` greedy requests cycling through the mixed workload (classes in turn), ready to send;
    an edit's `max_tokens` is `edit_tokens` when given (its answer is the whole text)."""
    order = interleaved()
    items = []
    for i in range(n):
        item = order[i % len(order)]
        tokens = edit_tokens if item.true_class == "edit" and edit_tokens else max_tokens
        body = {**item.body, "model": model, "temperature": 0, "max_tokens": tokens,
                "stream": stream}
        items.append(WorkItem(item.true_class, item.lang, body))
    return items


def class_by_key() -> dict[str, str]:
    return {item.key: item.true_class for item in MIXED}
