"""The retraining script behind `specroute train`: corpus -> evaluated, atomically written
artifact, with its report beside it.

Edge module (reads files, writes the artifact): the pure parts live in `train`, `evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from classifiers import artifact
from classifiers.features import TokenCounter
from classifiers.ngrams import HashSettings
from classifiers.tokenizer import TokenizerUnavailable, load_counter
from classifiers.training import evaluate as ev
from classifiers.training import train as tr
from classifiers.training.data.build import corpus_sha256, read_corpus

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TrainOptions:
    corpus: Path
    out: Path
    c: float = tr.DEFAULT_C
    max_iter: int = 100
    loso: bool = True
    settings: HashSettings = field(default_factory=HashSettings)


def report_paths(out: Path) -> tuple[Path, Path]:
    stem = out.name.removesuffix(".npz")
    return out.with_name(stem + ".report.md"), out.with_name(stem + ".confusion.png")


def token_counter(log: Log) -> TokenCounter | None:
    try:
        return load_counter()
    except TokenizerUnavailable as exc:
        log(f"tokenizer unavailable ({exc}); token features use the script-based estimate")
        return None


def run(options: TrainOptions, log: Log) -> dict[str, Any]:
    """Train, evaluate, write artifact and report; return the evaluation."""
    rows = read_corpus(options.corpus)
    log(f"corpus {options.corpus}: {len(rows)} rows")
    encoded = tr.encode(rows, options.settings, token_counter(log))
    labels = encoded.labels

    def train_and_predict(train: ev.Mask, test: ev.Mask) -> ev.Labels:
        fitted = tr.fit(encoded.subset(train), c=options.c, max_iter=options.max_iter)
        predicted: ev.Labels = fitted.probabilities(encoded.subset(test)).argmax(axis=1)
        return predicted

    test = ev.heldout_mask(rows)
    log(f"held-out families: {int(test.sum())} rows; training on {int((~test).sum())}")
    predicted = train_and_predict(~test, test)
    held_rows = [r for r, m in zip(rows, test) if m]
    evaluation: dict[str, Any] = {
        "slices": ev.slices(held_rows, np.ones(len(held_rows), dtype=bool), labels[test],
                            predicted)}
    if options.loso:
        evaluation["leave_one_source_out"] = ev.leave_one_source_out(
            rows, train_and_predict, labels, log)
    log("refitting on every row for the shipped model")
    final = tr.fit(encoded, c=options.c, max_iter=options.max_iter)
    meta, arrays = tr.artifact_meta(final, options.settings, corpus_sha256(options.corpus),
                                    _summary(evaluation), options.c)
    artifact.save(options.out, meta, arrays)
    md, png = report_paths(options.out)
    ev.write_report(md, png, evaluation, {
        "name": meta["name"], "artifact": options.out.name, "corpus rows": len(rows),
        "corpus sha256": meta["training"]["corpus_sha256"], "C": options.c,
        "feature schema": meta["feature_schema_version"], "hash dim": options.settings.dim})
    log(f"wrote {options.out} ({meta['name']}), {md.name}, {png.name}")
    return evaluation


def _summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {name: {"n": v["n"], "macro_f1": v["macro_f1"],
                                      "accuracy": v["accuracy"]}
                               for name, v in evaluation["slices"].items()}
    loso = evaluation.get("leave_one_source_out")
    if loso:
        sources = ev.sources_of(loso)
        summary["leave_one_source_out"] = {k: v["macro_f1_supported"]
                                           for k, v in sources.items()}
        summary["leave_one_source_out_all_classes"] = {k: v["macro_f1"]
                                                       for k, v in sources.items()}
        summary["leave_one_source_out_summary"] = {
            "min": loso["summary"]["min"], "mean": loso["summary"]["mean"],
            "zh_macro_f1": loso["summary"]["zh"]["macro_f1"]}
    return summary


def summary_lines(evaluation: dict[str, Any]) -> list[str]:
    """Leave-one-source-out first (the headline), then the held-out slices."""
    lines = []
    loso = evaluation.get("leave_one_source_out") or {}
    if loso:
        s = loso["summary"]
        lines.append(f"leave-one-source-out: lowest macro-F1 (n>={ev.MIN_SUPPORT}) "
                     f"{s['min']:.3f}, mean {s['mean']:.3f}; Chinese (pooled) macro-F1 "
                     f"{s['zh']['macro_f1']:.3f} n={s['zh']['n']}")
    for source, v in ev.sources_of(loso).items():
        lines.append(f"leave out {source:22} n={v['n']:5d} accuracy={v['accuracy']:.3f} "
                     f"macro-F1={v['macro_f1_supported']:.3f} (all classes {v['macro_f1']:.3f})")
    for name, v in evaluation["slices"].items():
        lines.append(f"{name:18} n={v['n']:5d} accuracy={v['accuracy']:.3f} "
                     f"macro-F1={v['macro_f1']:.3f}")
    return lines
