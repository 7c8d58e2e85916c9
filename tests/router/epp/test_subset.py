"""The gateway's subset hint (the endpoint-picker protocol's `x-gateway-destination-endpoint-
subset` in the request's `envoy.lb.subset_hint` metadata): the picker picks only among those
endpoints, and answers 503 when none of them is one of its instances. Set here by Envoy's own
set_metadata filter ahead of the ext_proc filter, in deploy/envoy/envoy.yaml as shipped."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from backends.local.cache import free_loopback_port
from backends.local.envoy import render_config
from router.app import create_app
from router.epp.server import serve_grpc
from router.state import Deps
from tests.backends.local.test_envoy import envoy_running, require_envoy
from tests.router.conftest import ListSink, ServerFactory, logged
from tests.router.epp.test_picker import ASKS, ORIGINAL_DST, chat, config_for, engines, post

EXT_PROC_FILTER = "          - name: specroute.pick\n"


def with_subset(text: str, subset: Sequence[str]) -> str:
    """The shipped config with a filter ahead of the picker's that sets the subset hint, as a
    gateway would."""
    assert text.count(EXT_PROC_FILTER) == 1
    hint = (
        "          - name: envoy.filters.http.set_metadata\n"
        "            typed_config:\n"
        '              "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.'
        "v3.Config\n"
        "              metadata:\n"
        "              - metadata_namespace: envoy.lb.subset_hint\n"
        "                value: {x-gateway-destination-endpoint-subset: "
        f"{json.dumps(list(subset))}}}\n")
    return text.replace(EXT_PROC_FILTER, hint + EXT_PROC_FILTER)


@contextlib.asynccontextmanager
async def front_with_subset(aiohttp_server: ServerFactory, tmp: Path, subset: Sequence[str],
                            ) -> AsyncIterator[tuple[str, ListSink]]:
    require_envoy()
    e = await engines(aiohttp_server)
    sink = ListSink()
    app = create_app(config_for(e, tmp, "epp"),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)
    listen = free_loopback_port()
    ports = {name: server.port for name, server in e.servers.items()}
    endpoints = [f"127.0.0.1:{ports[name]}" if name in ports else name for name in subset]
    async with serve_grpc(app, "127.0.0.1", 0, fallbacks=False) as grpc_port:
        text = render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                             ADMIN_PORT=free_loopback_port())
        async with envoy_running(with_subset(text, endpoints), tmp / "envoy"):
            yield f"http://127.0.0.1:{listen}/v1/chat/completions", sink


async def test_a_request_goes_only_to_the_subset_the_gateway_names_even_when_pinned_elsewhere(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    async with front_with_subset(aiohttp_server, tmp_path, ["plain-0"]) as (url, sink):
        for ask in ASKS[:3]:
            status, headers, _ = await post(url, chat(ask), {"x-specroute-route": "mtp"})
            assert status == 200
            assert headers["x-specroute-backend"] == "plain-0"
        # the answer is read as in proxy mode: the record names the subset's instance
        assert [r.outcome.backend for r in await logged(sink, 3)] == ["plain-0"] * 3


async def test_a_subset_of_endpoints_the_picker_does_not_have_is_a_503(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    async with front_with_subset(aiohttp_server, tmp_path, ["10.9.9.9:8000"]) as (url, _):
        status, _, body = await post(url, chat(ASKS[0]))
        assert status == 503
        assert json.loads(body)["error"]["code"] == "no_backend"
        # a path sent on to the default instance unrouted: the same rule
        other, _, _ = await post(url.replace("/chat/completions", "/embeddings"), b"{}")
        assert other == 503
