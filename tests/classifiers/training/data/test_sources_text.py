"""Readers of text sources, on small archives laid out like the pinned packages."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from classifiers.training.data import sources_text


def _wheel(tmp_path: Path, members: dict[str, list[object]]) -> Path:
    path = tmp_path / "evals-0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, items in members.items():
            wheel.writestr(name, "\n".join(json.dumps({"input": i}, ensure_ascii=False)
                                           for i in items) + "\n")
    return path


def test_evals_keeps_chinese_instructed_sets_capped_per_set(tmp_path: Path) -> None:
    base = "evals/registry/data/"
    poems = [[{"role": "user", "content": f"谁是下面这首诗的作者？请仅回复作者的名字。\n---\n诗{i}"}]
             for i in range(10)]
    english = [[{"role": "system", "content": "Answer with the author's name only."},
                {"role": "user", "content": f"床前明月光{i}"}] for i in range(5)]
    few_shot = [[{"role": "system", "content": "请将下面的小写汉字数字转化为阿拉伯数字"},
                 {"role": "user", "content": "三"}, {"role": "assistant", "content": "3"},
                 {"role": "user", "content": "四十二"}]]
    path = _wheel(tmp_path, {
        f"{base}chinese_poem/samples.jsonl": poems + english,
        f"{base}convert-bwt-num-and-chinese-num/a.jsonl": few_shot,
        f"{base}not_a_listed_set/samples.jsonl": poems,
    })
    rows = sources_text.evals_zh(path, per_set=4)
    by_set = [r.id.split("/")[1] for r in rows]
    assert by_set.count("chinese_poem") == 4  # capped; the English-instructed rows left out
    assert all("请仅回复" in r.request["messages"][0]["content"] for r in rows[:4])
    assert by_set.count("convert-bwt-num-and-chinese-num") == 1
    assert "not_a_listed_set" not in by_set
    assert {(r.label, r.lang, r.provenance, r.source) for r in rows} == {
        ("technical", "zh", "real", "evals")}
    assert rows[-1].request["messages"][2] == {"role": "assistant", "content": "3"}
    assert {r.family for r in rows} <= {f"evals/b{k}" for k in range(sources_text.BUCKETS)}
