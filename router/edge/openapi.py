"""The OpenAPI description of the proxy's own endpoints, served at `GET /openapi.json`.

It describes what specroute itself checks and answers, not the engines' full APIs: a routed
request must be a JSON object with its API shape's required field (the rest is passed on as the
client wrote it), and every error the proxy produces has the OpenAI shape. A response from the
backend is relayed as it is, whatever its status (`x-specroute-backend` names who answered).
The fuzz suite runs schemathesis against a live proxy with this document.
"""

from __future__ import annotations

from typing import Any, Final

from policies import ROUTE_WORDS

ERROR: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_ROLE_MESSAGES: Final = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "object", "required": ["role"],
              "properties": {"role": {"type": "string", "minLength": 1}}},
}
# The field each API shape needs; everything else goes to the backend unchecked.
_SHAPES: Final[dict[str, tuple[str, str, dict[str, Any]]]] = {
    "/v1/chat/completions": ("chat", "messages", _ROLE_MESSAGES),
    "/v1/completions": ("completions", "prompt", {"anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"type": "string"}},
        {"type": "array", "minItems": 1, "items": {"type": "integer"}},  # token ids
    ]}),
    "/v1/messages": ("messages", "messages", _ROLE_MESSAGES),
    "/v1/responses": ("responses", "input", {"anyOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
    ]}),
}


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" for c in word)


_ROUTE_PATTERN: Final = (
    "^[ \\t]*(" + "|".join(_any_case(r) for r in ROUTE_WORDS) + ")?[ \\t]*$"
)


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


def _relayed(description: str) -> dict[str, Any]:
    any_object = {"schema": {"type": "object"}}
    return {
        "description": description,
        "content": {"application/json": any_object, "text/event-stream": {"schema": {"type": "string"}}},
    }


def _routed(endpoint: str, field: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": f"routed_{endpoint}",
            "summary": f"Classified and routed to the mtp or plain backend ({endpoint} shape)",
            "parameters": [
                # mtp, plain or auto, any case, blanks around; empty: as if absent
                {"name": "x-specroute-route", "in": "header", "required": False,
                 "schema": {"type": "string", "pattern": _ROUTE_PATTERN,
                            "description": f"one of {', '.join(ROUTE_WORDS)} or a pool the config "
                                           "names (any case); else a 400"}},
                {"name": "x-specroute-conversation", "in": "header", "required": False,
                 "schema": {"type": "string"}},
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {
                    "type": "object", "required": [field],
                    "properties": {field: schema},
                }}},
            },
            "responses": {
                "200": _relayed("The backend's answer (JSON, or SSE when streamed)"),
                "400": _error("Invalid JSON, not an object, missing field, bad route header"),
                "405": _error("Only POST"),
                "413": _error("Body over limits.max_body_mb"),
                "502": _error("No backend could serve the request"),
                "default": _relayed("Any other status is the backend's own answer, relayed"),
            },
        },
    }


def _get(operation_id: str, summary: str, responses: dict[str, Any]) -> dict[str, Any]:
    return {"get": {"operationId": operation_id, "summary": summary, "responses": responses}}


def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {
        path: _routed(endpoint, field, schema) for path, (endpoint, field, schema) in _SHAPES.items()
    }
    paths["/v1/models"] = _get("models", "The models of the healthy backends, merged", {
        "200": {"description": "OpenAI model list", "content": {"application/json": {"schema": {
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array"}}}}}},
        "502": _error("No backend answered"),
    })
    paths["/healthz"] = _get("healthz", "200 while the process is up", {
        "200": {"description": "up", "content": {"application/json": {"schema": {
            "type": "object", "required": ["status"]}}}},
    })
    readiness = {"description": "readiness and the backends", "content": {"application/json": {
        "schema": {"type": "object", "required": ["ready", "backends"],
                   "properties": {"ready": {"type": "boolean"}, "backends": {"type": "array"},
                                  "record_sinks": {"type": "object"}}}}}}
    paths["/readyz"] = _get("readyz", "200 when a backend is healthy, else 503",
                            {"200": readiness, "503": readiness})
    paths["/metrics"] = _get("metrics", "Prometheus metrics (loopback or admin token)", {
        "200": {"description": "exposition", "content": {"text/plain": {"schema": {"type": "string"}}}},
        "403": _error("Not loopback and no admin token"),
    })
    paths["/openapi.json"] = _get("openapi", "This document", {
        "200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {
            "type": "object"}}}},
    })
    return {
        "openapi": "3.1.0",
        "info": {"title": "specroute", "version": "1",
                 "description": "The proxy's own endpoints; other /v1/* paths are passed on."},
        "paths": paths,
    }
