"""The ext_proc messages the picker sends, built from plain values; and what it reads from
Envoy's. Pure: protobuf objects in and out, no I/O.

The Gateway API Inference Extension's endpoint-picker protocol: the chosen instances, primary
first, go to Envoy as `ip:port[,ip:port...]` in the request header
`x-gateway-destination-endpoint` and, with the same value, in the dynamic metadata namespace
`envoy.lb` under the same key; Envoy tells which one served in the response's metadata
(`x-gateway-destination-endpoint-served`). No instance to send to: an immediate 503. A gateway
may name the only endpoints a request may go to (the subset hint: a list of `ip:port` under
`x-gateway-destination-endpoint-subset` in the request's metadata `envoy.lb.subset_hint`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from backends.upstream import engine_headers, withheld

DESTINATION: Final = "x-gateway-destination-endpoint"
SERVED: Final = "x-gateway-destination-endpoint-served"
SUBSET: Final = "x-gateway-destination-endpoint-subset"
SUBSET_NAMESPACE: Final = "envoy.lb.subset_hint"
LB_NAMESPACE: Final = "envoy.lb"
OURS_NAMESPACE: Final = "specroute"  # the exchange's id, how its answer goes, its headers
# The answer's x-specroute-* headers (Envoy's response_headers_to_add) and the decision's
# receipt (its access log): apart from OURS_NAMESPACE, which Envoy forwards on every message of
# the answer's streams, so that neither is sent back to the picker.
HEADERS_NAMESPACE: Final = "specroute.headers"
RECEIPT_NAMESPACE: Final = "specroute.receipt"
FILTER: Final = "envoy.filters.http.ext_proc"  # whose attributes Envoy sends
UPSTREAM_ADDRESS: Final = "upstream.address"  # deploy/envoy's `response_attributes`
CODE_DETAILS: Final = "response.code_details"  # `via_upstream` when an instance answered


def ends_its_side(request: ext_proc.ProcessingRequest) -> bool:
    """Whether Envoy's message is the last of the request's, or of the answer's: headers or a
    body chunk with end_of_stream, or trailers."""
    kind = request.WhichOneof("request")
    if kind is None or kind.endswith("_trailers"):
        return kind is not None
    return bool(getattr(request, kind).end_of_stream)


def for_engine(client_headers: Iterable[str], api_key: str, *, decoded: bool
               ) -> tuple[list[str], dict[str, str]]:
    """The header mutation that gives the engine the proxy's headers (backends/upstream): the
    client's headers it withholds removed (Envoy frames the request itself: its pseudo-headers
    stay), what it sets set. A body sent on as the client encoded it keeps its
    Content-Encoding."""
    remove = [name for name in client_headers if not name.startswith(":") and withheld(name)
              and (decoded or name != "content-encoding")]
    return remove, {k.lower(): v for k, v in engine_headers(api_key).items()}


def header_map(headers: ext_proc.HttpHeaders) -> dict[str, str]:
    """Envoy's headers as lower-case names to values (Envoy sends values as `raw_value`)."""
    out: dict[str, str] = {}
    for header in headers.headers.headers:
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        out[header.key.lower()] = value
    return out


def served_endpoint(request: ext_proc.ProcessingRequest) -> str:
    """The `ip:port` that served the request, "" when no instance did (Envoy answered itself):
    the `upstream.address` attribute (both configs), else the protocol's `-served` metadata."""
    attributes = request.attributes.get(FILTER)
    if attributes is not None and UPSTREAM_ADDRESS in attributes.fields:
        return str(attributes.fields[UPSTREAM_ADDRESS].string_value)
    namespace = request.metadata_context.filter_metadata.get(LB_NAMESPACE)
    if namespace is None or SERVED not in namespace.fields:
        return ""
    return str(namespace.fields[SERVED].string_value)


def endpoint_subset(request: ext_proc.ProcessingRequest) -> frozenset[str] | None:
    """The gateway's subset hint: the `ip:port`s the request may go to, None when it sent none
    (any instance). A list (the protocol's form) or one comma-separated string; an empty or
    unreadable hint allows nothing (the protocol: pick from it or answer 503)."""
    namespace = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET not in namespace.fields:
        return None
    value = namespace.fields[SUBSET]
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        items = [v.string_value for v in value.list_value.values]
    elif kind == "string_value":
        items = value.string_value.split(",")
    else:
        items = []
    return frozenset(item.strip() for item in items if item.strip())


def envoy_answered(request: ext_proc.ProcessingRequest) -> bool:
    """Whether the answer is Envoy's own (no instance answered: refused, reset, unreachable),
    as its `response.code_details` attribute says; False when the attribute is not sent."""
    attributes = request.attributes.get(FILTER)
    if attributes is None or CODE_DETAILS not in attributes.fields:
        return False
    return str(attributes.fields[CODE_DETAILS].string_value) != "via_upstream"


# Each answer is filled in place, field by field: a sub-message passed to a constructor is
# copied into its parent (upb), so nesting constructors copied a body answer three times and
# cost ~4x as much (~12 us against ~3 us each here; a header list ~60 against ~25 us).
_OVERWRITE: Final = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def _set(mutation: ext_proc.HeaderMutation, set_headers: Mapping[str, str],
         remove: Iterable[str] = ()) -> None:
    add = mutation.set_headers.add
    for key, value in set_headers.items():
        option = add(append_action=_OVERWRITE)
        option.header.key = key
        option.header.raw_value = value.encode()
    mutation.remove_headers.extend(remove)


