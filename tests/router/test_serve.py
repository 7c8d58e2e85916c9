"""The serving process's set-up: the collector tuned once the app is loaded."""

from __future__ import annotations

import gc

from router.serve import GC_YOUNG_THRESHOLD, tune_gc


def test_what_was_loaded_is_frozen_and_the_young_pass_runs_less_often() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_freeze_count() > 0  # loaded objects: out of the collector's way
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
