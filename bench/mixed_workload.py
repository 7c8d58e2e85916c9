"""A mixed, greedy chat workload for the learning benchmark: agent turns with tools, code,
technical explanations, prose in English, and chat in Chinese, each request tagged with its true
class (in `metadata`, which the simulated engine reads; the router never does).

Deterministic in its seed; bodies are distinct (the system prompt numbers them), so the
simulated engine's per-body pacing gives every request its own draw of gate skips and accepted
drafts. The user's text is what a user would write: no nonce in it for the classifier to read.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Final

CLASS_KEYS: Final = (
    ("agent", "en"), ("code", "en"), ("technical", "en"), ("prose", "en"), ("chat", "zh"),
)

_TOOLS: Final = [
    {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}}
    for name, desc in (("read_file", "Read a file"), ("write_file", "Write a file"),
                       ("run_tests", "Run the test suite"), ("grep", "Search the tree"))
]
_FILES: Final = ("src/app.py", "lib/parser.go", "README.md", "tests/test_api.py", "Makefile",
                 "pkg/store/db.rs", "web/index.ts", "config/settings.yaml")
_TASKS: Final = ("parses a CSV file and returns the column means",
                 "merges two sorted lists", "validates an e-mail address",
                 "implements an LRU cache", "finds duplicate elements in an array",
                 "converts a JSON document to YAML", "computes the n-th Fibonacci number",
                 "walks a directory tree and lists every file", "implements binary search")
_CODE_LANGS: Final = ("Python", "Go", "Rust", "TypeScript", "Java", "C++")
_CONCEPTS: Final = ("TCP congestion control", "a B-tree index", "garbage collection in the JVM",
                    "the CAP theorem", "speculative decoding", "virtual memory paging",
                    "TLS 1.3 handshakes", "consistent hashing", "the Raft consensus protocol",
                    "a KV cache in transformer inference", "copy-on-write file systems")
_TOPICS: Final = ("an old lighthouse keeper", "the last day of summer", "a city after rain",
                  "a cat who learns to read", "two friends who meet after twenty years",
                  "a train that never stops", "the smell of a bakery at dawn", "a lost letter")
_FORMS: Final = ("a short story", "a poem", "an essay", "a fable", "a letter")
_ZH_CHAT: Final = ("你好呀", "今天好累啊", "哈哈哈太好笑了", "早安！", "你今天过得怎么样？",
                   "我好无聊", "周末快乐！", "好久不见", "你喜欢猫还是狗？", "我刚吃完饭")


@dataclass(frozen=True, slots=True)
class BenchRequest:
    cls: str
    lang: str
    body: dict[str, Any]


def class_of(body: Any) -> str:
    """The true class, for the simulated engine's per-class acceptance."""
    meta = body.get("metadata") if isinstance(body, dict) else None
    return str(meta.get("bench_class", "technical")) if isinstance(meta, dict) else "technical"


def make_requests(n: int, seed: int, max_tokens: tuple[int, int] = (96, 256)) -> list[BenchRequest]:
    """`n` requests cycling through the classes in a shuffled order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cls, lang = CLASS_KEYS[rng.randrange(len(CLASS_KEYS))]
        messages = _MAKERS[cls](rng)
        body = {
            "model": "bench-model",
            "temperature": 0,
            "max_tokens": rng.randint(*max_tokens),
            "messages": [{"role": "system", "content": f"You are assistant #{i}."}, *messages],
            "metadata": {"bench_class": cls},
        }
        if cls == "agent":
            body["tools"] = _TOOLS
        out.append(BenchRequest(cls, lang, body))
    return out


def _agent(rng: random.Random) -> list[dict[str, Any]]:
    path = rng.choice(_FILES)
    return [
        {"role": "user", "content": f"Fix the failing test in {path} and run the suite."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": f"def handler(x):\n    return x + {rng.randint(1, 99)}\n"},
    ]


def _code(rng: random.Random) -> list[dict[str, Any]]:
    lang, task = rng.choice(_CODE_LANGS), rng.choice(_TASKS)
    _draw_nonce(rng)
    return [{"role": "user", "content": f"Write a {lang} function that {task}. "
             "Include a unit test."}]


def _technical(rng: random.Random) -> list[dict[str, Any]]:
    concept = rng.choice(_CONCEPTS)
    _draw_nonce(rng)
    return [{"role": "user", "content": f"Explain how {concept} works, step by step, and what "
             "its main trade-offs are."}]


def _prose(rng: random.Random) -> list[dict[str, Any]]:
    text = f"Write {rng.choice(_FORMS)} about {rng.choice(_TOPICS)}."
    _draw_nonce(rng)
    return [{"role": "user", "content": text}]


def _chat(rng: random.Random) -> list[dict[str, Any]]:
    text = rng.choice(_ZH_CHAT)
    _draw_nonce(rng)
    return [{"role": "user", "content": text}]


def _draw_nonce(rng: random.Random) -> None:
    """The draw a numeric suffix once took (it read as technical to the classifier); kept so that
    a seed still gives the same classes and lengths as before."""
    rng.randint(1, 10**6)


_MAKERS: Final = {
    "agent": _agent, "code": _code, "technical": _technical, "prose": _prose, "chat": _chat,
}
