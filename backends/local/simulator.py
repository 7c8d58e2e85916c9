"""A simulated OpenAI-compatible engine: a real aiohttp server for tests, demos and benchmarks.

It answers chat completions, completions, Anthropic messages, responses, models and embeddings,
as JSON or SSE. The reply depends on the request, never on the instance (like real lossless
speculation): an ask to edit quoted code or text re-emits the quote with a small change,
anything else is deterministic words (`simreply`). It is paced by one of three decoders:

- plain: every token costs `t_plain`;
- MTP-1 (profile `mtp`, the depth-1 cost model of ARCHITECTURE.md): a cycle is skipped by the
  margin gate with probability `gate_skip` (one token, `t_plain + t_draft`) or verified
  (`t_verify + t_draft`, `1 + acceptance` tokens). Acceptance is per workload class, which
  `class_of(body)` decides;
- n-gram prompt lookup (`speculation="ngram"`): when the reply's last `ngram_match` tokens
  occur in the prompt, the prompt's next tokens (up to `depth`) are the draft, accepted while
  they go on matching the reply; a cycle of k drafted tokens is one verify of k + 1 rows
  (`CostModel.verify_ms`: a plain step plus `row_ms` per row beyond the first) and commits the
  accepted ones plus one; no draft model, so no draft cost. Where nothing matches (free text)
  it decodes at plain pace plus the lookup's small overhead (`lookup_share` of a plain step).
  Acceptance thus follows how much of the answer is in the prompt.

An instance serves one request at a time (`serial`, as ds4) or each on its own at full pace, or,
with `slots` > 1, batches continuously as llama-server, vLLM and SGLang do (`simbatch`): up to
`slots` requests decode at once, the rest wait first come first served, and `/metrics` counts
them as llama-server's gauges do (processing, deferred); `/props` reports `total_slots`. At a
batch of b, a step's plain part costs `1 + batch_cost * (b - 1)` times its cost alone and
speculation's extra part (the draft, the verify's rows past the first) `1 + verify_batch_cost *
(b - 1)` times (`CostModel.at_batch`): the batch's rows fill the machine's compute, and
verifying drafts stops being nearly free, so that speculation's gain fades as the batch grows
and goes below 1 past some batch (the earlier, the less a class's drafts are accepted). Two
presets: `gpu-batch`, nearly flat (`batch_cost` 0.04: a GPU's decode is memory-bound at small
batches), and `cpu-batch`, near-linear (0.88: a CPU is compute-bound already at one request).

It reports llama.cpp-style `timings` (`draft_n`, `draft_n_accepted`; the n-gram instance only
when it drafted, as llama.cpp) and OpenAI `usage`. A batching instance's `predicted_ms` is the
time its steps really took in the batch, as llama.cpp's.

Scripted faults let tests exercise failover: refuse, fail with a status before any byte,
die after N chunks, delay the first byte, hang.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from aiohttp import web

from backends.local.simbatch import Batcher, Pacer
from backends.local.simreply import Lookup, accepted, edit_of, prompt_text, tokenize

WORDS = ["the", "of", "and", "to", "in", "is", "for", "that", "on", "with", "as", "by", "this", "are", "be", "from", "at", "it", "an", "or", "which", "can", "model", "token", "decode", "draft", "verify", "cycle", "cache", "speculative", "request", "route", "backend", "plain"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-step costs in milliseconds; the defaults are a GB10 running ds4 (ARCHITECTURE.md)."""

    t_plain_ms: float = 68.0
    t_verify_ms: float = 108.0
    t_draft_ms: float = 4.0
    gate_skip: float = 0.44
    # A verify's cost per row beyond the first (0: the 2-row verify's own, t_verify - t_plain),
    # and the n-gram lookup's overhead per step, as a share of a plain step: llama.cpp's
    # ngram-simple decoded a short story at 66.5 ms/token against plain's 64.9 on 2 cores.
    t_row_ms: float = 0.0
    lookup_share: float = 0.025
    # At a batch of b requests decoding at once (`SimState.slots` > 1): a step's plain part
    # costs 1 + batch_cost * (b - 1) times its cost alone, speculation's extra part
    # 1 + verify_batch_cost * (b - 1) times (`at_batch`)
    batch_cost: float = 0.0
    verify_batch_cost: float = 0.0

    @property
    def row_ms(self) -> float:
        return self.t_row_ms or max(0.0, self.t_verify_ms - self.t_plain_ms)

    def verify_ms(self, rows: int) -> float:
        """One verify of `rows` rows (the draft plus the token after it): the cost grows with
        the rows, linearly at `row_ms` each past the first (a 2-row verify is `t_verify`
        unless `t_row_ms` says otherwise)."""
        return self.t_plain_ms + max(0, rows - 1) * self.row_ms

    def at_batch(self, base: float, extra: float, batch: float) -> float:
        """What a step (or a whole decode) costing `base` of plain work and `extra` of
        speculation's extra work alone costs at `batch` requests decoding at once (any unit)."""
        over = max(batch, 1.0) - 1.0
        return base * (1.0 + self.batch_cost * over) + extra * (1.0 + self.verify_batch_cost * over)


