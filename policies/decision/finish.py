"""The finish rule's arithmetic: the healthy instance that will finish a request soonest, its
queue included (`policies.decision.decide` builds the candidates and asks it).

Pure: no I/O, no clock (elapsed times come in with the in-flight requests), no globals.

For each candidate instance, the predicted finish is
    the work queued on it (in-flight requests' predicted remaining time, served one at a time)
  + the prefill of the prompt (less the cached prefix when the instance holds the conversation)
  + the expected completion tokens x its per-token time for this request
    (plain: the machine's plain step; mtp: that step over the request's predicted speedup).
The speedup is drawn from its posterior (Thompson sampling, one standard normal draw `z`),
and a draw that would pick another instance than the posterior mean is followed when the
expected regret of doing so (the mean cost there over the best mean cost, less one) is at
most the request's bound (`exploration_bound`: `max_regret`, tighter on an answer longer than a
typical one): exploring costs a request at most that share of a typical request's time, and
happens only where the evidence leaves the choice open. A draw teaches about the config it
picks: one for a plain instance (no speedup to learn, its pace measured) is not followed.
Until a config has been measured `THIN_BELOW` times (the startup probe's two requests per
instance), its mean is the prior's guess and a draw for it is followed anyway. Where it was
measured, but not on requests like this one (its spread for this request still most of the
prior's: `Prediction.unlearned`), the bound is that spread when wider: the evidence cannot
tell it loses here by more (on the GB10 simulator's chat-heavy mix agent turns were written
off at 0.955x from the probe, sd 0.155, and never measured: they pay 1.108x).

The cost of a choice is not only this request's finish: a request that comes while it is
served finds the instance taken. In a FIFO queue that serves one request at a time, the
requests a request leaves behind when it departs are exactly those that waited behind it, and
in steady state their number is distributed as the number it found on arrival (arrivals see
time averages; departures leave what arrivals find). So the rule minimises
    predicted finish + requests on the instance now x the delay it imposes on each,
the current count standing for the expected number that will come while it is there. Each
such request loses this one's service time there, or what it loses by going to its next-best
instance instead, whichever is less: its loss had this instance been taken, as the recent
decisions measured it (`Behind`: the soonest finish elsewhere less the finish here, 0 for a
request that finishes as soon elsewhere). As many of them as there are idle instances
elsewhere can go there; the others wait the whole service (with every instance busy, as in an
open loop under heavy load, the price is the queue's as before). With two configs that differ
on a few requests only, a request waiting for the instance that serves it 3x faster delays the
one after it by that little (on the real plain + n-gram pair's alone times at 2 clients, a
whole service's price kept edits off a busy n-gram instance where waiting finished sooner).
When the instance is idle (always, at one client) this is the soonest finish (the load is
counted in requests: no clock, no machine constant).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from statistics import NormalDist
from typing import Final, NamedTuple

# An in-flight request whose length's spread is not known (another replica's of an older
# release, a bypasser priced at the typical request) that has run past its predicted time is
# taken to need at least this share of its prediction more (it is busy, not done).
OVERRUN_SHARE: Final = 0.2
# A config measured fewer times than this is thin: its predicted pace is mostly the
# prior's, so the regret bound (computed from it) does not stop a draw from measuring it.
# The startup probe measures each instance twice, on a copy-heavy and a free-form request (the
# two ends of what decides a speculation's pay), so a probed config is not judged from the
# prior alone; a third forced measurement cost a cold start more than it taught (bench.arms:
# edits-only on cpu-pair 0.875 -> 0.989 x always-ngram; bench.learning's GB10 mixes >= 1.002
# x the best static flag either way).
THIN_BELOW: Final = 2


class InFlight(NamedTuple):
    """One request being served (or waiting) on an instance, as the router tracks it (a named
    tuple: every decision builds one per request in flight, ~4x cheaper than a frozen
    dataclass)."""

    predicted_ms: float  # predicted prefill + decode time when it was routed (its mean)
    elapsed_ms: float  # since it was sent
    spread: float = 0.0  # sd of the log of its length (`time_left`; 0: not known)
    most_ms: float = 0.0  # its time at its max_tokens (0: no cap)


class Running(NamedTuple):
    """One request in flight as the proxy's pool keeps it: `InFlight` with the time it was
    sent (the pool's clock) rather than the time since."""

    predicted_ms: float
    sent: float
    spread: float = 0.0
    most_ms: float = 0.0


class Queued(NamedTuple):
    """The work on an instance as the rule uses it: the requests there now and the work they
    leave ahead of a new one (`queued_ms`; on an instance that serves several at once, the wait
    for a slot: `policies.decision.batching`)."""

    requests: int
    work_ms: float
    # serving several at once: the time left of each request being served, ascending (empty on
    # an instance that serves one at a time, whose queue `work_ms` says all of)
    serving: tuple[float, ...] = ()


IDLE_QUEUE: Final = Queued(0, 0.0)


def queued_ms(inflight: Sequence[InFlight]) -> float:
    """Work ahead on an instance that serves one request at a time, oldest first: what is left
    of the oldest request (`time_left`), then the whole predicted time of the others."""
    return _work_ahead(inflight, [f.elapsed_ms for f in inflight])


def queued_work(running: Collection[Running], now: float,
                freed_at: float = -math.inf) -> Queued:
    """`queued_ms` of the requests in flight as the proxy's pool keeps them (no `InFlight` per
    request: a decision under load reads every queue). `freed_at`: when a request here last
    ended. The oldest request has been served only since then, or since it was sent: the time
    it waited behind the one that ended is not service (counted as service, a request that
    just started after a long wait looked nearly done)."""
    if not running:  # an idle instance: most of them, at most loads
        return IDLE_QUEUE
    ordered = list(running)
    elapsed = [(now - r.sent) * 1000.0 if now > r.sent else 0.0 for r in ordered]
    served_ms = (now - freed_at) * 1000.0 if now > freed_at else 0.0
    return Queued(len(ordered), _work_ahead(ordered, elapsed, served_ms))


def _work_ahead(requests: Sequence[InFlight | Running], elapsed: Sequence[float],
                served_ms: float = math.inf) -> float:
    if not requests:
        return 0.0
    head = max(range(len(elapsed)), key=elapsed.__getitem__)  # the oldest; of equals, the first
    first = requests[head]
    left = time_left(first.predicted_ms, min(elapsed[head], served_ms), first.spread,
                     first.most_ms)
    return left + (math.fsum(r.predicted_ms for r in requests) - first.predicted_ms)


def time_left(predicted_ms: float, ran_ms: float, spread: float = 0.0,
              most_ms: float = 0.0) -> float:
    """The expected time left of a request predicted to take `predicted_ms` on average that
    has been served `ran_ms`. Its length is log-normal (`policies.learner.length`: log-sd
    `spread`, capped by max_tokens, which takes it `most_ms`), so this is the mean of what
    is left given that it has run so long: E[min(S, most) - ran | S > ran]. A request that
    has outlived its prediction is likelier a long one than nearly done: at spread 0.7 it has
    about 0.75 of its prediction left, at 1.5 more than twice it, less as it nears its cap
    (the real plain + n-gram pair, 2 clients: an edit sent to wait behind a story that had
    just passed its prediction of 31 tokens, priced at a fifth of it more, waited 14 s while
    the story ran to 400). Its spread unknown (0), the old rule: what the prediction leaves,
    or `OVERRUN_SHARE` of it once overrun."""
    if spread <= 0.0 or predicted_ms <= 0.0:
        return max(predicted_ms - ran_ms, OVERRUN_SHARE * predicted_ms)
    cap = most_ms if most_ms > 0.0 else math.inf
    if ran_ms >= cap:  # past the time its cap was predicted to take: nearly done
        return OVERRUN_SHARE * min(predicted_ms, cap)
    mu = math.log(predicted_ms) - spread * spread / 2
    above_ran, beyond_ran = _tail(predicted_ms, mu, spread, ran_ms)
    if beyond_ran < 1e-12:  # further out than the log-normal reaches: the cap, or the old rule
        return cap - ran_ms if cap < math.inf else OVERRUN_SHARE * predicted_ms
    above_cap, beyond_cap = _tail(predicted_ms, mu, spread, cap)
    capped_mean = (above_ran - above_cap + (cap * beyond_cap if beyond_cap else 0.0)) / beyond_ran
    return max(capped_mean - ran_ms, 0.0)


def _tail(mean: float, mu: float, spread: float, at: float) -> tuple[float, float]:
    """(E[S; S > at], P(S > at)) for S log-normal with log-mean `mu`, log-sd `spread` and
    mean `mean`."""
    if at <= 0.0:
        return mean, 1.0
    if at == math.inf:
        return 0.0, 0.0
    z = (mu - math.log(at)) / spread
    return mean * _STANDARD_NORMAL.cdf(z + spread), _STANDARD_NORMAL.cdf(z)


class Behind(NamedTuple):
    """What recent requests would have lost had an instance been taken when they came: each
    one's soonest finish elsewhere less its finish there (0: as soon elsewhere; inf: it had no
    other instance), sorted. A request that holds the instance delays one of them by the
    lesser of its own service and that loss (the other goes elsewhere)."""

    losses_ms: tuple[float, ...] = ()  # ascending

    @classmethod
    def of(cls, losses_ms: Iterable[float]) -> Behind:
        return cls(tuple(sorted(losses_ms)))

    def delay_ms(self, service_ms: float) -> float:
        """The mean delay a request served `service_ms` here imposes on one that comes while
        it is: with nothing measured, the whole service (the one behind has to wait)."""
        losses = self.losses_ms
        if not losses:
            return service_ms
        below = bisect_left(losses, service_ms)  # losses under it: only those are lost
        return (sum(losses[:below]) + service_ms * (len(losses) - below)) / len(losses)


NOTHING_BEHIND: Final = Behind()


class Candidate(NamedTuple):
    """What the rule knows about one healthy instance for this request (a named tuple, as
    `InFlight`: one per instance per decision)."""

    name: str
    profile: str
    queue_ms: float
    prefill_ms: float
    ms_per_token: float  # at the posterior median of the speedup
    sampled_ms_per_token: float  # at the Thompson draw
    waiting: int = 0  # requests on the instance now (the expected number to come while it is)
    # its kind of instance is measured too thinly for the posterior mean to be more than the
    # prior's guess: a draw that picks it is followed whatever that mean says (`soonest`)
    thin: bool = False
    tie_rank: int = 0  # among equal costs, the lowest first (BackendState.tie_rank)
    contended: float = 0.0  # the chance of meeting another replica's request (BackendState)
    config: str = ""  # its speculation config ('': its profile)
    # its speedup's spread for this request while the evidence has barely narrowed it from the
    # prior's (requests like this one not measured on its config; 0: learned): a draw for it
    # is followed while its regret is within that spread (`soonest`)
    unlearned_sd: float = 0.0
    behind: Behind = NOTHING_BEHIND  # what the requests that come while it is taken lose
    # serving several at once (`policies.decision.batching`): its slots, the time left of the
    # requests it serves now, and how much slower each of them decodes once this one joins
    slots: int = 1
    serving: tuple[float, ...] = ()
    slowdown: float = 1.0
    batch: int = 1  # the batch this request would decode in there, itself included
    pace_ms: float = 0.0  # its ms per token there alone (at the posterior median)
    # its ms per token at the batch it is expected to decode in over its life (0: `ms_per_token`)
    lifelong_ms_per_token: float = 0.0

    @property
    def speculates(self) -> bool:
        return (self.config or self.profile) != "plain"

    def finish_ms(self, tokens: float, sampled: bool = False) -> float:
        per_token = self.sampled_ms_per_token if sampled else self.ms_per_token
        return self.queue_ms + self.prefill_ms + tokens * per_token

    def service_ms(self, tokens: float, sampled: bool = False) -> float:
        """This request's own time on the instance, once it starts."""
        per_token = self.sampled_ms_per_token if sampled else self.ms_per_token
        return self.prefill_ms + tokens * per_token

    def lifelong_ms(self, tokens: float) -> float:
        """Its service as predicted for its life there: the batch it joins as that batch is
        expected to move (what its record and the pool carry)."""
        return self.prefill_ms + tokens * (self.lifelong_ms_per_token or self.ms_per_token)

    def cost_ms(self, tokens: float, sampled: bool = False, idle_elsewhere: int = 0) -> float:
        """Its finish plus the delay its service imposes on the requests expected to come while
        it is served, and the expected wait of a collision: one of two requests sent here at
        once waits for the other (about as long as this one: sent, it cannot go elsewhere).
        Of those expected to come, as many as there are idle instances elsewhere
        (`idle_elsewhere`) go there at their loss (`behind`); the others wait behind it."""
        service = self.service_ms(tokens, sampled)
        cost = self.queue_ms + service + self.contended * service
        if self.slots > 1:  # the price of a batch: the requests served there slow down
            if self.queue_ms > 0.0:
                # full: as many requests as wait there now will come while it waits and decodes,
                # and each waits for a slot a slot's share of its service longer (as the queue
                # of one prices the requests behind, over `slots` servers)
                return cost + (self.waiting - self.slots + 1) * service / self.slots
            return cost + self.overlap_delay_ms(service)
        if self.waiting:
            elsewhere = min(self.waiting, idle_elsewhere)
            cost += (self.waiting - elsewhere) * service
            if elsewhere:
                cost += elsewhere * self.behind.delay_ms(service)
        return cost

    def overlap_delay_ms(self, service_ms: float) -> float:
        """What the requests served there now lose while this one decodes beside them: each
        runs `slowdown` times slower for as long as they overlap (all of its time left when
        it ends first, else this one's service), the price of joining a batch. A request that
        waits for a slot slows none of them."""
        slower = self.slowdown
        if slower <= 1.0 or self.queue_ms > 0.0:
            return 0.0
        outlived = service_ms * (1.0 - 1.0 / slower)  # lost by one that outlives this one
        return math.fsum(min(left * (slower - 1.0), outlived) for left in self.serving)


@dataclass(frozen=True, slots=True)
class Choice:
    candidate: Candidate
    explored: bool  # the Thompson draw picked another instance than the posterior mean
    finish_ms: Mapping[str, float]  # instance -> predicted finish at the posterior mean
    # instance -> what this request would have lost had that instance been taken (`Behind`)
    losses_ms: Mapping[str, float]


def soonest(
    candidates: Sequence[Candidate], tokens: float, *, max_regret: float
) -> Choice | None:
    """The candidate with the least predicted cost: its finish, plus the delay it imposes on the
    requests expected to come while it is served (Thompson draw, regret-bounded). The bound is on the
    regret at the posterior mean, which is only as good as the evidence: a draw for a `thin`
    candidate (its kind of instance barely measured, its mean mostly the prior's) is followed
    whatever it costs there, so that what was judged from the prior alone gets measured; the
    draw is wide only while the evidence is thin, and a clear loser is drawn rarely even then.
    `max_regret` 0: no exploration at all."""
    if not candidates:
        return None
    # each candidate's costs computed once; ties go to a plain instance (a draft costs power
    # for nothing), then by the caller's tie rank, then by name
    idle = sum(not c.waiting for c in candidates)  # a busy one's idle elsewhere: all of them
    ranked = [((c.cost_ms(tokens, idle_elsewhere=idle), c.profile != "plain", c.tie_rank, c.name),
               (c.cost_ms(tokens, True, idle), c.profile != "plain", c.tie_rank, c.name), c)
              for c in candidates]
    best_mean, _, best = min(ranked, key=_MEAN)
    drawn_mean, _, drawn = min(ranked, key=_DRAWN)
    finish = {c.name: c.finish_ms(tokens) for c in candidates}
    losses = losses_if_taken(finish)
    # a draw teaches about the config it picks: a plain instance has no speedup to learn, and
    # its pace, once measured, is the best-measured figure there is (so a draw for it is not
    # followed: at 400 tokens two such draws sent stories to plain at 20.6 s each, where n-gram
    # served the stories in 10.8 s on average, and taught nothing about n-gram)
    if drawn.name != best.name and max_regret > 0 and (drawn.thin or (drawn.speculates and (
            _regret(drawn_mean[0], best_mean[0]) <= max(max_regret, drawn.unlearned_sd)))):
        return Choice(drawn, True, finish, losses)
    return Choice(best, False, finish, losses)


def losses_if_taken(finish_ms: Mapping[str, float]) -> dict[str, float]:
    """Instance -> what the request would lose had that instance been taken: its soonest
    finish elsewhere less its finish there, queues included (inf: no other instance)."""
    ordered = sorted(finish_ms.values())
    first = ordered[0]
    second = ordered[1] if len(ordered) > 1 else math.inf
    return {name: max(0.0, (second if finish <= first else first) - finish)
            for name, finish in finish_ms.items()}


def exploration_bound(max_regret: float, tokens: float, typical_tokens: float) -> float:
    """The regret a draw may cost this request: `max_regret` of its time when its answer is
    expected no longer than a typical one, less in proportion when it is longer. One request
    teaches about as much of a config's speedup whatever its length, and a draw costs in
    proportion to it: so exploration is spent on the cheap requests (a draw that sent a
    400-token story to the wrong instance cost as much as ten on chat turns)."""
    if tokens <= typical_tokens or tokens <= 0:
        return max_regret
    return max_regret * typical_tokens / tokens


def _regret(chosen_ms: float, best_ms: float) -> float:
    if best_ms <= 0:
        return 0.0 if chosen_ms <= 0 else math.inf
    return chosen_ms / best_ms - 1.0


_STANDARD_NORMAL: Final = NormalDist()  # immutable
_MEAN: Final = itemgetter(0)
_DRAWN: Final = itemgetter(1)


# Each further config's uniform draw is the first's moved on by the golden ratio's fraction
# (mod 1): as spread over [0, 1) as draws can be, and a function of the one draw an Ask carries.
_GOLDEN: Final = (math.sqrt(5.0) - 1.0) / 2.0


def spread_draws(z: float, count: int) -> list[float]:
    """`count` standard normal draws made from one, `z` (the first is `z`): one per
    speculation config, so that a draw that favours one does not favour them all."""
    if z == 0.0 or count < 1:
        return [0.0] * count  # the posterior median for every config, no exploration
    uniform = _STANDARD_NORMAL.cdf(z)  # once: each further draw moves it on
    return [z, *(normal_draw((uniform + _GOLDEN * i) % 1.0) for i in range(1, count))]


def normal_draw(uniform: float | None) -> float:
    """A standard normal draw from a uniform one (None: 0, the median)."""
    if uniform is None:
        return 0.0
    return _STANDARD_NORMAL.inv_cdf(min(max(uniform, 1e-9), 1.0 - 1e-9))
