"""The app's injected dependencies: request ids."""

from __future__ import annotations

import re

from router.state import Deps


def test_request_ids_are_unique_and_shaped_as_before() -> None:
    first, second = Deps().new_request_id, Deps().new_request_id
    ids = [first() for _ in range(20_000)] + [second() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)  # 80 random bits each; two apps draw different ones
    assert all(re.fullmatch(r"req_[0-9a-f]{20}", i) for i in ids)
