"""Prompt-copy signals: how much of the answer a request lets the engine copy from its prompt.

Pure: no I/O, no clock, no globals (the patterns and word lists are constants). Prompt-lookup
(n-gram) speculation pays when the answer re-emits text of the prompt: a module returned whole
with one function renamed, SEARCH/REPLACE blocks, a diff; it does not on free prose. What
predicts that is read here from the bounded view:

- what the ask and the material it brings (the tool results after it, the turns a harness set
  up before it: `RequestView.tool_results`, `.set_up`) quote: code, JSON, plain text (`Quoted`);
- whether the ask uses an edit verb (rename, refactor, fix, translate, 重命名, 修复, ...);
- whether the system prompt or the ask asks for an edit format that re-emits its input;
- where a rename breaks the copy: the old name's occurrences in the quoted material (each one a
  place where the answer leaves the prompt, so that a prompt-lookup draft of the old name is
  rejected and the lookup drafts nothing until its key is past the new one).

`CopySignals` holds the values; `classifiers.features.Features` carries them beside (not in)
the classifier's vector. What the ask alone gives (`AskCopy`) is a field of
`classifiers.memos.AskFacts`, so the ask memo keeps it, and the memo keeps each piece of
material's `Quoted` too.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Final

from classifiers.text import OVERLAP_TEXT_CAP, is_code_line, strip_fences

# What of a block (a fence's content, a tool result, a run of lines) is read to tell code from
# JSON from plain text: its first lines, this many characters of them at most.
SNIFF_CAP: Final = 400
SNIFF_LINES: Final = 8
# Characters of a turn's text outside fences read line by line (~0.8 us a line); the rest of
# it counts in the same proportions.
RUNS_CAP: Final = 1_500
# A block reads as code when at least this share of its sampled lines do.
CODE_SHARE: Final = 0.3
# A run of code lines outside fences counts when it has two lines, or is one line of JSON this
# long (a lone "rename foo() to bar()", a formula "f: [0, 5] -> R ..." does not).
LONE_LINE_CHARS: Final = 40

_JSON_TAGS: Final = frozenset({"json", "jsonc", "json5", "jsonl", "ndjson", "geojson"})
_TEXT_TAGS: Final = frozenset({"text", "txt", "plain", "plaintext", "markdown", "md", "rst",
                               "prose", "quote"})
_LINE_NUMBER = re.compile(r"\s*\d+(?:[\t:|→]|  )")  # cat -n, an agent's read_file output

# The edit verbs, every form (ASCII words, by set lookup), and the Chinese ones (substrings).
_EDIT_FORMS: Final = (
    "rename renames renamed renaming", "refactor refactors refactored refactoring",
    "fix fixes fixed fixing", "translate translates translated translating translation",
    "reformat reformats reformatted reformatting", "convert converts converted converting conversion",
    "rewrite rewrites rewrote rewriting rewritten", "edit edits edited editing",
    "modify modifies modified modifying", "change changes changed changing",
    "update updates updated updating", "replace replaces replaced replacing",
    "port ports ported porting", "migrate migrates migrated migrating", "cleanup",
    "tidy tidies tidied", "proofread proofreads proofreading", "revise revises revised revising",
    "rephrase rephrases rephrased rephrasing", "paraphrase paraphrases paraphrased paraphrasing",
    "restructure restructures restructured restructuring",
    "reorganize reorganizes reorganized reorganizing reorganise reorganised",
    "simplify simplifies simplified simplifying", "prettify beautify",
)
_EDIT_WORDS: Final = frozenset(word.encode() for forms in _EDIT_FORMS for word in forms.split())
_EDIT_PHRASES: Final = ("clean up", "tidy up")
_ZH_EDIT: Final = ("重命名", "改名", "重构", "修复", "修正", "修改", "翻译", "格式化", "转换", "转成",
                   "转为", "改写", "重写", "替换", "改成", "改为", "润色", "校对", "优化")
_LATIN = re.compile(r"[a-z]+")
_WORD_BYTES: Final = bytes(c if chr(c).isascii() and chr(c).islower() else 32 for c in range(256))

# Edit formats whose answer re-emits its input: SEARCH/REPLACE blocks (aider), unified diffs,
# V4A patches (apply_patch), whole files. Lower-case substrings, each behind a cheaper one that
# it holds (most text has none of these), then the whole-file phrase and the diff hunk.
_REEMIT_MARKS: Final = (
    ("<<<<<<<", ("<<<<<<< search",)), (">>>>>>>", (">>>>>>> replace",)),
    ("search/", ("search/replace",)), ("diff", ("unified diff", "diff -u", "udiff")),
    ("\n--- ", ("\n--- a/",)), ("\n+++ ", ("\n+++ b/",)),
    ("*** ", ("*** begin patch", "*** update file:")),
    (" of each file", (" copy of each file",)), ("file listing", ("file listing",)),
)
_ZH_WHOLE: Final = ("完整代码", "完整的代码", "完整文件", "完整的文件", "整个文件", "全部代码")
_HUNK = re.compile(r"^@@ (?:-\d|\.\.\.)", re.MULTILINE)
_WHOLE_WORDS: Final = ("whole", "entire", "full", "complete")
# What follows one of `_WHOLE_WORDS` in a whole-file phrase ("the entire updated file", not
# "the full file path").
_WHOLE_TAIL = re.compile(
    r"\s+(?:(?:updated|modified|new|edited|revised|changed)\s+)?"
    r"(?:file|files|module|script|program|source|content|contents|listing|code)\b"
    r"(?!\s*(?:path|name))")
# The ask to give its material back whole ("fix the typos and return it whole", "give me the
# paragraph back verbatim"), behind cheaper substrings: the answer re-emits what was quoted.
_BACK_GATES: Final = ("whole", "in full", "entirety", "verbatim", "unchanged")
_GIVE_BACK = re.compile(
    r"\b(?:return|give|send|output|print|repeat|reply with|write out)\s+(?:me\s+)?"
    r"(?:it|them|this|that|these|those|the\s+\w+)(?:\s+back)?\s+"
    r"(?:whole|in full|in its entirety|verbatim|unchanged)\b")


@dataclass(frozen=True, slots=True)
class Quoted:
    """Characters of some text that are quoted code, JSON and plain text, of `chars` in all."""

    code: int = 0
    json: int = 0
    text: int = 0
    chars: int = 0


# A rename's old name: "rename `X` to `Y`", "please rename X to Y", "replace X with Y", "change
# X to Y" (an identifier, optionally quoted or called; read in the ask's prose only).
_RENAME = re.compile(
    r"\b(?:rename|replace|change)\s+(?:the\s+(?:function|method|class|variable|field|key|"
    r"attribute|parameter|argument|name)\s+)?[`'\"]?([A-Za-z_]\w*(?:\.\w+)*)(?:\(\))?[`'\"]?"
    r"\s+(?:to|with|into|as|by|->|→)\s+[`'\"]?[A-Za-z_]", re.IGNORECASE)
_RENAME_GATES: Final = ("rename", "replace", "change")  # what `_RENAME` needs, as substrings
# A rename's old name counted in this many characters of each text at most (str.find: ~1 GB/s)
# and up to this many sites: past it the copy is broken everywhere.
SITES_SCAN_CAP: Final = 200_000
SITES_CAP: Final = 64


@dataclass(frozen=True, slots=True)
class AskCopy:
    """What the ask (the last user turn) alone tells of copying."""

    quoted: Quoted
    edit_verb: bool
    reemit_format: bool
    renamed: str = ""  # the old name of a rename the ask asks for
    rename_sites: int = 0  # its occurrences in the ask, less the instruction's own mention


@dataclass(frozen=True, slots=True)
class CopySignals:
    """The request's prompt-copy signals, as `Features.as_dict()` names them."""

    quoted_code_share: float = 0.0  # of the ask's and material's characters: code
    quoted_json_share: float = 0.0  # ... JSON
    quoted_text_share: float = 0.0  # ... quoted plain text
    quoted_chars: int = 0  # the three together, in the bounded view's characters
    edit_verb: bool = False  # the ask says rename, refactor, fix, translate, 修复, ...
    reemit_format: bool = False  # the system prompt or the ask asks for a re-emitting format
    rename_sites: int = 0  # where a rename breaks the copy: the old name in the quoted material


