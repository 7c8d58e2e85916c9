"""Replicas that share what they learned, the load they put on each instance, and where each
conversation lives, through one Redis (`replicas.store`). Off (nothing here runs) when no store
is configured: one process is the embedded default.

Keys, under `replicas.namespace` (`ns`):
- `ns:sums`, a hash: replica -> its own learned sums (policies.learner.shared), never expiring:
  a replica that is gone keeps its evidence. Each replica adds every other field to its own
  (router/learning/online.set_others), so each decides with the posterior of all replicas' records. A
  restarted replica reads its own field back before it publishes again (`restore_own`): what
  it had published is neither lost nor counted twice.
- the channel `ns:load`: each replica's requests in flight (per instance, each one's predicted
  time and time elapsed), published as soon as one starts or ends, and every
  `replicas.load_interval_s` anyway; every replica prices them as one process would its own.
  The same under the key `ns:load:<replica>`, expiring after `load.max_age_s`, for a replica
  that subscribes later; `ns:replicas` lists who publishes one. A replica not heard from for
  `load.max_age_s` no longer counts.
- `ns:turns`, a stream: (conversation key, instance) as each turn is served (within a few ms),
  so that the next turn stays on the instance that holds its prefix whichever replica takes it.
  A stream rather than pub/sub: a replica that was away reads back the turns still live.

This module is the link to the store (`ReplicaLink`); what it reads is checked in
`router/replicas/wire`, and the loops that drive it while the app runs are
`router/replicas/loops`. Everything runs off the request path. A store that is down, slow or answering garbage fails
no request and delays none: each replica keeps the last sums it read, `/readyz` and `/metrics`
say the store is failing, and the loops try again every interval, converging when it is back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import redis.asyncio as aioredis
import structlog
from aiohttp import web
from redis.exceptions import RedisError

from policies import SharedSumsError, Sums, sums_from_json, sums_to_json, total_sums
from router.config import Config
from router.instances.pool import ReplicaLoad
from router.replicas.peers import PassedOn
from router.replicas.wire import entry_ms, load_entry

log = structlog.get_logger("specroute")

# A turn waits this long for others to join it in one PUBLISH (a burst: one message, not one
# per request); the loop sleeps while no turn is waiting.
CONVERSATION_BATCH_S: Final = 0.002
# A conversation message carries at most this many turns (a burst is sent in several).
CONVERSATION_BATCH: Final = 500
# The turns stream keeps about this many messages; a blocking read waits this long at most.
TURNS_KEPT: Final = 20_000
TURNS_BLOCK_S: Final = 1.0
STORE_ERRORS: Final = (RedisError, OSError, TimeoutError, ValueError)
T = TypeVar("T")
# (conversation, backend, profile, prompt tokens, seconds since it was served)
TurnApplier = Callable[[str, str, str, int, float], None]
# (replica, its work)
LoadApplier = Callable[[str, ReplicaLoad], None]
# The channel's latency is followed at its recent highs: each echo of this replica's own
# publication raises it at once, and it decays by this share per echo.
LATENCY_DECAY: Final = 0.02


def replica_id(config: Config) -> str:
    """The configured name, or the host name and listen port (stable across restarts)."""
    return config.replicas.id or f"{socket.gethostname()}:{config.listen.port}"


@dataclass(slots=True)
class StoreHealth:
    """What `/readyz` and `/metrics` say about the store."""

    replica: str
    state: str = "connecting"  # connecting | ok | failing
    failures: int = 0  # store calls that failed (down, slow, an answer that is not Redis)
    bad_entries: int = 0  # other replicas' published sums that could not be read
    last_error: str = ""
    restored: bool = False  # this replica's own published sums were read back (or absent)
    replicas: list[str] = field(default_factory=list)  # replicas whose sums are added
    conversations_in: int = 0  # turns other replicas shared
    conversations_out: int = 0

    def ok(self) -> None:
        if self.state == "failing":
            log.info("store_ok", replica=self.replica, failures=self.failures)
        self.state = "ok"

    def failed(self, what: str, exc: BaseException) -> None:
        """Counted each time; logged once per outage (the loops fail in turn meanwhile)."""
        self.failures += 1
        detail = f"{what}: {type(exc).__name__}: {exc}" if str(exc) else f"{what}: {type(exc).__name__}"
        if self.state != "failing":
            log.warning("store_failing", replica=self.replica, error=detail)
        self.state, self.last_error = "failing", detail

    def describe(self) -> dict[str, Any]:
        return {"replica": self.replica, "state": self.state, "failures": self.failures,
                "bad_entries": self.bad_entries, "last_error": self.last_error,
                "restored": self.restored, "replicas": list(self.replicas),
                "conversations_in": self.conversations_in,
                "conversations_out": self.conversations_out}


class ReplicaLink:
    """One replica's connection to the shared store and the three things it shares."""

    def __init__(self, url: str, replica: str, namespace: str, timeout_s: float,
                 clock: Callable[[], float] | None = None) -> None:
        self.replica = replica
        self._clock = clock
        self._echo: tuple[bytes, float] | None = None  # the last load published, and when
        # how long a publication takes to reach the replicas (its own echo on the channel)
        self.channel_latency_s = 0.0
        self.url = ""  # where the others reach this replica, published with its load
        self.peer_urls: dict[str, str] = {}  # the others' urls, as they published them
        self.passed_on = PassedOn()
        self.channel_up = False  # whether the store's load channel is subscribed
        # the replicas whose load is heard straight from them now (router/replicas/peer_load): the
        # channel's messages from them are not taken as well
        self.direct: set[str] = set()
        # the replicas that follow this one's stream now, by name (router/replicas/peer_load)
        self.listeners: collections.Counter[str] = collections.Counter()
        self.health = StoreHealth(replica)
        self._timeout_s = timeout_s
        self._client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=None,
            decode_responses=False)
        self._sums_key = f"{namespace}:sums"
        self._replicas_key = f"{namespace}:replicas"
        self._load_prefix = f"{namespace}:load:"
        self._load_channel = f"{namespace}:load"
        self._turns_key = f"{namespace}:turns"
        # the turns are followed with a blocking read: its own connection, a longer timeout
        self._reader = aioredis.Redis.from_url(
            url, socket_timeout=TURNS_BLOCK_S + timeout_s, socket_connect_timeout=timeout_s,
            retry=None, decode_responses=False)
        self._turns: list[list[Any]] = []  # conversation turns not sent yet
        self._turn_waiting = asyncio.Event()

    async def close(self) -> None:
        for client in (self._client, self._reader):
            with contextlib.suppress(*STORE_ERRORS):
                async with asyncio.timeout(self._timeout_s):
                    await client.aclose()

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """A store call bounded by the timeout; None (and the store marked failing) on error."""
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # arrives as the call completes, and a loop that never stops hangs the shutdown
            async with asyncio.timeout(self._timeout_s):
                result = await call()
        except STORE_ERRORS as exc:
            self.health.failed(what, exc)
            return None
        self.health.ok()
        return result

    # --- learned sums ---------------------------------------------------------------------

    async def restore(self, apply: Callable[[Sums], bool]) -> bool:
        """Read this replica's own published sums back (before it publishes again)."""
        raw = await self._call("restore", lambda: self._client.hget(self._sums_key, self.replica))
        if raw is None and self.health.state != "ok":
            return False
        self.health.restored = True
        if raw is None:
            return True  # nothing published yet
        try:
            _, sums = sums_from_json(raw)
        except SharedSumsError as exc:
            self.health.bad_entries += 1
            log.warning("store_own_sums_unreadable", replica=self.replica, error=str(exc))
            return True  # overwritten by the next publish, from this replica's own log
        took = apply(sums)
        log.info("store_restored", replica=self.replica, through=sums.through,
                 observations=sums.evidence.n_speculating
                 + sums.evidence.plain.n, in_force=took)
        return True

    async def publish_sums(self, sums: Sums) -> bool:
        text = sums_to_json(self.replica, sums)
        done = await self._call(
            "publish sums", lambda: self._client.hset(self._sums_key, self.replica, text))
        return done is not None

    async def others_sums(self) -> Sums | None:
        """The other replicas' sums added up; None when the store did not answer."""
        raw = await self._call("read sums", lambda: self._client.hgetall(self._sums_key))
        if raw is None:
            return None
        parts, names = [], []
        for key, value in raw.items():
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            if name == self.replica:
                continue
            try:
                published_by, sums = sums_from_json(value)
            except SharedSumsError as exc:
                self.health.bad_entries += 1
                log.warning("store_sums_unreadable", replica=name, error=str(exc))
                continue
            if published_by != name:
                self.health.bad_entries += 1
                continue
            parts.append(sums)
            names.append(name)
        self.health.replicas = sorted(names)
        return total_sums(parts)

    # --- in-flight work -------------------------------------------------------------------

    async def publish_load(self, work: ReplicaLoad, ttl_s: float) -> bool:
        """This replica's requests in flight, to every replica now (PUBLISH) and to one that
        starts listening later (a key expiring after `ttl_s`: a replica that stopped publishing
        stops counting)."""
        text = self.load_message(work)
        key = self._load_prefix + self.replica

        if self._clock is not None:
            self._echo = (text.encode(), self._clock())

        async def all_three() -> list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.set(key, text, px=max(1, int(ttl_s * 1000)))
                pipe.sadd(self._replicas_key, self.replica)
                pipe.publish(self._load_channel, text)
                return await pipe.execute()

        return await self._call("publish load", all_three) is not None

    def heard_directly_by(self, others: list[str]) -> bool:
        """Whether every other replica follows this one's stream: then each change reaches them
        there, and the channel needs only the heartbeat (for a replica that starts later)."""
        return bool(others) and all(self.listeners[name] > 0 for name in others)

    def load_message(self, work: ReplicaLoad) -> str:
        """This replica's work as it tells it, on the store's channel or a peer's stream."""
        message: dict[str, Any] = {"replica": self.replica, "work": work}
        if self.url:
            message["url"] = self.url
        return json.dumps(message, separators=(",", ":"))

    async def others_load(self) -> dict[str, ReplicaLoad] | None:
        """The other replicas' work as last published (expired ones are gone)."""
        names = await self._call("read replicas",
                                 lambda: self._client.smembers(self._replicas_key))
        if names is None:
            return None
        others = sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)
        others = [n for n in others if n != self.replica]
        if not others:
            return {}
        values = await self._call(
            "read load", lambda: self._client.mget([self._load_prefix + n for n in others]))
        if values is None:
            return None
        found: dict[str, ReplicaLoad] = {}
        for name, value in zip(others, values, strict=True):
            entry = self.read_load(value) if value is not None else None
            if entry is not None and entry[0] == name:
                found[name] = entry[1]
        return found

    async def follow_load(self, apply: LoadApplier, retry_s: float,
                          lost: Callable[[], None]) -> None:
        """Apply other replicas' work as they publish it (within a few ms of a request's start
        or end). On (re)subscribing, the work they published before is read first. When the
        channel breaks, `lost`: what it told is no longer kept current. The replicas heard
        straight from them (router/replicas/peer_load) are not taken from it too."""
        while True:
            pubsub = self._reader.pubsub(ignore_subscribe_messages=True)
            try:
                async with asyncio.timeout(self._timeout_s):
                    await pubsub.subscribe(self._load_channel)
                for name, work in (await self.others_load() or {}).items():
                    if name not in self.direct:
                        apply(name, work)
                self.channel_up = True
                while True:
                    message = await pubsub.get_message(timeout=TURNS_BLOCK_S)
                    data = None if message is None else message.get("data")
                    entry = None if data is None else self.read_load(data)
                    if entry is not None and entry[0] != self.replica:
                        if entry[0] not in self.direct:
                            apply(*entry)
                    elif entry is not None:
                        self._heard_own(data)
            except STORE_ERRORS as exc:
                self.health.failed("replicas' load", exc)
                if self.channel_up:  # once per outage: a failed retry has nothing more to drop
                    self.channel_up = False
                    lost()
                await asyncio.sleep(retry_s)
            finally:
                with contextlib.suppress(*STORE_ERRORS):
                    async with asyncio.timeout(self._timeout_s):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _heard_own(self, data: Any) -> None:
        """This replica's own publication came back: the channel's latency, as the others see
        it (the same path through the store)."""
        if self._echo is None or self._clock is None or data != self._echo[0]:
            return
        latency = self._clock() - self._echo[1]
        self.channel_latency_s = max(latency, self.channel_latency_s * (1.0 - LATENCY_DECAY))
        self._echo = None

    def read_load(self, value: Any) -> tuple[str, ReplicaLoad] | None:
        """Another replica's message of its work (its url noted), None when unreadable."""
        entry = load_entry(value)
        if entry is None:
            self.health.bad_entries += 1
            return None
        name, work, url = entry
        if url and name != self.replica:
            self.peer_urls[name] = url
        else:
            self.peer_urls.pop(name, None)
        return name, work

    # --- conversations ----------------------------------------------------------------------

    def share_turn(self, conversation: str, backend: str, profile: str, prompt_tokens: int) -> None:
        """A served turn, sent to the other replicas with the next batch."""
        self._turns.append([conversation, backend, profile, int(prompt_tokens)])
        self._turn_waiting.set()

    async def next_turns(self) -> None:
        """Until a turn is waiting to be sent, and a moment more for others to join it."""
        await self._turn_waiting.wait()
        self._turn_waiting.clear()
        await asyncio.sleep(CONVERSATION_BATCH_S)

    async def flush_turns(self) -> None:
        while self._turns:
            batch, self._turns = self._turns[:CONVERSATION_BATCH], self._turns[CONVERSATION_BATCH:]
            fields = {"replica": self.replica,
                      "turns": json.dumps(batch, separators=(",", ":"))}
            add = functools.partial(self._client.xadd, self._turns_key, fields,  # type: ignore[arg-type]
                                    maxlen=TURNS_KEPT, approximate=True)
            if await self._call("share conversations", add) is None:
                self._turns.clear()  # stickiness is best effort: a turn lost here re-prefills
                return
            self.health.conversations_out += len(batch)

    async def follow_turns(self, apply: TurnApplier, ttl_s: float, retry_s: float) -> None:
        """Apply other replicas' turns as they arrive. At start, and after the store failed,
        the turns still within `ttl_s` are read back first: a replica that was away (restarted,
        or cut off from the store) learns where the live conversations are."""
        last: bytes | None = None
        while True:
            try:
                if last is None:
                    last = await self._catch_up(apply, ttl_s)
                async with asyncio.timeout(TURNS_BLOCK_S + self._timeout_s):
                    reply: Any = await self._reader.xread({self._turns_key: last}, count=1000,
                                                     block=int(TURNS_BLOCK_S * 1000))
                for _, entries in reply or []:
                    for entry_id, fields in entries:
                        self._apply_entry(fields, apply, 0.0)
                        last = bytes(entry_id)
                self.health.ok()
            except STORE_ERRORS as exc:
                self.health.failed("conversations", exc)
                last = None  # the store may have restarted empty: read back, then follow
                await asyncio.sleep(retry_s)

    async def _catch_up(self, apply: TurnApplier, ttl_s: float) -> bytes:
        async with asyncio.timeout(self._timeout_s):
            seconds, micros = await self._client.time()
            entries: Any = await self._client.xrevrange(self._turns_key, count=TURNS_KEPT)
        now_ms = seconds * 1000 + micros // 1000
        for entry_id, fields in reversed(entries):
            age_s = max(0.0, (now_ms - entry_ms(entry_id)) / 1000.0)
            if age_s <= ttl_s:
                self._apply_entry(fields, apply, age_s)
        return bytes(entries[0][0]) if entries else b"0-0"

    def _apply_entry(self, fields: Mapping[Any, Any], apply: TurnApplier, age_s: float) -> None:
        try:
            replica = fields[b"replica"].decode()
            if replica == self.replica:
                return
            for conversation, backend, profile, tokens in json.loads(fields[b"turns"]):
                if isinstance(conversation, str) and isinstance(backend, str):
                    apply(conversation, backend, str(profile), max(0, int(tokens)), age_s)
                    self.health.conversations_in += 1
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.health.bad_entries += 1
            log.warning("store_conversation_unreadable", error=f"{type(exc).__name__}: {exc}")


REPLICAS: web.AppKey[ReplicaLink] = web.AppKey("replicas")  # only with `replicas.store`
