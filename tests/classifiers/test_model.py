"""The numpy scorer and its artifact: parity with training, validation, hot-reload signal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from classifiers import artifact
from classifiers.artifact import ArtifactError
from classifiers.features import FEATURE_NAMES, extract
from classifiers.model import DEFAULT_ARTIFACT, load_artifact
from classifiers.request_view import view_request
from classifiers.scores import CLASSES
from classifiers.training import train
from classifiers.training.data.build import read_corpus


def _score(path: Path, body: dict[str, object]) -> tuple[str, dict[str, float]]:
    scorer = load_artifact(path)
    view = view_request("chat", body)
    scores = scorer.score(view, extract(view))
    return scores.top_class, dict(scores.scores)


def test_scores_are_probabilities(tiny_artifact: Path) -> None:
    top, scores = _score(tiny_artifact, {"messages": [{"role": "user", "content": "hi"}]})
    assert set(scores) == set(CLASSES)
    assert abs(sum(scores.values()) - 1.0) < 1e-5
    assert top == max(scores, key=lambda c: scores[c])


def test_the_classifier_says_nothing_of_whether_speculation_pays(tiny_artifact: Path) -> None:
    """p_spec is the decision's (the route model's); a scorer's verdict and its log record
    hold classes, language and the artifact's name only."""
    from classifiers import rules

    view = view_request("chat", {"messages": [{"role": "user", "content": "hi"}]})
    for scores in (load_artifact(tiny_artifact).score(view, extract(view)),
                   rules.score(view, extract(view))):
        assert not hasattr(scores, "p_spec")
        assert set(scores.as_dict()) == {"class", "lang", "scores", "artifact"}


def test_numpy_scoring_matches_training(tiny_artifact: Path, tiny_corpus: Path) -> None:
    rows = read_corpus(tiny_corpus)
    scorer = load_artifact(tiny_artifact)
    encoded = train.encode(rows, scorer.settings, None)
    fitted = train.Fitted(w_text=scorer.w_text, w_num=scorer.w_num, bias=scorer.bias,
                          num_mean=scorer.num_mean, num_scale=scorer.num_scale)
    batch = fitted.probabilities(encoded)
    for i, row in enumerate(rows):
        view = view_request("chat", dict(row.request))
        assert np.allclose(scorer.probabilities(view, extract(view)), batch[i], atol=1e-4)


def test_the_tiny_model_learns_its_corpus(tiny_artifact: Path, tiny_corpus: Path) -> None:
    rows = read_corpus(tiny_corpus)
    right = sum(_score(tiny_artifact, dict(r.request))[0] == r.label for r in rows)
    assert right / len(rows) >= 0.9


