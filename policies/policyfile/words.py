"""The words a policy is written in, each defined once: an instance's profiles, what a route
may name besides a named pool, and the language key that pools every language.

Pure data.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Profile = Literal["mtp", "plain"]  # an instance with depth-1 speculation, or without
Route = Literal["mtp", "plain", "auto"]  # auto: the soonest predicted finish decides
PROFILES: Final[tuple[Profile, ...]] = get_args(Profile)
ROUTE_WORDS: Final[tuple[Route, ...]] = get_args(Route)
ANY_LANG: Final = "*"  # "class/*": a class's figures over every language
