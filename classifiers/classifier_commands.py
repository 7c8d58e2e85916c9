"""The classifier's CLI commands: `data build`, `train`, `classify`.

`register` adds them to the `specroute` parser. Heavy imports (scikit-learn, matplotlib, the
corpus builder) happen inside the handlers, so importing this module stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from classifiers.request_view import InvalidRequest

_FMT = argparse.ArgumentDefaultsHelpFormatter


def _default_corpus() -> Path:
    from classifiers.training.data.build import default_corpus_path

    return default_corpus_path()


def register(subparsers: Any) -> None:
    """Add `data build`, `train` and `classify` to an argparse subparsers object."""
    from classifiers.model import DEFAULT_ARTIFACT

    data = subparsers.add_parser("data", help="the training corpus", formatter_class=_FMT)
    verbs = data.add_subparsers(dest="data_command", required=True)
    build = verbs.add_parser("build", formatter_class=_FMT,
                             help="download the pinned packages and write the labelled corpus")
    build.add_argument("--out", type=Path, default=_default_corpus(),
                       help="corpus JSONL to write (a manifest is written beside it)")
    build.add_argument("--pkg-dir", type=Path, default=None,
                       help="where pinned packages are cached (default: <cache>/specroute/pkgs)")
    build.set_defaults(func=_data_build)

    train = subparsers.add_parser("train", formatter_class=_FMT,
                                  help="train the workload classifier and write its artifact")
    train.add_argument("--corpus", type=Path, default=_default_corpus(),
                       help="corpus JSONL (built first with `data build` if missing)")
    train.add_argument("--out", type=Path, default=DEFAULT_ARTIFACT,
                       help="artifact to write atomically (report and PNG beside it)")
    train.add_argument("--C", dest="c", type=float, default=2.0,
                       help="inverse regularisation strength of the logistic regression")
    train.add_argument("--max-iter", type=int, default=100, help="solver iterations per fit")
    train.add_argument("--hash-dim", type=int, default=1 << 17,
                       help="hashed n-gram buckets (a power of two)")
    train.add_argument("--no-loso", dest="loso", action="store_false",
                       help="skip the leave-one-source-out evaluation (faster)")
    train.set_defaults(func=_train)

    classify = subparsers.add_parser("classify", formatter_class=_FMT,
                                     help="classify OpenAI request bodies, one JSON per line")
    classify.add_argument("input", nargs="?", default="-",
                          help="JSONL file of request bodies or {id, request} objects; - = stdin")
    classify.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT,
                          help="model artifact to score with")
    classify.add_argument("--rules", action="store_true",
                          help="use the rule-based scorer instead of an artifact")
    classify.add_argument("--endpoint", default="chat",
                          choices=["chat", "completions", "messages", "responses"],
                          help="API shape of the request bodies")
    classify.set_defaults(func=_classify)


def _data_build(args: argparse.Namespace) -> int:
    from classifiers.training.data.build import collect, write_corpus
    from classifiers.training.data.fetch import FetchError

    try:
        rows = collect(log=_err, pkg_dir=args.pkg_dir)
    except FetchError as exc:
        _err(f"error: {exc}")
        return 1
    manifest = write_corpus(rows, args.out)
    _err(f"wrote {args.out}: {manifest['rows']} rows, sha256 {manifest['sha256'][:16]}")
    for key in ("by_class", "by_lang", "by_provenance"):
        _err(f"  {key}: {json.dumps(manifest[key], ensure_ascii=False)}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from classifiers.ngrams import HashSettings
    from classifiers.training import retrain

    if not args.corpus.exists():
        _err(f"{args.corpus} does not exist: building it first")
        build = argparse.Namespace(out=args.corpus, pkg_dir=None)
        if _data_build(build) != 0:
            return 1
    if args.hash_dim < 256 or args.hash_dim & (args.hash_dim - 1):
        _err(f"error: --hash-dim must be a power of two >= 256, not {args.hash_dim}")
        return 2
    options = retrain.TrainOptions(corpus=args.corpus, out=args.out, c=args.c,
                                   max_iter=args.max_iter, loso=args.loso,
                                   settings=HashSettings(dim=args.hash_dim))
    try:
        evaluation = retrain.run(options, _err)
    except (ValueError, OSError) as exc:
        _err(f"error: {exc}")
        return 1
    print("\n".join(retrain.summary_lines(evaluation)))
    return 0


def _classify(args: argparse.Namespace) -> int:
    from classifiers import rules
    from classifiers.artifact import ArtifactError
    from classifiers.features import extract
    from classifiers.model import load_artifact
    from classifiers.request_view import view_request
    from classifiers.training.retrain import token_counter

    try:
        scorer = None if args.rules else load_artifact(args.artifact)
    except ArtifactError as exc:
        _err(f"error: {exc}")
        return 1
    count = token_counter(_err)
    failures = 0
    with _open(args.input) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rid, body = _parse(line)
                view = view_request(args.endpoint, body)
                features = extract(view, count)
                scores = scorer.score(view, features) if scorer else rules.score(view, features)
            except (ValueError, InvalidRequest) as exc:
                failures += 1
                print(json.dumps({"line": number, "error": str(exc)}, ensure_ascii=False))
                continue
            out = {"id": rid} if rid is not None else {}
            out.update({k: v for k, v in scores.as_dict().items() if k != "artifact"})
            print(json.dumps(out, ensure_ascii=False))
    return 1 if failures else 0


def _parse(line: str) -> tuple[Any, Any]:
    data = json.loads(line)
    if isinstance(data, dict) and "request" in data and "messages" not in data:
        return data.get("id"), data["request"]
    return None, data


@contextmanager
def _open(name: str) -> Iterator[TextIO]:
    """The input file, or stdin for "-" (left open)."""
    if name == "-":
        yield sys.stdin
        return
    with open(name, encoding="utf-8") as handle:
        yield handle


def _err(message: str) -> None:
    print(message, file=sys.stderr)
