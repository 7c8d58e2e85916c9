"""Record real llama-server responses (SmolLM2 pair from the cache) for the stats-parser tests.

    python -m tests.backends.record_llamacpp [--out tests/backends/recordings]

Launches the plain and the depth-1 instance through the supervisor, sends a few greedy requests
(`cache_prompt: false`) and saves exactly what came back: JSON bodies, the SSE bytes of streams,
and the Prometheus text of `/metrics` before and after, plus `requests.json` (what was sent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from backends.local.pair import local_pair_specs
from backends.supervisor import Supervisor

HERE = Path(__file__).resolve().parent
MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def requests_to_record(model: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """file stem -> (instance, path, body)."""
    chat = {"model": model, "messages": MESSAGES, "max_tokens": 24, "temperature": 0,
            "cache_prompt": False}
    return {
        "chat_mtp": ("mtp", "/v1/chat/completions", chat),
        "chat_plain": ("plain", "/v1/chat/completions", chat),
        "chat_stream_mtp": ("mtp", "/v1/chat/completions",
                            {**chat, "stream": True, "stream_options": {"include_usage": True}}),
        "chat_stream_plain": ("plain", "/v1/chat/completions", {**chat, "stream": True}),
        "completions_mtp": ("mtp", "/v1/completions",
                            {"model": model, "prompt": "def fibonacci(n):", "max_tokens": 24,
                             "temperature": 0, "cache_prompt": False}),
    }


async def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plain, mtp = local_pair_specs("smollm2", parallel=1)  # as the recordings were made
    urls = {"plain": plain.base_url, "mtp": mtp.base_url}
    model = Path(plain.launch.model).stem if plain.launch else ""
    async with aiohttp.ClientSession() as session:
        supervisor = Supervisor([plain, mtp], tempfile.mkdtemp(prefix="record-"), session=session)
        await supervisor.start()
        try:
            await _save_get(session, urls["mtp"] + "/v1/models", out / "models_mtp.json")
            await _save_get(session, urls["mtp"] + "/metrics", out / "metrics_mtp_before.txt")
            sent = {}
            for stem, (instance, path, body) in requests_to_record(model).items():
                suffix = ".sse" if body.get("stream") else ".json"
                async with session.post(urls[instance] + path, json=body) as response:
                    (out / f"{stem}{suffix}").write_bytes(await response.read())
                sent[stem] = {"instance": instance, "path": path, "body": body}
            await _save_get(session, urls["mtp"] + "/metrics", out / "metrics_mtp_after.txt")
            (out / "requests.json").write_text(json.dumps(sent, indent=2) + "\n")
        finally:
            await supervisor.stop()


async def _save_get(session: aiohttp.ClientSession, url: str, path: Path) -> None:
    async with session.get(url) as response:
        response.raise_for_status()
        path.write_bytes(await response.read())


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", default=str(HERE / "recordings"), help="where to write")
    asyncio.run(record(Path(parser.parse_args().out)))


if __name__ == "__main__":
    main()