NO_COPY: Final = CopySignals()
COPY_NAMES: Final = tuple(f.name for f in fields(CopySignals))
copy_values: Final = operator.attrgetter(*COPY_NAMES)


def ask_copy(text: str) -> AskCopy:
    prose = instruction_prose(text)  # once: the edit verb and the rename read the same words
    renamed, sites = _rename_in(text, prose)
    return AskCopy(quoted=quoted(text, whole=False), edit_verb=_edit_verb_in(prose),
                   reemit_format=reemit_format(text), renamed=renamed, rename_sites=sites)


def instruction_prose(text: str) -> str:
    """The ask's own words: outside fences, its start and its end (where the instruction sits
    around pasted material), `OVERLAP_TEXT_CAP` characters of each at most."""
    prose = strip_fences(text)
    if len(prose) > 2 * OVERLAP_TEXT_CAP:
        prose = prose[:OVERLAP_TEXT_CAP] + "\n" + prose[-OVERLAP_TEXT_CAP:]
    return prose


def copy_signals(ask: AskCopy, material: Iterable[Quoted], system_reemits: bool,
                 material_sites: int = 0) -> CopySignals:
    """The signals of one request: the ask's, what each piece of its material quotes, whether
    its system prompt asks for a re-emitting format (`reemit_format` of it), and the ask's
    renamed name's occurrences in the material (`name_sites` of each piece)."""
    q = ask.quoted
    code, json, text, chars = q.code, q.json, q.text, q.chars
    for q in material:  # plain sums: this runs on every request
        code, json, text, chars = code + q.code, json + q.json, text + q.text, chars + q.chars
    reemits = ask.reemit_format or system_reemits
    if not (code or json or text or ask.edit_verb or reemits):
        return NO_COPY
    share = 1.0 / chars if chars else 0.0
    return CopySignals(
        quoted_code_share=round(code * share, 4),
        quoted_json_share=round(json * share, 4),
        quoted_text_share=round(text * share, 4),
        quoted_chars=code + json + text,
        edit_verb=ask.edit_verb,
        reemit_format=reemits,
        rename_sites=min(ask.rename_sites + material_sites, SITES_CAP),
    )


