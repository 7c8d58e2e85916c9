"""Hashed character n-grams of a request's bounded text, vectorised with numpy.

Pure: no I/O, no globals. The same function feeds training (as sparse rows) and serving (as
indices into the weight matrix), so the two cannot drift apart. Character n-grams read English,
Chinese and code alike without a tokenizer; hashing keeps the vocabulary a fixed size.

Only bounded text is read: the head and tail of the last user turn, the end of the context, the
start of the system prompt and the tool names; never the whole body.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from classifiers.request_view import RequestView

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

_FNV_PRIME = np.uint32(0x01000193)
_TOOLS_USER_SEED = 5
# The hashing scheme: any change to how text becomes indices bumps it (artifacts record it).
HASH_SCHEME = 3


@dataclass(frozen=True, slots=True)
class HashSettings:
    """How text becomes bucket indices; stored in the artifact, checked on load."""

    scheme: int = HASH_SCHEME
    dim: int = 1 << 17
    orders: tuple[int, ...] = (1, 2, 3, 4)
    user_head: int = 1200
    user_tail: int = 300
    context_tail: int = 400
    system_head: int = 300
    tools_head: int = 200

    def as_dict(self) -> dict[str, object]:
        return {"scheme": self.scheme, "dim": self.dim, "orders": list(self.orders), "user_head": self.user_head,
                "user_tail": self.user_tail, "context_tail": self.context_tail,
                "system_head": self.system_head, "tools_head": self.tools_head}

    @staticmethod
    def from_dict(data: dict[str, object]) -> HashSettings:
        if data.get("scheme") != HASH_SCHEME:
            raise ValueError(f"hashing scheme {data.get('scheme')!r} is not {HASH_SCHEME}")
        orders = data.get("orders", [1, 2, 3, 4])
        return HashSettings(
            dim=int(str(data["dim"])),
            orders=tuple(int(o) for o in orders) if isinstance(orders, list) else (1, 2, 3, 4),
            user_head=int(str(data["user_head"])), user_tail=int(str(data["user_tail"])),
            context_tail=int(str(data["context_tail"])),
            system_head=int(str(data["system_head"])), tools_head=int(str(data["tools_head"])),
        )


def fields(view: RequestView, settings: HashSettings) -> tuple[str, str, str, str]:
    """The bounded texts that are hashed: user turn, context, system prompt, tool names."""
    text = view.last_user_text
    if len(text) > settings.user_head + settings.user_tail:
        text = text[: settings.user_head] + "\n" + text[-settings.user_tail:]
    tools = " ".join(_tool_name(t) for t in view.tools[:16])[: settings.tools_head]
    return (text, view.context_tail[-settings.context_tail:],
            view.system_text[: settings.system_head], tools)


def seeded_fields(view: RequestView, settings: HashSettings) -> tuple[tuple[int, str], ...]:
    """(hash seed, bounded text) of each field, in `fields` order."""
    # The user's words go to other buckets when the request carries tools: "what's the weather"
    # asks for an answer without tools and for a call with them (a linear model needs this).
    seeds = (_TOOLS_USER_SEED if view.tools else 1, 2, 3, 4)
    return tuple(zip(seeds, fields(view, settings)))


def hashed(view: RequestView, settings: HashSettings) -> tuple[IntArray, FloatArray]:
    """Bucket indices of every n-gram and the weight of each (1/sqrt(n-grams in its field))."""
    indices: list[IntArray] = []
    weights: list[FloatArray] = []
    for seed, text in seeded_fields(view, settings):
        idx, weight = field_weights(seed, text, settings)
        if idx.size:
            indices.append(idx)
            weights.append(weight)
    if not indices:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    return np.concatenate(indices), np.concatenate(weights)


def field_weights(seed: int, text: str, settings: HashSettings) -> tuple[IntArray, FloatArray]:
    """One field's bucket indices and their weights (what `hashed` concatenates; the serving
    scorer remembers their product with its weights per field text)."""
    idx = field_indices(text, seed, settings)
    return idx, np.full(idx.size, 1.0 / np.sqrt(idx.size) if idx.size else 0.0, dtype=np.float32)


def field_indices(text: str, seed: int, settings: HashSettings) -> IntArray:
    """Indices of the character n-grams of one field (lower-cased, whitespace squeezed)."""
    if not text:
        return np.zeros(0, dtype=np.int64)
    # surrogatepass: a lone surrogate a client sent (valid JSON) hashes as its code point
    squeezed = " ".join(text.lower().split())
    codes = np.frombuffer(squeezed.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    hashes = _ngram_hashes(codes, np.uint32(2166136261 + 97 * seed), settings.orders)
    dim = settings.dim
    if dim & (dim - 1) == 0:  # a power of two: the remainder is the low bits
        np.bitwise_and(hashes, np.uint32(dim - 1), out=hashes)
    else:
        np.remainder(hashes, np.uint32(dim), out=hashes)
    return hashes.astype(np.int64)


def _ngram_hashes(codes: npt.NDArray[np.uint32], basis: np.uint32,
                  orders: tuple[int, ...]) -> npt.NDArray[np.uint32]:
    """The hashes of the n-grams of each of `orders`, lowest order first, in one array.
    FNV-style, extended one character per order: the hashes of the n-grams of order k are
    those of order k-1 combined with the next character (one vector pass per order, written
    in place where the order is kept)."""
    size = codes.size
    last = min(max(orders), size)
    out = np.empty(sum(size - order + 1 for order in orders if order <= last), dtype=np.uint32)
    previous, at = codes, 0
    for order in range(1, last + 1):
        span = size - order + 1
        kept = order in orders
        h = out[at:at + span] if kept else np.empty(span, dtype=np.uint32)
        if order == 1:
            np.bitwise_xor(codes, basis, out=h)
        else:
            np.bitwise_xor(previous[:span], codes[order - 1:], out=h)
        np.multiply(h, _FNV_PRIME, out=h)
        previous, at = h, at + (span if kept else 0)
    return out


def _tool_name(tool: object) -> str:
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""
