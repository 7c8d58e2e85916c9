"""Hostile input: each case a hostile client tried, answered with a 4xx OpenAI-style error or
served, never a 500, a stack trace, an echo of what the client sent, or a lost record."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from backends.local.simulator import Fault
from decisionlog.records import STRING_CAP, parse_line
from router.request.json_body import MAX_JSON_DEPTH
from tests.router.conftest import ServerFactory, Stack, start_stack

ENDPOINTS = {
    "/chat/completions": ('{"model":"m","messages":', "}"),
    "/completions": ('{"model":"m","prompt":', "}"),
    "/messages": ('{"model":"m","max_tokens":8,"messages":', "}"),
    "/responses": ('{"model":"m","input":', "}"),
}
CHAT = {"model": "sim-model", "temperature": 0, "max_tokens": 8,
        "messages": [{"role": "user", "content": "Explain how a hash map resolves collisions."}]}


async def _post_raw(stack: Stack, path: str, raw: bytes,
                    headers: dict[str, str] | None = None) -> tuple[int, dict[str, object], str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base_url + path, data=raw, headers={
            "Content-Type": "application/json", **(headers or {})}) as response,
    ):
        text = await response.text()
        body = json.loads(text) if response.content_type == "application/json" else {}
        return response.status, body, text


def _decision_lines(stack: Stack) -> list[str]:
    path = Path(stack.config.log.path)
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.mark.parametrize("path", list(ENDPOINTS))
async def test_deep_nesting_is_a_400_on_every_routed_endpoint(stack: Stack, path: str) -> None:
    head, tail = ENDPOINTS[path]
    for depth in (10_000, MAX_JSON_DEPTH + 10):  # past the interpreter's stack, and just past ours
        raw = (head + "[" * depth + "]" * depth + tail).encode()
        status, body, _ = await _post_raw(stack, path, raw)
        assert status == 400, (depth, body)
        error = body["error"]
        assert isinstance(error, dict) and error["code"] == "invalid_json"
        assert str(MAX_JSON_DEPTH) in str(error["message"])
    assert stack.mtp.received == [] and stack.plain.received == []


async def test_nesting_within_the_bound_is_served(stack: Stack) -> None:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(40):  # a deep but legitimate tool schema
        schema = {"type": "object", "properties": {"inner": schema}}
    body = {**CHAT, "tools": [{"type": "function",
                               "function": {"name": "deep", "parameters": schema}}]}
    status, _, _ = await _post_raw(stack, "/chat/completions", json.dumps(body).encode())
    assert status == 200


LONE = '"a lone \\ud800 surrogate and \\udfff another"'


@pytest.mark.parametrize("stream", [False, True])
async def test_lone_surrogates_in_text_are_served_with_the_shipped_tokenizer(
    aiohttp_server: ServerFactory, tmp_path: Path, stream: bool
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, shipped_scorer=True)
    raw = (f'{{"model":"sim-model","temperature":0,"max_tokens":8,"stream":{json.dumps(stream)},'
           f'"messages":[{{"role":"system","content":{LONE}}},{{"role":"user","content":{LONE}}}]}}').encode()
    status, _, text = await _post_raw(stack, "/chat/completions", raw)
    assert status == 200, text
    record = (await stack.logged(1))[-1]
    assert record.outcome.status == 200
    assert record.classifier.get("error") is None  # the trained scorer read it too
    forwarded = (stack.mtp.received + stack.plain.received)[-1]["body"]
    assert forwarded["messages"][1]["content"] == "a lone \ud800 surrogate and \udfff another"
    if stream:  # llama.cpp's last chunk has its timings: the body went on with nothing added
        assert "stream_options" not in forwarded and '"usage"' not in text
        assert record.outcome.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
async def test_lone_surrogate_in_model_is_served_and_logged(stack: Stack, stream: bool) -> None:
    raw = (f'{{"model":"sim\\ud800model","temperature":0,"max_tokens":8,"stream":{json.dumps(stream)},'
           '"messages":[{"role":"user","content":"hello"}]}').encode()
    status, _, text = await _post_raw(stack, "/chat/completions", raw)
    assert status == 200, text
    await stack.logged(1)
    lines = _decision_lines(stack)
    assert len(lines) == 1
    parsed = parse_line(lines[0])
    assert parsed is not None and parsed.model == "sim\ud800model"  # escaped, not lost


async def test_gzip_declared_on_a_plain_body_is_a_400(stack: Stack) -> None:
    status, body, _ = await _post_raw(
        stack, "/chat/completions", json.dumps(CHAT).encode(), {"Content-Encoding": "gzip"})
    assert status == 400
    assert body["error"]["code"] == "invalid_body_encoding"  # type: ignore[index]
    assert stack.mtp.received == [] and stack.plain.received == []


async def test_a_real_gzip_body_is_read_and_forwarded_decoded(stack: Stack) -> None:
    status, _, _ = await _post_raw(
        stack, "/chat/completions", gzip.compress(json.dumps(CHAT).encode()),
        {"Content-Encoding": "gzip"})
    assert status == 200
    forwarded = (stack.mtp.received + stack.plain.received)[-1]
    assert forwarded["body"]["messages"] == CHAT["messages"]
    assert "Content-Encoding" not in forwarded["headers"]


@pytest.mark.parametrize("path", [
    "/v1/../props", "/v1/%2e%2e/props", "/v1/%2E%2E/slots", "/v1/./../health",
    "/v1/chat/completions/../../props", "/v1//props", "/v1/models/..%2f..%2fprops",
    "/v1/%252e%252e/props",
])
async def test_only_normalised_v1_paths_are_forwarded(stack: Stack, path: str) -> None:
    url = URL(f"http://127.0.0.1:{stack.proxy.port}{path}", encoded=True)
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 404
        assert "x-specroute-backend" not in response.headers  # answered by the proxy
        error = (await response.json())["error"]
    assert error["type"] == "not_found_error"


async def test_a_normalised_passthrough_path_still_goes_to_the_backend(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session, session.post(f"{stack.base_url}/embeddings",
                            json={"model": "sim-model", "input": "x"}) as response:
        assert response.status == 200
        assert response.headers["x-specroute-backend"] == "plain-0"


async def _readyz(stack: Stack) -> dict[str, object]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{stack.proxy.port}/readyz") as response,
    ):
        return dict(await response.json())


async def test_a_bad_request_answered_with_500_is_relayed_and_harms_no_backend(stack: Stack) -> None:
    body = {**CHAT, "temperature": "hot"}
    for _ in range(3):
        status, error, _ = await _post_raw(stack, "/chat/completions", json.dumps(body).encode())
        assert status == 500
        assert "type must be number" in json.dumps(error)  # the backend's own answer
    ready = await _readyz(stack)
    backends = ready["backends"]
    assert isinstance(backends, list)
    assert all(b["healthy"] and b["failures"] == 0 for b in backends), backends
    records = await stack.logged(3)
    assert all(r.outcome.failover_from == () for r in records)
    served_before = len(stack.plain.received) + len(stack.mtp.received)
    status, _, _ = await _post_raw(stack, "/chat/completions", json.dumps(CHAT).encode())
    assert status == 200
    assert len(stack.plain.received) + len(stack.mtp.received) == served_before + 1


@pytest.mark.parametrize("status", [400, 404, 422, 500])
async def test_request_faults_are_relayed_as_is(stack: Stack, status: int) -> None:
    stack.mtp.faults.append(Fault("status", status=status))
    stack.plain.faults.append(Fault("status", status=status))
    got, _, _ = await _post_raw(stack, "/chat/completions", json.dumps(CHAT).encode())
    assert got == status
    assert stack.last.outcome.failover_from == ()
    assert all(b["healthy"] for b in (await _readyz(stack))["backends"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("status", [502, 503, 504, 529])
async def test_backend_failure_statuses_fail_over_and_mark_the_backend(stack: Stack, status: int) -> None:
    stack.mtp.faults.append(Fault("status", status=status))
    stack.plain.faults.append(Fault("status", status=status))
    got, _, _ = await _post_raw(stack, "/chat/completions", json.dumps(CHAT).encode())
    first = stack.last.outcome.failover_from
    assert len(first) == 1  # the first backend failed; the second's answer is relayed
    assert got == status  # both failed: the last answer reaches the client as it was
    backends = {b["name"]: b for b in (await _readyz(stack))["backends"]}  # type: ignore[attr-defined]
    assert backends[first[0]]["failures"] == 1 and not backends[first[0]]["healthy"]


async def test_an_8000_character_route_header_is_not_echoed(stack: Stack) -> None:
    status, body, text = await _post_raw(
        stack, "/chat/completions", json.dumps(CHAT).encode(), {"x-specroute-route": "z" * 8000})
    assert status == 400
    assert body["error"]["code"] == "invalid_route_header"  # type: ignore[index]
    assert len(text) < 600 and "8000 characters" in text


async def test_every_logged_string_is_capped(stack: Stack) -> None:
    body = {**CHAT, "model": "m" * 900_000}
    status, _, _ = await _post_raw(stack, "/chat/completions", json.dumps(body).encode())
    assert status == 200
    await stack.logged(1)
    (line,) = _decision_lines(stack)
    assert len(line) < 3 * STRING_CAP
    record = parse_line(line)
    assert record is not None and record.model.startswith("m" * STRING_CAP)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "OPTIONS", "PATCH"])
@pytest.mark.parametrize("path", [*ENDPOINTS, "/models"])
async def test_wrong_methods_get_a_json_405(stack: Stack, method: str, path: str) -> None:
    if path == "/models" and method == "GET":
        return
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, stack.base_url + path,
                        headers={"Authorization": "Bearer sk-secret"}) as response,
    ):
        assert response.status == 405
        assert response.content_type == "application/json"
        error = (await response.json())["error"]
        assert "x-specroute-backend" not in response.headers
    assert error["code"] == "method_not_allowed"
    assert stack.mtp.received == [] and stack.plain.received == []


@pytest.mark.parametrize("field", ["metadata", "tools", "stream_options", "response_format"])
async def test_nesting_at_the_bound_is_never_a_500(stack: Stack, field: str) -> None:
    nested = "leaf"
    for _ in range(MAX_JSON_DEPTH - 1):  # the body's object is the first level
        nested = f'{{"k":{nested}}}'
    raw = ('{"model":"sim-model","stream":true,"temperature":0,"max_tokens":4,'
           f'"messages":[{{"role":"user","content":"hi"}}],"{field}":{nested}}}').encode()
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base_url + "/chat/completions", data=raw.replace(
            b"leaf", b'"x"'), headers={"Content-Type": "application/json"}) as response,
    ):
        status, backend = response.status, response.headers.get("x-specroute-backend")
        text = await response.text()
    # a 5xx may only be the backend's own answer (the simulator's parser gives up at ~1,000)
    assert status < 500 or backend not in (None, "none"), text
    if status == 400:
        assert json.loads(text)["error"]["code"] == "invalid_json"


async def test_a_gzip_bomb_stops_at_the_body_limit(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, max_body_mb=1)
    body = b'{"messages":[{"role":"user","content":"' + b"a" * (8 * 2**20) + b'"}]}'
    status, error, _ = await _post_raw(stack, "/chat/completions", gzip.compress(body, 9),
                                       {"Content-Encoding": "gzip"})  # ~8 KB on the wire
    assert status == 413
    assert error["error"]["code"] == "body_too_large"  # type: ignore[index]
    assert stack.mtp.received == [] and stack.plain.received == []
