"""The answer on Envoy's `specroute.watch` stream (observability mode): sent, never held.

Envoy sends the request's headers once the pick is applied (the stream's first message: which
exchange, by the id in the metadata namespace `specroute`), then the answer's headers and each
chunk as it goes on to the client, without waiting for a reply: none is sent. What the proxy
reads on its relay is read here from the same bytes by the same code (backends/client_view):
the instance that answered, the status, usage, `timings`, acceptance, the stream's end. The
exchange is accounted when the answer ends, or when the stream closes before it did (a cut:
Envoy closes the stream `deferred_close_timeout` after the request is over).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog
from aiohttp import web
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.client_view import Added, client_events, observed_body
from backends.sse import SSESplitter, is_event_stream
from router import state
from router.epp import messages
from router.epp.exchange import Exchange, Exchanges, endpoint_of

log = structlog.get_logger("specroute")
# The watcher reads the engine's bytes and sends none back: no client view to build (the editor
# builds it where one is needed), so nothing to strip while measuring.
_AS_SENT = Added()


@dataclass
class Watch:
    """The state of one answer's watch stream."""

    app: web.Application
    exchanges: Exchanges
    exchange: Exchange | None = None
    content_type: str = ""
    sse: bool = False
    splitter: SSESplitter = field(default_factory=SSESplitter)
    answer: bytearray = field(default_factory=bytearray)  # a JSON answer, kept to be read
    answered: bool = False  # the answer is all in: `finish` is due
    looked: bool = False  # its exchange was looked for

    def on(self, message: ext_proc.ProcessingRequest) -> None:
        if not self.looked:
            self.looked = True
            self.exchange = self._claim(message)
        if self.exchange is None or self.answered:
            return
        kind = message.WhichOneof("request")
        if kind == "response_headers":
            self._response_headers(message)
        elif kind == "response_body":
            self._response_body(message.response_body)
        elif kind == "response_trailers":  # the answer ended with trailers, not end_of_stream
            self._answer_end()

    def _claim(self, message: ext_proc.ProcessingRequest) -> Exchange | None:
        key = messages.ours(message).get("exchange", "")
        if not key:  # not a routed pick (the proxy's own answer, a passthrough): nothing to do
            return None
        exchange = self.exchanges.claim(key)
        if exchange is None:
            # picked by another picker process (several behind one Envoy cluster), or over
            log.warning("epp_watch_unknown_exchange", exchange=key,
                        detail="this answer is not accounted: one picker process per Envoy "
                               "(or per ext_proc cluster) keeps the pick and its answer together")
        return exchange

    def _response_headers(self, message: ext_proc.ProcessingRequest) -> None:
        headers = messages.header_map(message.response_headers)
        self.content_type = headers.get("content-type", "")
        self.sse = is_event_stream(self.content_type)
        self._served(messages.served_endpoint(message), int(headers.get(":status", "0") or 0),
                     by_envoy=messages.envoy_answered(message))
        if message.response_headers.end_of_stream:
            self.answered = True

    def _served(self, endpoint: str, status: int, *, by_envoy: bool) -> None:
        """Envoy went down the list as `forward` does: each instance before the one that
        answered could not serve it. Envoy's own answer (refused, reset, unreachable): each
        one up to the last it tried (all, when it does not say) failed."""
        assert self.exchange is not None
        result, named = self.exchange.sending.result, self.exchange.named
        ends = [endpoint_of(t.base_url) for t in named]
        at = ends.index(endpoint) if endpoint in ends else None
        if by_envoy and status >= 500:
            for target in named[:len(named) if at is None else at + 1]:
                result.trying(target)
                result.passed(f"no instance answered (Envoy's {status})")
            result.status = status
            return
        if at is not None:  # else: not one it was given, or Envoy's own 4xx: as it is
            for target in named[:at]:
                result.trying(target)
                result.passed("Envoy went on to the next instance")
            result.trying(named[at])
        result.took(status)

    def _response_body(self, body: ext_proc.HttpBody) -> None:
        assert self.exchange is not None
        exchange = self.exchange
        if self.sse:  # measured as the proxy measures it; what the client got is Envoy's
            client_events(self.splitter, body.body, exchange.sending.result.meter,
                          _AS_SENT, self.app[state.DEPS].clock())
        else:
            self.answer += body.body  # a copy to read at the end
        if body.end_of_stream:
            self._answer_end()

    def _answer_end(self) -> None:
        """The answer ended: its last observation."""
        assert self.exchange is not None
        exchange = self.exchange
        if self.sse:
            self.splitter.flush()
        else:
            observed_body(bytes(self.answer), self.content_type, exchange.sending.result.meter,
                          _AS_SENT, self.app[state.DEPS].clock())
        self.answered = True

    def complete(self) -> bool:
        """Whether the answer reached its end: Envoy said so, or the stream's last event went
        on to the client. A client that stops reading there (the openai SDK does, at `[DONE]`)
        may hang up before the engine's closing chunk passes."""
        return self.answered or (self.exchange is not None
                                 and self.exchange.sending.result.meter.ended)

    async def finish(self, *, stopping: bool = False) -> None:
        """Account for the exchange once its stream is over: cut short if the answer had not
        ended; unobserved if the picker is `stopping`, the answer going on."""
        if self.exchange is None:
            return
        incomplete = not self.complete()
        await self.exchange.finish(cut_short=incomplete, unobserved=incomplete and stopping)
