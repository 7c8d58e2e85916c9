"""Prove a freshly built llama-server works on this CPU before it enters the cache.

A binary can build cleanly and still crash at the first matmul (ggml's AMX kernels did, on
the local models). So it is started on a small model with a one-token draft (the code paths
the local instances use, at llama-server's default slots as they run), asked for a few
tokens, and stopped by PID. The result carries the end of the server's log, quoted in the
error when every flag set failed.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from backends.local.cache import free_loopback_port

SMOKE_PROMPT = "The capital of France is"
SMOKE_TOKENS = 8


@dataclass(frozen=True, slots=True)
class SmokeResult:
    ok: bool
    detail: str  # what happened, one line
    log_tail: str  # the last lines of the server's output


def smoke_test(binary: Path, model: Path, log: Path, *, timeout_s: float = 120.0) -> SmokeResult:
    """Start `binary` on `model` (its own one-token draft) on loopback, generate
    SMOKE_TOKENS tokens at temperature 0, stop it; never raises for a failing binary."""
    port = free_loopback_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--threads", "1", "--ctx-size", "512",
            "-md", str(model), "--spec-type", "draft-simple", "--spec-draft-n-max", "1"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as sink:
        try:
            process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        except OSError as error:
            return SmokeResult(False, f"could not start {binary}: {error}", "")
        try:
            detail = _exercise(process, f"http://127.0.0.1:{port}", time.monotonic() + timeout_s)
        finally:
            _stop(process)
    ok = detail.startswith("generated")
    return SmokeResult(ok, detail, log_tail(log))


def _exercise(process: subprocess.Popen[bytes], base: str, deadline: float) -> str:
    """Wait until ready, then ask for tokens; a line saying what happened."""
    while True:
        if process.poll() is not None:
            return f"the server exited with code {process.returncode} while loading the model"
        if _get_status(base + "/health") == 200:
            break
        if time.monotonic() > deadline:
            return "the server was not ready within the time limit"
        time.sleep(0.2)
    body = {"prompt": SMOKE_PROMPT, "n_predict": SMOKE_TOKENS, "temperature": 0,
            "cache_prompt": False}
    try:
        reply = _post_json(base + "/completion", body, max(1.0, deadline - time.monotonic()))
    except (OSError, ValueError) as error:
        code = process.poll()
        exited = f"; the server exited with code {code}" if code is not None else ""
        return f"generation failed: {error}{exited}"
    predicted = reply.get("tokens_predicted")
    produced = predicted if isinstance(predicted, int) else 0
    if produced < 1:
        return f"the server answered but generated no token: {json.dumps(reply)[:200]}"
    return f"generated {produced} tokens: {str(reply.get('content', ''))[:60]!r}"


def _get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def _post_json(url: str, body: dict[str, object], timeout: float) -> dict[str, object]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    if not isinstance(reply, dict):
        raise ValueError(f"not a JSON object: {str(reply)[:100]}")  # noqa: TRY004
    return reply


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, then SIGKILL."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def log_tail(log: Path, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        text = log.read_text(errors="replace")
        return "\n".join(text.rstrip().splitlines()[-lines:])
    return ""
