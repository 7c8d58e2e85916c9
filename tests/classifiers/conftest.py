"""Shared fixtures: a tiny corpus in the repository and a model trained on it."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def tiny_corpus() -> Path:
    return FIXTURES / "tiny_corpus.jsonl"


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    from classifiers.ngrams import HashSettings
    from classifiers.training import retrain

    out = tmp_path_factory.mktemp("artifact") / "tiny.npz"
    options = retrain.TrainOptions(corpus=tiny_corpus, out=out, loso=False, max_iter=200,
                                   settings=HashSettings(dim=1 << 12))
    retrain.run(options, lambda _: None)
    return out
