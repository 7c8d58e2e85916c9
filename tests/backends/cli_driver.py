"""`specroute backends ...` as the router wires it, with a JSON list of backend specs as config.

Run as `python -m tests.backends.cli_driver backends up --config specs.json ...`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from backends.backend_commands import register
from backends.spec import BackendSpec


def load_backends(path: str) -> list[BackendSpec]:
    return [BackendSpec.model_validate(item) for item in json.loads(Path(path).read_text())]


def main() -> int:
    parser = argparse.ArgumentParser(prog="specroute")
    register(parser.add_subparsers(dest="command", required=True), load_config=load_backends)
    args = parser.parse_args()
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
