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
from dataclasses import dataclass
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


@dataclass
class PickStream:
    """One request's pick stream: the body's chunks counted, the answers sent at its end."""

    endpoints: Iterator[str]
    held: int = 0  # body chunks owed a "go on" after the headers' answer
    answered: bool = False

    def on(self, message: ext_proc.ProcessingRequest) -> Responses:
        kind = message.WhichOneof("request")
        if kind == "request_trailers":  # the body ended on trailers, not end_of_stream
            return [*self._pick(), messages.trailers(request=True)]
        if self.answered:
            return [messages.REQUEST_BODY_CONTINUE] if kind == "request_body" else []
        if kind == "request_body":
            self.held += 1
            return self._pick() if message.request_body.end_of_stream else []
        if kind == "request_headers" and message.request_headers.end_of_stream:
            return self._pick()  # no body to wait for
        return []

    def _pick(self) -> Responses:
        if self.answered:
            return []
        self.answered = True
        picked = messages.picked([next(self.endpoints)], {}, (), OURS)
        return [picked, *[messages.REQUEST_BODY_CONTINUE] * self.held]


class Floor:
    """The servicer: a stream's first message says which filter's it is, as in
    router.epp.server; read and written on the context itself, as there."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        self.endpoints = itertools.cycle(endpoints)

    async def Process(self, request_iterator: Any, context: Any) -> None:  # the gRPC method's name
        message = await context.read()
        if message is grpc.aio.EOF:
            return
        if message.observability_mode:
            while message is not grpc.aio.EOF and not _answer_end(message):
                message = await context.read()
            return
        stream = PickStream(self.endpoints)
        while message is not grpc.aio.EOF:
            for response in stream.on(message):
                await context.write(response)
            if stream.answered:  # ended here, as router.epp.server ends its streams
                return
            message = await context.read()


def _answer_end(message: ext_proc.ProcessingRequest) -> bool:
    kind = message.WhichOneof("request") or ""
    return kind.startswith("response") and messages.ends_its_side(message)


async def serve(port: int, endpoints: Sequence[str]) -> None:
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(Floor(endpoints), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.epp_floor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the gRPC port (127.0.0.1)")
    parser.add_argument("--endpoints", required=True,
                        help="ip:port,ip:port...: the upstreams, named in turn")
    args = parser.parse_args(argv)
    install_uvloop()
    asyncio.run(serve(args.port, [e.strip() for e in args.endpoints.split(",") if e.strip()]))


if __name__ == "__main__":
    main()