# Machines whose step costs differ from the GB10's, so that a learner is tried on machines its
# prior does not describe (acceptance is the workload's, the same on all of them):
# - `gb10`: a GB10 running ds4 (the gb10-ds4 prior's own machine);
# - `gb10-like`: the GB10's ratios at 2.7x its pace (another box, another model): the same
#   classes win and lose, at a plain step the prior does not expect;
# - `slow-verify`: a 2-token verify costs almost two plain steps and the draft is dear:
#   speculation loses on every class (26-35%);
# - `cheap-verify`: a verify barely dearer than a plain step: speculation wins on every class;
# - `cpu-pair`: like the README's llama.cpp pair on 2 CPU cores (no margin gate, a verify ~2.8
#   plain steps with the draft model's time in it), at the GB10's pace: speculation loses on
#   every class. Without a draft model a verify costs a quarter of a plain step per extra row
#   (`t_row_ms`: ngram-simple returned a renamed module at 20.6 ms/token against plain's 68.1);
# - `gpu-batch`: a GPU that batches (slots > 1): verifying alone is cheap (mtp 1.14-1.30x plain),
#   a batch of 8 costs 1.28x a step alone, the extra rows 4.5x theirs: speculation's gain is gone
#   at about 3 requests at once on chat, 6 on agent work;
# - `cpu-batch`: a CPU that batches: a batch of 4 costs 3.6x a step alone (issue 50's llama-server
#   on 2 threads), the extra rows 7x theirs: mtp's 1.15-1.31x alone fades to 1.02-1.16x at 4.
MACHINES: Final[Mapping[str, CostModel]] = {
    "gb10": CostModel(),
    "gb10-like": CostModel(t_plain_ms=25.0, t_verify_ms=39.7, t_draft_ms=1.5, gate_skip=0.44),
    "slow-verify": CostModel(t_plain_ms=20.0, t_verify_ms=38.0, t_draft_ms=12.0, gate_skip=0.0),
    "cheap-verify": CostModel(t_plain_ms=40.0, t_verify_ms=48.0, t_draft_ms=2.0, gate_skip=0.44),
    "cpu-pair": CostModel(t_plain_ms=70.0, t_verify_ms=195.0, t_draft_ms=0.0, gate_skip=0.0,
                          t_row_ms=17.5),
    "gpu-batch": CostModel(t_plain_ms=25.0, t_verify_ms=30.0, t_draft_ms=1.5, gate_skip=0.44,
                           batch_cost=0.04, verify_batch_cost=0.5),
    "cpu-batch": CostModel(t_plain_ms=30.0, t_verify_ms=36.0, t_draft_ms=1.5, gate_skip=0.44,
                           batch_cost=0.88, verify_batch_cost=2.0),
}


