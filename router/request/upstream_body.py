"""The bytes a routed request sends upstream: the client's body with what the engine needs.

Pure: no I/O, no clock. The client's bytes go upstream unchanged when nothing is added; the
members an engine's adapter adds (`stream_options.include_usage`, `return_meta_info`) are
spliced in after the opening brace; a body the route's rewrite changed is encoded once, whole.
"""

from __future__ import annotations

import json
from typing import Any

from backends.engines import EngineAdapter, Tweaked
from router.request.json_body import exact_loads
from router.request.routing import RoutedRequest


def upstream_body(plan: RoutedRequest, raw: bytes, adapter: EngineAdapter, path: str) -> tuple[bytes, Tweaked]:
    """The bytes to send upstream, and what was added that the client must not see.

    The engine's adapter asks for what makes it report its stats (`stream_options.include_usage`
    on streams, SGLang's `return_meta_info`); the relay strips those again. When nothing is
    added and no rewrite changed the body, it goes upstream exactly as received.
    """
    tweaked = adapter.request_tweaks(plan.body, stream=plan.view.stream, path=path)
    if plan.rewritten:  # the client's bytes are not what goes upstream: encoded once, whole
        return encode_json(tweaked.body), tweaked
    if not (tweaked.added_usage or tweaked.added_meta_info):
        return raw, tweaked
    spliced = _with_members_added(raw, plan.body, tweaked.body)
    if spliced is not None:
        return spliced, tweaked
    exact = exact_loads(raw)
    return encode_json(adapter.request_tweaks(exact, stream=plan.view.stream, path=path).body), tweaked


def _with_members_added(raw: bytes, before: dict[str, Any], after: dict[str, Any]) -> bytes | None:
    """`raw` with the members `after` adds to `before` written after its opening brace, every
    other byte as the client sent it; None when `after` also changes a member (re-encode then).

    Cheaper than re-encoding a 300 KB body for one `stream_options`, and the client's bytes
    (key order, escapes, numbers) reach the backend unchanged.
    """
    added = {k: v for k, v in after.items() if k not in before}
    changed = any(k not in after or after[k] is not v for k, v in before.items())
    if not before or changed or len(added) + len(before) != len(after):
        return None
    start = raw.find(b"{")
    if start < 0 or raw[:start].strip():
        return None
    members = b"".join(encode_json({k: v})[1:-1] + b"," for k, v in added.items())
    return raw[: start + 1] + members + raw[start + 1:]


def encode_json(value: object) -> bytes:
    """UTF-8 JSON; a lone surrogate (valid JSON as `\\ud800`, not encodable as UTF-8) is kept
    escaped as the client sent it, so the backend reads the same string."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True).encode()
