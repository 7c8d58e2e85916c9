"""What one replica has learned, as the sums it publishes for the others: the route model's
evidence and the arms' sums, both additive. The posterior a replica uses is the prior plus its
own sums plus every other replica's, which is the posterior one process would have from all of
their records (sums add in any order; tested to 1e-9).

Pure: sums in, JSON text out, and back. What comes back from a shared store is checked before it
is added (`SharedSumsError`): a store answering garbage must not poison the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from policies.learner.arms import EMPTY_ARMS, ArmsState, arms_as_json, arms_from_json
from policies.learner.routemodel import RouteEvidence

SHARED_VERSION: Final = 1


class SharedSumsError(ValueError):
    """A replica's published sums that cannot be read (another version, malformed, not finite)."""


@dataclass(frozen=True, slots=True)
class Sums:
    """The learner's additive state: the route model's evidence and the arms' sums."""

    evidence: RouteEvidence = field(default_factory=RouteEvidence)
    arms: ArmsState = EMPTY_ARMS
    through: str = ""  # timestamp of the newest record counted (by either part)

    def merged(self, other: Sums) -> Sums:
        return Sums(self.evidence.merged(other.evidence), self.arms.merged(other.arms),
                    max(self.through, other.through))


EMPTY_SUMS: Final = Sums()


def total_sums(parts: Iterable[Sums]) -> Sums:
    """The sums of several replicas, added."""
    result = EMPTY_SUMS
    for part in parts:
        result = result.merged(part)
    return result


def sums_to_json(replica: str, sums: Sums) -> str:
    return json.dumps({"version": SHARED_VERSION, "replica": replica, "through": sums.through,
                       "evidence": sums.evidence.as_json(), "arms": arms_as_json(sums.arms)},
                      separators=(",", ":"), allow_nan=False)


def sums_from_json(text: str | bytes) -> tuple[str, Sums]:
    """(replica, its sums) from what `sums_to_json` wrote; raises `SharedSumsError`."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
        if not isinstance(data, dict) or data.get("version") != SHARED_VERSION:
            raise SharedSumsError(f"not version {SHARED_VERSION} sums")
        replica = data["replica"]
        if not isinstance(replica, str) or not replica:
            raise SharedSumsError("no replica name")
        through = data["through"]
        if not isinstance(through, str):
            raise SharedSumsError("no `through` timestamp")
        sums = Sums(RouteEvidence.from_json(data["evidence"]), arms_from_json(data["arms"]),
                    through)
        EMPTY_SUMS.merged(sums)  # shapes that do not add (a matrix of another size) fail here
    except SharedSumsError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise SharedSumsError(f"malformed sums ({type(exc).__name__}: {exc})") from exc
    _check_finite(data)
    return replica, sums


def _refuse_constant(name: str) -> Any:
    raise SharedSumsError(f"{name} in shared sums")


def _check_finite(value: Any) -> None:
    """Infinities written as huge literals (1e999) parse as inf: refused as NaN is."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SharedSumsError("a non-finite number in shared sums")
    if isinstance(value, dict):
        for item in value.values():
            _check_finite(item)
    elif isinstance(value, list):
        for item in value:
            _check_finite(item)