@dataclass(frozen=True, slots=True)
class Fault:
    """One scripted misbehaviour, consumed by the next request."""

    kind: str  # "refuse" | "status" | "die_after" | "delay" | "hang"
    status: int = 500
    after_chunks: int = 2
    delay_s: float = 0.0


@dataclass
class SimState:
    profile: str  # "mtp" | "plain"
    # how it drafts: "" by its profile (mtp: MTP-1 with the margin gate), "ngram": prompt
    # lookup of up to `depth` tokens keyed by the reply's last `ngram_match` tokens
    speculation: str = ""
    depth: int = 16
    ngram_match: int = 4
    model: str = "sim-model"
    cost: CostModel = field(default_factory=CostModel)
    acceptance: Mapping[str, float] = field(default_factory=dict)  # class -> acceptance
    default_acceptance: float = 0.7
    reply_tokens: int = 24
    time_scale: float = 0.0  # 0: no sleeping (fast tests); 1: real cost-model pace
    class_of: Callable[[Mapping[str, Any]], str] = lambda body: "technical"
    # How it reports speculative stats: "timings" (llama.cpp, per response), "prometheus"
    # (global counters at /metrics only, like vLLM without its per-request flag), "meta_info"
    # (SGLang, per response when the request asks with return_meta_info).
    stats: str = "timings"
    drafted_total: int = 0
    accepted_total: int = 0
    faults: deque[Fault] = field(default_factory=deque)
    received: list[dict[str, Any]] = field(default_factory=list)
    cancelled: int = 0
    inflight: int = 0
    # ds4 serves one request at a time: with `serial`, requests wait their turn (before the
    # first byte, as in ds4's queue); and it speculates only greedy decoding: with
    # `greedy_only`, an mtp instance decodes a sampled request at plain pace.
    serial: bool = False
    greedy_only: bool = False
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    # requests decoded at once, batched continuously (`simbatch`; the cost model's curves); the
    # rest wait their turn. 1: not a batching instance, as above (`serial` or each on its own)
    slots: int = 1
    batcher: Batcher = field(default_factory=Batcher)
    busy_s: float = 0.0  # time spent serving (paced), for utilisation figures
    serving: int = 0  # requests past the queue (the rest of `inflight` wait their turn)
    # What /metrics says of the queue, as llama-server's gauges: "true"; or a lie for fault
    # tests: "negative", "garbage" (not a number), "slow" (answers after 5 s), "none" (absent)
    gauges: str = "true"

    def __post_init__(self) -> None:
        if not isinstance(self.slots, int) or self.slots < 1:
            raise ValueError(f"slots must be a positive integer, not {self.slots!r}")


SIM_STATE = web.AppKey("sim_state", SimState)


def create_sim_app(state: SimState) -> web.Application:
    app = web.Application()
    app[SIM_STATE] = state
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/props", _props)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _generate)
    app.router.add_post("/v1/completions", _generate)
    app.router.add_post("/v1/messages", _generate)
    app.router.add_post("/v1/responses", _generate)
    app.router.add_post("/v1/embeddings", _embeddings)
    return app


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    text = (
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        f'vllm:spec_decode_num_draft_tokens_total{{model_name="{state.model}"}} {state.drafted_total}.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        f'vllm:spec_decode_num_accepted_tokens_total{{model_name="{state.model}"}} {state.accepted_total}.0\n'
    ) + await _gauges(state)
    return web.Response(text=text, content_type="text/plain")


async def _props(request: web.Request) -> web.Response:
    """llama-server's `/props`, the part that says how many requests it serves at once."""
    state = request.app[SIM_STATE]
    return web.json_response({"total_slots": state.slots, "model_alias": state.model})


async def _gauges(state: SimState) -> str:
    """llama-server's queue gauges (`--metrics`), or the lie the state asks for."""
    if state.gauges == "none":
        return ""
    if state.gauges == "slow":
        await asyncio.sleep(5.0)
    processing, deferred = state.serving, state.inflight - state.serving
    if state.gauges == "negative":
        processing, deferred = -3, -1
    value = "busy" if state.gauges == "garbage" else ""
    return (
        "# HELP llamacpp:requests_processing Number of requests processing.\n"
        "# TYPE llamacpp:requests_processing gauge\n"
        f"llamacpp:requests_processing {value or processing}\n"
        "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        f"llamacpp:requests_deferred {value or deferred}\n"
    )


