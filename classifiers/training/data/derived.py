"""Derived rows: real rows put into the shapes real traffic has and the sources lack.

Pure. Every derived row keeps the family of the real row it came from (so that it lands in the
same split) and is tagged `derived`, or `synthetic` when its last user turn is ours:
- mid-loop agent turns: BFCL's ground-truth calls as assistant `tool_calls`, then tool results;
- agentic coding: a long harness system prompt and file tools around real code tasks and issues;
- JSON mode: real questions asked with `response_format` (a JSON reply, labelled `code`);
- tools attached to chat turns (still `chat`), and "thanks" after a finished tool loop;
- real questions, code asks and writing asks after a real stretch of small talk: the last turn
  decides, not the length of the conversation (a model that saw long histories only on chat
  reads "can you explain X?" in turn five as chat);
- a generic system prompt ("You are a helpful assistant.") before real requests of every class:
  most real traffic has one, and a model that saw system prompts mostly on technical rows
  reads any system prompt as technical.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from classifiers.training.data.harness import HARNESS_PROMPTS, THANKS, TOOLSETS
from classifiers.training.data.rows import Row, assistant, pick, system, user
from classifiers.training.data.sources_tools import ToolCall

JSON_INSTRUCTIONS: Final = (
    ("en", 'Reply with a JSON object {"answer": string, "explanation": string} and nothing else.'),
    ("en", "Return only JSON with the keys answer, confidence (0-1) and sources (array)."),
    ("zh", '请只输出一个 JSON 对象，包含字段 "answer" 和 "reason"，不要输出其他内容。'),
    ("zh", "以 JSON 格式回答，键为 answer、steps（数组）。"),
)


def _messages(row: Row) -> list[dict[str, Any]]:
    return [dict(m) for m in row.request["messages"]]


def _derive(row: Row, suffix: str, label: str, body: dict[str, Any],
            provenance: str = "derived") -> Row:
    return replace(row, id=f"{row.id}#{suffix}", provenance=provenance, label=label,
                   request=body)


def _tool_calls(calls: Sequence[ToolCall], tag: str) -> list[dict[str, Any]]:
    return [{"id": f"call_{tag}_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False,
                                                                default=str)}}
            for i, (name, args) in enumerate(calls)]


def _tool_results(calls: Sequence[ToolCall], tag: str) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": f"call_{tag}_{i}",
             "content": json.dumps({"status": "success", "function": name, "input": args},
                                   ensure_ascii=False, default=str)}
            for i, (name, args) in enumerate(calls)]


def mid_loop(rows: Sequence[Row], answers: Mapping[str, list[list[ToolCall]]],
             limit: int) -> list[Row]:
    """After BFCL's answer: tool results last (agent), the next user turn (agent), or thanks."""
    out = []
    candidates = [r for r in rows if r.id in answers and r.label == "agent"]
    for n, row in enumerate(pick(candidates, limit, "mid_loop")):
        turns = answers[row.id]
        if not turns or not turns[0]:
            continue
        tag = str(n)
        loop = _messages(row) + [{"role": "assistant", "content": None,
                                  "tool_calls": _tool_calls(turns[0], tag)}]
        loop += _tool_results(turns[0], tag)
        out.append(_derive(row, "tool_result", "agent", {**row.request, "messages": loop}))
        closing = [*loop, assistant("Done: the request has been carried out.")]
        if n % 3 == 0:
            lang = row.lang if row.lang in THANKS else "en"
            thanks = THANKS[lang][n % len(THANKS[lang])]
            out.append(replace(_derive(row, "thanks", "chat", {
                **row.request, "messages": [*closing, user(thanks)]}, "synthetic"), lang=lang))
    return out


def agentic_coding(rows: Sequence[Row], limit: int) -> list[Row]:
    """Real code tasks and issues sent through a coding-agent harness with file tools."""
    out = []
    for n, row in enumerate(pick(rows, limit, "agentic")):
        prompt = HARNESS_PROMPTS[n % len(HARNESS_PROMPTS)]
        ask = _messages(row)[-1]["content"]
        messages: list[dict[str, Any]] = [system(prompt), user(ask)]
        if n % 2:
            tag = f"a{n}"
            call = [("read_file", {"path": "src/main.py"})]
            messages += [
                {"role": "assistant", "content": None, "tool_calls": _tool_calls(call, tag)},
                {"role": "tool", "tool_call_id": f"call_{tag}_0", "content": ask}]
        tools = TOOLSETS[(n // len(HARNESS_PROMPTS)) % len(TOOLSETS)]
        out.append(_derive(row, "agentic", "agent",
                           {"model": "any", "messages": messages, "tools": tools}))
    return out


def json_mode(rows: Sequence[Row], limit: int) -> list[Row]:
    """Real questions asked for a JSON reply: the reply is structured data, labelled `code`."""
    out = []
    for n, row in enumerate(pick(rows, limit, "json_mode")):
        options = [t for lang, t in JSON_INSTRUCTIONS if lang == (row.lang if row.lang == "zh"
                                                                  else "en")]
        instruction = options[n % len(options)]
        fmt: dict[str, Any] = {"type": "json_object"}
        if n % 3 == 0:
            fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
                "type": "object", "properties": {"answer": {"type": "string"}},
                "required": ["answer"]}}}
        messages = [system(instruction), *_messages(row)]
        out.append(_derive(row, "json", "code",
                           {"model": "any", "messages": messages, "response_format": fmt}))
    return out