def picked(endpoints: Iterable[str], set_headers: Mapping[str, str], remove: Iterable[str],
           ours: Mapping[str, str] | None = None, answer_headers: Mapping[str, str] | None = None,
           receipt: Mapping[str, Any] | None = None) -> ext_proc.ProcessingResponse:
    """The answer to the request headers: where to send it (header and metadata alike);
    `ours`, the exchange's own values, in the metadata namespace `specroute` (read by the
    answer's watcher and editor, and the route's match); the answer's `x-specroute-*` headers
    in `specroute.headers`; the decision's `receipt` (JSON-like values) in
    `specroute.receipt`, for Envoy's access log."""
    destination = ",".join(endpoints)
    answer = ext_proc.ProcessingResponse()
    namespaces = answer.dynamic_metadata.fields
    namespaces[LB_NAMESPACE].struct_value.fields[DESTINATION].string_value = destination
    for namespace, values in ((OURS_NAMESPACE, ours), (HEADERS_NAMESPACE, answer_headers)):
        if values:
            fields = namespaces[namespace].struct_value.fields
            for key, value in values.items():
                fields[key].string_value = value
    if receipt:
        namespaces[RECEIPT_NAMESPACE].struct_value.update(receipt)
    common = answer.request_headers.response
    common.clear_route_cache = True
    _set(common.header_mutation, {DESTINATION: destination, **set_headers}, remove)
    return answer


def ours(request: ext_proc.ProcessingRequest) -> dict[str, str]:
    """The exchange's own values the picker put in the metadata namespace `specroute`, as Envoy
    forwards them on each message of the answer's streams ({} when none: not a routed pick)."""
    namespace = request.metadata_context.filter_metadata.get(OURS_NAMESPACE)
    if namespace is None:
        return {}
    return {key: value.string_value for key, value in namespace.fields.items()}


def _request_body_continue() -> ext_proc.ProcessingResponse:
    answer = ext_proc.ProcessingResponse()
    answer.request_body.SetInParent()
    return answer


def _request_body_cleared() -> ext_proc.ProcessingResponse:
    answer = ext_proc.ProcessingResponse()
    answer.request_body.response.body_mutation.clear_body = True
    return answer


# STREAMED request body: a chunk answered with no mutation goes on as Envoy holds it; one
# cleared goes on as nothing (a rewritten body goes whole in its last chunk's place).
REQUEST_BODY_CONTINUE: Final = _request_body_continue()
REQUEST_BODY_CLEARED: Final = _request_body_cleared()


def request_body(body: bytes) -> ext_proc.ProcessingResponse:
    """A request body chunk's answer that sends `body` in its place (STREAMED)."""
    answer = ext_proc.ProcessingResponse()
    answer.request_body.response.body_mutation.body = body
    return answer


def request_body_streamed(body: bytes, end_of_stream: bool) -> ext_proc.ProcessingResponse:
    """FULL_DUPLEX_STREAMED (a gateway's own filter): the body Envoy sends on, all of it."""
    answer = ext_proc.ProcessingResponse()
    streamed = answer.request_body.response.body_mutation.streamed_response
    streamed.SetInParent()  # an empty last chunk is still a StreamedBodyResponse
    streamed.body = body
    streamed.end_of_stream = end_of_stream
    return answer


def response_headers(set_headers: Mapping[str, str]) -> ext_proc.ProcessingResponse:
    answer = ext_proc.ProcessingResponse()
    answer.response_headers.SetInParent()  # an empty answer still says which message it is
    _set(answer.response_headers.response.header_mutation, set_headers)
    return answer


def _continue_response_body() -> ext_proc.ProcessingResponse:
    answer = ext_proc.ProcessingResponse()
    answer.response_body.SetInParent()
    return answer


# STREAMED: a chunk answered with no mutation goes on as Envoy holds it. Built once and sent as
# is (grpc.aio serializes each write; the message is never changed).
RESPONSE_BODY_CONTINUE: Final = _continue_response_body()


def response_chunk(chunk: bytes, out: bytes) -> ext_proc.ProcessingResponse:
    """The answer to one chunk of the answer's body (STREAMED): go on as it is when `out`, what
    the client gets in its place, is the same bytes, else those bytes instead (none: cleared)."""
    if out == chunk:
        return RESPONSE_BODY_CONTINUE
    answer = ext_proc.ProcessingResponse()
    mutation = answer.response_body.response.body_mutation
    if out:
        mutation.body = out
    else:
        mutation.clear_body = True
    return answer


def trailers(request: bool) -> ext_proc.ProcessingResponse:
    if request:
        return ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())
    return ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse())


def immediate(status: int, body: bytes, set_headers: Mapping[str, str]) -> ext_proc.ProcessingResponse:
    """Answer the client now, without an upstream (a bad request, no instance)."""
    answer = ext_proc.ProcessingResponse()
    immediate = answer.immediate_response
    immediate.status.code = status
    _set(immediate.headers, set_headers)
    immediate.body = body
    immediate.details = f"specroute_{status}"
    return answer
