"""The ext_proc messages the picker sends, built from plain values; and what it reads from
Envoy's. Pure: protobuf objects in and out, no I/O.

The Gateway API Inference Extension's endpoint-picker protocol: the chosen instances, primary
first, go to Envoy as `ip:port[,ip:port...]` in the request header
`x-gateway-destination-endpoint` and, with the same value, in the dynamic metadata namespace
`envoy.lb` under the same key; Envoy tells which one served in the response's metadata
(`x-gateway-destination-endpoint-served`). No instance to send to: an immediate 503.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

DESTINATION: Final = "x-gateway-destination-endpoint"
SERVED: Final = "x-gateway-destination-endpoint-served"
LB_NAMESPACE: Final = "envoy.lb"
FILTER: Final = "envoy.filters.http.ext_proc"  # whose attributes Envoy sends
UPSTREAM_ADDRESS: Final = "upstream.address"  # deploy/envoy's `response_attributes`
CODE_DETAILS: Final = "response.code_details"  # `via_upstream` when an instance answered


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


def envoy_answered(request: ext_proc.ProcessingRequest) -> bool:
    """Whether the answer is Envoy's own (no instance answered: refused, reset, unreachable),
    as its `response.code_details` attribute says; False when the attribute is not sent."""
    attributes = request.attributes.get(FILTER)
    if attributes is None or CODE_DETAILS not in attributes.fields:
        return False
    return str(attributes.fields[CODE_DETAILS].string_value) != "via_upstream"


def _mutation(set_headers: Mapping[str, str], remove: Iterable[str] = ()) -> ext_proc.HeaderMutation:
    return ext_proc.HeaderMutation(
        set_headers=[base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)
            for k, v in set_headers.items()],
        remove_headers=list(remove))


def picked(endpoints: Iterable[str], set_headers: Mapping[str, str],
           remove: Iterable[str]) -> ext_proc.ProcessingResponse:
    """The answer to the request headers: where to send it (header and metadata alike)."""
    destination = ",".join(endpoints)
    metadata = struct_pb2.Struct()
    metadata.update({LB_NAMESPACE: {DESTINATION: destination}})
    mutation = _mutation({DESTINATION: destination, **set_headers}, remove)
    return ext_proc.ProcessingResponse(
        request_headers=ext_proc.HeadersResponse(
            response=ext_proc.CommonResponse(header_mutation=mutation, clear_route_cache=True)),
        dynamic_metadata=metadata)


def request_body(body: bytes, end_of_stream: bool) -> ext_proc.ProcessingResponse:
    return ext_proc.ProcessingResponse(request_body=_streamed(body, end_of_stream))


def response_headers(set_headers: Mapping[str, str]) -> ext_proc.ProcessingResponse:
    return ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse(
        response=ext_proc.CommonResponse(header_mutation=_mutation(set_headers))))


def response_body(body: bytes, end_of_stream: bool) -> ext_proc.ProcessingResponse:
    return ext_proc.ProcessingResponse(response_body=_streamed(body, end_of_stream))


def _streamed(body: bytes, end_of_stream: bool) -> ext_proc.BodyResponse:
    return ext_proc.BodyResponse(response=ext_proc.CommonResponse(
        body_mutation=ext_proc.BodyMutation(streamed_response=ext_proc.StreamedBodyResponse(
            body=body, end_of_stream=end_of_stream))))


def trailers(request: bool) -> ext_proc.ProcessingResponse:
    if request:
        return ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())
    return ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse())


def immediate(status: int, body: bytes, set_headers: Mapping[str, str]) -> ext_proc.ProcessingResponse:
    """Answer the client now, without an upstream (a bad request, no instance)."""
    return ext_proc.ProcessingResponse(immediate_response=ext_proc.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        headers=_mutation(set_headers), body=body, details=f"specroute_{status}"))
