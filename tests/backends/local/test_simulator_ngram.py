"""The simulated n-gram instance: replies follow the request, drafts follow the prompt."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from backends.local.simreply import EDIT_MARK, PREAMBLE, TEXT_MARK, edit_of, tokenize
from backends.local.simulator import MACHINES, CostModel, SimState, create_sim_app, decode_plan

FUNCTION = '''def total_price(items, discount=0.0):
    """The basket's total after a discount."""
    subtotal = 0.0
    for item in items:
        if item.quantity <= 0:
            continue
        subtotal += item.price * item.quantity
    if discount:
        subtotal *= 1 - discount
    return round(subtotal, 2)'''
RENAME = f"Rename `subtotal` to `amount` and return the whole function:\n```python\n{FUNCTION}\n```"
ONE_NAME = f"Rename `total_price` to `basket_total`; return it whole.\n```python\n{FUNCTION}\n```"
FREE = "Write a poem about autumn rain in the city."


def _body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "temperature": 0, "max_tokens": 400,
            "messages": [{"role": "user", "content": text}], **extra}


def _state(kind: str, **extra: Any) -> SimState:
    profile = "plain" if kind == "plain" else "mtp"
    return SimState(profile=profile, speculation="ngram" if kind == "ngram" else "",
                    reply_tokens=1024, cost=MACHINES["cpu-pair"], **extra)


@pytest.mark.parametrize(("text", "edit"), [
    (RENAME, True),
    ("Fix this:\n```\nx = 1/0\n```\nit divides by zero", True),
    ("Proofread this paragraph:\n> Teh cat sat\n> on teh mat.\n", True),
    (f"What does this function do?\n```python\n{FUNCTION}\n```", False),  # no edit asked
    ("Rename the variable x to y in my script.", False),  # nothing quoted
    (FREE, False),
])
def test_an_edit_is_quoted_text_with_an_ask_to_change_it(text: str, edit: bool) -> None:
    assert (edit_of(_body(text)) is not None) == edit


def test_an_edit_re_emits_the_quote_with_the_rename_asked() -> None:
    reply = "".join(decode_plan(_state("plain"), _body(RENAME)).tokens)
    assert reply.startswith(PREAMBLE + "```python\n")
    assert reply == f"{PREAMBLE}```python\n{FUNCTION.replace('subtotal', 'amount')}\n```\n"


def test_without_a_rename_one_line_is_marked_edited() -> None:
    reply = "".join(decode_plan(_state("plain"), _body(
        f"Add a docstring to this:\n```\n{FUNCTION}\n```")).tokens)
    assert reply.count(EDIT_MARK) == 1
    assert reply.replace(EDIT_MARK, "") == f"{PREAMBLE}```\n{FUNCTION}\n```\n"


def test_tokens_join_back_to_the_text() -> None:
    assert "".join(tokenize(FUNCTION)) == FUNCTION
    assert len(tokenize(FUNCTION)) < len(FUNCTION) // 2


@pytest.mark.parametrize("text", [RENAME, FREE])
async def test_every_instance_answers_the_same_bytes(text: str) -> None:
    answers = set()
    for kind in ("plain", "mtp", "ngram"):
        for stream in (False, True):
            async with TestClient(TestServer(create_sim_app(_state(kind)))) as client:
                response = await client.post("/v1/chat/completions",
                                             json=_body(text, stream=stream))
                answers.add(_text(await response.text(), stream))
    assert len(answers) == 1


def _text(raw: str, stream: bool) -> str:
    if not stream:
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    chunks = [json.loads(line[6:]) for line in raw.splitlines()
              if line.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def test_the_ngram_instance_drafts_the_copy_and_beats_plain_on_it() -> None:
    ngram, plain = (decode_plan(_state(kind), _body(ONE_NAME)) for kind in ("ngram", "plain"))
    assert ngram.tokens == plain.tokens
    assert ngram.accepted / ngram.draft_n > 0.7
    assert ngram.total_s < plain.total_s / 2


def test_acceptance_follows_how_much_of_the_answer_is_in_the_prompt() -> None:
    # a name on every other line breaks the copy more often than one on the first line
    many, one = (decode_plan(_state("ngram"), _body(t)) for t in (RENAME, ONE_NAME))
    assert many.accepted / many.draft_n < one.accepted / one.draft_n
    assert many.total_s > one.total_s


def test_on_free_text_it_drafts_nothing_at_plain_pace_plus_the_lookup() -> None:
    ngram, plain = decode_plan(_state("ngram"), _body(FREE)), decode_plan(_state("plain"),
                                                                          _body(FREE))
    assert ngram.tokens == plain.tokens and ngram.draft_n == 0
    cost = MACHINES["cpu-pair"]
    assert ngram.total_s == pytest.approx(plain.total_s * (1 + cost.lookup_share))


@pytest.mark.parametrize(("cost", "rows", "ms"), [
    (CostModel(t_plain_ms=60, t_verify_ms=100), 1, 60),
    (CostModel(t_plain_ms=60, t_verify_ms=100), 2, 100),  # MTP-1's verify, as before
    (CostModel(t_plain_ms=60, t_verify_ms=100), 5, 220),  # 40 ms per row past the first
    (CostModel(t_plain_ms=60, t_verify_ms=100, t_row_ms=10), 5, 100),
])
def test_a_verify_costs_more_with_every_row(cost: CostModel, rows: int, ms: float) -> None:
    assert cost.verify_ms(rows) == pytest.approx(ms)


async def test_it_reports_llama_cpp_timings_only_when_it_drafted() -> None:
    state = _state("ngram")
    async with TestClient(TestServer(create_sim_app(state))) as client:
        edit = await (await client.post("/v1/chat/completions", json=_body(RENAME))).json()
        free = await (await client.post("/v1/chat/completions", json=_body(FREE))).json()
    timings = edit["timings"]
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    assert "draft_n" not in free["timings"]
    assert state.drafted_total == timings["draft_n"]
    assert state.accepted_total == timings["draft_n_accepted"]


async def test_sglang_style_stats_count_verify_cycles_not_drafted_tokens() -> None:
    state = _state("ngram", stats="meta_info")
    plan = decode_plan(state, _body(RENAME))
    async with TestClient(TestServer(create_sim_app(state))) as client:
        answer = await (await client.post("/v1/chat/completions",
                                          json=_body(RENAME, return_meta_info=True))).json()
    assert answer["choices"][0]["meta_info"]["spec_verify_ct"] == plan.verify_ct
    assert plan.verify_ct < plan.draft_n


def test_quoted_text_comes_back_as_text_with_one_line_marked() -> None:
    body = _body("Fix the typos and return it whole:\n> Teh cat sat\n> on teh mat.\n")
    reply = "".join(decode_plan(_state("plain"), body).tokens)
    assert reply == f"{PREAMBLE}Teh cat sat\non teh mat.{TEXT_MARK}\n"
