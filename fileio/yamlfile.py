"""Load a YAML file into a pydantic model, with errors that name the file, line and field.

Used at every boundary that reads YAML (the policy, config.yaml), so that an unknown key or a
bad value is reported the same way everywhere: `policy.yaml:12: routes.chat: Input should be
'mtp', 'plain' or 'auto'`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

Location = tuple[str | int, ...]


class ConfigError(ValueError):
    """A file that cannot be used; `problems` holds one line per error, already located."""

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.path = path
        self.problems = problems


def load_model(path: str | Path, model: type[M], *, context: dict[str, Any] | None = None) -> M:
    """Read and validate `path` as `model`, or raise `ConfigError` with located problems."""
    path = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, [f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    return parse_model(text, model, path=path, context=context)


def parse_model(
    text: str, model: type[M], *, path: str = "<string>", context: dict[str, Any] | None = None
) -> M:
    """Validate YAML `text` as `model`; errors carry `path:line: field: message`. `context`
    reaches the model's validators (e.g. the pools a policy may name)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"{mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(path, [f"{path}:{line} invalid YAML: {problem}"]) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, [f"{path}:1: the file must hold a mapping at the top level"])
    lines = _line_map(node)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(path, [_locate(path, err, lines) for err in exc.errors()]) from exc


def _locate(path: str, err: Any, lines: dict[Location, int]) -> str:
    # A tagged union puts its tag in the location; ours are bracketed ("[pool route]").
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("[")))
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = _nearest_line(loc, lines)
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{path}:{line}: {field}: {message}"


def _nearest_line(loc: Location, lines: dict[Location, int]) -> int:
    for cut in range(len(loc), 0, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return 1


def _line_map(node: yaml.Node | None, prefix: Location = ()) -> dict[Location, int]:
    """Map every key path in the YAML document to the 1-based line it starts on."""
    out: dict[Location, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            loc = prefix + (key.value,)
            out[loc] = key.start_mark.line + 1
            out.update(_line_map(value, loc))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            loc = prefix + (index,)
            out[loc] = item.start_mark.line + 1
            out.update(_line_map(item, loc))
    return out
