"""A picker that does nothing: the floor bench.epp puts beside specroute's picker.

A grpc.aio ExternalProcessor in its own process, on uvloop as `specroute epp` runs, behind the
same deploy/envoy/envoy.yaml, answering the message pattern the real picker's streams see and
nothing more:

    pick stream (`specroute.pick`)    the headers' answer held until the body's end (its
                                      end_of_stream, or trailers); then the headers' answer
                                      naming the next of --endpoints in turn (the header
                                      `x-gateway-destination-endpoint` and the metadata
                                      `envoy.lb`, router.epp.messages.picked's answer), with
                                      `answer: watched` in the namespace `specroute` so the
                                      route passes `specroute.edit` by, and one "go on" per
                                      body chunk held; then the stream ended
    watch stream (observability mode) read to the answer's end, then ended; nothing sent
With `--answer specroute` the headers' answer carries what specroute's picker's carries besides
its choice (router.epp.pick): the engine's headers (the client's withheld ones removed, its own
set), the exchange's id, the answer's x-specroute-* headers and the decision's receipt, with
the values of a typical decision: what Envoy (and the picker's writes) cost for the answer the
issue asks for, with no decision made.

Each stream is ended by the picker as soon as nothing more on it needs an answer, as
router.epp.server ends its own.

No parsing, no decision, no record: what Python's gRPC and Envoy's ext_proc cost on their own.

    .venv/bin/python -m bench.epp_floor --port 9002 --endpoints 127.0.0.1:8001,127.0.0.1:8002
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from bench.proxy_overhead import install_uvloop
from router.epp import messages

# router.epp.pick.WATCHED under the key the route matches (not imported: that module brings the
# whole request path into this process; tests/bench/test_epp_floor.py holds them equal)
OURS: Final = {"answer": "watched"}

Responses = list[ext_proc.ProcessingResponse]
# --answer specroute: a typical routed decision's values, in specroute's picker's keys
# (router.request.lifecycle.route_headers, router.epp.pick.receipt; the test holds them equal)
ANSWER_HEADERS: Final = {
    "x-specroute-backend": "plain-0", "x-specroute-profile": "plain",
    "x-specroute-class": "technical", "x-specroute-reason": "finish",
    "x-specroute-overhead-ms": "0.412", "x-specroute-request-id": "5f0c9a4e1b7d4c2a9e3f6b8d0a1c2e4f",
    "x-specroute-pool": "auto", "x-specroute-rewrite": "none"}
RECEIPT: Final = {
    "request_id": "5f0c9a4e1b7d4c2a9e3f6b8d0a1c2e4f", "chosen": "plain-0", "spec": "plain",
    "reason": "finish", "rule": "routes.technical", "class": "technical",
    "finish_ms": {"mtp-0": 1843.2, "plain-0": 1790.6}}


@dataclass
class PickStream:
    """One request's pick stream: the body's chunks counted, the answers sent at its end.
    `full`: the headers' answer shaped as specroute's (--answer specroute)."""

    endpoints: Iterator[str]
    full: bool = False
    exchanges: Iterator[int] = field(default_factory=itertools.count)
    held: int = 0  # body chunks owed a "go on" after the headers' answer
    answered: bool = False
    client_headers: list[str] = field(default_factory=list)  # the names, read with --answer specroute

    def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        kind = message.WhichOneof("request")
        if kind == "request_trailers":  # the body ended on trailers, not end_of_stream
            return [*self._pick(), messages.trailers(request=True)]
        if self.answered:
            return [messages.REQUEST_BODY_CONTINUE] if kind == "request_body" else []
        if kind == "request_body":
            self.held += 1
            return self._pick() if message.request_body.end_of_stream else []
        if kind == "request_headers" and self.full:
            self.client_headers = list(messages.header_map(message.request_headers))
        if kind == "request_headers" and message.request_headers.end_of_stream:
            return self._pick()  # no body to wait for
        return []

    def _pick(self) -> Responses:
        if self.answered:
            return []
        self.answered = True
        if self.full:
            ours = {"exchange": f"{next(self.exchanges):x}", **OURS, "strip": ""}
            remove, engine = messages.for_engine(self.client_headers, "", decoded=True)
            picked = messages.picked([next(self.endpoints)], engine, remove, ours,
                                     ANSWER_HEADERS, RECEIPT)
        else:
            picked = messages.picked([next(self.endpoints)], {}, (), OURS)
        return [picked, *[messages.REQUEST_BODY_CONTINUE] * self.held]


class Floor:
    """The servicer: a stream's first message says which filter's it is, as in
    router.epp.server; read and written on the context itself, as there."""

    def __init__(self, endpoints: Sequence[str], full: bool = False) -> None:
        self.endpoints = itertools.cycle(endpoints)
        self.full = full
        self.exchanges = itertools.count()

    async def Process(self, request_iterator: Any, context: Any) -> None:  # the gRPC method's name
        message = await context.read()
        if message is grpc.aio.EOF:
            return
        if message.observability_mode:
            while message is not grpc.aio.EOF and not _answer_end(message):
                message = await context.read()
            return
        stream = PickStream(self.endpoints, self.full, self.exchanges)
        while message is not grpc.aio.EOF:
            for response in stream.on(message):
                await context.write(response)
            if stream.answered:  # ended here, as router.epp.server ends its streams
                return
            message = await context.read()


def _answer_end(message: ext_proc.ProcessingRequest) -> bool:
    kind = message.WhichOneof("request") or ""
    return kind.startswith("response") and messages.ends_its_side(message)


async def serve(port: int, endpoints: Sequence[str], full: bool = False) -> None:
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(Floor(endpoints, full), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.epp_floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the gRPC port (127.0.0.1)")
    parser.add_argument("--endpoints", required=True,
                        help="ip:port,ip:port...: the upstreams, named in turn")
    parser.add_argument("--answer", choices=("bare", "specroute"), default="bare",
                        help="the headers' answer: the choice only, or shaped as specroute's")
    args = parser.parse_args(argv)
    install_uvloop()
    asyncio.run(serve(args.port, [e.strip() for e in args.endpoints.split(",") if e.strip()],
                      full=args.answer == "specroute"))


if __name__ == "__main__":
    main()
