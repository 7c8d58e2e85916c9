"""One routed request as the picker sees it, from its pick to its answer's end, across the two
ext_proc streams Envoy opens for it (deploy/envoy/envoy.yaml):

- `specroute.pick` (router/epp/pick.py) holds the request: its headers and body in, the
  destination out, in one wait. Envoy closes that stream once the body is answered.
- `specroute.watch` (router/epp/watch.py), in Envoy's observability mode, is sent the
  request's headers after the pick, then the answer's headers and chunks as they go to the
  client: nobody waits on it. It finds its `Exchange` by the id the pick wrote in the metadata
  namespace `specroute`, reads what the learner needs, and accounts for it at the end.

The bookkeeping and the decision-log record are proxy mode's (router/request/lifecycle).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from dataclasses import dataclass, field
from typing import Final

from aiohttp import compression_utils, web
from aiohttp.http_exceptions import ContentEncodingError

from backends.client_view import Added
from backends.upstream import Target
from router import state
from router.instances.pool import POOL
from router.request.core import CORE
from router.request.errors import body_too_large, parse_error, unreadable_body
from router.request.lifecycle import Sending, settle_and_account
from router.request.routing import RoutedRequest

# The Content-Encodings aiohttp's parser undoes for the proxy; any other reaches it as sent.
_DECODED: Final = frozenset({"gzip", "deflate", "br", "zstd"})
# A pick whose watcher never comes (the client left before Envoy passed the request on) is
# accounted as cut short after this long: the watcher's stream opens as the pick is applied.
UNWATCHED_AFTER_S: Final = 10.0


def endpoint_of(base_url: str) -> str:
    """`http://10.0.0.7:8000` -> `10.0.0.7:8000`: how Envoy names an instance."""
    rest = base_url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


@dataclass
class Exchange:
    """A routed request on its way: the plan, what was sent, what the client must not see."""

    app: web.Application
    started: float
    plan: RoutedRequest
    sending: Sending
    named: list[Target]  # the instances Envoy was given, in order
    added: Added = field(default_factory=Added)
    watched: bool = False  # a watcher claimed it
    done: bool = False

    async def finish(self, *, cut_short: bool = False, unobserved: bool = False) -> None:
        """The request is over: release the instance and account for it, once. Cut short,
        the stream ended before the answer did, and which end cut it Envoy does not say: it
        resets or closes the stream alike when the instance's answer breaks off and when the
        client leaves (Envoy 1.40, both seen for each). Recorded as the proxy records a client
        that left: never timed, never the conversation's home. Unobserved: the picker stopped
        before the answer's end (Envoy finishes a watched answer without it, cuts an edited
        one), so that end is unseen: never timed either."""
        if self.done:
            return
        self.done = True
        if unobserved:
            self.sending.result.unobserved = True
        elif cut_short:
            self.sending.result.client_disconnected = True
        app = self.app
        primary = self.plan.decision.backend
        self.sending.result.ran_in(
            primary, app[POOL].end(primary, self.sending.ticket, app[state.DEPS].clock()))
        await settle_and_account(app[CORE], app[state.SESSION], self.plan, self.sending,
                                 self.started)


class Exchanges:
    """The exchanges picked here and not yet claimed by their watcher, by id. An id names this
    process too: a watcher sent to another picker process finds nothing here and says so."""

    def __init__(self, unwatched_after_s: float = UNWATCHED_AFTER_S) -> None:
        self._open: dict[str, tuple[Exchange, float]] = {}  # and when it was picked
        self._unwatched_after_s = unwatched_after_s
        self._prefix = f"{os.getpid()}-{id(self):x}-"
        self._ids = itertools.count()
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._open)

    def open(self, exchange: Exchange) -> str:
        key = f"{self._prefix}{next(self._ids)}"
        loop = asyncio.get_running_loop()
        self._open[key] = (exchange, loop.time())
        if self._sweeper is None:  # one task for all, not a timer per request
            self._sweeper = loop.create_task(self._sweep())
        return key

    def claim(self, key: str) -> Exchange | None:
        """The exchange `key` names, for its watcher (once); None when it is not one of ours
        or already over."""
        exchange, _ = self._open.pop(key, (None, 0.0))
        if exchange is not None:
            exchange.watched = True
        return exchange

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._unwatched_after_s / 4)
            due = loop.time() - self._unwatched_after_s
            for key in [k for k, (_, at) in self._open.items() if at <= due]:
                exchange, _ = self._open.pop(key)
                await exchange.finish(cut_short=True)

    async def close(self) -> None:
        """Stop sweeping; what is still unclaimed is accounted as unobserved (the picker
        stops, the request may still be served)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for exchange, _ in list(self._open.values()):
            await exchange.finish(unobserved=True)
        self._open.clear()


def decoded_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """The body as the proxy reads it: Envoy passes it on as the client encoded it, aiohttp
    decodes it for the proxy (with its own decompressors, used here too) up to `limit`."""
    encoding = content_encoding.lower()
    if encoding not in _DECODED or not raw:
        return raw
    decompressor = _decompressor(encoding, raw)
    try:
        body = decompressor.decompress_sync(raw, max_length=limit + 1)
    except Exception as exc:  # whatever the codec raises: not what it says
        raise unreadable_body(ContentEncodingError.__name__) from exc
    if len(body) > limit:
        raise body_too_large(limit)
    if encoding == "deflate" and not getattr(decompressor, "eof", True):  # cut short
        raise unreadable_body(ContentEncodingError.__name__)
    return body


def _decompressor(encoding: str, raw: bytes) -> compression_utils.DecompressionBaseHandler:
    """aiohttp's decompressor for `encoding`; where it has none (a codec not installed), the
    proxy's server refuses the request as unparsable: so here."""
    if encoding == "br":
        if not compression_utils.HAS_BROTLI:
            raise parse_error(400, ContentEncodingError(encoding))
        return compression_utils.BrotliDecompressor()
    if encoding == "zstd":
        if not compression_utils.HAS_ZSTD:
            raise parse_error(400, ContentEncodingError(encoding))
        return compression_utils.ZSTDDecompressor()
    # aiohttp reads "deflate" that lacks its zlib header as raw deflate, as browsers send it
    raw_deflate = encoding == "deflate" and raw[0] & 0xF != 8
    return compression_utils.ZLibDecompressor(encoding=encoding,
                                              suppress_deflate_header=raw_deflate)
