"""The routing policy file (YAML): typed, frozen, unknown keys rejected.

Pure data and validation. Read with `fileio.yamlfile.load_model(path, Policy)` so that errors
carry the file, line and field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from classifiers.scores import CLASSES
from policies.policyfile.pools import PoolRoute
from policies.policyfile.words import ROUTE_WORDS, Profile, Route


def _route_kind(value: Any) -> str:
    return "[route]" if isinstance(value, str) and value in ROUTE_WORDS else "[pool route]"


# A class route: `mtp | plain | auto`, or a named pool / a pool with a rewrite / arms
# (`policies.policyfile.pools.PoolRoute`; a bare name that is not a route word is a pool's name).
RouteSpec = Annotated[
    Annotated[Route, Tag("[route]")] | Annotated[PoolRoute, Tag("[pool route]")],
    Discriminator(_route_kind),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Assume(_Strict):
    """What to assume about a request that does not say (engine defaults differ)."""

    temperature: float = Field(1.0, description="temperature when the request sets none")
    thinking: bool = Field(False, description="thinking mode when the request does not say")


class Overrides(_Strict):
    """Rules checked before the class route, in this order."""

    header: bool = Field(True, description="honour the x-specroute-route request header")
    models: dict[str, Profile] = Field(default_factory=dict, description="model alias -> profile")
    api_keys: dict[str, Profile] = Field(
        default_factory=dict, description="API-key name (see config) -> profile"
    )
    sampled: Profile | None = Field(
        "plain", description="profile for temperature > 0 (speculation only pays on greedy)"
    )
    thinking: Profile | None = Field("plain", description="profile for thinking mode")
    response_format: dict[Literal["json"], Profile] = Field(
        default_factory=dict, description="json (json_object or json_schema) -> profile"
    )


class Exploration(_Strict):
    max_regret: float = Field(
        0.02, ge=0.0, le=0.5,
        description="most a Thompson draw may cost a request, as a share of its best "
                    "predicted finish (of a typical request's, when its answer is expected "
                    "longer; 0: route by the posterior mean only)",
    )
    min_samples: int = Field(
        30, ge=1,
        description="requests per arm before a class's measured speedup is trusted, and per "
                    "arm of a pool route before its measured best is its default",
    )
    arms_rate: float = Field(
        0.05, ge=0.0, le=0.5,
        description="largest share of a route's requests sent to one of its other arms "
                    "(routes with several arms) to keep comparing them",
    )


class Stickiness(_Strict):
    enabled: bool = True
    ttl_s: float = Field(1800.0, gt=0, description="forget a conversation after this idle time")
    max_conversations: int = Field(10_000, ge=1)


class Policy(_Strict):
    schema_version: Literal[1] = 1
    prior: str = Field(
        "neutral",
        description="machine prior to start from: neutral (nothing assumed), gb10-ds4, "
                    "local-pair, or a YAML file (relative to the policy file)",
    )
    fallback: Profile = Field("plain", description="profile when the classifier fails")
    default: Route = Field("plain", description="profile for a class with no route")
    routes: dict[str, RouteSpec] = Field(default_factory=dict, description="class -> route")
    languages: dict[str, dict[str, RouteSpec]] = Field(
        default_factory=dict, description="lang -> {class -> route}, wins over routes"
    )
    assume: Assume = Field(default_factory=Assume)
    overrides: Overrides = Field(default_factory=Overrides)
    exploration: Exploration = Field(default_factory=Exploration)
    stickiness: Stickiness = Field(default_factory=Stickiness)

    @field_validator("routes")
    @classmethod
    def _known_classes(cls, routes: dict[str, RouteSpec]) -> dict[str, RouteSpec]:
        bad = sorted(c for c in routes if c not in CLASSES)
        if bad:
            raise ValueError(f"unknown class(es) {bad}; known: {list(CLASSES)}")
        return routes

    @field_validator("languages")
    @classmethod
    def _known_classes_per_lang(
        cls, languages: dict[str, dict[str, RouteSpec]]
    ) -> dict[str, dict[str, RouteSpec]]:
        for routes in languages.values():
            cls._known_classes(routes)
        return languages

    def route_for(self, top_class: str, lang: str) -> tuple[Route, str]:
        """The built-in route for a class and language, and the rule that gave it. Pool routes
        are skipped here: `policies.decision.route.decide_route` resolves those."""
        for table, rule in self._tables(top_class, lang):
            route = table.get(top_class)
            if isinstance(route, str):
                return route, rule
        return self.default, "default"

    def class_route(self, top_class: str, lang: str, endpoint: str) -> tuple[RouteSpec, str]:
        """The route for a class and language on `endpoint` (a pool route applies only to the
        endpoints it lists), and the rule that gave it."""
        for table, rule in self._tables(top_class, lang):
            route = table.get(top_class)
            if route is not None and (isinstance(route, str) or route.applies_to(endpoint)):
                return route, rule
        return self.default, "default"

    def _tables(self, top_class: str, lang: str) -> list[tuple[dict[str, RouteSpec], str]]:
        return [
            (self.languages.get(lang, {}), f"languages.{lang}.{top_class}"),
            (self.routes, f"routes.{top_class}"),
        ]
