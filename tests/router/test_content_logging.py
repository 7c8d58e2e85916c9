"""Prompt and completion text reach the decision log only when the operator turns it on."""

from __future__ import annotations

from pathlib import Path

from decisionlog.records import to_json
from tests.router.conftest import ServerFactory, start_stack

PROMPT = "Explain how a B-tree keeps itself balanced."
BODY = {"model": "sim-model", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0}


async def _two_replies(stack) -> list[str]:  # type: ignore[no-untyped-def]
    async with stack.client() as client:
        whole = await client.chat.completions.create(**BODY)
        stream = await client.chat.completions.create(**BODY, stream=True)
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    return [whole.choices[0].message.content or "", streamed]


async def test_no_text_in_the_log_by_default(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    stack = await start_stack(aiohttp_server, tmp_path)
    replies = await _two_replies(stack)
    records = await stack.logged(2)
    lines = "\n".join(to_json(r) for r in records)
    assert all(r.content is None for r in records)
    assert "B-tree" not in lines
    assert all(len(reply) > 40 and reply.strip() not in lines for reply in replies)


async def test_prompt_and_completion_logged_when_turned_on(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    stack = await start_stack(aiohttp_server, tmp_path, log_content=True)
    replies = await _two_replies(stack)
    records = await stack.logged(2)
    assert [r.content for r in records[:2]] == [
        {"last_user": PROMPT, "completion": reply} for reply in replies
    ]
    assert all(reply.strip() for reply in replies)