def test_missing_and_corrupt_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="cannot read"):
        load_artifact(tmp_path / "absent.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match="not a readable"):
        load_artifact(bad)


def _rewrite_meta(source: Path, target: Path, **changes: object) -> None:
    with np.load(source) as npz:
        meta = json.loads(str(npz["meta"]))
        arrays = {name: npz[name] for name in artifact.ARRAYS}
    meta.update(changes)
    artifact.save(target, meta, arrays)


def test_a_feature_schema_mismatch_is_refused(tiny_artifact: Path, tmp_path: Path) -> None:
    other = tmp_path / "old.npz"
    _rewrite_meta(tiny_artifact, other, feature_schema_version=1)
    with pytest.raises(ArtifactError, match="feature schema 1"):
        load_artifact(other)


def test_another_hashing_scheme_is_refused(tiny_artifact: Path, tmp_path: Path) -> None:
    with np.load(tiny_artifact) as npz:
        settings = json.loads(str(npz["meta"]))["hash"]
    other = tmp_path / "scheme1.npz"
    _rewrite_meta(tiny_artifact, other, hash={**settings, "scheme": 1})
    with pytest.raises(ArtifactError, match="hashing scheme 1"):
        load_artifact(other)


def test_tampered_weights_are_refused(tiny_artifact: Path, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.npz"
    with np.load(tiny_artifact) as npz:
        meta = json.loads(str(npz["meta"]))
        arrays = {name: np.array(npz[name]) for name in artifact.ARRAYS}
    arrays["bias"][0] += 1.0
    artifact.save(tampered, meta, arrays)
    with pytest.raises(ArtifactError, match="sha256"):
        load_artifact(tampered)


def test_changed_on_disk_signals_a_new_file(tiny_artifact: Path, tmp_path: Path) -> None:
    copy = tmp_path / "live.npz"
    copy.write_bytes(tiny_artifact.read_bytes())
    scorer = load_artifact(copy)
    assert not scorer.changed_on_disk()
    copy.write_bytes(tiny_artifact.read_bytes())
    os.utime(copy, (scorer.mtime + 5, scorer.mtime + 5))
    assert scorer.changed_on_disk()
    assert scorer.name.startswith("lr-") and scorer.path == copy


def test_the_artifact_is_one_small_npz(tiny_artifact: Path) -> None:
    with zipfile.ZipFile(tiny_artifact) as archive:
        names = {n.removesuffix(".npy") for n in archive.namelist()}
    assert names == {"meta", *artifact.ARRAYS}
    assert "class_value" not in names  # a new artifact holds no p_spec map


def _with_arrays(source: Path, target: Path, **changes: np.ndarray | None) -> None:
    """`source` with arrays replaced or added (a legacy one too) or, given None, dropped; its
    recorded digest is that of the arrays it then holds, when it holds every required one."""
    with np.load(source) as npz:
        meta = json.loads(str(npz["meta"]))
        held = {name: np.array(npz[name]) for name in npz.files if name != "meta"}
    for name, value in changes.items():
        if value is None:
            held.pop(name)
        else:
            held[name] = value
    if set(artifact.ARRAYS) <= set(held):
        meta["weights_sha256"] = artifact.weights_digest(held)
    np.savez_compressed(target, **held, meta=np.array(json.dumps(meta, sort_keys=True)))


def test_an_artifact_written_before_p_spec_left_the_classifier_still_loads(
    tiny_artifact: Path, tmp_path: Path
) -> None:
    """Older artifacts (the shipped one among them) also hold `class_value`, the classifier's
    old per-class p_spec map: covered by their digest, checked, then ignored."""
    with zipfile.ZipFile(DEFAULT_ARTIFACT) as archive:
        assert "class_value.npy" in archive.namelist()
    shipped = load_artifact(DEFAULT_ARTIFACT)
    assert not hasattr(shipped, "class_value") and shipped.name == "lr-adbcdb8c"
    old = tmp_path / "old.npz"
    _with_arrays(tiny_artifact, old, class_value=np.full(len(CLASSES), 0.5, dtype=np.float32))
    loaded = load_artifact(old)
    assert loaded.name == load_artifact(tiny_artifact).name  # the name is in the metadata
    view = view_request("chat", {"messages": [{"role": "user", "content": "hi"}]})
    assert loaded.score(view, extract(view)).scores == pytest.approx(
        load_artifact(tiny_artifact).score(view, extract(view)).scores)


@pytest.mark.parametrize(
    ("arrays", "error"),
    [
        ({"bias": None}, "no bias array"),
        ({"w_text": None, "w_num": None}, "no w_text array"),
        ({"class_value": np.zeros(3, dtype=np.float32)}, r"class_value has shape \(3,\)"),
        ({"class_value": np.full(len(CLASSES), np.nan, dtype=np.float32)}, "non-finite"),
    ],
)
def test_an_incomplete_or_bad_artifact_is_refused_by_name(
    tiny_artifact: Path, tmp_path: Path, arrays: dict[str, np.ndarray | None], error: str
) -> None:
    bad = tmp_path / "bad.npz"
    _with_arrays(tiny_artifact, bad, **arrays)
    with pytest.raises(ArtifactError, match=error):
        load_artifact(bad)


def test_serving_imports_neither_sklearn_nor_torch() -> None:
    code = (
        "import sys\n"
        "from classifiers.model import load_artifact, DEFAULT_ARTIFACT\n"
        "from classifiers.request_view import view_request\n"
        "from classifiers.features import extract\n"
        "s = load_artifact(DEFAULT_ARTIFACT)\n"
        "v = view_request('chat', {'messages': [{'role': 'user', 'content': 'hi'}]})\n"
        "s.score(v, extract(v))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sklearn', 'torch', 'scipy', 'matplotlib')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"messages": [{"role": "user", "content": "你好呀"}]}, "chat"),
        ({"messages": [{"role": "user", "content": "thanks, that's great!"}]}, "chat"),
        ({"messages": [{"role": "user", "content": "Write a Python function that merges two "
                        "sorted lists."}]}, "code"),
        ({"messages": [{"role": "user", "content": "什么是量子计算？请详细解释。"}]}, "technical"),
        ({"messages": [{"role": "user", "content": "Write a poem about the sea at night."}]},
         "prose"),
        ({"messages": [{"role": "user", "content": "Send an email to Sarah saying the meeting "
                        "moved to 3pm"}],
          "tools": [{"type": "function", "function": {
              "name": "send_email", "description": "Send an email on behalf of the user",
              "parameters": {"type": "object", "properties": {"to": {"type": "string"},
                                                              "body": {"type": "string"}}}}}]},
         "agent"),
        ({"messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "{\"temp\": 21}"}],
          "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
              "type": "object", "properties": {"city": {"type": "string"}}}}}]}, "agent"),
    ],
)
def test_the_committed_artifact_gets_plain_cases_right(body: dict[str, object],
                                                        expected: str) -> None:
    assert _score(DEFAULT_ARTIFACT, body)[0] == expected


_TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for name, desc in (("set_reminder", "Create a reminder"), ("get_weather", "Weather"),
                       ("send_email", "Send an e-mail"), ("play_music", "Play music"))]
_HISTORY = [
    {"role": "user", "content": "What's the weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"q\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 4}"},
    {"role": "assistant", "content": "4 degrees."},
    {"role": "user", "content": "Set a reminder to apply sunscreen before lunch at 12:30."},
]


@pytest.mark.parametrize(
    ("body", "agent"),
    [
        ({"messages": _HISTORY, "tools": _TOOLS}, True),  # tools + tool calls in the history
        ({"messages": _HISTORY, "tools": _TOOLS, "tool_choice": "none"}, False),  # calls barred
        ({"messages": _HISTORY}, False),  # the history alone: no tool to call now
    ],
)
def test_agent_structure_counts_in_the_shipped_model_and_the_rules(
    body: dict[str, object], agent: bool
) -> None:
    from classifiers import rules

    view = view_request("chat", body)
    features = extract(view)
    assert features.agent_structure is agent
    scores = load_artifact(DEFAULT_ARTIFACT).score(view, features)
    if agent:
        assert scores.top_class == "agent" and scores.scores["agent"] >= 0.9 - 1e-6
        assert sum(scores.scores.values()) == pytest.approx(1.0, abs=1e-4)
        assert rules.score(view, features).top_class == "agent"


def test_the_shipped_model_itself_reads_agent_structure_as_agent() -> None:
    """The structure is a feature too: the model's own probabilities, before the rule's floor,
    put a turn with tools and earlier tool calls on agent (issue 11)."""
    view = view_request("chat", {"messages": _HISTORY, "tools": _TOOLS})
    features = extract(view)
    scorer = load_artifact(DEFAULT_ARTIFACT)
    probabilities = scorer.probabilities(view, features)
    assert scorer.classes[int(np.argmax(probabilities))] == "agent"
    assert features.vector()[FEATURE_NAMES.index("agent_structure")] == 1.0


def test_remembered_field_shares_score_as_a_fresh_scorer_does_and_stay_bounded() -> None:
    """Each field text's share of the logits is remembered (an agent loop resends most fields):
    a second request with the same fields and a new tail scores as a scorer seeing it first."""
    scorer = load_artifact(DEFAULT_ARTIFACT)
    turns = [{"messages": [{"role": "system", "content": "You are a coding agent."},
                           {"role": "user", "content": "Fix the failing test in utils.py"},
                           {"role": "assistant", "content": f"Looking at step {i}."},
                           {"role": "tool", "content": f"result {i}: " + "ok " * i}],
              "tools": _TOOLS} for i in range(3)]
    for body in turns:
        view = view_request("chat", body)
        features = extract(view)
        remembered, fresh = scorer.score(view, features), load_artifact(DEFAULT_ARTIFACT).score(view, features)
        assert remembered.top_class == fresh.top_class
        assert remembered.scores == pytest.approx(fresh.scores, abs=1e-6)
    for i in range(200):  # new texts push old ones out: bounded
        view = view_request("chat", {"messages": [{"role": "user", "content": f"question {i}"}]})
        scorer.score(view, extract(view))
    assert len(scorer.memo) == 64


def test_serving_scores_match_the_plain_numpy_formula() -> None:
    """The serving path (field by field, Python softmax) against the formula written plainly."""
    from classifiers.model import numeric_row
    from classifiers.ngrams import hashed

    scorer = load_artifact(DEFAULT_ARTIFACT)
    for content in ("hi there", "def f(x):\n    return x * 2\n", "写一首关于秋天的诗", "x" * 3000):
        view = view_request("chat", {"messages": [{"role": "user", "content": content}]})
        features = extract(view)
        idx, weights = hashed(view, scorer.settings)
        numeric = (numeric_row(features.vector()) - scorer.num_mean) / scorer.num_scale
        logits = scorer.bias + numeric @ scorer.w_num + weights @ scorer.w_text[idx]
        expected = np.exp(logits - logits.max())
        expected /= expected.sum()
        assert np.allclose(scorer.probabilities(view, features), expected, atol=1e-5)


def test_the_numeric_values_are_those_of_the_formula_over_every_feature() -> None:
    """Only the log-scaled positions are visited; the values are exactly those of the formula
    applied to each feature in turn (log1p of the count-like ones, the rest as they are)."""
    import math

    from classifiers.model import LOG_SCALED, _numeric_values

    for content in ("hi there", "def f(x):\n    return x * 2\n", "写一首关于秋天的诗", "x" * 3000):
        view = view_request("chat", {"messages": [{"role": "user", "content": content}],
                                     "tools": _TOOLS, "max_tokens": 300})
        features = extract(view)
        expected = [math.log1p(max(getattr(features, name), 0.0)) if name in LOG_SCALED
                    else getattr(features, name) for name in FEATURE_NAMES]
        assert _numeric_values(features) == expected
