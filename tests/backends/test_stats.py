"""Stats parsers on the shapes each engine documents: vLLM, SGLang, Prometheus text (pure).
The llama.cpp parser is tested on real recordings in test_recordings.py."""

from __future__ import annotations

from typing import Any

import pytest

from backends.stats import (
    EMPTY,
    SpecCounters,
    UpstreamReport,
    counter_delta,
    parse_prometheus,
    read_report,
)

VLLM_SPEC = {"mean_acceptance_length": 1.8, "draft_acceptance_rate": 0.8,
             "num_draft_tokens": 20, "num_accepted_draft_tokens": 16}


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # vLLM --per-request-spec-decode-metrics, non-stream response
        ({"usage": {"prompt_tokens": 9, "completion_tokens": 36},
          "metrics": {"speculative_decoding": VLLM_SPEC}},
         UpstreamReport(prompt_tokens=9, completion_tokens=36, draft_n=20, draft_accepted=16,
                        spec_source="metrics")),
        # vLLM streaming: the final usage chunk
        ({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 36,
                                   "prompt_tokens_details": {"cached_tokens": 8}},
          "metrics": {"speculative_decoding": VLLM_SPEC}},
         UpstreamReport(prompt_tokens=9, cached_tokens=8, completion_tokens=36, draft_n=20,
                        draft_accepted=16, spec_source="metrics")),
        # vLLM without the per-request flag: no speculative stats
        ({"metrics": {}}, EMPTY),
        # SGLang OpenAI API with return_meta_info: per choice, newer counters
        ({"choices": [{"index": 0, "meta_info": {
            "prompt_tokens": 12, "completion_tokens": 30, "cached_tokens": 4,
            "spec_verify_ct": 18, "spec_accept_token_num": 12, "spec_draft_token_num": 18}}]},
         UpstreamReport(prompt_tokens=12, cached_tokens=4, completion_tokens=30, draft_n=18,
                        draft_accepted=12, spec_source="meta_info")),
        # SGLang without the counters: depth 1 derives them from verify count and tokens
        ({"meta_info": {"completion_tokens": 30, "spec_verify_ct": 20,
                        "spec_accept_length": 1.5}},
         UpstreamReport(completion_tokens=30, draft_n=20, draft_accepted=10,
                        spec_source="meta_info")),
        # SGLang without speculation: nothing speculative to report
        ({"meta_info": {"completion_tokens": 30}}, EMPTY),
        # usage alone (ds4, openai)
        ({"usage": {"prompt_tokens": 5, "completion_tokens": 7,
                    "prompt_tokens_details": {"cached_tokens": 3}}},
         UpstreamReport(prompt_tokens=5, cached_tokens=3, completion_tokens=7)),
        # junk is nothing, never an exception
        ({"metrics": {"speculative_decoding": {"num_draft_tokens": "x"}}, "meta_info": []}, EMPTY),
        ([1, 2], EMPTY),
        (None, EMPTY),
    ],
)
def test_read_report(payload: Any, expected: UpstreamReport) -> None:
    assert read_report(payload) == expected


PROMETHEUS = """\
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",model_name="m"} 100.0
llamacpp:prompt_tokens_total 345
llamacpp:n_busy_slots_per_decode 1.5e0 1712345678000
weird{label="has } brace"} 2
nan_metric NaN
not a sample line
"""


def test_parse_prometheus_sums_label_sets_and_skips_junk() -> None:
    assert parse_prometheus(PROMETHEUS) == {
        "vllm:spec_decode_num_draft_tokens_total": 150.0,
        "vllm:spec_decode_num_accepted_tokens_total": 100.0,
        "vllm:spec_decode_num_accepted_tokens_per_pos_total": 100.0,
        "llamacpp:prompt_tokens_total": 345.0,
        "llamacpp:n_busy_slots_per_decode": 1.5,
        "weird": 2.0,
    }


COUNTERS = SpecCounters(draft_tokens="d_total", accepted_tokens="a_total")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({"d_total": 10, "a_total": 7}, {"d_total": 25, "a_total": 19},
         UpstreamReport(draft_n=15, draft_accepted=12, spec_source="prometheus")),
        # first scrape before any speculation: the counters did not exist yet
        ({}, {"d_total": 4, "a_total": 3},
         UpstreamReport(draft_n=4, draft_accepted=3, spec_source="prometheus")),
        # nothing ran: a zero delta is an observation (no drafts), not missing data
        ({"d_total": 4, "a_total": 3}, {"d_total": 4, "a_total": 3},
         UpstreamReport(draft_n=0, draft_accepted=0, spec_source="prometheus")),
        # the engine restarted between the scrapes: counters went down, no delta
        ({"d_total": 40, "a_total": 30}, {"d_total": 4, "a_total": 3}, EMPTY),
        # the engine does not export them
        ({}, {"other_total": 1}, EMPTY),
    ],
)
def test_counter_delta(
    before: dict[str, float], after: dict[str, float], expected: UpstreamReport
) -> None:
    assert counter_delta(before, after, COUNTERS) == expected
