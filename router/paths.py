"""Which request paths may be forwarded: normalised `/v1/...` paths only.

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
