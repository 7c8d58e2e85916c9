"""bench.epp_floor's answers to the pick stream's messages, and bench.epp's target lines."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from bench import epp
from bench.epp_floor import Floor, PickStream
from bench.proxy_overhead import Sample
from router.epp import messages
from router.epp.exchange import Exchanges
from router.epp.pick import WATCHED, Pick
from tests.router.conftest import ServerFactory
from tests.router.epp.test_parity import Stream, headers_message, sim_app

ENDPOINTS = ["127.0.0.1:8001", "127.0.0.1:8002"]


def _headers(end: bool = False) -> ext_proc.ProcessingRequest:
    message = ext_proc.ProcessingRequest()
    message.request_headers.end_of_stream = end
    return message


def _body(end: bool) -> ext_proc.ProcessingRequest:
    message = ext_proc.ProcessingRequest()
    message.request_body.body = b"{}"
    message.request_body.end_of_stream = end
    return message


def _trailers() -> ext_proc.ProcessingRequest:
    message = ext_proc.ProcessingRequest()
    message.request_trailers.SetInParent()
    return message


def _destination(answer: ext_proc.ProcessingResponse) -> str:
    headers = answer.request_headers.response.header_mutation.set_headers
    named = {h.header.key: h.header.raw_value.decode() for h in headers}
    lb = answer.dynamic_metadata.fields[messages.LB_NAMESPACE].struct_value
    assert lb.fields[messages.DESTINATION].string_value == named[messages.DESTINATION]
    return str(named[messages.DESTINATION])


def test_the_headers_answer_waits_for_the_body_then_each_chunk_goes_on() -> None:
    stream = PickStream(itertools.cycle(ENDPOINTS))
    assert stream.on(_headers()) == []
    assert stream.on(_body(end=False)) == []
    picked, *chunks = stream.on(_body(end=True))
    assert _destination(picked) == ENDPOINTS[0]
    assert chunks == [messages.REQUEST_BODY_CONTINUE] * 2
    ours = picked.dynamic_metadata.fields[messages.OURS_NAMESPACE].struct_value
    assert ours.fields["answer"].string_value == WATCHED  # the route skips specroute.edit


def test_streams_name_the_endpoints_in_turn() -> None:
    endpoints = itertools.cycle(ENDPOINTS)
    named = [_destination(PickStream(endpoints).on(_body(end=True))[0]) for _ in range(3)]
    assert named == [ENDPOINTS[0], ENDPOINTS[1], ENDPOINTS[0]]


def test_a_body_ending_on_trailers_and_a_request_without_body() -> None:
    stream = PickStream(itertools.cycle(ENDPOINTS))
    stream.on(_headers())
    stream.on(_body(end=False))
    picked, chunk, trailers = stream.on(_trailers())
    assert _destination(picked) == ENDPOINTS[0]
    assert chunk == messages.REQUEST_BODY_CONTINUE
    assert trailers == messages.trailers(request=True)
    assert [_destination(a) for a in PickStream(itertools.cycle(ENDPOINTS)).on(
        _headers(end=True))] == [ENDPOINTS[0]]


def _shape(answer: ext_proc.ProcessingResponse) -> dict[str, Any]:
    """What an answer to the headers carries, its values left out where they are a decision's:
    the header mutation, each metadata namespace's keys (the receipt's, nested)."""
    mutation = answer.request_headers.response.header_mutation
    namespaces = answer.dynamic_metadata.fields

    def keys(struct: Any) -> dict[str, Any]:
        return {key: keys(value.struct_value) if value.HasField("struct_value") else None
                for key, value in struct.fields.items()}

    return {"set": sorted(h.header.key for h in mutation.set_headers),
            "remove": sorted(mutation.remove_headers),
            "metadata": {name: keys(value.struct_value) for name, value in namespaces.items()}}


async def test_the_answer_shaped_floor_answers_as_specroutes_picker_does(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    # --answer specroute: Envoy gets the same headers' answer as from specroute's picker (its
    # values a typical decision's), so that the two differ by the decision alone
    app, _ = await sim_app(aiohttp_server, tmp_path)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    client = {":method": "POST", ":path": "/v1/chat/completions",
              "content-type": "application/json", "content-length": str(len(body)),
              "accept-encoding": "gzip", "x-specroute-conversation": "c-1", "x-trace": "t"}
    messages_in = [headers_message(client, False),
                   ext_proc.ProcessingRequest(request_body=ext_proc.HttpBody(
                       body=body, end_of_stream=True))]
    pick = Pick(app, Exchanges())
    real = [answer for message in messages_in for answer in await pick.on(message)]
    floor = PickStream(itertools.cycle(ENDPOINTS), full=True)
    shaped = [answer for message in messages_in for answer in floor.on(message)]
    assert _shape(shaped[0]) == _shape(real[0])
    assert "content-length" in _shape(real[0])["remove"]  # the shape compared is not empty
    assert shaped[1:] == real[1:] == [messages.REQUEST_BODY_CONTINUE]
    assert _shape(PickStream(itertools.cycle(ENDPOINTS)).on(messages_in[1])[0]) != _shape(real[0])
    assert pick.exchange is not None
    await pick.exchange.finish()


def _tally(ms: float, lag_ms: float = 0.0, requests: int = 0) -> epp.Tally:
    return epp.Tally(samples=[Sample(ms, ms, lag_ms, None)] * 3, requests=requests, seconds=1.0)


def test_the_target_lines_say_met_or_missed() -> None:
    tallies = {(epp.DIRECT, "1k"): _tally(1.0, requests=5000),
               (epp.PICKER, "1k"): _tally(3.2, requests=800),
               (epp.FLOOR, "1k"): _tally(3.0, requests=1200)}
    added, share = epp.target_1k(tallies, 32)
    assert added.endswith(": met") and "+2.20 ms against +2.00" in added
    assert share.endswith(": missed") and "(67%)" in share
    tallies = {(epp.DIRECT, "sse"): _tally(50.0, 0.10),
               (epp.PICKER, "sse"): _tally(52.0, 0.15),
               (epp.FLOOR, "sse"): _tally(52.0, 0.14)}
    assert epp.target_sse(tallies)[0].endswith("+50 us against +40 (+10): met")


def test_memory_is_bounded_when_the_last_third_of_the_rounds_levels_off() -> None:
    # the stores fill in the first rounds, then the RSS stays: bounded, though +15% overall
    filling = [250.0, 288.0, 310.0, 319.0, 327.0, 330.0, 331.0]
    line = epp.bounded(filling)
    assert "+14.9% from the first round to the last" in line and line.endswith(": met")
    assert "rounds 5-6" in line
    assert epp.bounded([250.0, 288.0, 310.0, 319.0, 331.0]).endswith(": missed")  # still rising
    assert "not judged" in epp.bounded([250.0, 288.0, 290.0])
    floor = epp.bounded([55.0, 92.7, 92.6, 95.3, 100.9, 111.3, 110.8], judged=False)
    assert floor == "+19.5% from the first round to the last, +9.8% over rounds 5-6"


def test_the_220k_targets_count_failures_and_stand_beside_gie() -> None:
    args = epp.parse_args(["--clients", "20", "1"])
    assert args.sizes == ["1k", "42k", "220k", "sse"] and args.clients == [1, 20]
    names = (epp.DIRECT, epp.PICKER, epp.FLOOR)
    tallies = {(name, "220k"): epp.Tally() for name in names}
    sweep = {(epp.DIRECT, "220k", 20): _tally(20.0, requests=150),
             (epp.PICKER, "220k", 20): _tally(40.0, requests=120),
             (epp.FLOOR, "220k", 20): _tally(35.0, requests=130)}
    sweep |= {(name, "220k", 1): _tally(1.0) for name in names}
    sweep[(epp.FLOOR, "220k", 20)].failed, sweep[(epp.FLOOR, "220k", 20)].error = 2, "reset"
    ttft, failed, floor_error, gie, here = epp.target_220k(tallies, sweep, args, names)
    assert ttft.endswith("+20.00 ms against +15.00 (1.33x): missed")
    assert "do-nothing picker 2" in failed and failed.endswith(": met")  # the picker's none
    assert floor_error.endswith("first failure: reset")
    assert "ANOTHER MACHINE" in gie and "TTFT 158 ms at 20 clients" in gie
    assert "Envoy + picker 40.0 ms, 120 req/s" in here
    assert epp.failed_requests(tallies, sweep, ["220k"], args, names) == [
        "failed requests, Envoy + do-nothing picker: 220k 2; the first: reset"]


async def test_the_floor_ends_its_streams_where_the_picker_ends_its_own() -> None:
    floor = Floor(ENDPOINTS)
    pick = Stream([_headers(), _body(end=False), _body(end=True)])
    answer = ext_proc.ProcessingRequest()
    answer.response_body.end_of_stream = True
    watch = Stream([_headers(), answer, _trailers()])
    watch.steps[0].observability_mode = True
    for stream in (pick, watch):
        await floor.Process(stream.messages(), stream)
    assert (pick.read_past, watch.read_past) == (0, 0)
    assert len(pick.written) == 3 and watch.written == []
    assert len(watch.steps) == 1  # ended at the answer's end, not read on
