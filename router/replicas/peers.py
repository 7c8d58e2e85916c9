"""A request whose best instance is free and in another replica's share goes through that
replica: the owner alone sends to its share, so it knows that load exactly, where two replicas
deciding within the channel's latency of each other could pick one free instance twice (and one
request then waits a whole service time). The hop costs a proxy's overhead, a few ms. An
instance with work queued is no such race: the request is sent from here, as before.

The owner plans the request again with what it knows (its own share exactly) and never passes
it on (`VIA` marks it): one hop at most. When its plan puts the request in the sender's share
(its own share turned out busy: the sender heard of that too late), it sends nothing and
declines (`DECLINED`): the sender knows its own share exactly and places the request there,
where the owner, hearing of that share a few ms late, could meet a request the sender had just
sent. So each instance is sent to by its owner alone, or by a replica that found it busy. A
peer that cannot be reached, or answers that it cannot serve, is skipped and not tried again
for PEER_RETRY_S: the request goes straight to the instances, as with no peer.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from backends.openai_error import error_body, error_event
from backends.upstream import HOP_BY_HOP, RECODED

# Set on a request one replica passes to another: the replica it came through.
VIA: Final = "x-specroute-via"
# On the owner's answer when it declines a passed request (409: nothing was sent anywhere).
DECLINED: Final = "x-specroute-declined"
# what describes one hop, and the encodings (the body goes on decoded, the answer as it comes)
_HOP: Final = HOP_BY_HOP | RECODED
# a peer that failed, and a client that left (also router/replicas/peer_load's, both ways)
PEER_ERRORS: Final = (aiohttp.ClientError, TimeoutError, OSError)
CLIENT_GONE: Final = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)
# A peer answering these cannot take the request now (not ready, shutting down, overloaded).
_PEER_UNAVAILABLE: Final = frozenset({502, 503, 504})
# Replicas of one fleet are a hop apart: one that does not connect within this is away.
PEER_CONNECT_S: Final = 1.0
# A peer that did not take a request is not tried again for this long.
PEER_RETRY_S: Final = 5.0


def peer_for(owner: str, me: str, urls: Mapping[str, str], incoming: Mapping[str, str],
             queue_ms: float) -> str:
    """The url of the replica to pass the request to, "" to send it from here: the replica
    whose share holds the chosen instance, while that instance looks free (`queue_ms` 0)."""
    if not owner or owner == me or VIA in incoming or queue_ms > 0:
        return ""
    return urls.get(owner, "")


def declines(passed_by: str, owner: str) -> bool:
    """Whether the owner declines a request passed to it by `passed_by` (its VIA, "" when the
    client sent it here) whose plan chose an instance in `owner`'s share: the sender's share
    is the sender's to place in."""
    return bool(passed_by) and owner == passed_by


def declined_response(me: str) -> web.Response:
    """The owner's answer to a request it declines (no engine saw it)."""
    return web.json_response(
        error_body(409, f"replica {me} declines: its share is busy; the sender places it",
                   code="replica_declined"),
        status=409, headers={DECLINED: me})


class NotTaken(enum.Enum):
    """Why a peer's answer is not the request's."""

    AWAY = "away"  # unreachable, or not able to serve now: rested, the request sent from here
    DECLINED = "declined"  # its share was busy: the sender places it in its own


def _peer_headers(incoming: Mapping[str, str], me: str) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict(
        (key, value) for key, value in incoming.items() if key.lower() not in _HOP)
    headers["Accept-Encoding"] = "identity"
    headers[VIA] = me
    return headers


@dataclass(slots=True)
class PassedOn:
    """Requests passed to the replica that owns their instance (for /metrics), and the peers
    that did not take one lately."""

    answered: int = 0
    not_taken: int = 0  # sent from here instead
    declined: int = 0  # the owner's share was busy: placed here, outside it
    away_until: dict[str, float] = field(default_factory=dict)  # peer url -> when to try again

    def usable(self, url: str, now: float) -> bool:
        return now >= self.away_until.get(url, -math.inf)

    def taken(self, url: str) -> None:
        self.answered += 1
        self.away_until.pop(url, None)

    def declined_by(self, url: str) -> None:
        self.declined += 1
        self.away_until.pop(url, None)

    def not_taken_by(self, url: str, now: float) -> None:
        self.not_taken += 1
        self.away_until[url] = now + PEER_RETRY_S


async def relay(request: web.Request, session: aiohttp.ClientSession, url: str, body: bytes,
                me: str) -> web.StreamResponse | NotTaken:
    """The peer's answer relayed to the client as it comes; `NotTaken` when the peer did not
    take the request (unreachable, not able to serve now, or declining it), so that it is sent
    from here. Once the peer answered, its answer is the request's: an answer cut short there
    is cut short here (with an error event on a stream), as an engine's would be."""
    timeout = aiohttp.ClientTimeout(total=None, connect=PEER_CONNECT_S,
                                    sock_connect=PEER_CONNECT_S)
    try:
        upstream = await session.post(url + request.path_qs, data=body,
                                      headers=_peer_headers(request.headers, me),
                                      timeout=timeout, allow_redirects=False)
    except PEER_ERRORS:
        return NotTaken.AWAY
    if upstream.status == 409 and DECLINED in upstream.headers:
        with contextlib.suppress(*PEER_ERRORS):
            await upstream.read()  # its few bytes: the connection is kept for the next
        upstream.release()
        return NotTaken.DECLINED
    if upstream.status in _PEER_UNAVAILABLE:
        upstream.close()
        return NotTaken.AWAY
    response = web.StreamResponse(status=upstream.status, headers=CIMultiDict(
        (k, v) for k, v in upstream.headers.items() if k.lower() not in _HOP))
    try:
        await response.prepare(request)
        await _copy(upstream, response)
    except CLIENT_GONE:
        pass  # closing the peer's answer below tells it, and its engine, to stop
    finally:
        upstream.close()
    return response


async def _copy(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    """The peer's bytes to the client; reading and writing fail apart (a client gone raises
    from the write, to the caller)."""
    chunks = upstream.content.iter_any().__aiter__()
    while True:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except PEER_ERRORS as exc:
            if upstream.content_type == "text/event-stream":
                await response.write(error_event(
                    502, f"the replica that served the request broke off: {type(exc).__name__}",
                    code="backend_failed"))
            return
        await response.write(chunk)
    await response.write_eof()