async def _models(request: web.Request) -> web.Response:
    state = request.app[SIM_STATE]
    return web.json_response(
        {"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "sim"}]}
    )


async def _embeddings(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[SIM_STATE].received.append({"path": request.path, "body": body, "headers": dict(request.headers)})
    text = json.dumps(body.get("input"))
    digest = hashlib.sha256(text.encode()).digest()
    vector = [round(b / 255, 4) for b in digest[:8]]
    return web.json_response(
        {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": vector}],
         "model": request.app[SIM_STATE].model}
    )


async def _generate(request: web.Request) -> web.StreamResponse:
    state = request.app[SIM_STATE]
    body = await request.json()
    state.received.append({"path": request.path, "body": body, "headers": dict(request.headers)})
    fault = state.faults.popleft() if state.faults else None
    if fault is not None and fault.kind == "refuse":
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError  # the connection is gone; nothing to answer
    if fault is not None and fault.kind == "status":
        return web.json_response(
            {"error": {"message": "simulated failure", "type": "server_error"}}, status=fault.status
        )
    temperature = body.get("temperature")
    if temperature is not None and not isinstance(temperature, (int, float)):
        # as llama-server answers a wrongly typed field: a 500 that is the request's fault
        return web.json_response(
            {"error": {"code": 500, "type": "server_error",
                       "message": "[json.exception.type_error.302] type must be number"}},
            status=500,
        )
    if fault is not None and fault.kind in ("delay", "hang"):
        await asyncio.sleep(fault.delay_s if fault.kind == "delay" else 3600)
    state.inflight += 1
    try:
        if state.slots > 1:
            async with state.batcher.slot(state.slots):
                return await _serve(request, state, body, fault)
        if state.serial:
            async with state.turn:
                return await _serve(request, state, body, fault)
        return await _serve(request, state, body, fault)
    except asyncio.CancelledError:
        state.cancelled += 1
        raise
    finally:
        state.inflight -= 1


async def _serve(
    request: web.Request, state: SimState, body: dict[str, Any], fault: Fault | None
) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    began = loop.time()
    state.serving += 1
    try:
        plan = _plan(state, body)
        state.drafted_total += plan.draft_n
        state.accepted_total += plan.accepted
        pacer = Pacer(state.batcher, state.cost, state.time_scale) if state.slots > 1 else None
        if body.get("stream"):
            return await _stream(request, state, body, plan, fault, pacer)
        if pacer is None:
            await asyncio.sleep(plan.total_s * state.time_scale)
        else:
            await pacer.steps(plan.step_s, plan.extra_s)
            plan = replace(plan, step_s=tuple(pacer.spent_s))
        return web.json_response(_full_response(request.path, state, body, plan))
    finally:
        state.serving -= 1
        state.busy_s += loop.time() - began


@dataclass(frozen=True, slots=True)
class _Plan:
    tokens: tuple[str, ...]
    step_s: tuple[float, ...]  # seconds before each token
    draft_n: int
    accepted: int
    prompt_tokens: int = 8
    verifies: int | None = None  # verify cycles (None: one per drafted token, as MTP-1)
    # the part of each step that is speculation's extra work (the draft, the verify's rows
    # past the first), timed apart in a batch (`CostModel.at_batch`); (): none
    extra_s: tuple[float, ...] = ()

    @property
    def total_s(self) -> float:
        return sum(self.step_s)

    @property
    def verify_ct(self) -> int:
        return self.draft_n if self.verifies is None else self.verifies


def _plan(state: SimState, body: Mapping[str, Any]) -> _Plan:
    """The reply and its pacing under the cost model, deterministic in the request."""
    # The reply depends on what was asked, not on how it is delivered (like a real engine).
    asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "return_meta_info")}
    seed = hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).digest()
    rng = random.Random(seed)
    limit = body.get("max_tokens") or body.get("max_completion_tokens") or state.reply_tokens
    n = max(1, min(int(limit), state.reply_tokens))
    edit = edit_of(body)
    if edit is not None:
        tokens = tuple(tokenize(edit.reply())[:n])
        n = len(tokens)
    else:
        tokens = tuple(rng.choice(WORDS) + " " for _ in range(n))
    cost = state.cost
    prompt = prompt_tokens_of(body)
    sampled = float(body.get("temperature") or 0) > 0
    if state.speculation == "ngram":
        return _ngram_plan(state, body, tokens, prompt)
    if state.profile != "mtp" or (sampled and state.greedy_only):
        return _Plan(tokens, tuple([cost.t_plain_ms / 1000] * n), 0, 0, prompt)
    acceptance = state.acceptance.get(state.class_of(body), state.default_acceptance)
    steps: list[float] = []
    extra: list[float] = []
    draft_n = accepted_n = 0
    while len(steps) < n:
        if rng.random() < cost.gate_skip:
            steps.append((cost.t_plain_ms + cost.t_draft_ms) / 1000)
            extra.append(cost.t_draft_ms / 1000)
            continue
        draft_n += 1
        cycle = (cost.t_verify_ms + cost.t_draft_ms) / 1000
        over = cycle - cost.t_plain_ms / 1000
        if rng.random() < acceptance and len(steps) + 2 <= n:
            accepted_n += 1
            steps += [cycle, 0.0]  # two tokens from one verify
            extra += [over, 0.0]
        else:
            steps.append(cycle)
            extra.append(over)
    return _Plan(tokens, tuple(steps[:n]), draft_n, accepted_n, prompt, extra_s=tuple(extra[:n]))


