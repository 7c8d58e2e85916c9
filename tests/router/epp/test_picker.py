"""`specroute epp` behind the real Envoy 1.40 (deploy/envoy/*.yaml as written), in front of
simulated engines on loopback: the same choice and record as proxy mode, the engines' bytes
unchanged, fallbacks, the picker gone, bad input, no instance."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from backends.local.cache import free_loopback_port
from backends.local.envoy import render_config
from backends.local.simulator import SimState, create_sim_app
from backends.spec import BackendSpec
from policies import observation_from_record
from router.app import create_app
from router.config import Config, LogConfig, SupervisorConfig
from router.epp.server import PickerConfigError, check_endpoints, serve_grpc
from router.instances.pool import POOL
from router.state import DEPS, Deps
from tests.backends.local.test_envoy import envoy_running, require_envoy
from tests.router.conftest import ListSink, ServerFactory, gb10_policy, logged

ROOT = Path(__file__).resolve().parents[3]
ORIGINAL_DST = ROOT / "deploy" / "envoy" / "envoy.yaml"
FALLBACK = ROOT / "deploy" / "envoy" / "envoy-fallback.yaml"
# a gateway's own single filter: the pick and the answer on one stream (not shipped)
ONE_FILTER = Path(__file__).with_name("gateway-one-filter.yaml")
TIMEOUT = aiohttp.ClientTimeout(total=30)

ASKS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "```python\ndef add(a, b):\n    return a + b\n```"
                   "\nAdd type hints and a docstring."}], "temperature": 0},
    {"messages": [{"role": "user", "content": "Tell me a short story about the sea."}],
     "temperature": 0.8},
    {"messages": [{"role": "user", "content": "Explain how TCP congestion control reacts to "
                   "packet loss, in technical detail."}], "temperature": 0},
    {"messages": [{"role": "user", "content": "Write a Python function that parses a CSV file."}],
     "temperature": 0, "stream": True},
    {"messages": [{"role": "user", "content": "讲一个关于月亮的故事。"}], "temperature": 0.7,
     "stream": True},
]


@dataclass
class Engines:
    states: dict[str, SimState]
    servers: dict[str, TestServer]
    specs: list[BackendSpec]


async def engines(aiohttp_server: ServerFactory) -> Engines:
    states = {"mtp-0": SimState(profile="mtp", acceptance={"technical": 0.8}),
              "plain-0": SimState(profile="plain")}
    servers = {name: await aiohttp_server(create_sim_app(s)) for name, s in states.items()}
    specs = [BackendSpec(name=name, engine="llamacpp", profile=s.profile,
                         url=f"http://127.0.0.1:{servers[name].port}")
             for name, s in states.items()]
    return Engines(states, servers, specs)


def config_for(e: Engines, tmp: Path, name: str, **fields: Any) -> Config:
    settings: dict[str, Any] = {"policy": gb10_policy(tmp), **fields}
    return Config(backends=e.specs, default_backend="plain-0", tokenizer=False,
                  classifier="rules", log=LogConfig(path=str(tmp / f"{name}.jsonl")),
                  supervisor=SupervisorConfig(log_dir=str(tmp / "backends"),
                                              startup_probe=False, health_interval_s=60.0),
                  **settings)


@dataclass
class Front:
    url: str  # the OpenAI base URL clients use
    app: Any
    sink: ListSink


@contextlib.asynccontextmanager
async def picker_front(aiohttp_server: ServerFactory, tmp: Path, e: Engines, *,
                       config: Path = FALLBACK, edit: Callable[[str], str] = str,
                       **fields: Any) -> AsyncIterator[Front]:
    """specroute epp (its app, its gRPC server) and Envoy running `config` (its text passed
    through `edit`) in front."""
    require_envoy()
    sink = ListSink()
    app = create_app(config_for(e, tmp, "epp", **fields),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)  # the app's state and background work, /readyz
    listen = free_loopback_port()
    async with serve_grpc(app, "127.0.0.1", 0, fallbacks=config == FALLBACK) as grpc_port:
        text = render_config(config, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                             ADMIN_PORT=free_loopback_port(),
                             **({"MTP_PORT": e.servers["mtp-0"].port,
                                 "PLAIN_PORT": e.servers["plain-0"].port}
                                if config == FALLBACK else {}))
        async with envoy_running(edit(text), tmp / "envoy"):
            yield Front(f"http://127.0.0.1:{listen}/v1", app, sink)


async def proxy_front(aiohttp_server: ServerFactory, tmp: Path, e: Engines,
                      **fields: Any) -> Front:
    sink = ListSink()
    app = create_app(config_for(e, tmp, "proxy", **fields),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    server = await aiohttp_server(app)
    return Front(f"http://127.0.0.1:{server.port}/v1", app, sink)


async def post(url: str, body: bytes | dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.post(
            url, data=data, headers={"Content-Type": "application/json", **(headers or {})},
    ) as response:
        return (response.status, {k.lower(): v for k, v in response.headers.items()},
                await response.read())


def chat(ask: dict[str, Any]) -> dict[str, Any]:
    return {"model": "sim-model", **ask}


@pytest.mark.parametrize("config", [FALLBACK, ONE_FILTER], ids=["shipped", "one filter"])
async def test_the_picker_chooses_what_the_proxy_chooses_and_logs_the_same_record(
        aiohttp_server: ServerFactory, tmp_path: Path, config: Path) -> None:
    e = await engines(aiohttp_server)
    proxy = await proxy_front(aiohttp_server, tmp_path, e)
    async with picker_front(aiohttp_server, tmp_path, e, config=config) as picker:
        for ask in ASKS:
            for front in (proxy, picker):
                status, headers, _ = await post(front.url + "/chat/completions", chat(ask))
                assert status == 200, front
                assert headers["x-specroute-backend"] in e.servers
        await logged(picker.sink, len(ASKS))
    await logged(proxy.sink, len(ASKS))
    assert len(picker.sink.records) == len(proxy.sink.records) == len(ASKS)
    served = {r.outcome.backend for r in proxy.sink.records}
    assert served == {"mtp-0", "plain-0"}  # the asks exercise both instances
    for by_proxy, by_picker in zip(proxy.sink.records, picker.sink.records, strict=True):
        assert by_picker.outcome.backend == by_proxy.outcome.backend
        assert by_picker.outcome.failover_from == ()
        assert by_picker.decision["reason"] == by_proxy.decision["reason"]
        assert by_picker.decision["profile"] == by_proxy.decision["profile"]
        assert by_picker.classifier == by_proxy.classifier
        assert by_picker.outcome.completion_tokens == by_proxy.outcome.completion_tokens
        assert by_picker.outcome.backend_tps == by_proxy.outcome.backend_tps
        assert by_picker.outcome.draft_n == by_proxy.outcome.draft_n
        assert by_picker.outcome.status == 200 and not by_picker.outcome.client_disconnected
        # the learner reads the picker's records as it reads the proxy's
        observed = observation_from_record(by_picker)
        assert observed is not None and observed.paced
        by_proxy_observed = observation_from_record(by_proxy)
        assert by_proxy_observed is not None
        assert observed.decode_tps == pytest.approx(by_proxy_observed.decode_tps)


@pytest.mark.parametrize("stream", [False, True])
async def test_answers_reach_the_client_byte_identical_to_the_engine_s(
        aiohttp_server: ServerFactory, tmp_path: Path, stream: bool) -> None:
    e = await engines(aiohttp_server)
    ask = chat({**ASKS[0], "stream": stream})
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        status, headers, through = await post(picker.url + "/chat/completions", ask)
    assert status == 200
    backend = headers["x-specroute-backend"]
    engine = e.servers[backend]
    direct_status, _, direct = await post(
        f"http://127.0.0.1:{engine.port}/v1/chat/completions", ask)
    assert direct_status == 200 and through == direct
    if stream:  # llama.cpp's last chunk carries its timings: the picker asked for nothing
        assert "stream_options" not in e.states[backend].received[0]["body"]
        assert b'"timings"' in through


async def test_a_dead_instance_gets_the_fallback(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    e = await engines(aiohttp_server)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        await e.servers["mtp-0"].close()  # dead; the picker's health probe has not seen it
        status, headers, body = await post(picker.url + "/chat/completions", chat(ASKS[0]))
        assert status == 200 and json.loads(body)["choices"]
        assert headers["x-specroute-backend"] == "plain-0"
        record = (await logged(picker.sink))[0]
        assert record.outcome.backend == "plain-0"
        assert record.outcome.failover_from == ("mtp-0",)
        # the next one does not try the dead instance first: it is marked failed for a while
        assert picker.app[POOL].runtime("mtp-0").failed_until > picker.app[DEPS].clock()


async def test_with_one_endpoint_a_dead_instance_is_envoy_s_503_and_then_avoided(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    e = await engines(aiohttp_server)
    async with picker_front(aiohttp_server, tmp_path, e, config=ORIGINAL_DST) as picker:
        await e.servers["mtp-0"].close()
        status, _, _ = await post(picker.url + "/chat/completions", chat(ASKS[0]))
        assert status == 503  # ORIGINAL_DST takes one ip:port: nothing to fail over to
        status, headers, _ = await post(picker.url + "/chat/completions", chat(ASKS[0]))
    assert status == 200 and headers["x-specroute-backend"] == "plain-0"


async def test_the_picker_gone_midway_fails_requests_as_documented_then_recovers(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    require_envoy()
    e = await engines(aiohttp_server)
    app = create_app(config_for(e, tmp_path, "epp"), deps=Deps(explore=False))
    await aiohttp_server(app)
    listen, grpc_port = free_loopback_port(), free_loopback_port()
    text = render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                         ADMIN_PORT=free_loopback_port())
    url = f"http://127.0.0.1:{listen}/v1/chat/completions"
    async with envoy_running(text, tmp_path / "envoy"):
        async with serve_grpc(app, "127.0.0.1", grpc_port, fallbacks=False):
            assert (await post(url, chat(ASKS[1])))[0] == 200
        status, _, body = await post(url, chat(ASKS[1]))  # the picker is gone
        assert (status, body) == (500, b"")  # deploy/envoy/envoy.yaml's documented failure
        async with serve_grpc(app, "127.0.0.1", grpc_port, fallbacks=False):
            for _ in range(50):  # bounded: Envoy reconnects to the picker
                status = (await post(url, chat(ASKS[1])))[0]
                if status == 200:
                    break
                await asyncio.sleep(0.1)
    assert status == 200


BAD_BODIES = [
    b"{not json",
    b"[]",
    json.dumps({"model": "sim-model"}).encode(),  # no messages
    json.dumps({"model": "sim-model", "messages": "hi"}).encode(),
]


async def test_bad_bodies_get_the_proxy_s_4xx(aiohttp_server: ServerFactory,
                                             tmp_path: Path) -> None:
    e = await engines(aiohttp_server)
    proxy = await proxy_front(aiohttp_server, tmp_path, e)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        for body in BAD_BODIES:
            by_proxy = await post(proxy.url + "/chat/completions", body)
            by_picker = await post(picker.url + "/chat/completions", body)
            assert 400 <= by_proxy[0] < 500, body
            assert by_picker[0] == by_proxy[0], body
            assert json.loads(by_picker[2]) == json.loads(by_proxy[2])
            assert by_picker[1]["content-type"].startswith("application/json")
    assert not e.states["mtp-0"].received and not e.states["plain-0"].received


async def test_no_healthy_instance_is_an_immediate_503(aiohttp_server: ServerFactory,
                                                      tmp_path: Path) -> None:
    e = await engines(aiohttp_server)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        pool = picker.app[POOL]
        for name in pool.names:
            pool.set_health(name, False, "down for the test")
        status, _, body = await post(picker.url + "/chat/completions", chat(ASKS[1]))
    assert status == 503
    assert json.loads(body)["error"]["code"] == "no_backend"
    assert not e.states["mtp-0"].received and not e.states["plain-0"].received


def test_instances_must_be_named_by_ip_and_port(tmp_path: Path) -> None:
    spec = BackendSpec(name="a", engine="llamacpp", profile="plain", url="http://gpu-1:8000")
    config = Config(backends=[spec], tokenizer=False, classifier="rules")
    with pytest.raises(PickerConfigError, match="not an IP address"):
        check_endpoints(config)
    ok = spec.model_copy(update={"url": "http://10.0.0.7:8000/v1"})
    check_endpoints(config.model_copy(update={"backends": [ok]}))


async def test_specroute_epp_killed_with_sigkill_mid_run_is_envoy_s_documented_500(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    require_envoy()
    e = await engines(aiohttp_server)
    config = tmp_path / "config.yaml"
    config.write_text(
        "backends:\n" + "".join(
            f"  - {{name: {s.name}, engine: llamacpp, profile: {s.profile}, url: '{s.base_url}'}}\n"
            for s in e.specs)
        + "tokenizer: false\nclassifier: rules\nlog: {path: epp.jsonl}\n"
        "supervisor: {startup_probe: false}\n")
    grpc_port, http_port, listen = free_loopback_port(), free_loopback_port(), free_loopback_port()
    process = subprocess.Popen(  # noqa: ASYNC220  # forks and returns; every wait is bounded
        [sys.executable, "-m", "router", "epp", "--config", str(config), "--grpc-port",
         str(grpc_port), "--port", str(http_port), "--endpoints", "primary"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text = render_config(ORIGINAL_DST, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                         ADMIN_PORT=free_loopback_port())
    url = f"http://127.0.0.1:{listen}/v1/chat/completions"
    try:
        async with envoy_running(text, tmp_path / "envoy"):
            status = 0
            for _ in range(100):  # bounded: 20 s for the picker to start
                assert process.poll() is None, "specroute epp exited early"
                with contextlib.suppress(aiohttp.ClientError):
                    status = (await post(url, chat(ASKS[1])))[0]
                if status == 200:
                    break
                await asyncio.sleep(0.2)
            assert status == 200
            await asyncio.sleep(0.3)  # its record is written within 20 ms of the answer
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            status, _, body = await post(url, chat(ASKS[1]))
            assert (status, body) == (500, b"")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert (tmp_path / "epp.jsonl").read_text().count("\n") == 1  # the one it served, logged


async def test_a_rewritten_body_reaches_the_engine_as_proxy_mode_sends_it(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # the ds4 policy sends chat to the `nothink` pool with {model: deepseek-chat, thinking: off}
    e = await engines(aiohttp_server)
    e.specs = [s.model_copy(update={"engine": "ds4"}) for s in e.specs]
    ds4 = {"pools": {"nothink": ["plain-0"]},
           "policy": str(ROOT / "policies" / "ds4-gb10.yaml")}
    casual = {"model": "deepseek-v4", "messages": [{"role": "user", "content": "hey, how are you?"}]}
    proxy = await proxy_front(aiohttp_server, tmp_path, e, **ds4)
    status, by_proxy, _ = await post(proxy.url + "/chat/completions", casual)
    assert status == 200 and by_proxy["x-specroute-rewrite"] != "none"
    sent_by_proxy = e.states["plain-0"].received[-1]["body"]
    async with picker_front(aiohttp_server, tmp_path, e, **ds4) as picker:
        status, by_picker, _ = await post(picker.url + "/chat/completions", casual)
    assert status == 200
    assert by_picker["x-specroute-rewrite"] == by_proxy["x-specroute-rewrite"]
    assert by_picker["x-specroute-backend"] == "plain-0"
    assert e.states["plain-0"].received[-1]["body"] == sent_by_proxy
    assert sent_by_proxy["model"] == "deepseek-chat"


def chunked_json_app(pieces: list[bytes],
                     content_type: str = "application/json") -> web.Application:
    """An engine that writes its answer in `pieces`, a few ms apart (chunked)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    return engine_app(chat)


