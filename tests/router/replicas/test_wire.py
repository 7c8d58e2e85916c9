"""What the replicas read from the store, checked on the way in: a published load entry."""

from __future__ import annotations

import json

import pytest

from router.replicas.wire import load_entry


def _entry(work: object, **extra: object) -> bytes:
    return json.dumps({"replica": "r1", "work": work, **extra}).encode()


def test_each_request_is_its_prediction_and_elapsed_time_with_its_spread_when_known() -> None:
    entry = load_entry(_entry({"a": [[400.0, 10.0], [1000.0, 2000.0, 1.5, 13000.0]]},
                              url="http://127.0.0.1:8000"))
    assert entry == ("r1", {"a": [(400.0, 10.0), (1000.0, 2000.0, 1.5, 13000.0)]},
                     "http://127.0.0.1:8000")


@pytest.mark.parametrize("request_item", [
    [400.0],  # no elapsed time
    [400.0, 10.0, 1.5],  # a spread without its cap
    [400.0, 10.0, 1.5, 13000.0, 1.0],  # more than it could mean
    [400.0, -1.0],  # a negative time
    [400.0, 10.0, True, 1.0],  # not a number
    "400,10",
])
def test_a_malformed_request_refuses_the_whole_entry(request_item: object) -> None:
    # a part of an entry would undercount the replica's load
    assert load_entry(_entry({"a": [[400.0, 10.0], request_item]})) is None


def test_an_entry_that_is_not_a_replica_s_load_is_refused() -> None:
    assert load_entry(b"not json") is None
    assert load_entry(json.dumps({"work": {}}).encode()) is None  # whose?
    assert load_entry(_entry(["a"])) is None
    # a url that is not http(s) is not one to pass requests to
    assert load_entry(_entry({}, url="file:///etc/passwd")) == ("r1", {}, "")
