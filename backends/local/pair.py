"""The embedded default backend: a plain and a depth-1 llama-server on loopback, from the cache.

Two pairs: `smollm2` (SmolLM2-135M as its own draft: 98 MB, starts in half a second, for tests)
and `qwen` (Qwen2.5-Coder-1.5B with the 0.5B as draft, same tokenizer, for the demo).

    python -m backends.local.pair ensure [smollm2|qwen]   # build/download once, print the paths
    python -m backends.local.pair where [smollm2|qwen]    # print the paths, or what is missing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from backends.local.build import cached_server, ensure_llama_server, server_summary
from backends.local.cache import (
    LocalBackendError,
    Progress,
    cache_root,
    free_loopback_port,
    stderr_progress,
)
from backends.local.models import MODELS, cached_model, ensure_model
from backends.spec import BackendSpec, LaunchSpec

SMOKE_MODEL = "smollm2-135m"  # starts in half a second: the build's smoke test runs on it

PAIRS: dict[str, tuple[str, str]] = {  # kind -> (target model, draft model)
    "smollm2": ("smollm2-135m", "smollm2-135m"),
    "qwen": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"),
}


@dataclass(frozen=True, slots=True)
class LocalPair:
    kind: str
    server: Path
    target: Path
    draft: Path


def _pair_assets(kind: str) -> tuple[str, str]:
    if kind not in PAIRS:
        raise LocalBackendError(f"unknown local pair {kind!r}; choose one of {sorted(PAIRS)}")
    return PAIRS[kind]


def find_pair(kind: str, root: Path | None = None) -> LocalPair | None:
    """The cached pair, or None if anything is missing (never builds or downloads)."""
    root = cache_root() if root is None else root
    target_key, draft_key = _pair_assets(kind)
    server = cached_server(root)
    target = cached_model(root, MODELS[target_key])
    draft = cached_model(root, MODELS[draft_key])
    if server is None or target is None or draft is None:
        return None
    return LocalPair(kind, server, target, draft)


def ensure_pair(kind: str, root: Path | None = None, progress: Progress = stderr_progress) -> LocalPair:
    """Build llama-server and assemble the pair's models if they are not cached yet."""
    root = cache_root() if root is None else root
    target_key, draft_key = _pair_assets(kind)
    # Models first: downloads are quick, the build is the long part and shows its own progress.
    target = ensure_model(root, MODELS[target_key], progress)
    draft = ensure_model(root, MODELS[draft_key], progress)
    # every build is smoke-tested on the small model before it is cached
    smoke_model = ensure_model(root, MODELS[SMOKE_MODEL], progress)
    server = ensure_llama_server(root, progress, smoke_model)
    progress(f"using {server_summary(server)}")
    return LocalPair(kind, server, target, draft)


def local_pair_specs(
    kind: str,
    *,
    plain_port: int = 0,
    mtp_port: int = 0,
    root: Path | None = None,
    threads: int = 0,
    ctx: int = 4096,
) -> list[BackendSpec]:
    """The plain and the depth-1 launch specs for the cached pair `kind`.

    Ports 0 (the default) are free loopback ports picked here. Raises LocalBackendError naming
    the command to run when the pair is not cached.
    `threads` 0 gives each instance half the cores: two instances share the machine, and
    llama.cpp's thread barrier collapses when its threads compete for a core (measured on a
    busy 2-core VM, SmolLM2: ~55 tok/s with 1 thread, 4-8 tok/s with 2). `ctx` bounds the KV
    memory of each instance.
    """
    pair = find_pair(kind, root)
    if pair is None:
        raise LocalBackendError(
            f"the local {kind} pair is not in the cache ({cache_root() if root is None else root});"
            f" run: python -m backends.local.pair ensure {kind}"
        )
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    args = ["--ctx-size", str(ctx), "--parallel", "1", "--threads", str(threads)]
    args += ["--alias", pair.target.stem]  # both instances report the same model id

    def launch(port: int, draft: str) -> LaunchSpec:
        return LaunchSpec(binary=str(pair.server), model=str(pair.target), draft=draft,
                          spec_method="draft" if draft else "auto", port=port, args=args,
                          ready_timeout_s=120.0)

    plain = launch(plain_port or free_loopback_port(), "")
    mtp = launch(mtp_port or free_loopback_port(), str(pair.draft))
    return [
        BackendSpec(name=f"{kind}-plain", engine="llamacpp", profile="plain", launch=plain),
        BackendSpec(name=f"{kind}-mtp", engine="llamacpp", profile="mtp", launch=mtp),
    ]


def _describe(pair: LocalPair) -> str:
    return json.dumps({key: str(value) for key, value in asdict(pair).items()}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m backends.local.pair",
        description="Build and cache the local llama.cpp backend pair.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("verb", choices=("ensure", "where"),
                        help="ensure: build/download what is missing; where: only report")
    parser.add_argument("kind", nargs="?", default="smollm2", choices=sorted(PAIRS),
                        help="which model pair")
    parser.add_argument("--cache-dir", default=str(cache_root()),
                        help="cache directory (${XDG_CACHE_HOME:-~/.cache}/specroute)")
    options = parser.parse_args(argv)
    root = Path(options.cache_dir)
    started = time.monotonic()
    try:
        if options.verb == "where":
            found = find_pair(options.kind, root)
            if found is None:
                print(f"the {options.kind} pair is not cached under {root}", file=sys.stderr)
                return 1
            print(_describe(found))
            return 0
        pair = ensure_pair(options.kind, root)
    except LocalBackendError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stderr_progress(f"{options.kind} pair ready in {time.monotonic() - started:.1f}s")
    print(_describe(pair))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
