"""The client's pins, decided in one place: header (a profile or a named pool), model alias,
API key, in that order; `auto` pins nothing."""

from __future__ import annotations

import pytest

from policies.decision.pins import Pin, RequestContext, request_pin
from policies.policyfile.schema import Overrides, Policy

POLICY = Policy(overrides=Overrides(models={"deepseek-reasoner": "plain"},
                                    api_keys={"batch": "mtp"}))
POOLS = {"nothink", "ds4-plain"}


@pytest.mark.parametrize(
    ("context", "pin"),
    [
        (RequestContext(header_route=" MTP "), Pin("mtp", "header", "overrides.header")),
        (RequestContext(header_route="nothink"),
         Pin("nothink", "header", "overrides.header", pool=True)),
        (RequestContext(header_route="auto", model="DeepSeek-Reasoner"),
         Pin("plain", "model", "overrides.models.deepseek-reasoner")),
        (RequestContext(api_key_name="batch"), Pin("mtp", "api_key", "overrides.api_keys.batch")),
        (RequestContext(header_route="plain", api_key_name="batch"),
         Pin("plain", "header", "overrides.header")),  # the header first
        (RequestContext(header_route="auto"), None),
        (RequestContext(header_route="elsewhere"), None),  # not a pool of this config
        (RequestContext(), None),
    ],
)
def test_the_first_pin_wins(context: RequestContext, pin: Pin | None) -> None:
    assert request_pin(POLICY, context, POOLS) == pin


def test_a_policy_that_ignores_the_header_still_honours_the_other_pins() -> None:
    deaf = POLICY.model_copy(update={"overrides": POLICY.overrides.model_copy(
        update={"header": False})})
    assert request_pin(deaf, RequestContext(header_route="mtp"), POOLS) is None
    assert request_pin(deaf, RequestContext(header_route="mtp", api_key_name="batch"),
                       POOLS) == Pin("mtp", "api_key", "overrides.api_keys.batch")
