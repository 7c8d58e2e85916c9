"""What a grpc.aio ext_proc server's RSS grows by per stream, by how the client ends it: a
half-close (the client's end of stream, then the server's status) or a cancel (an RST_STREAM:
what Envoy sends for a stream it no longer needs).

bench.epp found the picker's RSS growing without end while the proxy with the same stores
stayed flat, and the do-nothing picker growing as much: the growth is the gRPC server's. This
measures that server alone, without Envoy or specroute: a do-nothing ext_proc servicer in its
own process, a grpc.aio client opening streams in bounded batches, the server's RSS read from
/proc before and after.

    .venv/bin/python -m bench.grpc_stream_memory [--streams 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import queue
import socket
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Event
from typing import Any, Final, NamedTuple

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

ENDINGS: Final = ("half-close", "cancel")
AT_ONCE: Final = 50  # streams open together
WARM_STREAMS: Final = 2000  # before the first reading: the server's pools and caches filled
SETTLE_S: Final = 1.0  # for the server to finish what the last streams left


class Grown(NamedTuple):
    ending: str
    streams: int  # served after the first reading
    before_mb: float
    after_mb: float

    @property
    def kb_per_stream(self) -> float:
        return (self.after_mb - self.before_mb) * 1024.0 / self.streams if self.streams else 0.0


class Servicer:
    """Answers every message with an empty response until the stream ends: nothing kept."""

    def __init__(self) -> None:
        self.streams = 0

    async def Process(self, request_iterator: Any, context: Any) -> None:  # the gRPC name
        self.streams += 1
        while await context.read() is not grpc.aio.EOF:
            await context.write(ext_proc.ProcessingResponse())


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def serve(port: int, asked: Any, answers: Any, stop: Event) -> None:
    """The server process: on each request on `asked`, (streams served, its RSS) on `answers`."""
    async def run() -> None:
        server = grpc.aio.server()
        servicer = Servicer()
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        answers.put((0, rss_mb()))
        while not stop.is_set():
            try:
                asked.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.05)
                continue
            answers.put((servicer.streams, rss_mb()))
        await server.stop(None)

    asyncio.run(run())


async def open_streams(port: int, ending: str, count: int) -> None:
    """`count` streams, `AT_ONCE` at a time: one message each way, then ended as `ending`."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = ext_proc_grpc.ExternalProcessorStub(channel)

        async def one() -> None:
            call = stub.Process()
            await call.write(ext_proc.ProcessingRequest())
            await call.read()
            if ending == "half-close":
                await call.done_writing()
                await call.read()  # the server's end of stream
            else:
                call.cancel()

        for start in range(0, count, AT_ONCE):
            await asyncio.gather(*(one() for _ in range(min(AT_ONCE, count - start))),
                                 return_exceptions=True)


def measure(ending: str, streams: int, warm: int = WARM_STREAMS) -> Grown:
    """A fresh server process per ending: `warm` streams, read, `streams` more, read again."""
    context = multiprocessing.get_context("spawn")
    asked, answers, stop = context.Queue(), context.Queue(), context.Event()
    port = free_port()
    process = context.Process(target=serve, args=(port, asked, answers, stop), daemon=True)
    process.start()
    try:
        answers.get(timeout=30)  # serving
        asyncio.run(open_streams(port, ending, warm))
        time.sleep(SETTLE_S)
        asked.put(None)
        served_before, before = answers.get(timeout=30)
        asyncio.run(open_streams(port, ending, streams))
        time.sleep(SETTLE_S)
        asked.put(None)
        served_after, after = answers.get(timeout=30)
        return Grown(ending, served_after - served_before, before, after)
    finally:
        stop.set()
        process.join(timeout=10)
        if process.is_alive():
            process.kill()  # by its handle: this process's child only
            process.join()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_stream_memory",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=20_000,
                        help="streams measured per ending, after 2,000 to warm up (20000)")
    args = parser.parse_args(argv)
    if args.streams < 1:
        parser.error("--streams must be at least 1")
    print(f"grpc.aio ext_proc server (grpcio {grpc.__version__}), {args.streams} streams per "
          "ending, each one message each way:")
    for ending in ENDINGS:
        grown = measure(ending, args.streams)
        print(f"  {ending:<10} {grown.streams} served, RSS {grown.before_mb:.1f} -> "
              f"{grown.after_mb:.1f} MB: {grown.kb_per_stream:+.3f} KB a stream")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
