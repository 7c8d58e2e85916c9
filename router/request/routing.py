"""A request's routing plan: from its bytes and headers to the body, features, scores, decision
and rewrite it is forwarded with.

Pure: no I/O and no clock; the scorer, the backends' state and the random draw come in as
arguments. The handler calls `plan_request` before forwarding; the bytes sent upstream are
`router/request/upstream_body`'s, the record written after is `router/request/log_record`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from classifiers.features import Features, TokenCounter, extract
from classifiers.memos import AskMemo, ToolsMemo
from classifiers.request_view import InvalidRequest, RequestView, view_request
from classifiers.scorer import Scorer, score_safely
from classifiers.scores import Scores
from policies import (
    EMPTY_ARMS,
    ROUTE_WORDS,
    Applied,
    ArmsState,
    Ask,
    BackendState,
    Decision,
    Held,
    Policy,
    RequestContext,
    Routed,
    RouteModel,
    State,
    apply_rewrite,
    conversation_key,
    decide_route,
)
from router.request.errors import RequestError
from router.request.json_body import exact_loads, parse_json

ECHO_CAP: Final = 64  # characters of a bad header value quoted back in an error message


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    request_id: str
    endpoint: str
    body: dict[str, Any]
    view: RequestView
    features: Features
    scores: Scores | None
    scorer_name: str
    scorer_error: str
    decision: Decision
    order: tuple[str, ...]  # backends to try, in order
    conversation: str
    routed: Routed | None = None  # the pool and arm (None: planned without pools)
    rewrite: Applied | None = None  # the route's rewrite, applied to `body`

    @property
    def rewritten(self) -> bool:
        """Whether the body sent upstream differs from the client's (it is then re-encoded)."""
        return self.rewrite is not None and self.rewrite.changed

    def decision_record(self) -> dict[str, Any]:
        return self.routed.as_dict() if self.routed is not None else self.decision.as_dict()

    @property
    def pool(self) -> str:
        """The pool asked for (`x-specroute-pool`)."""
        return self.routed.pool if self.routed is not None else self.decision.profile

    def rewrite_header(self) -> str:
        """`x-specroute-rewrite`: the route's rewrite as applied, or `none`."""
        return self.rewrite.label if self.rewrite is not None else "none"


@dataclass(frozen=True, slots=True)
class Incoming:
    """One request as it arrived: its endpoint, its bytes and the headers routing reads."""

    endpoint: str
    raw: bytes
    request_id: str
    header_route: str | None = None  # x-specroute-route
    conversation_hint: str | None = None  # x-specroute-conversation


@dataclass(frozen=True, slots=True)
class RoutingInputs:
    """What a request is decided with, as it is at that moment.

    `draw` is a uniform random number for the arms' exploration and the Thompson draw (None:
    the route's best arm and the posterior median, no exploration); `held_for(key)` says where
    a conversation's prefix lives; `engine_of(backend)` says which engine a backend runs (a
    rewrite of thinking goes in that engine's own field).
    """

    policy: Policy
    model: RouteModel  # the machine prior with what the log taught, online updates included
    scorer: Scorer
    count_tokens: TokenCounter | None
    backends: list[BackendState]
    draw: float | None
    held_for: Callable[[str], Held | None]
    arms: ArmsState = EMPTY_ARMS
    engine_of: Callable[[str], str] = lambda name: "openai"
    tools_memo: ToolsMemo | None = None  # the app's memo of tool-list facts (agents resend them)
    ask_memo: AskMemo | None = None  # the app's memo of the asks' text facts (agents resend them)


def plan_request(incoming: Incoming, inputs: RoutingInputs) -> RoutedRequest:
    """Parse, classify, decide and apply the route's rewrite; raises `RequestError` (4xx) on
    bad input."""
    body = parse_json(incoming.raw)
    try:
        view = view_request(incoming.endpoint, body)
    except InvalidRequest as exc:
        raise RequestError(400, str(exc), param=exc.param, code="invalid_request") from exc
    route = _header_route(incoming.header_route, inputs.backends)
    features = extract(view, inputs.count_tokens, inputs.tools_memo, inputs.ask_memo)
    scored = score_safely(inputs.scorer, view, features)
    context = RequestContext(header_route=route or None, model=view.model)
    conversation = conversation_key(view, incoming.conversation_hint)
    ask = Ask(features, scored.scores, context, incoming.endpoint,
              held=inputs.held_for(conversation), draw=inputs.draw)
    routed = decide_route(ask, State(inputs.policy, inputs.model, inputs.backends, inputs.arms))
    rewrite = None
    if routed.rewrite is not None:
        first = routed.decision.backend or (routed.order[0] if routed.order else "")
        # Applied to the body as the standard parser reads it (every number as the client wrote
        # it): a rewritten body is re-encoded for the backend from this.
        rewrite = apply_rewrite(routed.rewrite, exact_loads(incoming.raw), endpoint=incoming.endpoint,
                                engine=inputs.engine_of(first))
    return RoutedRequest(
        request_id=incoming.request_id, endpoint=incoming.endpoint,
        body=rewrite.body if rewrite is not None else body, view=view, features=features,
        scores=scored.scores, scorer_name=inputs.scorer.name, scorer_error=scored.error,
        decision=routed.decision, order=routed.order, conversation=conversation,
        routed=routed, rewrite=rewrite,
    )


def _header_route(header: str | None, backends: list[BackendState]) -> str:
    """The `x-specroute-route` value: mtp, plain, auto or a named pool (any case); else a 400."""
    route = (header or "").strip()
    if route.lower() in ROUTE_WORDS:
        return route.lower()
    named = {pool.lower(): pool for b in backends for pool in b.pools}
    if not route or route.lower() in named:
        return named.get(route.lower(), "")
    allowed = ", ".join([*ROUTE_WORDS, *sorted(named.values())])
    raise RequestError(
        400, f"x-specroute-route must be one of {allowed}; got {_echo(header or '')}",
        param="x-specroute-route", code="invalid_route_header",
    )


def _echo(value: str) -> str:
    """A client-supplied value quoted in an error message, cut to `ECHO_CAP` characters."""
    if len(value) <= ECHO_CAP:
        return repr(value)
    return f"{value[:ECHO_CAP]!r}... ({len(value)} characters)"
