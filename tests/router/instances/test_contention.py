"""How replicas deal the instances out and learn how often they collide (pure)."""

from __future__ import annotations

import pytest

from router.instances.contention import HORIZON, Contention, ranks, share

NAMES = ["mtp-0", "plain-0", "mtp-1", "plain-1"]
PROFILES = ["mtp", "plain", "mtp", "plain"]


def test_each_replica_gets_its_part_of_each_kind_of_instance() -> None:
    assert share(NAMES, PROFILES, 0, 2) == {"mtp-0", "plain-0"}
    assert share(NAMES, PROFILES, 1, 2) == {"mtp-1", "plain-1"}
    assert share(NAMES, PROFILES, 0, 1) == set(NAMES)  # alone: all of them
    dealt = [share(NAMES, PROFILES, p, 3) for p in range(3)]
    assert set().union(*dealt) == set(NAMES) and sum(map(len, dealt)) == len(NAMES)
    # one pair, two replicas: one each, the mtp instance to the first
    assert share(["mtp", "plain"], ["mtp", "plain"], 0, 2) == {"mtp"}


def test_own_share_ranks_first_in_list_order() -> None:
    assert ranks(NAMES, frozenset({"mtp-1", "plain-1"})) == {
        "mtp-1": 0, "plain-1": 1, "mtp-0": 2, "plain-0": 3}


def test_the_risk_is_learned_from_what_is_counted_and_fades() -> None:
    contention = Contention()
    assert contention.risk() == 0.0
    for _ in range(400):  # one blind request in four met another's
        for collided in (True, False, False, False):
            contention.observe(collided)
    assert contention.risk() == pytest.approx(0.25, abs=0.03)
    for _ in range(int(3 * HORIZON)):  # the traffic changed: nobody collides any more
        contention.observe(False)
    assert contention.risk() < 0.05
    for _ in range(int(2 * HORIZON)):  # and then everyone does
        contention.observe(True)
    assert 0.8 < contention.risk() <= 1.0  # a chance
