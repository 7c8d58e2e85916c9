"""One normalized view of a request, whatever API shape it arrived in.

Pure: no I/O, no clock, no globals. OpenAI chat completions, OpenAI completions, Anthropic
messages and OpenAI responses bodies are all read into a `RequestView`, so that feature
extraction, conversation keys and the classifier see one shape.

Work is bounded: only the text the features need is kept (the last user turn, a tail of
context, the start of the material the answer may copy from, each capped), never a copy of a
300 KB body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

# How many characters of text a view keeps; features never need more.
LAST_USER_CAP: Final = 8_000
CONTEXT_TAIL_CAP: Final = 4_000
SYSTEM_CAP: Final = 2_000
# The material an answer may copy besides the ask: the tool results after the last user turn
# (the newest first, each from its start, `MATERIAL_CAP` in all), and the user turns just
# before the ask that an assistant only acknowledged (how aider sends the files in the chat:
# the files, "Ok, any changes I propose will be to those files.", then the ask), at most
# `SET_UP_TURNS` of them, `MATERIAL_CAP` in all.
MATERIAL_CAP: Final = 8_000
ACK_CAP: Final = 200
SET_UP_TURNS: Final = 3

Endpoint = str  # "chat" | "completions" | "messages" | "responses"


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the features and the policy need from a request body, in one shape."""

    endpoint: Endpoint
    model: str
    stream: bool
    roles: tuple[str, ...]  # role of every message/item, in order
    last_role: str
    last_user_text: str  # capped at LAST_USER_CAP
    context_tail: str  # text before the last user turn, capped from the end
    system_text: str  # capped at SYSTEM_CAP
    first_user_text: str  # capped at SYSTEM_CAP (conversation key)
    total_chars: int  # all text, counted not copied
    tools: tuple[Mapping[str, Any], ...]
    tool_choice: str  # "none" | "auto" | "required" | "function" | ""
    response_format: str  # "" | "text" | "json_object" | "json_schema"
    temperature: float | None
    thinking: bool | None  # None: the request did not say
    max_tokens: int | None
    user: str
    tool_results: tuple[str, ...] = ()  # after the last user turn, in order, capped in all
    set_up: tuple[str, ...] = ()  # the acknowledged user turns just before it, in order, capped


class InvalidRequest(ValueError):
    """The body cannot be read as a request of its endpoint (maps to HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def view_request(endpoint: Endpoint, body: object) -> RequestView:
    """Read `body` (already-parsed JSON) as a request of `endpoint`."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    reader = _READERS.get(endpoint)
    if reader is None:
        raise InvalidRequest(f"Unknown endpoint kind {endpoint!r}.")
    return reader(body)


# --- readers, one per API shape -------------------------------------------------------------


def _view_chat(body: dict[str, Any]) -> RequestView:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", "messages")
    items = [_message(m, i) for i, m in enumerate(messages)]
    return _assemble("chat", body, items, system="", max_tokens_key=("max_completion_tokens", "max_tokens"))


def _view_completions(body: dict[str, Any]) -> RequestView:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) and prompt:
        text = "\n".join(prompt)
    elif isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and prompt and all(_token_id(p) for p in prompt):
        text = ""  # token ids: no text to read, still a valid request (the engine judges them)
    else:
        raise InvalidRequest("'prompt' must be a string or an array of strings.", "prompt")
    return _assemble("completions", body, [("user", text)], system="", max_tokens_key=("max_tokens",))


