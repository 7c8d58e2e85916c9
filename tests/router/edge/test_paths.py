"""Which paths may be forwarded: normalised `/v1/...` only (pure)."""

from __future__ import annotations

import pytest

from router.edge.paths import forwardable_path


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/files/file-abc/content",
                                  "/v1/models/Qwen/Qwen2.5-7B:q4", "/v1/audio/speech"])
def test_normalised_paths_are_forwarded_as_they_are(path: str) -> None:
    assert forwardable_path(path) == path


@pytest.mark.parametrize("path", ["/v1/../props", "/v1/./models", "/v1//props", "/v1/", "/v1",
                                  "/props", "/v1/a/../../slots", "/v1/%2e%2e/props",
                                  "/v1/a\\..\\props", "/v1/é", "/v1/a b", "/v1/a\x00"])
def test_anything_else_is_refused(path: str) -> None:
    assert forwardable_path(path) is None
