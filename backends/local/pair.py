"""The embedded default backend: llama-server instances of one model on loopback, from the cache.

Two pairs of models: `smollm2` (SmolLM2-135M as its own draft: 98 MB, starts in half a second,
for tests) and `qwen` (Qwen2.5-Coder-1.5B with the 0.5B as draft, same tokenizer, for the demo).
`local_specs` gives one instance per speculation config asked for (plain, the shorthand mtp, or
any config llama.cpp runs: `THREE` is plain, n-gram prompt lookup and the depth-1 draft model);
`local_pair_specs` is the plain and depth-1 pair of them.

    python -m backends.local.pair ensure [smollm2|qwen]   # build/download once, print the paths
    python -m backends.local.pair where [smollm2|qwen]    # print the paths, or what is missing
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from backends.local.build import cached_server, ensure_llama_server, server_summary
from backends.local.cache import (
    LocalBackendError,
    Progress,
    cache_parser,
    cache_root,
    free_loopback_port,
    stderr_progress,
)
from backends.local.models import MODELS, cached_model, ensure_model
from backends.spec import DRAFT_MODEL_TYPES, BackendSpec, LaunchSpec, Profile, Speculation

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


# An instance's speculation config: the shorthand profile, or a declared config (backends.spec).
LocalConfig = Profile | Speculation
# plain, n-gram prompt lookup (the engine's own bounds), and the draft model at depth 1
THREE: Final[tuple[LocalConfig, ...]] = (
    "plain", Speculation(type="ngram-simple"), Speculation(type="draft", depth=1),
)


def local_specs(
    kind: str,
    configs: Sequence[LocalConfig],
    *,
    ports: Sequence[int] = (),
    root: Path | None = None,
    threads: int = 0,
    ctx: int = 4096,
    parallel: int | None = None,
) -> list[BackendSpec]:
    """One launch spec of the cached pair `kind`'s target per config, named `{kind}-{key}`
    (`qwen-plain`, `qwen-ngram-simple`, `qwen-draft`; the shorthand `mtp`: `qwen-mtp`).

    `ports` in config order; a missing or 0 one is a free loopback port picked here, apart from
    the others. Raises LocalBackendError naming the command to run when the pair is not cached,
    or when two configs would share a name. `threads` 0 gives each instance its share of the
    cores (at least one): the instances share the machine, and llama.cpp's thread barrier
    collapses when its threads compete for a core (measured on a busy 2-core VM, SmolLM2: ~55
    tok/s with 1 thread, 4-8 tok/s with 2). `ctx` bounds the KV memory of each instance.
    `parallel`: the requests each serves at once (`--parallel`); None leaves it to llama-server
    (its auto: 4, told on `/props`), 1 serves one at a time (what timed tests and benches
    compare). A config that drafts with a model (`draft`, `eagle3`, the shorthand `mtp`) gets
    the pair's draft unless it names its own.
    """
    pair = find_pair(kind, root)
    if pair is None:
        raise LocalBackendError(
            f"the local {kind} pair is not in the cache ({cache_root() if root is None else root});"
            f" run: python -m backends.local.pair ensure {kind}"
        )
    threads = threads or max(1, (os.cpu_count() or 2) // max(1, len(configs)))
    args = ["--ctx-size", str(ctx), *(["--parallel", str(parallel)] if parallel else []),
            "--threads", str(threads)]
    args += ["--alias", pair.target.stem]  # every instance reports the same model id
    picked = _free_ports([*ports, *[0] * (len(configs) - len(ports))])
    specs = [_local_spec(kind, pair, config, port, args) for config, port in zip(configs, picked)]
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise LocalBackendError(f"two local instances would share a name: {names}; give one "
                                "config a `name`")
    return specs


def local_pair_specs(
    kind: str,
    *,
    plain_port: int = 0,
    mtp_port: int = 0,
    root: Path | None = None,
    threads: int = 0,
    ctx: int = 4096,
    parallel: int | None = None,
) -> list[BackendSpec]:
    """The plain and the depth-1 (the shorthand mtp: the pair's draft model) launch specs for
    the cached pair `kind`: `local_specs(kind, ("plain", "mtp"), ...)`."""
    return local_specs(kind, ("plain", "mtp"), ports=(plain_port, mtp_port), root=root,
                       threads=threads, ctx=ctx, parallel=parallel)


def _local_spec(kind: str, pair: LocalPair, config: LocalConfig, port: int,
                args: list[str]) -> BackendSpec:
    def launch(draft: str) -> LaunchSpec:
        return LaunchSpec(binary=str(pair.server), model=str(pair.target), draft=draft,
                          spec_method="draft" if draft else "auto", port=port, args=args,
                          ready_timeout_s=120.0)

    if config == "plain":
        return BackendSpec(name=f"{kind}-plain", engine="llamacpp", profile="plain",
                           launch=launch(""))
    if config == "mtp":
        return BackendSpec(name=f"{kind}-mtp", engine="llamacpp", profile="mtp",
                           launch=launch(str(pair.draft)))
    needs_draft = config.type in DRAFT_MODEL_TYPES and not config.draft
    return BackendSpec(name=f"{kind}-{config.key}", engine="llamacpp", speculation=config,
                       launch=launch(str(pair.draft) if needs_draft else ""))


def _free_ports(asked: Sequence[int]) -> list[int]:
    """`asked`, each 0 replaced by a free loopback port none of the others uses."""
    taken = {port for port in asked if port}
    ports = []
    for port in asked:
        while not port:
            candidate = free_loopback_port()
            port = 0 if candidate in taken else candidate
        taken.add(port)
        ports.append(port)
    return ports


def _describe(pair: LocalPair) -> str:
    return json.dumps({key: str(value) for key, value in asdict(pair).items()}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = cache_parser("python -m backends.local.pair",
                          "Build and cache the local llama.cpp backend pair.",
                          "build/download what is missing")
    parser.add_argument("kind", nargs="?", default="smollm2", choices=sorted(PAIRS),
                        help="which model pair")
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