ZH_CODE_WRAPPERS: Final = (
    "请补全下面的函数：\n\n```python\n{code}\n```",
    "帮我实现这个函数，只返回代码。\n{code}",
    "下面的函数还没写完，请完成它并加上必要的注释：\n```\n{code}\n```",
    "用Python实现以下需求，直接给出代码：\n{code}",
)


def zh_code(rows: Sequence[Row], limit: int) -> list[Row]:
    """Real code tasks asked in Chinese: the instruction is ours, the code is real (zh, code)."""
    out = []
    for n, row in enumerate(pick(rows, limit, "zh_code")):
        code = str(_messages(row)[-1]["content"]).strip()
        text = ZH_CODE_WRAPPERS[n % len(ZH_CODE_WRAPPERS)].format(code=code)
        body = {"model": "any", "messages": [user(text)]}
        out.append(replace(_derive(row, "zh", "code", body), lang="zh"))
    return out


def bare_stubs(rows: Sequence[Row], limit: int) -> list[Row]:
    """Real code tasks asked the way editors and completion clients ask: no instruction and no
    fence, the starter code with the task as its docstring (HumanEval's shape, from other
    sources' tasks). Rows without a fenced starter block are skipped."""
    out = []
    for row in pick(rows, limit, "bare_stubs"):
        text = str(_messages(row)[-1]["content"])
        parts = text.split("```")
        if len(parts) < 3 or "def " not in parts[-2]:
            continue
        task = parts[0].strip()
        starter = parts[-2].split("\n", 1)[1] if "\n" in parts[-2] else parts[-2]
        head, _, signature = starter.rpartition("\ndef ")
        signature = "def " + signature.split("\n", 1)[0]
        doc = "\n".join("    " + line if line.strip() else "" for line in task.splitlines())
        body = f"{head.rstrip()}\n\n\n{signature}\n    \"\"\"\n{doc}\n    \"\"\"\n"
        out.append(_derive(row, "bare", "code", {"model": "any", "messages": [user(body)]}))
    return out


GENERIC_SYSTEM: Final = {
    "en": (
        "You are a helpful assistant.", "You are a helpful, respectful and honest assistant.",
        "You are an AI assistant. Answer the user's request.", "Be concise.",
        "You are Aria, the assistant of Northwind Travel.", "You are assistant #7.",
        "You are a friendly AI assistant. Reply in the language the user writes in.",
        "Current date: 2026-03-14. You are a large language model.",
    ),
    "zh": (
        "你是一个乐于助人的助手。", "你是一个AI助手，请用中文回答。", "你是一个友好的智能助手。",
        "请简洁地回答用户的问题。", "You are a helpful assistant.", "你是小智，一个聊天机器人。",
    ),
}


def with_generic_system(rows: Sequence[Row], per_class: int) -> list[Row]:
    """Real requests without a system prompt, given a generic one; the class is unchanged."""
    out = []
    for label in sorted({r.label for r in rows}):
        bare = [r for r in rows if r.label == label and r.provenance == "real"
                and not any(m.get("role") == "system" for m in r.request["messages"])]
        for n, row in enumerate(pick(bare, per_class, f"system/{label}")):
            prompts = GENERIC_SYSTEM["zh" if row.lang == "zh" else "en"]
            messages = [system(prompts[n % len(prompts)]), *_messages(row)]
            out.append(_derive(row, "sys", label, {**row.request, "messages": messages}))
    return out


def chat_with_tools(chats: Sequence[Row], tool_rows: Sequence[Row], limit: int) -> list[Row]:
    """Casual turns (or questions) that happen to carry tools keep their class: tools attached
    to a first turn do not make it agent, a tool that does what it asks does. The donors take
    turns by source, so that no one source's tools teach it (leaving one out keeps the rest)."""
    by_source: dict[str, list[Row]] = {}
    for r in tool_rows:
        if r.request.get("tools"):
            by_source.setdefault(r.source, []).append(r)
    sources = sorted(by_source)
    if not sources:
        return []
    out = []
    for n, row in enumerate(pick(chats, limit, "chat_tools")):
        donors = by_source[sources[n % len(sources)]]
        donor = donors[(n // len(sources) * 7919) % len(donors)]
        derived = _derive(row, "tools", row.label, {**row.request, "tools": donor.request["tools"]})
        out.append(_borrowing(derived, donor))
    return out


def after_small_talk(asks: Sequence[Row], chats: Sequence[Row], limit: int) -> list[Row]:
    """Single-turn asks put after the history of a real multi-turn casual conversation in the
    same language; the ask's class, language and family stay (the history is the chat's)."""
    histories: dict[str, list[Row]] = {}
    for row in chats:
        messages = row.request["messages"]
        if row.label == "chat" and len(messages) >= 3 and messages[-2].get("role") == "assistant":
            histories.setdefault("zh" if row.lang == "zh" else "en", []).append(row)
    single = [r for r in asks if r.label != "chat" and len(r.request["messages"]) == 1]
    out = []
    for n, ask in enumerate(pick(single, limit, "after_small_talk")):
        pool = histories.get("zh" if ask.lang == "zh" else "en")
        if not pool:
            continue
        talk = pool[(n * 7919) % len(pool)]
        messages = [*_messages(talk)[:-1], *_messages(ask)]
        derived = _derive(ask, "after_talk", ask.label, {**ask.request, "messages": messages})
        out.append(_borrowing(derived, talk))
    return out


def _borrowing(derived: Row, donor: Row) -> Row:
    """`derived`, marked as holding `donor`'s material when that is another source's (leaving
    that source out of training leaves the row out too)."""
    if donor.source == derived.source:
        return derived
    return replace(derived, also_from=(*derived.also_from, donor.source))
