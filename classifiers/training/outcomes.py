"""What the proxy observed for one request, as the trainer reads it from decision logs.

Pure data. The router builds these from its log records (classifiers never import the router)
and passes a reader to `specroute train --logs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoggedOutcome:
    features: Mapping[str, float | int | bool]  # the logged request features, by name
    top_class: str  # the class the classifier gave at the time
    lang: str
    profile: str  # "mtp" | "plain": the profile that served the request
    acceptance: float | None  # draft tokens accepted / drafted, when the backend reported it
    decode_tps: float | None  # measured decode tokens/s


LogReader = Callable[[list[str]], Iterable[LoggedOutcome]]