def engine_app(chat: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.Application:
    """An engine double: `chat` answers chat completions, and it is always healthy."""

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


async def test_a_json_answer_in_pieces_reaches_the_client_whole_and_is_read(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # each piece goes on when the next one comes, the last with the end: none is lost or doubled
    answer = json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                          "content": "word " * 300}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 301, "total_tokens": 310},
        "timings": {"predicted_per_second": 42.5}}).encode()
    pieces = [answer[:700], answer[700:1400], answer[1400:]]
    e = await chunked_engines(aiohttp_server, pieces)
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        status, headers, through = await post(picker.url + "/chat/completions", chat(ASKS[1]))
        await logged(picker.sink)
    assert status == 200 and through == answer
    assert headers["x-specroute-backend"] in e.servers
    outcome = picker.sink.records[0].outcome
    assert (outcome.completion_tokens, outcome.backend_tps) == (301, 42.5)


@pytest.mark.parametrize("pieces", [1, 30])
async def test_an_answer_over_envoy_s_buffer_limit_reaches_the_client_whole_and_is_read(
        aiohttp_server: ServerFactory, tmp_path: Path, pieces: int) -> None:
    # 3 MB: Envoy holds the answer's body while the picker answers its headers (STREAMED);
    # more than its 1 MiB buffers hold must not fail the answer
    answer = json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                          "content": "word " * 600_000}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 600_000,
                  "total_tokens": 600_009}}).encode()
    size = len(answer) // pieces + 1
    e = await chunked_engines(aiohttp_server,
                              [answer[i:i + size] for i in range(0, len(answer), size)])
    async with picker_front(aiohttp_server, tmp_path, e) as picker:
        status, _, through = await post(picker.url + "/chat/completions", chat(ASKS[1]))
        await logged(picker.sink)
    assert status == 200 and through == answer
    assert picker.sink.records[0].outcome.completion_tokens == 600_000


