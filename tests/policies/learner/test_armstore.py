"""The arms' state on disk: the holder takes in what `specroute learn` wrote, keeps its state
through a bad or deleted file, and does not read back what the proxy's learner just set."""

from __future__ import annotations

from pathlib import Path

from policies.learner.arms import EMPTY_ARMS, ArmObservation, learn_arms
from policies.learner.armstore import ArmsHolder, write_arms


def test_the_holder_follows_the_file_and_keeps_its_state_through_bad_saves(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.arms.json"
    holder = ArmsHolder(path)
    assert holder.state == EMPTY_ARMS and holder.reload_if_changed() is False
    learned = learn_arms(ArmObservation("chat", "en", "plain", 14.0, 2000.0, 100) for _ in range(3))
    write_arms(path, learned)
    assert holder.reload_if_changed() is True and holder.state == learned
    path.write_text("not json", encoding="utf-8")
    assert holder.reload_if_changed() is False and holder.state == learned
    path.unlink()
    assert holder.reload_if_changed() is False and holder.state == learned


def test_a_state_the_proxy_set_is_not_read_back(tmp_path: Path) -> None:
    path = tmp_path / "p.arms.json"
    holder = ArmsHolder(path)
    mine = learn_arms(ArmObservation("chat", "en", "mtp", 20.0, 1500.0, 80) for _ in range(2))
    write_arms(path, mine)
    holder.set(mine)
    assert holder.reload_if_changed() is False and holder.state is mine
