"""Prompt-copy signals: what a text quotes, edit verbs, re-emitting formats, and the signals
`extract` gives whole requests (pure; tables of small texts and requests)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifiers.copying import (
    NO_COPY,
    RUNS_CAP,
    SITES_CAP,
    CopySignals,
    Quoted,
    edit_verb,
    name_sites,
    quoted,
    reemit_format,
    rename_in,
)
from classifiers.features import extract
from classifiers.request_view import view_request

CODE = "def handler(request):\n    data = request.json()\n    return {'ok': True, **data}\n"
JSON = '{\n  "name": "specroute",\n  "tags": ["proxy", "llm"]\n}\n'
PROSE = "The proxy routes each request to the engine that will finish it soonest.\n"


def _fenced(body: str, tag: str = "") -> str:
    return f"```{tag}\n{body}```\n"


QUOTE = "> To be or not to be\n> that is the question\n"
NUMBERED = "     1\tdef f(x):\n     2\t    return x\n"  # an agent's read_file (cat -n)
UNCLOSED = "```js\nif (!ok) { go(); }\n"
NESTED = "````md\n```py\nx = 1\n```\n````\n"


@pytest.mark.parametrize(
    ("text", "whole", "code", "json", "plain"),
    [
        # fenced blocks count whole (fence lines included), by their tag...
        (_fenced(CODE, "python"), False, _fenced(CODE, "python"), "", ""),
        (_fenced(JSON, "json"), False, "", _fenced(JSON, "json"), ""),
        (_fenced(PROSE, "text"), False, "", "", _fenced(PROSE, "text")),
        # ... or, untagged, by their content
        (_fenced(CODE), False, _fenced(CODE), "", ""),
        (_fenced(JSON), False, "", _fenced(JSON), ""),
        ("Read:\n" + _fenced(PROSE * 2), False, "", "", _fenced(PROSE * 2)),
        # ~~~ fences too, and an unclosed fence runs to the end
        ("~~~\nx = f(1);\n~~~\n", False, "~~~\nx = f(1);\n~~~\n", "", ""),
        ("Fix:\n" + UNCLOSED, False, UNCLOSED, "", ""),
        # a longer fence holds shorter ones: one markdown block
        (NESTED + "thanks", False, "", "", NESTED),
        # outside fences, a turn quotes its runs of code or JSON lines and its > lines...
        ("Rename handler:\n" + CODE, False, CODE, "", ""),
        ("Here:\n" + JSON + "ok?", False, "", JSON, ""),
        (QUOTE + "What does it mean?", False, "", "", QUOTE),
        # ... not its own words, nor a lone short line that reads as code, nor a REPL prompt
        ("Tell me a story about a dragon who learns to fly.", False, "", "", ""),
        ("Rename foo() to bar()", False, "", "", ""),
        ("Show that f / [0, 5] -> R, f(x) := 1 if 0 <= x <= 1, is Riemann integrable (f(x))", False,
         "", "", ""),
        # ... but a lone line of JSON is quoted JSON
        ('Parse this:\n{"id": 7, "tags": ["a", "b"], "ok": true}', False,
         "", '{"id": 7, "tags": ["a", "b"], "ok": true}', ""),
        (">>> 1 + 1\n", False, "", "", ""),
        # a tool result is all quoted material, read as one block
        ('{"temp": 21, "unit": "C"}', True, "", '{"temp": 21, "unit": "C"}', ""),
        ('[{"id": 1}, {"id": 2}]', True, "", '[{"id": 1}, {"id": 2}]', ""),
        (CODE, True, CODE, "", ""),
        (NUMBERED, True, NUMBERED, "", ""),
        ("Exit 0. 3 tests passed.", True, "", "", "Exit 0. 3 tests passed."),
        ("", True, "", "", ""),
    ],
)
def test_what_a_text_quotes(text: str, whole: bool, code: str, json: str, plain: str) -> None:
    assert quoted(text, whole) == Quoted(len(code), len(json), len(plain), len(text))


def test_a_long_unfenced_turn_is_read_from_its_start_and_counted_in_proportion() -> None:
    text = (CODE + PROSE) * 200  # ~30 KB: two lines of code, one of prose, repeated
    reading = quoted(text, whole=False)
    assert reading.chars == len(text)
    assert reading.code == pytest.approx(len(CODE) * 200, rel=0.1)  # in the start's proportion
    assert RUNS_CAP < len(text) // 10  # only the start was read line by line
    start = time.perf_counter()
    quoted(text * 10, whole=False)
    assert time.perf_counter() - start < 0.05  # bounded: 300 KB cost no more than its start


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([CODE, JSON, PROSE, "```\n", "```python\n", "~~~\n", "> q\n",
                                 "\n", "    x\n", "{\n", "}\n", '"k": 1,\n', "修复这个\n"]),
                max_size=30).map("".join), st.booleans())
def test_the_quoted_characters_are_some_of_the_text(text: str, whole: bool) -> None:
    reading = quoted(text, whole)
    assert reading.chars == len(text)
    assert min(reading.code, reading.json, reading.text) >= 0
    assert reading.code + reading.json + reading.text <= len(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Rename handler to serve.", True),
        ("Refactor this into two functions", True),
        ("fix the failing test", True),
        ("Please translate the README into French", True),
        ("Reformat this JSON", True),
        ("convert it to TypeScript", True),
        ("Can you clean up this module?", True),
        ("```python\nx = 1\n```\nmake it faster", False),  # the verbs read are the ask's words
        ("Fix this:\n```python\n" + CODE * 30 + "```", True),  # the ask's start...
        ("```python\n" + CODE * 30 + "```\nnow rename handler to serve", True),  # ... and its end
        ("把这个函数重命名为 serve", True),
        ("请重构这段代码", True),
        ("修复这个bug", True),
        ("把这段话翻译成英文", True),
        ("格式化这个 JSON", True),
        ("Tell me a story about a dragon.", False),
        ("What is the capital of France?", False),
        ("What a portrait of the prefix!", False),  # "port", "fix" inside other words
        ("给我讲个故事", False),
    ],
)
def test_edit_verbs(text: str, expected: bool) -> None:
    assert edit_verb(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Describe each change with a *SEARCH/REPLACE block* per the examples below.", True),
        ("<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE", True),
        ("Return the whole file.", True),
        ("Always return the entire updated file, never a part.", True),
        ("output a copy of each file that needs changes", True),
        ("Reply with the full contents of the module", True),
        ("write out the changes similar to a unified diff like `diff -U0` would produce", True),
        ("```diff\n--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-x\n+y\n```", True),
        ("@@ ... @@\n-class MathWeb:\n+import sympy", True),
        ("*** Begin Patch\n*** Update File: app.py\n*** End Patch", True),
        ("Fix the spelling mistakes in this paragraph and return it whole:", True),
        ("Add a comment above the loop and give me the function back verbatim.", True),
        ("Translate it, then print the text unchanged below it.", True),
        ("请返回完整代码", True),
        ("输出修改后的整个文件", True),
        ("Use the *FULL* file path, as shown to you by the user.", False),
        ("The full file path is /tmp/x; the complete file name is x.", False),
        ("Tell me a story about a dragon.", False),
        ("Explain what this diff-like view shows: a + b", False),
        ("Answer questions about the supplied code.", False),
        ("Explain the whole idea in full detail.", False),
        ("Return the answer as a number; the input is unchanged.", False),
        ("", False),
    ],
)
def test_formats_that_reemit_their_input(text: str, expected: bool) -> None:
    assert reemit_format(text) is expected


def _signals(body: dict[str, Any]) -> CopySignals:
    return extract(view_request("chat", body)).copy


def _turns(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": role, "content": text} for role, text in turns]}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the ask quotes a module, asks for a rename and the whole file back
        (_turns(("user", "Rename handler to serve and return the whole file:\n" + _fenced(CODE * 3, "python"))),
         {"edit_verb": True, "reemit_format": True, "quoted_json_share": 0.0}),
        # the format asked for in the system prompt, the code in an agent's tool result
        (_turns(("system", "Reply with SEARCH/REPLACE blocks."), ("user", "fix the bug"),
                ("assistant", ""), ("tool", CODE * 3)),
         {"edit_verb": True, "reemit_format": True, "quoted_text_share": 0.0}),
        # JSON from a tool, the ask's words no edit
        (_turns(("user", "what's the weather?"), ("tool", '{"temp": 21, "unit": "C", "sky": "clear"}')),
         {"edit_verb": False, "reemit_format": False, "quoted_code_share": 0.0}),
        (_turns(("user", "Summarise:\n" + ("> " + PROSE) * 3)),
         {"quoted_code_share": 0.0, "quoted_json_share": 0.0, "edit_verb": False}),
    ],
)
def test_signals_of_requests(body: dict[str, Any], expected: dict[str, object]) -> None:
    signals = _signals(body)
    for name, value in expected.items():
        assert getattr(signals, name) == value, name
    shares = (signals.quoted_code_share, signals.quoted_json_share, signals.quoted_text_share)
    assert max(shares) > 0.5  # the material dominates what was read
    assert 0.0 <= sum(shares) <= 1.0 and signals.quoted_chars > 0


def test_shares_are_of_the_ask_and_its_material_together() -> None:
    ask = "fix it"
    signals = _signals(_turns(("user", ask), ("tool", CODE), ("tool", JSON)))
    total = len(ask) + len(CODE) + len(JSON)
    assert signals.quoted_code_share == round(len(CODE) / total, 4)
    assert signals.quoted_json_share == round(len(JSON) / total, 4)
    assert signals.quoted_chars == len(CODE) + len(JSON)


@pytest.mark.parametrize(
    "body",
    [
        _turns(("user", "Tell me a story about a dragon who learns to fly.")),
        _turns(("user", "hi!"), ("assistant", "Hello! How can I help?"), ("user", "how are you today?")),
        _turns(("system", "You are a friendly assistant."), ("user", "给我讲个关于龙的故事")),
    ],
)
def test_chat_and_stories_quote_nothing(body: dict[str, Any]) -> None:
    assert _signals(body) == NO_COPY


# --- where a rename breaks the copy ------------------------------------------------------------

ORDERS = (
    "def summarize(orders):\n    totals = {}\n    for order in orders:\n"
    "        totals[order.customer] = totals.get(order.customer, 0) + order.amount\n"
    "    subtotals = sorted(totals.items())\n    return subtotals\n"
)


@pytest.mark.parametrize(
    ("ask", "name", "sites"),
    [
        # the instruction's own mention is not a site; `subtotals` is another word
        ("Rename `totals` to `revenue` in this code and return the whole code:", "totals", 4),
        ("Please rename totals to revenue below and give me the complete updated code.", "totals", 4),
        ("Refactor: replace the variable 'totals' with 'revenue'.", "totals", 4),
        ("change summarize() to summarise", "summarize", 1),
        ("Add a short comment above the trickiest line of this code and return it whole:", "", 0),
        ("Why does it rename nothing?", "", 0),  # no name to rename
        ("RENAME TOTALS TO REVENUE", "TOTALS", 0),  # shouted: read, and the code has no TOTALS
    ],
)
def test_a_rename_and_the_sites_where_it_breaks_the_copy(ask: str, name: str, sites: int) -> None:
    assert rename_in(f"{ask}\n\n```python\n{ORDERS}```") == (name, sites)


def test_a_renamed_name_in_the_code_only_is_not_read_as_the_ask() -> None:
    # "rename x to y" inside the quoted code is code, not the ask's instruction
    assert rename_in("Explain this:\n```python\n# rename a to b\nrename(a, b)\n```") == ("", 0)


def test_name_sites_are_words_and_bounded() -> None:
    assert name_sites("a_total total total2 (total) total", "total") == 3
    assert name_sites("", "total") == 0 and name_sites("total", "") == 0
    assert name_sites("x " * 1000, "x") == SITES_CAP


def test_the_sites_in_an_agents_material_count_with_the_asks() -> None:
    # an agent read the file with a tool; the ask names the rename
    body = _turns(("user", "rename totals to revenue"), ("assistant", ""), ("tool", ORDERS))
    assert _signals(body).rename_sites == 4
    ask_and_code = _turns(("user", f"rename totals to revenue\n```python\n{ORDERS}```"),
                          ("assistant", ""), ("tool", ORDERS))
    assert _signals(ask_and_code).rename_sites == 8
    assert _signals(_turns(("user", "fix it"), ("assistant", ""), ("tool", ORDERS))).rename_sites == 0
