"""The whole suite's one hook: the line at the end of a run naming what was skipped, why, and
the command that installs what is missing (tests/missing.py)."""

from tests.missing import pytest_unconfigure

__all__ = ["pytest_unconfigure"]
