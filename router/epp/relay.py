"""The answer on the pick's own stream, for a gateway that runs one ext_proc filter (a Gateway
API Inference Extension gateway sets its own; deploy/envoy's configs split the answer off to
`specroute.watch`): Envoy holds each message of the answer until it is answered, so every
one is answered here, "go on" but for the picker's own bytes, and read for the record as the
watcher reads it (router/epp/watch), with the proxy's `x-specroute-*` headers on it.
"""

from __future__ import annotations

from aiohttp import web
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from router.epp import messages
from router.epp.edit import Edit
from router.epp.exchange import Exchange, Exchanges
from router.epp.watch import Watch
from router.request.lifecycle import route_headers

Responses = list[ext_proc.ProcessingResponse]


class Relay:
    """One answer, watched and edited on the stream that picked it (`exchange` None: a
    request the picker did not route, passed on as it is)."""

    def __init__(self, app: web.Application, exchange: Exchange | None) -> None:
        self.exchange = exchange
        self.watch = Watch(app, Exchanges(), exchange=exchange, looked=True)
        self.edit = Edit(added=exchange.added if exchange is not None else None)

    def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        exchange = self.exchange
        if exchange is None:
            return [_go_on(message)]
        self.watch.on(message)  # the instance that served, first: the headers name it
        if message.WhichOneof("request") == "response_headers":
            self.edit.on(message)
            return [messages.response_headers(
                route_headers(exchange.plan, exchange.sending.result, exchange.started))]
        return self.edit.on(message)

    async def finish(self, *, stopping: bool = False) -> None:
        await self.watch.finish(stopping=stopping)


def _go_on(message: ext_proc.ProcessingRequest) -> ext_proc.ProcessingResponse:
    kind = message.WhichOneof("request")
    if kind == "response_body":
        return messages.RESPONSE_BODY_CONTINUE
    if kind == "response_trailers":
        return messages.trailers(request=False)
    return messages.response_headers({})