def _ngram_plan(state: SimState, body: Mapping[str, Any], tokens: tuple[str, ...],
                prompt: int) -> _Plan:
    """Prompt lookup: each cycle drafts what follows the reply's last tokens in the prompt
    (nothing: a plain step), one verify of the draft's rows plus one commits the accepted
    tokens and one more. Every step pays the lookup's overhead."""
    cost, n = state.cost, len(tokens)
    lookup = Lookup(tokenize(prompt_text(body)), state.ngram_match)
    overhead = cost.t_plain_ms * cost.lookup_share
    steps: list[float] = []
    extra: list[float] = []
    draft_n = accepted_n = verifies = 0
    at = 0
    while at < n:
        draft = lookup.draft(tokens, at, min(state.depth, n - at - 1))
        if not draft:
            steps.append((cost.t_plain_ms + overhead) / 1000)
            extra.append(0.0)
            at += 1
            continue
        took = accepted(draft, tokens, at)
        verifies += 1
        draft_n += len(draft)
        accepted_n += took
        steps += [(cost.verify_ms(len(draft) + 1) + overhead) / 1000] + [0.0] * took
        extra += [len(draft) * cost.row_ms / 1000] + [0.0] * took
        at += took + 1
    return _Plan(tokens, tuple(steps[:n]), draft_n, accepted_n, prompt, verifies,
                 tuple(extra[:n]))


def decode_plan(state: SimState, body: Mapping[str, Any]) -> _Plan:
    """The reply and its pacing for `body` on this instance (what a request would get)."""
    return _plan(state, body)


