"""At start: do both profiles serve the same model, and does each speculating instance really
draft?

Routing between a speculative and a plain instance only makes sense if they return the same
tokens: same model on both (compared by the ids of `GET /v1/models`). A mismatch refuses the
start. Then every backend answers two short greedy requests, one backend and one request at a
time (instances that share a machine must not share it while they are timed): a copy-heavy one
(rename a function in a short module quoted in the prompt, return the whole module) and a
free-form one (a short story). A prompt-lookup (n-gram) instance drafts only on the first, a
draft model or an MTP head on both, so the verdict is over both: a speculating instance (profile
mtp, whatever its type) that drafted on neither, or whose engine reports nothing, is a warning,
not a refusal; so is a plain instance that drafts. Drafts are read from the answer (llama.cpp
timings, vLLM metrics, SGLang meta_info) or from Prometheus counter deltas around it. Each answer
is kept with its wall time (`ProbeResult.timed`): the router takes them as the first
measurements of this machine's paces. `engine_slots` asks an instance how many requests it
serves at once (read whenever it becomes healthy: router/instances/supervision).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from backends.engines import ADAPTERS, VLLM_PER_REQUEST_FLAG, EngineAdapter
from backends.slots import listed_slots, props_slots
from backends.spec import BackendSpec
from backends.stats import (
    EMPTY,
    UpstreamReport,
    counter_delta,
    merge,
    parse_prometheus,
    read_report,
)

# The module the copy probe quotes (25 lines): most of a right answer is in the prompt.
PROBE_MODULE = '''\
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def total_value(items):
    """The value of everything in stock."""
    return sum(item.price * item.quantity for item in items)


def restock(items, name, amount):
    for item in items:
        if item.name == name:
            item.quantity += amount
            return item
    raise KeyError(name)


def cheapest(items):
    return min(items, key=lambda item: item.price)'''
# The change is to the module's last function, past the probe's 64 tokens: the answer timed is
# a copy, as most of a real edit's answer is. (A rename near the top made prompt lookup draft
# the old name and lose a third of its drafts on the lines timed: 38 of 65 accepted on the
# real ngram-simple instance, no faster than plain; now 50 of 50, 40 ms per token against
# plain's 49-67 on the same, noisy, machine.)
COPY_PROMPT = ("Rename the function `cheapest` to `cheapest_item` in this Python module and "
               "return the whole module, nothing else:"
               f"\n\n```python\n{PROBE_MODULE}\n```")
FREE_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


@dataclass(frozen=True, slots=True)
class Probe:
    """One timed probe request: its kind (the record's `probe_{backend}_{kind}`), the user turn,
    and a bound on the answer that keeps the start short on a slow CPU."""

    kind: str
    prompt: str
    max_tokens: int

    def body(self, model: str) -> dict[str, object]:
        """The request as the client side writes it (no engine tweaks)."""
        return {"model": model, "messages": [{"role": "user", "content": self.prompt}],
                "max_tokens": self.max_tokens, "temperature": 0, "stream": False}


PROBES: tuple[Probe, ...] = (Probe("copy", COPY_PROMPT, 64), Probe("free", FREE_PROMPT, 32))
PROBE_KINDS: Mapping[str, Probe] = {probe.kind: probe for probe in PROBES}


class CapabilityError(RuntimeError):
    """The configured backends cannot be routed between (the message says why)."""


@dataclass(frozen=True, slots=True)
class TimedProbe:
    """One probe request's answer as the backend reported it, and its wall time."""

    body: Mapping[str, object]  # the request as the client side wrote it (no engine tweaks)
    report: UpstreamReport
    elapsed_ms: float


@dataclass(frozen=True, slots=True)
class ProbeResult:
    models: Mapping[str, tuple[str, ...]]  # backend -> the model ids it serves
    common_model: str  # the id sent in the probe requests ("" if none is shared)
    # backend -> tokens drafted over its probes (None: none answered, or nothing was reported)
    drafted: Mapping[str, int | None]
    errors: tuple[str, ...]  # reasons to refuse the start
    general_warnings: tuple[str, ...]  # about the backends together
    # backend -> probe kind -> its answer, in probe order (answers that failed are not here)
    timed: Mapping[str, Mapping[str, TimedProbe]] = field(default_factory=dict)
    backend_warnings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every warning: each backend's, then those about them together."""
        return tuple(w for ws in self.backend_warnings.values() for w in ws) + \
            self.general_warnings

    def drafts(self, name: str) -> bool | None:
        """Did `name` draft on its probes (None: not probed, or no drafts reported)?"""
        drafted = self.drafted.get(name)
        return None if drafted is None else drafted > 0

    def raise_for_errors(self) -> None:
        if self.errors:
            raise CapabilityError("; ".join(self.errors))


async def capability_probe(
    specs: Sequence[BackendSpec],
    session: aiohttp.ClientSession,
    *,
    adapters: Mapping[str, EngineAdapter] = ADAPTERS,
    timeout_s: float = 120.0,
    probes: Sequence[Probe] = PROBES,
) -> ProbeResult:
    """Compare the models of every backend, then send each one the probes, in turn."""
    listed = await asyncio.gather(*(_model_ids(s, adapters, session, timeout_s) for s in specs))
    models = {spec.name: ids for spec, (ids, _) in zip(specs, listed)}
    warned = {spec.name: [why] if why else [] for spec, (_, why) in zip(specs, listed)}
    errors = _model_mismatch(specs, models)
    common = common_model(models)
    drafted: dict[str, int | None] = {}
    timed: dict[str, dict[str, TimedProbe]] = {}
    for spec in specs if not errors and common else ():
        if not models[spec.name]:
            continue
        answers, failures = await _probe_backend(spec, adapters[spec.engine], session, common,
                                                 timeout_s, probes)
        drafted[spec.name] = total_drafted(answers.values())
        warned[spec.name] += failures + _speculation_warnings(spec, answers)
        if answers:
            timed[spec.name] = answers
    general = []
    if {spec.profile for spec in specs} != {"mtp", "plain"}:
        general.append("only one profile is configured: every request goes to it")
    return ProbeResult(models, common, drafted, tuple(errors), tuple(general), timed,
                       {name: tuple(ws) for name, ws in warned.items() if ws})


def total_drafted(answers: Iterable[TimedProbe]) -> int | None:
    """Tokens drafted over `answers` (None: none of them reports drafts)."""
    counts = [a.report.draft_n for a in answers if a.report.draft_n is not None]
    return sum(counts) if counts else None


def probe_body(model: str, kind: str = "free") -> dict[str, object]:
    """The probe request of `kind` (`PROBES`): greedy and bounded, the same for every backend."""
    return PROBE_KINDS[kind].body(model)


async def _model_ids(
    spec: BackendSpec, adapters: Mapping[str, EngineAdapter],
    session: aiohttp.ClientSession, timeout_s: float,
) -> tuple[tuple[str, ...], str]:
    url = spec.base_url + adapters[spec.engine].models_path
    try:
        async with session.get(url, headers=_auth(spec),
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            payload = await response.json(content_type=None)
            response.raise_for_status()
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return (), f"backend {spec.name!r}: cannot list models at {url}: {error}"
    data = payload.get("data") if isinstance(payload, Mapping) else None
    ids = tuple(sorted(str(m["id"]) for m in data or [] if isinstance(m, Mapping) and "id" in m))
    return ids, "" if ids else f"backend {spec.name!r}: {url} lists no models"


def _model_mismatch(specs: Sequence[BackendSpec], models: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Every reachable backend must share a model id with every reachable one of the other profile."""
    errors = []
    for spec in specs:
        for other in specs:
            if spec.profile == "mtp" and other.profile == "plain" and models[spec.name] \
                    and models[other.name] and not set(models[spec.name]) & set(models[other.name]):
                errors.append(
                    f"backends {spec.name!r} (mtp) and {other.name!r} (plain) serve different "
                    f"models: {list(models[spec.name])} vs {list(models[other.name])}; both "
                    "profiles must serve the same model, or routing changes the answers"
                )
    return errors


def common_model(models: Mapping[str, tuple[str, ...]]) -> str:
    sets = [set(ids) for ids in models.values() if ids]
    shared = set.intersection(*sets) if sets else set()
    return min(shared) if shared else ""


async def _probe_backend(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    model: str, timeout_s: float, probes: Sequence[Probe],
) -> tuple[dict[str, TimedProbe], list[str]]:
    """Each probe on `spec`, one after the other: the answers by kind, and why any failed."""
    answers: dict[str, TimedProbe] = {}
    failures: list[str] = []
    for probe in probes:
        answer, why = await _probe_request(spec, adapter, session, model, timeout_s, probe)
        if why:
            failures.append(why)
        else:
            answers[probe.kind] = answer
    return answers, failures


async def _probe_request(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    model: str, timeout_s: float, probe: Probe,
) -> tuple[TimedProbe, str]:
    sent = probe.body(model)
    body = adapter.request_tweaks(dict(sent), stream=False, path="/v1/chat/completions").body
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        before = await scrape_metrics(spec, adapter, session, timeout)
        started = time.monotonic()
        async with session.post(spec.base_url + "/v1/chat/completions", json=body,
                                headers=_auth(spec), timeout=timeout) as response:
            payload = await response.json(content_type=None)
            response.raise_for_status()
        elapsed_ms = (time.monotonic() - started) * 1000.0
        report = read_report(payload)
        if report.draft_n is None and adapter.counters is not None and before is not None:
            after = await scrape_metrics(spec, adapter, session, timeout)
            delta = counter_delta(before, after or {}, adapter.counters)
            report = merge(report, delta)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return (TimedProbe(sent, EMPTY, 0.0),
                f"backend {spec.name!r}: the {probe.kind} probe request failed: {error}")
    return TimedProbe(sent, report, elapsed_ms), ""


async def scrape_metrics(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    timeout: aiohttp.ClientTimeout,
) -> dict[str, float] | None:
    """The engine's Prometheus counters (`parse_prometheus`), or None when it has none or the
    scrape fails. Difference two scrapes with `stats.counter_delta(before, after, counters)`."""
    text, _ = await metrics_text(spec, adapter, session, timeout)
    return parse_prometheus(text) if text is not None else None


async def metrics_text(
    spec: BackendSpec, adapter: EngineAdapter, session: aiohttp.ClientSession,
    timeout: aiohttp.ClientTimeout,
) -> tuple[str | None, str]:
    """The engine's `/metrics` text, or None and why (no metrics path, an error status, the
    connection or the timeout)."""
    if not adapter.metrics_path:
        return None, "no metrics path"
    try:
        async with session.get(spec.base_url + adapter.metrics_path, headers=_auth(spec),
                               timeout=timeout) as response:
            if response.status != 200:
                return None, f"HTTP {response.status}"
            return await response.text(errors="replace"), ""
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def engine_slots(
    spec: BackendSpec, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout,
) -> tuple[int | None, str]:
    """The requests the engine says it serves at once (llama.cpp: `GET /props` total_slots,
    else the length of `GET /slots`), or None and why (another engine, an error, nothing told)."""
    if spec.engine != "llamacpp":
        return None, f"engine {spec.engine!r} reports no slot count"
    errors = []
    for path, read in (("/props", props_slots), ("/slots", listed_slots)):
        try:
            async with session.get(spec.base_url + path, headers=_auth(spec),
                                   timeout=timeout) as response:
                if response.status != 200:
                    errors.append(f"{path}: HTTP {response.status}")
                    continue
                count = read(await response.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            errors.append(f"{path}: {type(exc).__name__}")
            continue
        if count is not None:
            return count, ""
        errors.append(f"{path}: no slot count")
    return None, "; ".join(errors)


def _speculation_warnings(spec: BackendSpec, answers: Mapping[str, TimedProbe]) -> list[str]:
    """The verdict over every probe that answered: a speculating instance must draft on one of
    them, a plain one on none."""
    if not answers:
        return []
    drafted = total_drafted(answers.values())
    label = f"backend {spec.name!r} ({spec.spec_key})"
    hint = _vllm_flag_hint(spec, answers)
    if spec.profile == "mtp" and drafted is None:
        return [(f"{label}: the engine reports no draft statistics; speculation cannot be "
                 f"confirmed (decode tokens/s is still measured){hint}")]
    if spec.profile == "mtp" and drafted == 0:
        why = ("its lookup found nothing to draft (its n-gram bounds may be longer than the "
               "probe), or speculation is not running there" if _looks_up(spec)
               else "speculation is not running there")
        return [f"{label} drafted no token on the greedy probes ({', '.join(answers)}): "
                + why + hint]
    if hint:
        return [f"{label}: no answer carries its drafts; they are read from /metrics' counters "
                "around requests that run alone, and it is priced from its measured paces"
                + hint]
    if spec.profile == "plain" and drafted:
        return [f"{label} drafted {drafted} tokens: it speculates, so both profiles do"]
    return []


def _vllm_flag_hint(spec: BackendSpec, answers: Mapping[str, TimedProbe]) -> str:
    """What a speculating vLLM whose answers carry no `metrics.speculative_decoding` lacks."""
    if spec.engine != "vllm" or spec.profile != "mtp" or any(
            answer.report.spec_source == "metrics" for answer in answers.values()):
        return ""
    return f"; start it with `{VLLM_PER_REQUEST_FLAG} summary` to have them in each answer"


def _looks_up(spec: BackendSpec) -> bool:
    """It drafts from what the text so far repeats (n-grams, suffix trees), not with a model."""
    kind = spec.speculation.type if spec.speculation is not None else ""
    return kind.startswith("ngram") or kind == "suffix"


def _auth(spec: BackendSpec) -> dict[str, str]:
    return {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