def _token_id(value: object) -> bool:
    """An integer, as JSON Schema counts them: an integral number (an integer past 64 bits
    arrives as a float from the fast parser, router.request.json_body)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _view_messages(body: dict[str, Any]) -> RequestView:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", "messages")
    items = [_message(m, i) for i, m in enumerate(messages)]
    # Anthropic tool results travel as user messages holding tool_result blocks.
    items = [("tool", t) if _holds_tool_result(m) else (r, t) for (r, t), m in zip(items, messages)]
    system = _text_of(body.get("system"))
    return _assemble("messages", body, items, system=system, max_tokens_key=("max_tokens",))


def _view_responses(body: dict[str, Any]) -> RequestView:
    raw = body.get("input")
    if isinstance(raw, str):
        items = [("user", raw)]
    elif isinstance(raw, list) and raw:
        items = [_response_item(it, i) for i, it in enumerate(raw)]
    else:
        raise InvalidRequest("'input' must be a string or a non-empty array.", "input")
    system = _text_of(body.get("instructions"))
    return _assemble("responses", body, items, system=system, max_tokens_key=("max_output_tokens",))


_READERS = {
    "chat": _view_chat,
    "completions": _view_completions,
    "messages": _view_messages,
    "responses": _view_responses,
}


# --- shared assembly ---------------------------------------------------------------------


def _assemble(
    endpoint: Endpoint,
    body: dict[str, Any],
    items: Sequence[tuple[str, str]],
    *,
    system: str,
    max_tokens_key: tuple[str, ...],
) -> RequestView:
    roles = tuple(role for role, _ in items)
    system_parts = [system] + [t for r, t in items if r in ("system", "developer")]
    user_indices = [i for i, (r, _) in enumerate(items) if r == "user"]
    last_user = user_indices[-1] if user_indices else len(items) - 1
    first_user = user_indices[0] if user_indices else 0
    before = [t for r, t in items[:last_user] if r not in ("system", "developer")]
    return RequestView(
        endpoint=endpoint,
        model=_str(body.get("model")),
        stream=body.get("stream") is True,
        roles=roles,
        last_role=roles[-1] if roles else "",
        last_user_text=items[last_user][1][:LAST_USER_CAP] if items else "",
        context_tail=_tail("\n".join(_tail(t, CONTEXT_TAIL_CAP) for t in before[-8:]), CONTEXT_TAIL_CAP),
        system_text="\n".join(p for p in system_parts if p)[:SYSTEM_CAP],
        first_user_text=items[first_user][1][:SYSTEM_CAP] if items else "",
        total_chars=len(system) + sum(len(t) for _, t in items),
        tools=_tools(body.get("tools")),
        tool_choice=_tool_choice(body.get("tool_choice")),
        response_format=_response_format(body),
        temperature=_number(body.get("temperature")),
        thinking=_thinking(body),
        max_tokens=_first_int(body, max_tokens_key),
        user=_str(body.get("user")) or _str(_dig(body, "metadata", "user_id")),
        tool_results=_heads([t for r, t in items[last_user + 1:] if r in ("tool", "function")][::-1]),
        set_up=_heads(_set_up_turns(items, last_user)),
    )


def _set_up_turns(items: Sequence[tuple[str, str]], last_user: int) -> list[str]:
    """The user turns just before the ask, each answered by a short acknowledgement only,
    the nearest first."""
    turns: list[str] = []
    at = last_user
    while (len(turns) < SET_UP_TURNS and at >= 2 and items[at - 1][0] == "assistant"
           and len(items[at - 1][1]) <= ACK_CAP and items[at - 2][0] == "user"):
        turns.append(items[at - 2][1])
        at -= 2
    return turns


def _heads(texts: Sequence[str]) -> tuple[str, ...]:
    """The starts of `texts` (the most wanted first), `MATERIAL_CAP` characters in all, put back
    in the conversation's order."""
    kept: list[str] = []
    room = MATERIAL_CAP
    for text in texts:
        if room <= 0:
            break
        if text:
            kept.append(text[:room])
            room -= len(kept[-1])
    return tuple(reversed(kept))


def _message(message: object, index: int) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise InvalidRequest(f"messages[{index}] must be an object.", f"messages[{index}]")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidRequest(f"messages[{index}].role must be a string.", f"messages[{index}].role")
    return role, _text_of(message.get("content"))


def _response_item(item: object, index: int) -> tuple[str, str]:
    if isinstance(item, str):
        return "user", item
    if not isinstance(item, dict):
        raise InvalidRequest(f"input[{index}] must be an object or a string.", f"input[{index}]")
    kind = item.get("type")
    if kind == "function_call_output":
        return "tool", _text_of(item.get("output"))
    if kind == "function_call":
        return "assistant", _text_of(item.get("arguments"))
    return _str(item.get("role")) or "user", _text_of(item.get("content"))


def _text_of(content: object) -> str:
    """The text of a content field: a string, or an array of typed parts (text parts only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif part.get("type") == "tool_result":
                    parts.append(_text_of(part.get("content")))
        return "\n".join(parts)
    return ""


def _holds_tool_result(message: object) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "tool_result" for p in content
    )


def _tools(raw: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(t for t in raw if isinstance(t, dict))


def _tool_choice(raw: object) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict):
        kind = raw.get("type")
        return "function" if kind in ("function", "tool") else _str(kind)
    return ""


def _response_format(body: dict[str, Any]) -> str:
    fmt = body.get("response_format")
    if fmt is None:
        fmt = _dig(body, "text", "format")  # the responses API
    if isinstance(fmt, dict):
        return _str(fmt.get("type"))
    return ""


def _thinking(body: dict[str, Any]) -> bool | None:
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        return thinking.get("type") not in ("disabled", None)
    if isinstance(thinking, bool):
        return thinking
    think = body.get("think")
    if isinstance(think, bool):
        return think
    reasoning = body.get("reasoning") or body.get("reasoning_effort")
    if reasoning:
        return True
    return None


def _first_int(body: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _dig(body: Mapping[str, Any], *keys: str) -> object:
    node: object = body
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _tail(text: str, cap: int) -> str:
    return text[-cap:] if len(text) > cap else text
