"""The engines' queue gauges, from real and hostile /metrics text."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.gauges import EngineLoad, has_gauges, parse_gauges

RECORDINGS = Path(__file__).parent / "recordings"


def test_a_real_llama_server_scrape_reads_as_idle() -> None:
    text = (RECORDINGS / "metrics_mtp_after.txt").read_text(encoding="utf-8")
    assert parse_gauges("llamacpp", text) == EngineLoad(0, 0)


def test_vllm_gauges_are_summed_over_label_sets() -> None:
    text = ('vllm:num_requests_running{model_name="a"} 2.0\n'
            'vllm:num_requests_running{model_name="b"} 1.0\n'
            'vllm:num_requests_waiting{model_name="a"} 4.0\n'
            'vllm:num_requests_waiting_by_reason{reason="x"} 99\n')  # a longer name: not it
    load = parse_gauges("vllm", text)
    assert load == EngineLoad(3, 4) and load is not None and load.requests == 7


def test_sglang_gauges() -> None:
    text = "sglang:num_running_reqs{tp_rank=\"0\"} 5\nsglang:num_queue_reqs{tp_rank=\"0\"} 2\n"
    assert parse_gauges("sglang", text) == EngineLoad(5, 2)


@pytest.mark.parametrize("text", [
    "llamacpp:requests_processing 1\n",  # one gauge missing
    "llamacpp:requests_processing -1\nllamacpp:requests_deferred 0\n",  # negative
    "llamacpp:requests_processing busy\nllamacpp:requests_deferred 0\n",  # not a number
    "llamacpp:requests_processing NaN\nllamacpp:requests_deferred 0\n",
    "llamacpp:requests_processing +Inf\nllamacpp:requests_deferred 0\n",
    "<html>502 Bad Gateway</html>",
    "",
])
def test_gauges_that_are_missing_or_lie_are_not_trusted(text: str) -> None:
    assert parse_gauges("llamacpp", text) is None


def test_engines_without_gauges() -> None:
    assert not has_gauges("ds4") and not has_gauges("openai") and has_gauges("llamacpp")
    assert parse_gauges("ds4", "llamacpp:requests_processing 1\n") is None
