"""A local-backend cache laid out on disk for tests: a stub llama-server and the Qwen pair's
model files (nothing here runs; tests/integration launches the real ones)."""

from __future__ import annotations

import platform
from pathlib import Path

from backends.local.build import server_dir
from backends.local.flags import flag_sets
from backends.local.models import MODELS


def lay_out_qwen_cache(root: Path) -> Path:
    """The stub server and the Qwen target and draft under `root`; returns the server path."""
    server = server_dir(root, flag_sets(platform.machine())[0]) / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    models = root / "models"
    models.mkdir()
    for key in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        (models / MODELS[key].file_name).write_bytes(b"gguf")
    return server
