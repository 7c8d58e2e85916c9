"""Request rewrites: each field written where the endpoint and the engine read it."""

from __future__ import annotations

from typing import Any

import pytest

from classifiers.features import extract
from classifiers.request_view import view_request
from policies.policyfile.rewrite import Rewrite, apply_rewrite, missing_fields, rewritten_features

CHAT = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("endpoint", "engine", "body", "rewrite", "expected", "paths"),
    [
        # ds4 reads its own `thinking` on every endpoint
        ("chat", "ds4", CHAT, {"thinking": False},
         {"thinking": {"type": "disabled"}}, ["thinking.type"]),
        ("chat", "ds4", {**CHAT, "think": True}, {"thinking": False},
         {"thinking": {"type": "disabled"}, "think": False}, ["thinking.type", "think"]),
        ("responses", "ds4", {"model": "m", "input": "hi"}, {"thinking": True},
         {"thinking": {"type": "enabled"}}, ["thinking.type"]),
        # the chat template's switch elsewhere, other template kwargs kept
        ("chat", "llamacpp", {**CHAT, "chat_template_kwargs": {"x": 1}}, {"thinking": False},
         {"chat_template_kwargs": {"x": 1, "enable_thinking": False}},
         ["chat_template_kwargs.enable_thinking"]),
        ("chat", "vllm", CHAT, {"thinking": True},
         {"chat_template_kwargs": {"enable_thinking": True}},
         ["chat_template_kwargs.enable_thinking"]),
        # Anthropic's own field on /v1/messages, whatever the engine; no budget when disabled
        ("messages", "openai",
         {"model": "m", "max_tokens": 9, "thinking": {"type": "enabled", "budget_tokens": 2048},
          "messages": [{"role": "user", "content": "hi"}]},
         {"thinking": False}, {"thinking": {"type": "disabled"}}, ["thinking.type"]),
        # model and temperature are set; a cap keeps a smaller value and caps every length key
        ("completions", "llamacpp", {"model": "a", "prompt": "x"},
         {"model": "b", "temperature": 0.3, "max_tokens": 64},
         {"model": "b", "temperature": 0.3, "max_tokens": 64},
         ["model", "temperature", "max_tokens"]),
        ("chat", "ds4", {**CHAT, "max_tokens": 20}, {"max_tokens": 64}, {"max_tokens": 20}, []),
        ("chat", "ds4", {**CHAT, "max_tokens": 900, "max_completion_tokens": 800},
         {"max_tokens": 64}, {"max_tokens": 64, "max_completion_tokens": 64},
         ["max_tokens", "max_completion_tokens"]),
        ("responses", "vllm", {"model": "m", "input": "hi", "max_output_tokens": 500},
         {"max_tokens": 100}, {"max_output_tokens": 100}, ["max_output_tokens"]),
    ],
)
def test_fields_land_where_the_endpoint_and_engine_read_them(
    endpoint: str, engine: str, body: dict[str, Any], rewrite: dict[str, Any],
    expected: dict[str, Any], paths: list[str],
) -> None:
    applied = apply_rewrite(Rewrite(**rewrite), body, endpoint=endpoint, engine=engine)
    for key, value in expected.items():
        assert applied.body[key] == value
    assert list(applied.paths) == paths
    assert applied.changed == bool(paths)
    untouched = {k: v for k, v in body.items() if k not in expected}
    assert {k: applied.body[k] for k in untouched} == untouched
    assert "enable_thinking" not in str(body.get("chat_template_kwargs"))  # input not mutated


def test_the_record_says_what_changed_and_what_the_client_sent() -> None:
    applied = apply_rewrite(Rewrite(model="deepseek-chat", thinking=False), CHAT,
                            endpoint="chat", engine="ds4")
    assert applied.as_dict() == {
        "label": "model=deepseek-chat,thinking=off",
        "changes": {"model": "deepseek-chat", "thinking": False},
        "before": {"model": "deepseek-v4-flash", "thinking": None},
        "paths": ["model", "thinking.type"],
    }
    same = apply_rewrite(Rewrite(model="deepseek-v4-flash"), CHAT, endpoint="chat", engine="ds4")
    assert not same.changed and same.changes == {}


def test_completions_have_no_thinking() -> None:
    rewrite = Rewrite(thinking=False, model="x")
    assert missing_fields(rewrite, ["chat", "completions"]) == [("thinking", "completions")]
    with pytest.raises(ValueError, match="/v1/completions has no thinking"):
        apply_rewrite(rewrite, {"model": "a", "prompt": "x"}, endpoint="completions", engine="ds4")


def test_labels_are_stable() -> None:
    assert Rewrite(temperature=0.0, max_tokens=256, thinking=True, model="m").label() == (
        "model=m,thinking=on,max_tokens<=256,temperature=0"
    )
    assert Rewrite().label() == ""


def test_features_describe_the_request_as_sent() -> None:
    features = extract(view_request("chat", {**CHAT, "temperature": 0.9, "max_tokens": 500}))
    assert features.thinking_unset and features.temperature == 0.9
    sent = rewritten_features(features, Rewrite(model="deepseek-chat", temperature=0,
                                                max_tokens=100))
    assert (sent.thinking, sent.thinking_unset) == (False, False)  # the alias does not think
    assert (sent.temperature, sent.greedy, sent.max_tokens) == (0, True, 100)
    assert sent.n_messages == features.n_messages
    assert rewritten_features(features, None) is features


def test_the_learner_reads_a_rewritten_request_as_it_decoded() -> None:
    from tests.policies.learner.test_learn import observation_from_log

    record: dict[str, object] = {
        "schema_version": 1,
        "features": {"temperature": -1, "thinking": False, "thinking_unset": True},
        "classifier": {"class": "chat", "lang": "en", "p_spec": 0.3},
        "decision": {"profile": "plain"},
        "outcome": {"status": 200, "profile": "plain", "completion_tokens": 40, "decode_tps": 14.0},
    }
    plain = observation_from_log(record)
    assert plain is not None and plain.thinking is None and plain.temperature == -1
    rewritten = observation_from_log({**record, "rewrite": {
        "label": "model=deepseek-chat,temperature=0",
        "changes": {"model": "deepseek-chat", "temperature": 0.0}}})
    assert rewritten is not None
    assert (rewritten.thinking, rewritten.temperature) == (False, 0.0)


def test_a_model_name_must_fit_in_a_header() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Rewrite(model="deep seek")
    with pytest.raises(ValidationError):
        Rewrite(model="模型")