async def chunked_engines(aiohttp_server: ServerFactory, pieces: list[bytes]) -> Engines:
    """An mtp and a plain instance, each answering with `pieces` of one JSON answer."""
    servers = {name: await aiohttp_server(chunked_json_app(pieces))
               for name in ("mtp-0", "plain-0")}
    specs = [BackendSpec(name=name, engine="llamacpp", profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}") for name, server in servers.items()]
    return Engines({}, servers, specs)


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CHUNK = {"id": "x", "object": "chat.completion.chunk", "model": "sim-model"}
USAGE = event({**CHUNK, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}})


@pytest.mark.parametrize("config", [FALLBACK, ONE_FILTER], ids=["shipped", "one filter"])
@pytest.mark.parametrize(("engine", "stream", "ours"), [
    ("vllm", True, USAGE),  # the usage chunk the picker asked for, cut in two
    ("sglang", False, b""),  # `meta_info` the picker asked for, in a JSON answer in pieces
])
async def test_what_the_picker_asked_for_is_dropped_across_pieces_as_the_proxy_drops_it(
        aiohttp_server: ServerFactory, tmp_path: Path, engine: str, stream: bool,
        ours: bytes, config: Path) -> None:
    if stream:
        words = b"".join(event({**CHUNK, "choices": [{"index": 0, "delta": {"content": w}}]})
                         for w in ("Par", "is", "."))
        answer = words + USAGE + b"data: [DONE]\n\n"
        cut = len(words) + 20  # inside the usage chunk
        pieces = [answer[:30], answer[30:cut], answer[cut:]]  # an event cut in each piece
    else:
        answer = json.dumps({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                              "content": "word " * 50},
             "meta_info": {"id": "x"}}], "meta_info": {"completion_tokens": 50}}).encode()
        pieces = [answer[:100], answer[100:200], answer[200:]]
    app = chunked_json_app(pieces, "text/event-stream" if stream else "application/json")
    servers = {name: await aiohttp_server(app) for name in ("mtp-0", "plain-0")}
    specs = [BackendSpec(name=name, engine=engine, profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}") for name, server in servers.items()]
    e = Engines({}, servers, specs)
    ask = chat({**ASKS[1], "stream": stream})
    proxy = await proxy_front(aiohttp_server, tmp_path, e)
    _, _, by_proxy = await post(proxy.url + "/chat/completions", ask)
    async with picker_front(aiohttp_server, tmp_path, e, config=config) as picker:
        status, _, by_picker = await post(picker.url + "/chat/completions", ask)
        await logged(picker.sink)
    assert status == 200 and by_picker == by_proxy != answer
    assert picker.sink.records[0].outcome.status == 200
    if stream:
        assert by_picker == answer.replace(ours, b"")
    else:
        assert b"meta_info" not in by_picker


def with_receipt_log(text: str) -> str:
    """The shipped config with its commented access log (the decision's receipt) turned on."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == "# access_log:")
    end = next(i for i, line in enumerate(lines) if "DYNAMIC_METADATA(specroute.receipt)" in line)
    for i in range(start, end + 1):
        lines[i] = lines[i].replace("# ", "", 1)
    return "".join(lines)


@pytest.mark.parametrize("config", [ORIGINAL_DST, FALLBACK])
async def test_each_decision_s_receipt_is_in_envoy_s_access_log(
        aiohttp_server: ServerFactory, tmp_path: Path, config: Path) -> None:
    e = await engines(aiohttp_server)
    async with picker_front(aiohttp_server, tmp_path, e, config=config,
                            edit=with_receipt_log) as picker:
        answers = [await post(picker.url + "/chat/completions", chat(ask)) for ask in ASKS[:3]]
        stdout = tmp_path / "envoy" / "envoy.stdout"
        for _ in range(100):  # bounded: Envoy flushes its access log every second
            logged_lines = [json.loads(line) for line in stdout.read_text().splitlines()
                            if line.startswith("{") and '"specroute"' in line]
            if len(logged_lines) == len(answers):
                break
            await asyncio.sleep(0.1)
    assert len(logged_lines) == len(answers)
    by_id = {line["specroute"]["request_id"]: line for line in logged_lines}
    assert any(line["specroute"]["reason"] == "finish" for line in logged_lines)
    for status, headers, _ in answers:
        assert status == 200
        line = by_id[headers["x-specroute-request-id"]]
        receipt = line["specroute"]
        assert receipt["chosen"] == headers["x-specroute-backend"]
        assert receipt["reason"] == headers["x-specroute-reason"]
        assert receipt["class"] == headers["x-specroute-class"]
        assert line["upstream"] == f"127.0.0.1:{e.servers[receipt['chosen']].port}"
        if receipt["reason"] == "finish":  # priced: each candidate's predicted finish
            assert set(receipt["finish_ms"]) == {"mtp-0", "plain-0"}
            assert all(ms > 0 for ms in receipt["finish_ms"].values())


@pytest.mark.parametrize("size_mib", [32.5, 40])
@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_past_the_limit_is_a_413_whether_its_length_is_declared_or_not(
        aiohttp_server: ServerFactory, tmp_path: Path, size_mib: float, chunked: bool) -> None:
    """32.5 MiB: past the picker's limit (32 MiB), within Envoy's buffer (33 MiB); 40 MiB:
    past both. Declared, the picker refuses on the headers; chunked, once it holds more than
    its limit, before Envoy's buffer is full (else Envoy stops reading: a 504)."""
    e = await engines(aiohttp_server)
    ask = chat(ASKS[1])
    filler = "x" * int(size_mib * 2**20)
    body = json.dumps({**ask, "messages": [{"role": "user", "content": filler}]}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(body), 2**20):
            yield body[at:at + 2**20]

    async with (picker_front(aiohttp_server, tmp_path, e, config=ORIGINAL_DST) as picker,
                aiohttp.ClientSession(timeout=TIMEOUT) as session):
        data: Any = pieces() if chunked else body
        try:
            async with session.post(picker.url + "/chat/completions", data=data,
                                    headers={"content-type": "application/json"}) as answer:
                status, text = answer.status, await answer.read()
        except aiohttp.ClientOSError:  # Envoy answered and closed before the body was sent
            pytest.fail("Envoy closed the connection without an answer")
        status_after = (await post(picker.url + "/chat/completions", ask))[0]
    assert status == 413
    assert json.loads(text)["error"]["code"] == "body_too_large"
    assert status_after == 200  # the picker is unharmed
    assert sum(len(state.received) for state in e.states.values()) == 1  # that one only


def gated_sse_app(first: bytes, rest: bytes, gate: asyncio.Event) -> web.Application:
    """An engine that streams `first`, waits for `gate`, then streams `rest`."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(first)
        await asyncio.wait_for(gate.wait(), 20)
        await response.write(rest)
        await response.write_eof()
        return response

    return engine_app(chat)


@pytest.mark.parametrize("config", [ORIGINAL_DST, FALLBACK])
@pytest.mark.parametrize("engine", ["llamacpp", "vllm"])  # the answer watched; also edited
async def test_a_picker_restarted_mid_stream_records_the_answer_once_unobserved(
        aiohttp_server: ServerFactory, tmp_path: Path, config: Path, engine: str) -> None:
    """A watched answer finishes (the watcher fails open: Envoy holds nothing for it); an
    edited one is cut (the editor fails closed: Envoy would drop the chunks it holds for it).
    Either way the picker that made the pick records it once, unobserved."""
    words = [event({**CHUNK, "choices": [{"index": 0, "delta": {"content": w}}]})
             for w in ("Par", "is", ".")]
    first, rest = words[0], b"".join(words[1:]) + USAGE + b"data: [DONE]\n\n"
    gate = asyncio.Event()
    servers = {name: await aiohttp_server(gated_sse_app(first, rest, gate))
               for name in ("mtp-0", "plain-0")}
    specs = [BackendSpec(name=name, engine=engine, profile=name.split("-")[0],
                         url=f"http://127.0.0.1:{server.port}") for name, server in servers.items()]
    e = Engines({}, servers, specs)
    require_envoy()
    sink = ListSink()
    app = create_app(config_for(e, tmp_path, "epp"),
                     deps=Deps(sinks=(sink,), explore=False, record_interval_s=0.0))
    await aiohttp_server(app)
    listen, grpc_port = free_loopback_port(), free_loopback_port()
    text = render_config(config, LISTEN_PORT=listen, PICKER_PORT=grpc_port,
                         ADMIN_PORT=free_loopback_port(),
                         **({"MTP_PORT": servers["mtp-0"].port,
                             "PLAIN_PORT": servers["plain-0"].port} if config == FALLBACK else {}))
    url = f"http://127.0.0.1:{listen}/v1/chat/completions"
    fallbacks = config == FALLBACK
    async with (envoy_running(text, tmp_path / "envoy"),
                aiohttp.ClientSession(timeout=TIMEOUT) as session):
        async with serve_grpc(app, "127.0.0.1", grpc_port, fallbacks=fallbacks):
            answer = await session.post(url, json=chat({**ASKS[1], "stream": True}))
            assert answer.status == 200
            got = await answer.content.readuntil(b"\n\n")
        # the picker is gone (stopped: its grace ran out with the answer still open)
        async with serve_grpc(app, "127.0.0.1", grpc_port, fallbacks=fallbacks):
            gate.set()
            try:
                got += await answer.read()
            except aiohttp.ClientPayloadError:
                got += b"<cut>"
            answer.release()
            await logged(sink)
            first_records = list(sink.records)
            status = 0
            for _ in range(50):  # bounded: Envoy reconnects to the new picker
                status = (await post(url, chat(ASKS[1])))[0]
                if status == 200:
                    break
                await asyncio.sleep(0.1)
            await logged(sink, 2)
    assert status == 200
    if engine == "vllm":
        assert got.startswith(first) and got.endswith(b"<cut>")
    else:
        assert got == b"".join(words) + USAGE + b"data: [DONE]\n\n"  # finished, unchanged
    assert len(first_records) == 1  # recorded once, by the picker that made the pick
    outcome = first_records[0].outcome
    assert outcome.unobserved and not outcome.client_disconnected
    observed = observation_from_record(first_records[0])
    assert observed is None or not observed.timed  # never timed
    assert len(sink.records) == 2 and not sink.records[1].outcome.unobserved