def prompt_tokens_of(body: Mapping[str, Any]) -> int:
    """A stand-in token count of the prompt (about four characters a token)."""
    asked = body.get("messages") or body.get("prompt") or body.get("input") or ""
    return max(1, len(json.dumps(asked, ensure_ascii=False)) // 4)


def _timings(plan: _Plan, state: SimState) -> dict[str, Any]:
    # in the time it was paced at: a machine running at `time_scale` of the cost model's pace
    # reports what its clock saw (time_scale 0, no pacing: the cost model's own time)
    scale = state.time_scale if state.time_scale > 0 else 1.0
    predicted_ms = plan.total_s * 1000 * scale or 1e-3
    timings: dict[str, Any] = {
        "prompt_n": plan.prompt_tokens,
        "predicted_n": len(plan.tokens),
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_second": round(len(plan.tokens) / predicted_ms * 1000, 3),
    }
    if (state.profile == "mtp" and not state.speculation) or plan.draft_n:
        # llama.cpp reports them when drafting ran (an MTP-1 instance always tries)
        timings.update(draft_n=plan.draft_n, draft_n_accepted=plan.accepted)
    return timings


def _usage(plan: _Plan) -> dict[str, Any]:
    n, prompt = len(plan.tokens), plan.prompt_tokens
    return {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n,
            "prompt_tokens_details": {"cached_tokens": 0}}


def _full_response(path: str, state: SimState, body: Mapping[str, Any], plan: _Plan) -> dict[str, Any]:
    text = "".join(plan.tokens)
    if path.endswith("/messages"):
        return {"id": "msg_sim", "type": "message", "role": "assistant", "model": state.model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": len(plan.tokens)}}
    if path.endswith("/responses"):
        return {"id": "resp_sim", "object": "response", "model": state.model, "status": "completed",
                "output": [{"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": text}]}],
                "usage": {"input_tokens": plan.prompt_tokens, "output_tokens": len(plan.tokens)}}
    if path.endswith("/completions") and "chat" not in path:
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "length"}
        kind = "text_completion"
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "stop"}
        kind = "chat.completion"
    response = {"id": "cmpl-sim", "object": kind, "created": 0, "model": state.model,
                "choices": [choice], "usage": _usage(plan)}
    return _with_stats(response, state, body, plan)


def _with_stats(
    payload: dict[str, Any], state: SimState, body: Mapping[str, Any], plan: _Plan
) -> dict[str, Any]:
    """The final response or chunk, carrying stats the way the simulated engine reports them."""
    if state.stats == "timings":
        payload["timings"] = _timings(plan, state)
    elif state.stats == "meta_info" and body.get("return_meta_info") and payload.get("choices"):
        payload["choices"][0]["meta_info"] = {
            "spec_verify_ct": plan.verify_ct, "completion_tokens": len(plan.tokens),
            "prompt_tokens": plan.prompt_tokens, "cached_tokens": 0,
        }
    return payload


async def _stream(
    request: web.Request, state: SimState, body: Mapping[str, Any], plan: _Plan, fault: Fault | None,
    pacer: Pacer | None,
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(b": prefill\n\n")
    chat = request.path.endswith("/chat/completions")
    loop = asyncio.get_running_loop()
    due = loop.time()
    for index, (token, delay) in enumerate(zip(plan.tokens, plan.step_s)):
        if fault is not None and fault.kind == "die_after" and index >= fault.after_chunks:
            assert request.transport is not None
            request.transport.close()
            return response
        if pacer is not None:
            await pacer.step(delay, plan.extra_s[index] if plan.extra_s else 0.0)
        else:
            # Sleep to an absolute schedule so that timer overhead does not accumulate per token.
            due += delay * state.time_scale
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
        await response.write(_sse(_chunk(chat, state, token, None)))
    if pacer is not None:
        plan = replace(plan, step_s=tuple(pacer.spent_s))
    final = _with_stats(_chunk(chat, state, "", "stop"), state, body, plan)
    await response.write(_sse(final))
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage"):
        usage_chunk = _chunk(chat, state, "", None)
        usage_chunk["choices"] = []
        usage_chunk["usage"] = _usage(plan)
        await response.write(_sse(usage_chunk))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _chunk(chat: bool, state: SimState, token: str, finish: str | None) -> dict[str, Any]:
    if chat:
        delta = {"content": token} if token else {}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": token, "finish_reason": finish}
        kind = "text_completion"
    return {"id": "cmpl-sim", "object": kind, "created": 0, "model": state.model,
            "choices": [choice]}


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