# --- where a rename breaks the copy ------------------------------------------------------------


def rename_in(text: str) -> tuple[str, int]:
    """The old name of the rename `text` asks for ("" if none) and its occurrences as a word
    in `text` outside the instruction that names it."""
    return _rename_in(text, instruction_prose(text))


def _rename_in(text: str, prose: str) -> tuple[str, int]:
    lowered = prose.lower()
    if not any(gate in lowered for gate in _RENAME_GATES):  # most asks: no regex run (~3 us)
        return "", 0
    found = _RENAME.search(prose)
    if found is None:
        return "", 0
    name = found.group(1)
    return name, max(name_sites(text, name) - 1, 0)  # the instruction names it once


def name_sites(text: str, name: str) -> int:
    """Occurrences of `name` as a word (not inside a longer identifier) in `text`'s first
    `SITES_SCAN_CAP` characters, up to `SITES_CAP`."""
    if not name:
        return 0
    end = min(len(text), SITES_SCAN_CAP)
    count, at, size = 0, text.find(name, 0, end), len(name)
    while at != -1 and count < SITES_CAP:
        after = at + size
        if ((at == 0 or not _word_char(text[at - 1]))
                and (after >= len(text) or not _word_char(text[after]))):
            count += 1
        at = text.find(name, after, end)
    return count


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


# --- what a text quotes ----------------------------------------------------------------------


