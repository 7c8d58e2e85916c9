"""What the replicas read from the store, checked on the way in: a stream entry's time and one
replica's published load. Pure: bytes and JSON in, values or None out; anything malformed is
None as a whole (a part of an entry would undercount).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from router.instances.pool import ReplicaLoad

# a published entry naming more requests on one instance than this is not believed
MAX_PUBLISHED_REQUESTS: Final = 100_000


def entry_ms(entry_id: Any) -> int:
    """A stream entry's time (its id is `<ms>-<seq>`, from the store's clock)."""
    try:
        return int(bytes(entry_id).split(b"-", 1)[0])
    except ValueError:
        return 0


def load_entry(value: Any) -> tuple[str, ReplicaLoad, str] | None:
    """One replica's published work: its name, per instance (predicted ms, elapsed ms[,
    spread, ms at max_tokens]) per request, and where it takes requests passed on ("" when
    it named no http(s) url); None for anything else (the whole entry: a part of it would
    undercount)."""
    try:
        data = json.loads(value)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("replica"), str):
        return None
    work = data.get("work")
    if not isinstance(work, dict):
        return None
    parsed: ReplicaLoad = {}
    for backend, running in work.items():
        if not isinstance(running, list) or len(running) > MAX_PUBLISHED_REQUESTS:
            return None
        pairs = [_request(item) for item in running]
        if any(pair is None for pair in pairs):
            return None
        parsed[str(backend)] = [pair for pair in pairs if pair is not None]
    url = data.get("url")
    peer = url if isinstance(url, str) and url.startswith(("http://", "https://")) else ""
    return data["replica"], parsed, peer


def _request(item: Any) -> tuple[float, ...] | None:
    """[predicted ms, elapsed ms] or, its spread known, [.., spread, ms at max_tokens]."""
    if not isinstance(item, list) or len(item) not in (2, 4):
        return None
    if not all(isinstance(x, int | float) and not isinstance(x, bool)
               and math.isfinite(x) and 0 <= x < 1e12 for x in item):
        return None
    return tuple(float(x) for x in item)
