"""`specroute epp`: the gRPC ExternalProcessor that Envoy asks, one stream per HTTP request,
beside the same aiohttp app that the proxy runs (its state, background work and `/readyz`,
`/metrics`, `/dashboard` on `listen`), so that a decision here is the proxy's decision.

Health: the standard gRPC health service, with `liveness`, `readiness` and the ext_proc
service's own name (the protocol's three), SERVING while an instance is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator
from typing import Final, TypeAlias

import grpc
import structlog
from aiohttp import web
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from router import state
from router.config import Config
from router.epp.edit import Edit
from router.epp.exchange import Exchanges, endpoint_of
from router.epp.pick import Pick
from router.epp.relay import Relay
from router.epp.watch import Watch
from router.instances.pool import POOL

log = structlog.get_logger("specroute")
SERVICE: Final = "envoy.service.ext_proc.v3.ExternalProcessor"
HEALTH_SERVICES: Final = ("", "liveness", "readiness", SERVICE)
HEALTH_INTERVAL_S: Final = 1.0
# On stop, open streams get this long to end; an answer still going on after it is recorded as
# unobserved (Envoy finishes a watched one without the picker: the watcher fails open).
STOP_GRACE_S: Final = 2.0


class PickerConfigError(ValueError):
    """A config the picker cannot serve (names the backend and why)."""


def check_endpoints(config: Config) -> None:
    """Envoy's original-destination cluster connects to `ip:port` as given: every instance must
    be named by an IP address and a port, with no path under it."""
    for spec in config.backends:
        endpoint = endpoint_of(spec.base_url)
        host, _, port = endpoint.rpartition(":")
        rest = spec.base_url.split("://", 1)[-1][len(endpoint):]
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise PickerConfigError(
                f"backend {spec.name!r}: {spec.base_url} is not an IP address and port; Envoy "
                "sends to the `ip:port` the picker names") from None
        if not port.isdigit() or rest.strip("/"):
            raise PickerConfigError(f"backend {spec.name!r}: {spec.base_url} must be "
                                    "http://<ip>:<port> (with no path) for the picker")


Context: TypeAlias = grpc.aio.ServicerContext[ext_proc.ProcessingRequest,
                                              ext_proc.ProcessingResponse]


class Picker(ext_proc_grpc.ExternalProcessorServicer):
    """One ext_proc stream per filter and HTTP request: the pick (`specroute.pick`), the
    answer's watcher (`specroute.watch`, observability mode) and, for an answer with bytes the
    client must not get, its editor (`specroute.edit`). The first message says which.

    Each stream is ended here, cleanly, once nothing more on it needs an answer or a look (the
    protocol's "Envoy proceeds without consulting the server"): left open, Envoy resets it when
    the request is over, and grpc.aio leaks the native memory of each reset stream's last
    batch (grpc/grpc#43360; bench.epp's picker RSS over a long run)."""

    def __init__(self, app: web.Application, fallbacks: bool = True) -> None:
        self.app = app
        self.fallbacks = fallbacks
        self.exchanges = Exchanges()
        # the server is stopping: an answer whose stream ends now is unobserved, not cut
        self.stopping = False

    async def Process(  # the gRPC method's name
        self, request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
        context: Context,
    ) -> None:
        """Read and write on the context itself: grpc.aio's async-generator form adds a hop
        through its iterator per message (6-10% of a do-nothing picker's CPU)."""
        first = await context.read()
        if first is grpc.aio.EOF:
            return
        if first.observability_mode:
            await self._watch(first, context)
        elif first.WhichOneof("request") in _REQUEST:
            await self._pick(first, context)
        else:
            await self._edit(first, context)

    async def _pick(self, message: ext_proc.ProcessingRequest, context: Context) -> None:
        """The pick; then, behind a gateway's single filter, the answer on the same stream."""
        pick = Pick(self.app, self.exchanges, self.fallbacks)
        relay: Relay | None = None
        try:
            while message is not grpc.aio.EOF:
                if message.WhichOneof("request") in _REQUEST:
                    responses = await pick.on(message)
                else:
                    relay = relay or Relay(self.app, pick.exchange)
                    responses = relay.on(message)
                for response in responses:
                    await context.write(response)
                if pick.finished or (relay is not None and relay.watch.answered):
                    return  # its last message answered: accounted below
                message = await context.read()
        finally:
            if relay is not None:
                await relay.finish(stopping=self.stopping)
            elif pick.answers_here and pick.exchange is not None:  # ended before the answer
                await pick.exchange.finish(cut_short=True, unobserved=self.stopping)

    async def _watch(self, message: ext_proc.ProcessingRequest, context: Context) -> None:
        watch = Watch(self.app, self.exchanges)
        try:
            while message is not grpc.aio.EOF:
                watch.on(message)
                if watch.answered or watch.exchange is None:  # nothing more to read
                    return
                message = await context.read()
        finally:
            # Accounted once the stream is over: cut short if it ended before the answer did
            # (the answer broke off, or Envoy closed it `deferred_close_timeout` after the
            # request was over).
            await watch.finish(stopping=self.stopping)

    async def _edit(self, message: ext_proc.ProcessingRequest, context: Context) -> None:
        edit = Edit()
        while message is not grpc.aio.EOF:
            for response in edit.on(message):
                await context.write(response)
            if edit.ended:
                return
            message = await context.read()


_REQUEST: Final = frozenset({"request_headers", "request_body", "request_trailers"})


@contextlib.asynccontextmanager
async def serve_grpc(app: web.Application, host: str, port: int,
                     fallbacks: bool = True) -> AsyncIterator[int]:
    """The gRPC server on (host, port) while the context is open; gives its port.
    `fallbacks`: name the other allowed instances after the chosen one (Envoy's override_host
    policy goes down the list; an ORIGINAL_DST cluster takes one `ip:port` only)."""
    server = grpc.aio.server()
    picker = Picker(app, fallbacks)
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(picker, server)
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    watcher = asyncio.create_task(_health(app, servicer))
    log.info("picker_listening", host=host, port=bound)
    try:
        yield bound
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        picker.stopping = True
        await server.stop(grace=STOP_GRACE_S)
        await picker.exchanges.close()


async def _health(app: web.Application, servicer: health.aio.HealthServicer) -> None:
    while True:
        ready = app[POOL].any_healthy(app[state.DEPS].clock())
        status = (health_pb2.HealthCheckResponse.SERVING if ready
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in HEALTH_SERVICES:
            alive = name == "liveness"
            await servicer.set(name, health_pb2.HealthCheckResponse.SERVING if alive else status)
        await asyncio.sleep(HEALTH_INTERVAL_S)
