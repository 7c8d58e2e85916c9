"""Derived rows keep their origin's class and family and say they are derived."""

from __future__ import annotations

from dataclasses import replace

from classifiers.training.data import derived
from classifiers.training.data.rows import Row, assistant, chat, system, user


def _row(i: int, label: str, lang: str = "en", messages: list[dict[str, str]] | None = None,
         provenance: str = "real") -> Row:
    body = chat(messages or [user(f"request {i}")])
    return Row(id=f"src/{i}", source="src", family=f"src/b{i % 3}", provenance=provenance,
               label=label, lang=lang, request=body)


def test_generic_system_prompts_go_before_real_requests_of_every_class() -> None:
    rows = [_row(i, label, lang="zh" if i % 2 else "en")
            for i, label in enumerate(["prose", "chat", "code", "technical"] * 5)]
    rows.append(_row(100, "prose", messages=[system("Write like Poe."), user("a poem")]))
    rows.append(_row(101, "prose", provenance="synthetic"))
    out = derived.with_generic_system(rows, per_class=3)
    assert sorted(r.label for r in out) == sorted(["prose", "chat", "code", "technical"] * 3)
    origin = {r.id: r for r in rows}
    for row in out:
        source = origin[row.id.removesuffix("#sys")]
        first, *rest = row.request["messages"]
        assert first["role"] == "system" and rest == source.request["messages"]
        assert first["content"] in derived.GENERIC_SYSTEM["zh" if source.lang == "zh" else "en"]
        assert (row.family, row.lang, row.provenance) == (source.family, source.lang, "derived")
    assert not {"src/100#sys", "src/101#sys"} & {r.id for r in out}  # has one / not real


def test_bare_stubs_turn_a_fenced_task_into_an_unfenced_docstring_stub() -> None:
    task = ("Counts the words of a text.\n\nThe function should output with:\n    int: the count"
            "\n\n```python\nimport re\n\ndef task_func(text: str) -> int:\n```")
    rows = [_row(0, "code", messages=[user(task)]), _row(1, "code", messages=[user("no code")])]
    out = derived.bare_stubs(rows, limit=5)
    assert [r.id for r in out] == ["src/0#bare"]
    text = out[0].request["messages"][0]["content"]
    assert "```" not in text and text.startswith("import re\n")
    assert 'def task_func(text: str) -> int:\n    """\n    Counts the words of a text.' in text
    assert (out[0].label, out[0].provenance, out[0].family) == ("code", "derived", "src/b0")


def test_tools_given_to_a_chat_turn_record_the_package_they_came_from() -> None:
    chats = [_row(i, "chat") for i in range(4)]
    donor = replace(_row(9, "agent"), source="toolpkg", request=chat(
        [user("book it")], tools=[{"type": "function", "function": {"name": "book"}}]))
    out = derived.chat_with_tools(chats, [donor], limit=4)
    assert len(out) == 4 and all(r.label == "chat" and r.request["tools"] for r in out)
    assert all(r.also_from == ("toolpkg",) and r.comes_from("toolpkg") for r in out)


def test_tool_donors_take_turns_by_source_however_many_rows_each_has() -> None:
    def donor(i: int, source: str) -> Row:
        return replace(_row(i, "agent"), source=source, request=chat(
            [user("do it")], tools=[{"type": "function", "function": {"name": f"{source}_{i}"}}]))

    donors = [donor(i, "big") for i in range(30)] + [donor(100, "small")]
    out = derived.chat_with_tools([_row(i, "chat") for i in range(10)], donors, limit=10)
    by_source = [r.also_from[0] for r in out]
    # 30 rows against 1: still half each, so leaving "big" out keeps half of these rows
    assert by_source.count("big") == by_source.count("small") == 5
    assert len({r.request["tools"][0]["function"]["name"] for r in out if r.also_from == ("big",)}) > 1


def test_asks_after_small_talk_keep_their_class_and_take_a_same_language_history() -> None:
    talk = [replace(_row(i, "chat", messages=[user("hey"), assistant("hi!"), user("how's it going")]),
                    source="talkpkg") for i in range(2)]
    talk_zh = [replace(_row(5, "chat", "zh", messages=[user("你好"), assistant("你好呀"), user("在吗")]),
                       source="talkpkg")]
    asks = [_row(10, "technical"), _row(11, "code"), _row(12, "prose", "zh", [user("写一首诗")]),
            _row(13, "chat"), _row(14, "technical", messages=[system("be brief"), user("why?")])]
    out = derived.after_small_talk(asks, talk + talk_zh, limit=10)
    assert sorted(r.label for r in out) == ["code", "prose", "technical"]  # not chat, not multi-message
    for row in out:
        messages = row.request["messages"]
        assert messages[-2] == assistant("hi!" if row.lang == "en" else "你好呀")
        assert messages[-1] == next(a for a in asks if a.id == row.id.split("#")[0]).request["messages"][0]
        assert row.also_from == ("talkpkg",) and row.provenance == "derived"
