"""Where each conversation's KV prefix lives.

Pure: a function (the conversation key) and one small bounded table whose methods take `now`
(no clock read here). The finish rule (policies.decision.finish) counts only the uncached part of the
prompt as prefill on the instance that holds the conversation's prefix: moving a conversation
re-prefills the whole prompt elsewhere, which it weighs against the queue and the speedup.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from classifiers.request_view import RequestView


def conversation_key(view: RequestView, hint: str | None) -> str:
    """A stable key for a conversation: the header hint, the `user` field, or a hash of the
    system prompt and the first user turn."""
    if hint:
        source = hint
    elif view.user:
        source = f"user:{view.user}"
    else:
        source = f"{view.system_text}\x00{view.first_user_text}"
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Held:
    """Where a conversation's KV prefix lives, and how long the conversation has run."""

    backend: str
    profile: str
    turns: int
    prompt_tokens: int
    last_seen: float


class SessionTable:
    """Conversation -> where its prefix lives; bounded (least recently seen dropped first) and
    forgetting conversations idle for longer than `ttl_s`."""

    def __init__(self, max_conversations: int, ttl_s: float) -> None:
        if max_conversations < 1 or ttl_s <= 0:
            raise ValueError("max_conversations must be >= 1 and ttl_s > 0")
        self.max_conversations = max_conversations
        self.ttl_s = ttl_s
        self._held: OrderedDict[str, Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def resize(self, max_conversations: int, ttl_s: float) -> None:
        """Apply new limits (after a policy reload), dropping the oldest if over."""
        if max_conversations < 1 or ttl_s <= 0:
            raise ValueError("max_conversations must be >= 1 and ttl_s > 0")
        self.max_conversations, self.ttl_s = max_conversations, ttl_s
        self._trim()

    def get(self, key: str, now: float) -> Held | None:
        held = self._held.get(key)
        if held is None:
            return None
        if now - held.last_seen > self.ttl_s:
            del self._held[key]
            return None
        return held

    def remember(
        self, key: str, backend: str, profile: str, prompt_tokens: int, now: float
    ) -> Held:
        """Record that `backend` served this turn (and now holds the prefix)."""
        previous = self._held.pop(key, None)
        fresh = previous is None or now - previous.last_seen > self.ttl_s
        turns = 1 if fresh or previous is None else previous.turns + 1
        held = Held(backend, profile, turns, prompt_tokens, now)
        self._held[key] = held
        self._trim()
        return held

    def expire(self, now: float) -> int:
        """Drop idle conversations; returns how many."""
        stale = [k for k, h in self._held.items() if now - h.last_seen > self.ttl_s]
        for key in stale:
            del self._held[key]
        return len(stale)

    def _trim(self) -> None:
        while len(self._held) > self.max_conversations:
            self._held.popitem(last=False)
