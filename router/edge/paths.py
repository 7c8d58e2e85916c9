"""specroute's own paths (the routed APIs, the models list) and the methods each takes; which
other request paths may be forwarded: normalised `/v1/...` paths only.

Pure. A path is checked after percent-decoding (as aiohttp hands it over), so that `/v1/../props`
and `/v1/%2e%2e/props` are refused alike: forwarding them would let a client reach the
backend's own endpoints (llama-server's `/slots`, `/props`, ...) through the proxy.
"""

from __future__ import annotations

import re
from typing import Final

# One segment: unreserved and sub-delimiter characters of RFC 3986, plus ':' and '@'. No '%'
# (a doubly encoded path), no backslash, no control or non-ASCII character.
_SEGMENT: Final = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@]+")
_DOT_SEGMENTS: Final = frozenset({".", ".."})

# The routed APIs: classified, decided and sent to the chosen instance.
ROUTED: Final = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/messages": "messages",
    "/v1/responses": "responses",
}
MODELS: Final = "/v1/models"  # answered by specroute: the instances' lists merged
# What each of those paths takes: any other method gets a 405 naming these.
ALLOWED_METHODS: Final = {**dict.fromkeys(ROUTED, "POST"), MODELS: "GET, HEAD"}


def refused_method(method: str, path: str) -> str | None:
    """The methods `path` takes when `method` is not one of them; None when it is, or when
    the path is not one of specroute's own."""
    allow = ALLOWED_METHODS.get(path)
    if allow is None or method in allow.split(", "):
        return None
    return allow


def forwardable_path(path: str) -> str | None:
    """`path` when it is a normalised `/v1/...` path (no empty, `.` or `..` segment, only
    plain characters), else None."""
    if not path.startswith("/v1/"):
        return None
    segments = path[len("/v1/"):].split("/")
    for segment in segments:
        if segment in _DOT_SEGMENTS or not _SEGMENT.fullmatch(segment):
            return None
    return path
