"""The engines' own queue gauges: how many requests each instance is running and holding back.

Pure: Prometheus text in, an `EngineLoad` out. These gauges count every request on the
instance, whoever sent it (another specroute replica, a client that bypasses specroute), so the
router adds what they show beyond its own in-flight work to the finish rule's queue.

| engine   | running                        | waiting                          |
|----------|--------------------------------|----------------------------------|
| llamacpp | `llamacpp:requests_processing` | `llamacpp:requests_deferred`     |
| vllm     | `vllm:num_requests_running`    | `vllm:num_requests_waiting`      |
| sglang   | `sglang:num_running_reqs`      | `sglang:num_queue_reqs`          |

ds4 and a generic OpenAI server have none. Replicas share their own requests in flight in any
case (router/replicas/link); the gauges add the requests that bypassed every replica.
A gauge that is missing, not a number, negative or infinite makes the whole scrape untrusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, NamedTuple

from backends.stats import parse_sample

GAUGES: Final[Mapping[str, tuple[str, str]]] = {
    "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
}


class EngineLoad(NamedTuple):
    """Requests on an instance as its engine counts them."""

    running: int
    waiting: int

    @property
    def requests(self) -> int:
        return self.running + self.waiting


def has_gauges(engine: str) -> bool:
    return engine in GAUGES


def parse_gauges(engine: str, text: str) -> EngineLoad | None:
    """The engine's load from its `/metrics` text (label sets summed: vLLM labels by model), or
    None when the engine has no gauges or any of them is missing or implausible."""
    names = GAUGES.get(engine)
    if names is None:
        return None
    totals = {name: 0.0 for name in names}
    seen: set[str] = set()
    for line in text.splitlines():
        if not line.startswith(names):  # comments, other series
            continue
        parsed = parse_sample(line.strip())
        if parsed is None:
            return None  # a gauge line that is not a number: the scrape is not trusted
        name, value = parsed
        if name not in totals:
            continue  # a longer name with the same prefix
        if value < 0 or math.isinf(value):
            return None
        totals[name] += value
        seen.add(name)
    if seen != set(names):
        return None
    running, waiting = (totals[n] for n in names)
    return EngineLoad(round(running), round(waiting))
