"""Running the proxy: logging set-up, the event loop (uvloop when available), the server."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Final

import structlog
from aiohttp import web

from backends.capability import CapabilityError
from backends.supervisor import BackendStartError
from decisionlog.writer import LogFileError
from router.app import create_app
from router.config import Config, ConfigError
from router.edge.httpserver import Beside, make_runner, serve
from router.state import Deps

# The collector's youngest pass runs every 700 container allocations by default: a few times per
# request here, each walking every young object still alive (a parsed body, a plan, a record).
# Requests free nearly all of theirs by reference counting; the pass runs every 20,000, and what
# was loaded at start (modules, the classifier, the tokenizer) is frozen out of its way.
GC_YOUNG_THRESHOLD: Final = 20_000


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def configure_logging(log_format: str = "console") -> None:
    """Operator log on stderr (events, never prompt text); decisions go to the decision log."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def run(config: Config, *, log_format: str = "console", deps: Deps | None = None,
        beside: Beside | None = None) -> int:
    """Serve until SIGINT or SIGTERM; `beside`: the endpoint picker's gRPC server, on the same
    loop (grpc.aio wakes the loop through a file descriptor, which uvloop serves as asyncio's
    own loop does; the picker spends 7% less CPU per 1 KB request on it, 23% per SSE one:
    bench/README.md, bench.epp)."""
    configure_logging(log_format)
    _install_uvloop()
    try:
        app = create_app(config, deps=deps)
    except (ConfigError, ValueError, OSError) as exc:  # bad policy file, artifact, log path
        print(f"specroute: cannot start:\n{exc}", file=sys.stderr)
        return 2
    tune_gc()
    try:
        asyncio.run(serve(app, config.listen.host, config.listen.port, beside))
    except KeyboardInterrupt:
        pass
    except (LogFileError, OSError, BackendStartError, CapabilityError) as exc:
        # the decision log cannot be opened, the port is taken, a backend did not start, or the
        # pair does not match
        print(f"specroute: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0


async def start_site(
    app: web.Application, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int, Callable[[], Awaitable[None]]]:
    """Start `app` on an event loop that is already running; returns (runner, port, stop)."""
    runner = make_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]  # (host, port) or (host, port, flowinfo, scope_id)
    return runner, int(bound), runner.cleanup


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
