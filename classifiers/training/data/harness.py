"""Fixed text for derived and synthetic rows: coding-agent harness prompts, file tools, thanks.

Pure data, written for this project (no text copied from other harnesses). The harness prompts
are long on purpose: agentic-coding traffic carries several KB of system prompt.
"""

from __future__ import annotations

from typing import Any, Final


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "required": list(params),
                       "properties": {k: {"type": "string", "description": v}
                                      for k, v in params.items()}}}}


FILE_TOOLS: Final = [
    _tool("read_file", "Read a file of the workspace and return its text with line numbers.",
          path="Path relative to the workspace root."),
    _tool("write_file", "Create or overwrite a file with the given content.",
          path="Path relative to the workspace root.", content="The full new content."),
    _tool("edit_file", "Replace one exact occurrence of old_text with new_text in a file.",
          path="Path relative to the workspace root.", old_text="Text to replace, verbatim.",
          new_text="Replacement text."),
    _tool("list_files", "List the files under a directory, recursively, up to 500 entries.",
          path="Directory relative to the workspace root."),
    _tool("search", "Search the workspace for a regular expression; returns matching lines.",
          pattern="A regular expression.", path="Directory to search in."),
    _tool("run_command", "Run a shell command in the workspace and return its output.",
          command="The command line to run.", timeout="Seconds before it is stopped."),
]

# The same abilities under the names other harnesses use, so that no one naming is learned.
TOOLSETS: Final = (
    FILE_TOOLS,
    [_tool("Read", "Reads a file from the local filesystem.", file_path="Absolute path."),
     _tool("Edit", "Performs exact string replacements in files.", file_path="Absolute path.",
           old_string="Text to replace.", new_string="Replacement."),
     _tool("Write", "Writes a file to the local filesystem.", file_path="Absolute path.",
           content="Content to write."),
     _tool("Bash", "Executes a bash command in a persistent shell.", command="The command."),
     _tool("Grep", "Searches file contents with a regular expression.", pattern="Regex."),
     _tool("Glob", "Finds files by name pattern.", pattern="Glob pattern.")],
    [_tool("shell", "Runs a shell command and returns its output.", command="Command line."),
     _tool("apply_patch", "Applies a unified diff to the workspace.", patch="The diff."),
     _tool("str_replace_editor", "View, create and edit files.", command="view|create|edit",
           path="File path.")],
)

_RULES: Final = """
# Working rules
- Read the relevant files before you change them; never guess at their content.
- Make the smallest change that solves the task; keep the surrounding style.
- After editing, run the project's tests with run_command and fix what fails.
- Never delete files you did not create. Never run commands that need the network.
- When the task is ambiguous, state your assumption in one sentence and go on.
- Use edit_file for small changes and write_file only for new files.
- Report at the end in at most five lines: what changed, what was verified.

# Tool use
Call tools one at a time unless the calls are independent. Paths are relative to the
workspace root. A command that runs longer than its timeout is stopped; choose a timeout.
Outputs longer than 20,000 characters are cut: narrow your searches.

# Code style
Follow the existing formatting. Type hints on public functions. No commented-out code.
Tests live next to the code they test, in the layout the project already uses.
"""

HARNESS_PROMPTS: Final = (
    "You are a coding agent working in a software repository on the user's machine. You can "
    "read, search and edit files and run commands through the tools provided." + _RULES * 3,
    "You are an autonomous software engineer. The user gives you a task in their repository; "
    "carry it out end to end with the tools, then summarise." + _RULES * 4,
    "你是一个在用户代码仓库中工作的编程助手。你可以通过提供的工具读取、搜索和修改文件，"
    "并运行命令。请先阅读相关文件再修改，修改后运行测试。" + _RULES * 3,
)

THANKS: Final = {
    "en": ("thanks!", "great, thank you", "perfect, that's all", "cool thanks", "ok thanks, bye",
           "awesome, appreciate it", "thank you so much!", "nice, cheers"),
    "zh": ("谢谢！", "好的，谢谢你", "太好了，多谢", "收到，谢谢", "好的没问题了", "辛苦了，谢谢"),
}
