"""The request body as JSON: parsed once under a nesting limit, or refused with a 400.

Pure: no I/O, no clock. `parse_json` reads the client's bytes for routing (orjson, its own
depth limit enforcing ours); `exact_loads` reads them again with the standard parser for a body
that is re-encoded, every number as the client wrote it.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

from router.request.errors import RequestError

# Deepest JSON nesting accepted: tool schemas nest a few dozen levels; deeper is an attack on
# every recursive walk and gets a 400 before any of them runs. Just under orjson's own limit
# (1,024), which then enforces ours at C speed; the features' walks are bounded in depth, and
# the rare re-encoding of a body refuses what the interpreter's stack cannot take.
MAX_JSON_DEPTH: Final = 1000


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise RequestError(400, "The request body is empty; expected a JSON object.", code="empty_body")
    body = _padded_loads(raw)
    if body is _TOO_DEEP:
        raise _too_deep()
    if body is _UNREAD:  # what orjson refuses (lone surrogates, NaN): the standard parser decides
        try:
            body = json.loads(raw)
        except RecursionError as exc:  # deeper than the interpreter's stack: certainly too deep
            raise _too_deep() from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(
                400, f"The request body is not valid JSON: {exc}", code="invalid_json"
            ) from exc
        if nesting_exceeds(body, raw, MAX_JSON_DEPTH):
            raise _too_deep()
    if not isinstance(body, dict):
        raise RequestError(
            400, f"The request body must be a JSON object, not {type(body).__name__}.",
            code="invalid_body",
        )
    return body


def exact_loads(raw: bytes) -> dict[str, Any]:
    """The (already validated) body as the standard parser reads it: every number as the client
    wrote it, for a body that is re-encoded."""
    try:
        body: dict[str, Any] = json.loads(raw)
    except RecursionError as exc:
        raise _too_deep() from exc
    return body


def nesting_exceeds(body: object, raw: bytes, limit: int) -> bool:
    """True when the parsed JSON `body` nests arrays/objects more than `limit` levels deep.

    Breadth first, no recursion, containers only. Free in the common case: a text (`raw`)
    with at most `limit` opening brackets in all cannot nest deeper.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    level: list[Any] = [body]
    for _ in range(limit):
        deeper: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            deeper += [c for c in children if type(c) is dict or type(c) is list]
        if not deeper:
            return False
        level = deeper
    return True


def _orjson_depth() -> int:
    """orjson's nesting limit (1,024 today), found once; 0 if it has none we can find."""
    for depth in (1024, 2048):
        try:
            orjson.loads(b"[" * (depth + 1) + b"]" * (depth + 1))
        except orjson.JSONDecodeError:
            return depth
    return 0


_PAD: Final = max(_orjson_depth() - MAX_JSON_DEPTH, 0)
_PAD_LEVELS: Final = range(_PAD)
_UNREAD: Final = object()
_TOO_DEEP: Final = object()


def _padded_loads(raw: bytes) -> Any:
    """The body parsed by orjson (2-3x faster than json on agent-sized bodies) inside `_PAD`
    arrays, so that orjson's own nesting limit refuses exactly what is deeper than
    `MAX_JSON_DEPTH`, at C speed; `_UNREAD` when orjson refuses it for another reason.

    orjson reads an integer past 64 bits as a float: harmless for the features, and a body
    re-encoded for the backend is parsed again by the standard parser (`exact_loads`).
    """
    if not _PAD:
        return _UNREAD
    try:
        wrapped = orjson.loads(b"[" * _PAD + raw + b"]" * _PAD)
    except orjson.JSONDecodeError as exc:
        return _TOO_DEEP if "depth" in str(exc) else _UNREAD
    try:
        for _ in _PAD_LEVELS:
            (wrapped,) = wrapped  # each padding array holds one value, unless `raw` broke out
    except (TypeError, ValueError):
        return _UNREAD  # "1],[2": not one value once unwrapped; let json say why
    return wrapped


def _too_deep() -> RequestError:
    return RequestError(
        400, f"The request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels.",
        code="invalid_json",
    )