def quoted(text: str, whole: bool) -> Quoted:
    """What `text` quotes. Fenced blocks count whole, as code, JSON or text by their tag or,
    untagged, their content. Outside fences a turn (`whole=False`) quotes its runs of code or
    JSON lines and its `>` lines, not its own words; a tool result (`whole=True`) is all quoted
    material, read as one block."""
    code = json = plain = 0
    room = RUNS_CAP
    for block, tag in _blocks(text):
        if tag is None and not whole:
            c, j, t = _sampled_runs(block, room)
            room -= len(block)
        else:
            # an untagged fenced block is read from its second line: its fence is no content
            kind = _tag_kind(tag) if tag else _sniff(block if tag is None else _after_line(block))
            c, j, t = (len(block), 0, 0) if kind == "code" else (
                (0, len(block), 0) if kind == "json" else (0, 0, len(block)))
        code, json, plain = code + c, json + j, plain + t
    return Quoted(code, json, plain, len(text))


def _blocks(text: str) -> Iterator[tuple[str, str | None]]:
    """`text` cut at its fences: (piece, None) outside them, (block, tag) for a fenced block,
    fence lines included (an unclosed fence runs to the end)."""
    at = 0
    for start, end, tag in _fenced(text):
        if start > at:
            yield text[at:start], None
        yield text[start:end], tag
        at = end
    if at < len(text):
        yield text[at:], None


def _fenced(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, lower-case tag) of each fenced block: a ``` or ~~~ line opens one, a line of
    at least as many of the same mark alone closes it."""
    lines = _fence_lines(text)
    i = 0
    while i < len(lines):
        start, mark, info_end = lines[i]
        run = len(mark)
        tag = text[start:info_end].strip().lstrip(mark[0]).split(maxsplit=1)
        close = next((j for j in range(i + 1, len(lines)) if lines[j][1][0] == mark[0]
                      and len(lines[j][1]) >= run and _bare(text, lines[j])), None)
        end = len(text) if close is None else lines[close][2]
        yield start, end, tag[0].lower() if tag else ""
        if close is None:
            return
        i = close + 1


def _fence_lines(text: str) -> list[tuple[int, str, int]]:
    """(line start, fence mark, line end) of every line that starts with ``` or ~~~ (after
    spaces), in order. `str.find` does the scanning: text without a fence costs two finds, and
    text without a backtick or a tilde two memchr calls (~0.05 us, a find ~2.5 us on 3 KB)."""
    found: list[tuple[int, str, int]] = []
    for mark in ("```", "~~~"):
        at = text.find(mark) if mark[0] in text else -1
        while at != -1:
            line_start = text.rfind("\n", 0, at) + 1
            line_end = _line_end(text, at)
            if not text[line_start:at].strip():
                run = at
                while run < line_end and text[run] == mark[0]:
                    run += 1
                found.append((line_start, text[at:run], line_end))
            at = text.find(mark, line_end)
    found.sort()
    return found


def _after_line(block: str) -> str:
    return block[block.find("\n") + 1:] if "\n" in block else ""


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end == -1 else end + 1


def _bare(text: str, line: tuple[int, str, int]) -> bool:
    """A fence line that can close a block: its mark alone on the line."""
    start, mark, end = line
    return not text[start:end].strip().lstrip(mark[0])


def _sampled_runs(piece: str, room: int) -> tuple[int, int, int]:
    """`_runs` of a piece's first `room` characters (at a line's end), scaled to the piece."""
    if len(piece) <= room:
        return _runs(piece)
    if room <= 0:
        return 0, 0, 0
    cut = piece.rfind("\n", 0, room) + 1 or room
    scale = len(piece) / cut
    code, json, plain = _runs(piece[:cut])
    return round(code * scale), round(json * scale), round(plain * scale)


def _runs(piece: str) -> tuple[int, int, int]:
    """(code, JSON, quoted text) characters of a turn's text outside fences: its runs of code
    or JSON lines (blank lines inside a run count with it) and its `>` lines."""
    code = json = plain = 0
    run: list[str] = []
    blank = 0  # blank lines seen since the run's last line
    for line in piece.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped:
            blank += len(line)
            continue
        if stripped[0] == ">" and not stripped.startswith(">>>"):
            plain += len(line)
        elif _is_code(line, stripped):
            if run and blank:
                run.append(" " * blank)
            run.append(line)
            blank = 0
            continue
        c, j = _counted(run)
        code, json, run, blank = code + c, json + j, [], 0
    c, j = _counted(run)
    return code + c, json + j, plain


def _counted(run: list[str]) -> tuple[int, int]:
    if not run:
        return 0, 0
    block = "".join(run)
    if _sniff(block) == "json":
        return (0, len(block)) if len(run) > 1 or len(block) >= LONE_LINE_CHARS else (0, 0)
    return (len(block), 0) if len(run) > 1 else (0, 0)


def _is_code(line: str, stripped: str) -> bool:
    """A line of code or of pretty-printed JSON: indented as a code block, `"key":`, a lone
    bracket, or what `text.is_code_line` reads as code."""
    return (line.startswith(("    ", "\t")) or (stripped[0] == '"' and '":' in stripped)
            or stripped.rstrip(",") in _BRACKETS or is_code_line(line))


_BRACKETS: Final = frozenset({"{", "}", "[", "]", "},", "],"})


def _sniff(block: str) -> str:
    """"code", "json" or "text": what a block's start reads as."""
    sample = block[:SNIFF_CAP].lstrip()
    if sample[:1] == "{" and '":' in sample:
        return "json"
    if sample[:1] == "[" and sample[1:].lstrip()[:1] in ("{", '"', "[", "]"):
        return "json"
    code = lines = 0
    for line in sample.splitlines():
        stripped = line.strip()
        if stripped:
            if stripped[0].isdigit() and (numbered := _LINE_NUMBER.match(line)):
                line = line[numbered.end():]  # the line without its number
                stripped = line.strip() or "."
            lines += 1
            code += _is_code(line, stripped)
            if lines == SNIFF_LINES:
                break
    return "code" if lines and code >= CODE_SHARE * lines else "text"


