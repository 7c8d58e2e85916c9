"""Function-calling sources: BFCL (real tool schemas and user queries) and glaive (Chinese).

BFCL function docs are not JSON Schema: types are mapped (dict->object, float->number,
tuple->array, any->string) and dots in names sanitised before they become OpenAI `tools`.
Rows whose turn asks for something a tool does are `agent`; BFCL's irrelevance rows are
labelled by what they ask for (chit-chat or questions with tools attached). BFCL's own answers
become the assistant `tool_calls` of derived mid-loop turns (`derived.py`).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Final

from classifiers.text import estimated_tokens
from classifiers.training.data.fetch import list_members, read_member
from classifiers.training.data.labels import is_pleasantry, label_text
from classifiers.training.data.rows import Row, chat, lang_of, pick

_TYPE_MAP: Final = {"dict": "object", "float": "number", "tuple": "array", "any": "string",
                    "list": "array", "int": "integer", "bool": "boolean", "str": "string"}
_MULTI_TURN_DOCS: Final = {
    "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api",
    "MessageAPI": "message_api", "TwitterAPI": "posting_api", "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot", "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
# Sets whose rows ask for a tool call; irrelevance sets are labelled by their text.
_AGENT_SETS: Final = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
                      "live_relevance", "simple_python", "simple_java", "simple_javascript",
                      "multiple", "parallel", "parallel_multiple")
_IRRELEVANCE_SETS: Final = ("irrelevance", "live_irrelevance")
_MULTI_TURN_SETS: Final = ("multi_turn_base", "multi_turn_long_context",
                           "multi_turn_miss_func", "multi_turn_miss_param")

ToolCall = tuple[str, dict[str, Any]]


def schema(node: Any) -> Any:
    """A BFCL parameter schema as JSON Schema."""
    if isinstance(node, dict):
        out = {k: schema(v) for k, v in node.items()}
        if isinstance(out.get("type"), str):
            out["type"] = _TYPE_MAP.get(out["type"], out["type"])
        return out
    if isinstance(node, list):
        return [schema(v) for v in node]
    return node


def tool_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function",
             "function": {"name": tool_name(f["name"]), "description": f.get("description", ""),
                          "parameters": schema(f.get("parameters") or {"type": "object",
                                                                        "properties": {}})}}
            for f in functions]


def _jsonl(path: Path, member: str) -> list[dict[str, Any]]:
    items = []
    for line in read_member(path, member).decode().splitlines():
        try:
            items.append(json.loads(line))
        except ValueError:
            continue  # a few doc files hold pretty-printed JSON: not rows we use
    return items


# BFCL holds one irrelevance row (no tool fits) for every ~3 tool calls, a benchmark's mix;
# in real traffic a request that carries tools mostly wants one, so they are subsampled.
IRRELEVANCE_ROWS: Final = 300


def bfcl(path: Path) -> tuple[list[Row], dict[str, list[list[ToolCall]]]]:
    """BFCL rows, and per row id the ground-truth calls of each turn (for derived turns)."""
    rows: list[Row] = []
    answers: dict[str, list[list[ToolCall]]] = {}
    docs = _multi_turn_docs(path)
    for name in _AGENT_SETS + _IRRELEVANCE_SETS + _MULTI_TURN_SETS:
        answer_file = f"bfcl_eval/data/possible_answer/BFCL_v4_{name}.json"
        has_answers = answer_file in set(list_members(path))
        truth = {a["id"]: a["ground_truth"] for a in _jsonl(path, answer_file)} if has_answers \
            else {}
        for item in _jsonl(path, f"bfcl_eval/data/BFCL_v4_{name}.json"):
            row = _bfcl_row(name, item, docs)
            if row is None:
                continue
            rows.append(row)
            if item["id"] in truth:
                answers[row.id] = _calls(truth[item["id"]], multi=name in _MULTI_TURN_SETS)
    irrelevant = [r for r in rows if r.family.removeprefix("bfcl/") in _IRRELEVANCE_SETS]
    kept = {r.id for r in pick(irrelevant, IRRELEVANCE_ROWS, "irrelevance")}
    rows = [r for r in rows if r.id in kept or r.family.removeprefix("bfcl/") not in
            _IRRELEVANCE_SETS]
    return rows, answers


def bfcl_multi_turn(path: Path, per_set: int = 60) -> list[Row]:
    """The later turns of BFCL's multi-turn conversations, each after the earlier turns were
    carried out: the user turns are real, the assistant calls are BFCL's ground truth and the
    tool results ours (so the rows are `derived`). A turn whose ground truth makes calls is
    `agent`; one that makes none (the function is missing) is left out, as its reply is open."""
    docs = _multi_turn_docs(path)
    rows: list[Row] = []
    for name in _MULTI_TURN_SETS:
        answers = {a["id"]: a["ground_truth"] for a in _jsonl(
            path, f"bfcl_eval/data/possible_answer/BFCL_v4_{name}.json")}
        items = [i for i in _jsonl(path, f"bfcl_eval/data/BFCL_v4_{name}.json")
                 if i["id"] in answers]
        for item in pick(items, per_set, f"multi_turn/{name}"):
            classes = item.get("involved_classes") or []
            if any(c not in _MULTI_TURN_DOCS for c in classes):
                continue
            tools = openai_tools([f for c in classes for f in docs[_MULTI_TURN_DOCS[c]]])
            turns = _calls(answers[item["id"]], multi=True)
            rows += _later_turns(name, item, tools, turns)
    return rows


def _later_turns(name: str, item: dict[str, Any], tools: list[dict[str, Any]],
                 turns: list[list[ToolCall]]) -> list[Row]:
    rows: list[Row] = []
    messages: list[dict[str, Any]] = []
    for k, asked in enumerate(item.get("question") or []):
        if k >= len(turns):
            break
        if not asked:  # a turn that only adds a missing function: nothing asked
            continue
        messages += [{"role": m["role"], "content": m["content"]} for m in asked]
        text = str(messages[-1]["content"])
        if k > 0 and turns[k]:
            rows.append(Row(id=f"bfcl/{item['id']}/turn{k}", source="bfcl-eval",
                            family=f"bfcl/{name}", provenance="derived", label="agent",
                            lang=lang_of(text), request=chat([dict(m) for m in messages],
                                                             tools=tools)))
        tag = f"{k}"
        calls = [{"id": f"call_{tag}_{i}", "type": "function",
                  "function": {"name": fname, "arguments": json.dumps(args, default=str)}}
                 for i, (fname, args) in enumerate(turns[k])]
        if calls:
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": call["id"],
                          "content": json.dumps({"status": "success"})} for call in calls]
        messages.append({"role": "assistant", "content": "Done."})
    return rows


def _bfcl_row(name: str, item: dict[str, Any], docs: dict[str, list[dict[str, Any]]]
              ) -> Row | None:
    if name in _MULTI_TURN_SETS:
        classes = item.get("involved_classes") or []
        if any(c not in _MULTI_TURN_DOCS for c in classes):
            return None
        functions = [f for c in classes for f in docs[_MULTI_TURN_DOCS[c]]]
    else:
        functions = item.get("function") or []
    turns = item.get("question") or []
    if not turns or not turns[0]:
        return None
    messages = [{"role": m["role"], "content": m["content"]} for m in turns[0]]
    text = messages[-1]["content"]
    label = _irrelevance_label(text) if name in _IRRELEVANCE_SETS else "agent"
    body = chat(messages, tools=openai_tools(functions)) if functions else chat(messages)
    if not functions and label == "agent":
        return None
    return Row(id=f"bfcl/{item['id']}", source="bfcl-eval", family=f"bfcl/{name}",
               provenance="real", label=label, lang=lang_of(text), request=body)


_ACTION_ASK: Final = re.compile(
    r"^\s*(that's great[.!]? |thanks[.!]? |(also|and) |please |can you |could you |(also )?help me |"
    r"i want to |i need to |i'd like to |you |also )*(find|get|book|buy|"
    r"order|search|show|list|send|create|add|check|open|play|set|turn|schedule|cancel|delete|"
    r"remove|update|call|fetch|retrieve|look up|reserve|transfer|pay|start|stop)\b",
    re.IGNORECASE,
)


def _irrelevance_label(text: str) -> str:
    """A BFCL irrelevance row: no tool fits, so an action ask gets a brief refusal (chat)."""
    if _ACTION_ASK.search(text) or _ACTION_ZH.search(text):
        return "chat"
    return label_text(text, "technical")


def _multi_turn_docs(path: Path) -> dict[str, list[dict[str, Any]]]:
    prefix = "bfcl_eval/data/multi_turn_func_doc/"
    return {stem: _jsonl(path, f"{prefix}{stem}.json") for stem in _MULTI_TURN_DOCS.values()}


def _calls(truth: Any, *, multi: bool) -> list[list[ToolCall]]:
    """Ground truth as a list of turns of (name, arguments); unparseable calls are dropped."""
    if multi:
        return [[c for c in (_parse_call(s) for s in turn) if c is not None] for turn in truth]
    turn: list[ToolCall] = []
    for call in truth:
        for fname, args in call.items():
            turn.append((tool_name(fname), {k: (v[0] if isinstance(v, list) and v else v)
                                            for k, v in args.items()}))
    return [turn]


def _parse_call(source: str) -> ToolCall | None:
    try:
        node = ast.parse(source, mode="eval").body
        if not isinstance(node, ast.Call):
            return None
        name = ast.unparse(node.func)
        return tool_name(name), {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except (SyntaxError, ValueError):
        return None


def glaive_zh(path: Path) -> list[Row]:
    """Chinese tool-use conversations: a row at each human turn and after each observation."""
    return glaive(path, "zh")


def glaive(path: Path, language: str) -> list[Row]:
    """Glaive tool-use conversations (llamafactory's `zh` or `en` demo): a row at each human
    turn (labelled by what follows it) and after each observation (agent)."""
    member = f"llamafactory-0.9.5/data/glaive_toolcall_{language}_demo.json"
    name = f"glaive_{language}"
    rows = []
    for c, convo in enumerate(json.loads(read_member(path, member))):
        tools = [{"type": "function", "function": {**f, "name": tool_name(f["name"])}}
                 for f in json.loads(convo.get("tools") or "[]")]
        messages: list[dict[str, Any]] = []
        turns = convo["conversations"]
        for t, turn in enumerate(turns):
            role, value = turn["from"], turn["value"]
            nxt = turns[t + 1]["from"] if t + 1 < len(turns) else ""
            if role == "human":
                messages.append({"role": "user", "content": value})
                reply = turns[t + 1]["value"] if nxt == "gpt" else ""
                label = "agent" if tools and leads_to_call(turns, t) else \
                    label_by_reply(value, reply)
                rows.append(_glaive_row(name, c, t, label, messages, tools, value))
            elif role == "function_call":
                call = json.loads(value)
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{c}_{t}", "type": "function",
                     "function": {"name": tool_name(call["name"]),
                                  "arguments": json.dumps(call.get("arguments", {}),
                                                          ensure_ascii=False)}}]})
            elif role == "observation":
                messages.append({"role": "tool", "tool_call_id": f"call_{c}_{t - 1}",
                                 "content": value})
                rows.append(_glaive_row(name, c, t, "agent", messages, tools,
                                        _last_user(messages)))
            else:
                messages.append({"role": "assistant", "content": value})
    return rows


_OFFER: Final = re.compile(r"还有|其他|别的|anything else", re.IGNORECASE)
_ASKS_FOR_SLOT: Final = re.compile(r"[？?]\s*$|请提供|请告诉|告诉我|please (provide|tell)",
                                   re.IGNORECASE)
SLOT_ROUNDS: Final = 3


def leads_to_call(turns: list[dict[str, str]], t: int) -> bool:
    """Whether the human turn at `t` is answered by a tool call: directly, by a reply the
    engine ran as a call (an observation follows it), or after up to `SLOT_ROUNDS`
    slot-filling questions (a generic "anything else?" is not one)."""
    questions = 0
    for k in range(t + 1, len(turns)):
        role, value = turns[k]["from"], turns[k]["value"].strip()
        if role in ("function_call", "observation"):
            return True
        if role != "gpt":
            continue
        if k + 1 < len(turns) and turns[k + 1]["from"] == "observation":
            return True
        questions += 1
        if not _ASKS_FOR_SLOT.search(value) or _OFFER.search(value) or questions > SLOT_ROUNDS:
            return False
    return False


_EXPLAIN_ZH: Final = re.compile(r"解释|什么是|是什么|为什么|如何|怎么|怎样|区别|介绍|原理|哪些|explain|what is",
                                re.IGNORECASE)
_ACTION_ZH: Final = re.compile(r"(帮我|替我|给我|为我|帮忙)[^。？！]{0,6}(订|预定|预订|买|购|发|叫|煮|做|找|查|"
                               r"创建|生成|安排|播放|更新|删除|设置|发送|取消|支付|转账|提醒)")


# Reply lengths in estimated tokens, so that one rule serves every script: "You're welcome! If
# you have any other questions, feel free to ask." is 66 characters, "不客气！如果你还有其他问题，
# 随时可以问。" 20, and both are ~18 tokens.
BRIEF_REPLY_TOKENS: Final = 120  # a refusal or "you're welcome" (English refusals ~40-65)
REMARK_REPLY_TOKENS: Final = 20  # shorter than this, a reply is a remark, not an explanation


def label_by_reply(request: str, reply: str) -> str:
    """The class of a text turn whose actual reply is known.

    Mostly code -> code; asked for writing or code -> that; asked for an explanation ->
    technical (short is not casual); thanks or a greeting answered in kind, or an action no
    tool does answered briefly (a refusal or an acknowledgement) -> chat; otherwise by the
    reply's length.
    """
    fenced = reply.split("```")[1::2]
    if fenced and sum(len(f) for f in fenced) >= 0.5 * len(reply):
        return "code"
    asked = label_text(request, "technical")
    if asked in ("prose", "code"):
        return asked
    if _EXPLAIN_ZH.search(request):
        return "technical"
    size = estimated_tokens(reply)
    if is_pleasantry(request) and size < BRIEF_REPLY_TOKENS:
        return "chat"
    if (_ACTION_ZH.search(request) or _ACTION_ASK.search(request)) and size < BRIEF_REPLY_TOKENS:
        return "chat"
    return "chat" if size < REMARK_REPLY_TOKENS else "technical"


def _glaive_row(name: str, c: int, t: int, label: str, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]], text: str) -> Row:
    body = chat([dict(m) for m in messages], tools=tools) if tools else chat(list(messages))
    return Row(id=f"{name}/{c}/{t}", source="llamafactory", family=f"{name}/b{c % 5}",
               provenance="real", label=label, lang=lang_of(text), request=body)


def _last_user(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            return str(message["content"])
    return ""
