"""Launch blocks for real vLLM instances on this CPU, from the cache `make vllm` fills.

`vllm_specs` gives one `engine: vllm` BackendSpec per speculation config (`plain`, or any
config vLLM runs: `NGRAM` is prompt lookup as the issue measured it), each launched by the
supervisor through the adapter's own command line (`backends.engines`): the venv's Python as
`launch.binary` runs `vllm.entrypoints.openai.api_server`, and a speculating instance gets
`--per-request-spec-decode-metrics summary` there. Here go only what this machine needs:

- `--enforce-eager`: ~30 s to ready rather than 85-118 s of torch.compile;
- `--dtype` the converted model's (SmolLM2 float32: plain and n-gram answer the same bytes);
- `--max-model-len` (the KV cache is `VLLM_CPU_KVCACHE_SPACE` GiB, `server_env`);
- `VLLM_CPU_OMP_THREADS_BIND`: vLLM's `auto` binds every instance to core 0 (and reserves the
  rest), so the instances would share one core: each gets its own, round robin.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from backends.local.cache import LocalBackendError, free_loopback_port
from backends.local.vllm import find_all, server_env
from backends.local.vllm_models import VLLM_MODELS
from backends.spec import BackendSpec, LaunchSpec, Speculation

TEST_MODEL: Final = "smollm2-135m"
BENCH_MODEL: Final = "qwen2.5-coder-0.5b"
# prompt lookup: up to 4 tokens drafted from a 2-4 token match in what came before
NGRAM: Final = Speculation(type="ngram", depth=4,
                           knobs={"prompt_lookup_max": 4, "prompt_lookup_min": 2})
READY_TIMEOUT_S: Final = 600.0  # ~30 s idle, minutes on a busy 2-core machine

VllmConfig = str | Speculation  # "plain", or a speculation config


def vllm_specs(
    configs: Sequence[VllmConfig] = ("plain", NGRAM),
    *,
    model: str = TEST_MODEL,
    ports: Sequence[int] = (),
    root: Path | None = None,
    max_model_len: int = 2048,
    max_num_seqs: int | None = None,
    args: Sequence[str] = (),
) -> list[BackendSpec]:
    """One launch spec of the cached `model` per config, named `vllm-{key}` (`vllm-plain`,
    `vllm-ngram`); each serves the model as `model` (the same id on all: the probe compares).

    Raises LocalBackendError naming `make vllm` when the venv or the model is not cached.
    `max_num_seqs`: the requests each batches at once (None: vLLM's default). `args` are added
    to every instance's (`--per-request-spec-decode-metrics` there stops the default one).
    """
    found = find_all(root, (model,))
    if found is None:
        raise LocalBackendError(f"vLLM or its {model} model is not in the cache; run: make vllm "
                                "(python -m backends.local.vllm ensure)")
    install, models = found
    cores = os.cpu_count() or 1
    common = ["--enforce-eager", "--dtype", VLLM_MODELS[model].dtype,
              "--max-model-len", str(max_model_len), "--served-model-name", model,
              *(["--max-num-seqs", str(max_num_seqs)] if max_num_seqs else []), *args]
    picked = [*ports, *[0] * (len(configs) - len(ports))]
    specs = []
    for index, (config, port) in enumerate(zip(configs, picked)):
        env = {**server_env(install), "VLLM_CPU_OMP_THREADS_BIND": str(index % cores)}
        launch = LaunchSpec(binary=str(install.python), model=str(models[model]),
                            port=port or free_loopback_port(), args=common, env=env,
                            ready_timeout_s=READY_TIMEOUT_S)
        if isinstance(config, Speculation):
            specs.append(BackendSpec(name=f"vllm-{config.key}", engine="vllm",
                                     speculation=config, launch=launch))
        else:
            specs.append(BackendSpec(name="vllm-plain", engine="vllm", profile="plain",
                                     launch=launch))
    return specs
