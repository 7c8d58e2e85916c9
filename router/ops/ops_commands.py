"""The operator's commands: `specroute tail` and `specroute report`.

`register(subparsers)` adds them to the CLI; each handler is `func(args) -> int`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from decisionlog.writer import LogFileError
from router.config import LogConfig
from router.ops.projection import PRESETS, ProjectionError
from router.ops.report import GROUPINGS, render_markdown, run_report
from router.ops.tail import Tail, options_from_args

Formatter = argparse.ArgumentDefaultsHelpFormatter
DEFAULT_LOG = str(LogConfig.model_fields["path"].default)  # the config's default `log.path`


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_tail(sub)
    _add_report(sub)


def _add_tail(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tail = sub.add_parser(
        "tail", help="print the decision log one readable line per request, optionally live",
        formatter_class=Formatter,
        description="Print the last requests of the decision log (time, class/lang, route and "
        "reason, backend, TTFT, tokens, tokens/s, acceptance); with -f keep following it across "
        "rotation, with a live per-class summary on a terminal. Filters may be repeated.",
    )
    tail.add_argument("log", nargs="?", default=DEFAULT_LOG, help="decision log (JSON Lines)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new requests")
    tail.add_argument("-n", "--lines", type=_non_negative, default=10,
                      help="matching requests from the log's history to print first")
    tail.add_argument("--class", dest="cls", action="append", metavar="C",
                      help="only this workload class")
    tail.add_argument("--lang", action="append", metavar="L", help="only this language")
    tail.add_argument("--backend", action="append", metavar="B", help="only this backend")
    tail.add_argument("--reason", action="append", metavar="R", help="only this decision reason")
    tail.add_argument("--json", action="store_true",
                      help="pass matching log lines through unchanged (for jq)")
    tail.add_argument("--no-summary", action="store_true",
                      help="no live per-class summary in follow mode")
    tail.add_argument("--window", type=_positive, default=2000,
                      help="requests the live summary covers")
    tail.add_argument("--poll", type=float, default=0.5, help="seconds between reads in -f mode")
    tail.set_defaults(func=_tail)


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report", help="per-class Markdown table and PNG plots from decision logs",
        formatter_class=Formatter,
        description="Summarise any set of decision logs (rotated sets included) into "
        "DIR/report.md and PNG plots. --project-onto adds a separately labelled projection of "
        "the measured acceptance onto another machine's step costs.",
    )
    report.add_argument("logs", nargs="+", metavar="LOG", help="decision logs to read")
    report.add_argument("--out", default="report", help="directory for report.md and the PNGs")
    report.add_argument("--by", choices=sorted(GROUPINGS), default="class",
                        help="group rows by class, or by class and language")
    report.add_argument(
        "--project-onto", default=None, metavar="MODEL",
        help=f"project onto a cost model: {', '.join(sorted(PRESETS))}, or a YAML file with "
        "t_plain_ms, t_verify_ms, t_draft_ms, gate_skip (and an optional name)",
    )
    report.set_defaults(func=_report)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _tail(args: argparse.Namespace) -> int:
    options = options_from_args(args, is_tty=sys.stdout.isatty())
    if not options.follow and not Path(options.path).exists():
        print(f"specroute tail: no decision log at {options.path}", file=sys.stderr)
        return 2
    try:
        return Tail(options, sys.stdout, sys.stderr).run()
    except BrokenPipeError:  # `specroute tail | head`
        return 0


def _report(args: argparse.Namespace) -> int:
    try:
        report, markdown, plots = run_report(
            args.logs, Path(args.out), project_onto=args.project_onto, grouping=args.by
        )
    except (LogFileError, ProjectionError) as exc:
        print(f"specroute report: {exc}", file=sys.stderr)
        return 2
    print(render_markdown(report))
    print(f"wrote {markdown} and {', '.join(str(p) for p in plots)}", file=sys.stderr)
    return 0