def _tag_kind(tag: str) -> str:
    return "json" if tag in _JSON_TAGS else ("text" if tag in _TEXT_TAGS else "code")


# --- what the ask and the system prompt ask for ----------------------------------------------


def edit_verb(text: str) -> bool:
    """An edit verb among the ask's words (`instruction_prose`)."""
    return _edit_verb_in(instruction_prose(text))


def _edit_verb_in(prose: str) -> bool:
    lowered = prose.lower()
    if lowered.isascii():
        words = lowered.encode().translate(_WORD_BYTES).split()
    else:
        if any(word in prose for word in _ZH_EDIT):
            return True
        words = [w.encode() for w in _LATIN.findall(lowered)]
    return (not _EDIT_WORDS.isdisjoint(words)) or any(p in lowered for p in _EDIT_PHRASES)


def reemit_format(text: str) -> bool:
    """Whether `text` asks for (or shows) an edit format whose answer re-emits its input."""
    lowered = text.lower()
    for gate, marks in _REEMIT_MARKS:
        if gate in lowered and any(mark in lowered for mark in marks):
            return True
    if not text.isascii() and any(phrase in text for phrase in _ZH_WHOLE):
        return True
    if "@@ " in text and _HUNK.search(text):
        return True
    if any(_whole_phrase(lowered, word) for word in _WHOLE_WORDS):
        return True
    return any(gate in lowered for gate in _BACK_GATES) and _GIVE_BACK.search(lowered) is not None


def _whole_phrase(lowered: str, word: str) -> bool:
    """A whole-file phrase at one of `word`'s occurrences (as a word)."""
    at = lowered.find(word)
    while at != -1:
        end = at + len(word)
        if (at == 0 or not lowered[at - 1].isalnum()) and _WHOLE_TAIL.match(lowered, end):
            return True
        at = lowered.find(word, end)
    return False
