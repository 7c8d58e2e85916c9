"""How often replicas collide: two of them send a request to the same free instance within the
moment it takes each to hear of the other's (a few ms), and one request waits a whole service
time behind the other. Pure: counts in, a probability out; no clock.

Each replica has a share of the instances (`share`): the others take the rest first, so a free
instance in its own share is one the others avoid, and a free instance outside it may be taken
by its owner at the same moment. How often that happens is measured rather than assumed: each
request sent to an instance that looked free is watched until it ends, and counted as a
collision when this replica later hears of another replica's request there that had started
before it (one it could not have known of) or so soon after it, within the channel's latency,
that the other could not know of this one. Closed-loop clients in step collide in most bursts;
independent arrivals almost never: the risk is learned per fleet and traffic, and forgotten as
they change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

# Requests the estimate remembers (older ones fade by 1/HORIZON per new one): enough for a rate
# of a few percent, short enough to follow a change of traffic within a few hundred requests.
HORIZON: Final = 200.0
# What it starts from: this many watched requests, none collided (no risk assumed).
PRIOR_WATCHED: Final = 4.0


@dataclass(slots=True)
class Contention:
    """Blind requests (sent to an instance that looked free, other replicas about) and how
    many of them met another replica's request there, each fading as new ones come."""

    watched: float = PRIOR_WATCHED
    collided: float = 0.0

    def observe(self, collided: bool) -> None:
        keep = 1.0 - 1.0 / HORIZON
        self.watched = self.watched * keep + 1.0
        self.collided = self.collided * keep + (1.0 if collided else 0.0)

    def risk(self) -> float:
        """The chance that a request sent blind meets another replica's request (either one
        first)."""
        return self.collided / self.watched


def share(names: Sequence[str], profiles: Sequence[str], position: int, replicas: int
          ) -> frozenset[str]:
    """The instances replica `position` of `replicas` (0-based, the same order on each) takes
    first: each kind of instance dealt out in turn, so that every replica gets its part of
    each kind while there are enough (two pairs, two replicas: one pair each)."""
    if replicas <= 1:
        return frozenset(names)
    dealt = sorted(range(len(names)), key=lambda i: (profiles[i], i))
    return frozenset(names[i] for turn, i in enumerate(dealt) if turn % replicas == position)


def ranks(names: Iterable[str], own: frozenset[str]) -> dict[str, int]:
    """Tie ranks: among instances that cost the same, this replica's own share first."""
    ordered = sorted(names, key=lambda name: name not in own)  # stable: list order within
    return {name: rank for rank, name in enumerate(ordered)}
