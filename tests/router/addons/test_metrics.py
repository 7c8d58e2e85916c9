"""`/metrics` exposition: the samples each observation and event produces."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from router.addons.metrics import Metrics
from tests.decisionlog.examples import make_record

GRAFANA = Path(__file__).resolve().parents[3] / "grafana" / "specroute-dashboard.json"


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def _get(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
         **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_observe_counts_requests_and_fills_histograms() -> None:
    metrics = Metrics()
    metrics.observe(make_record(cls="code", ttft_ms=250, tps=12.0, tokens=100, draft_n=10,
                                accepted=9, overhead_ms=0.7, explored=True))
    metrics.observe(make_record(cls="code", ttft_ms=250, tps=13.0, tokens=50, draft_n=30,
                                accepted=15))
    metrics.observe(make_record(cls="chat", profile="plain", reason="sampled", status=502,
                                error="boom", tps=None, tokens=None, ttft_ms=None))
    s = _samples(metrics)
    assert _get(s, "specroute_requests_total", **{"class": "code"}, lang="en", spec="mtp",
                backend="mtp-0", reason="learned", status="200") == 2
    assert _get(s, "specroute_requests_total", **{"class": "chat"}, lang="en", spec="plain",
                backend="plain-0", reason="sampled", status="502") == 1
    assert _get(s, "specroute_explored_requests_total", **{"class": "code"}) == 1
    assert _get(s, "specroute_proxy_overhead_seconds_count") == 3
    assert _get(s, "specroute_proxy_overhead_seconds_bucket", le="0.001") == 3
    assert _get(s, "specroute_ttft_seconds_bucket", spec="mtp", **{"class": "code"},
                le="0.25") == 2
    assert _get(s, "specroute_ttft_seconds_bucket", spec="mtp", **{"class": "code"},
                le="0.1") == 0
    assert _get(s, "specroute_decode_tokens_per_second_sum", spec="mtp",
                **{"class": "code"}) == pytest.approx(25.0)
    assert _get(s, "specroute_completion_tokens_total", spec="mtp", **{"class": "code"}) == 150
    assert _get(s, "specroute_draft_tokens_total", **{"class": "code"}) == 40
    assert _get(s, "specroute_draft_accepted_tokens_total", **{"class": "code"}) == 24
    assert _get(s, "specroute_acceptance_ratio_bucket", **{"class": "code"}, le="0.5") == 1
    assert _get(s, "specroute_acceptance_ratio_count", **{"class": "code"}) == 2
    assert ("specroute_ttft_seconds_count", (("class", "chat"), ("spec", "plain"))) not in s
    assert _get(s, "specroute_arm_requests_total", **{"class": "code"}, pool="mtp", arm="mtp") == 2


def test_labels_name_the_speculation_config_not_the_shorthand() -> None:
    """An n-gram instance's profile is the shorthand `mtp`; its series say `ngram-simple`. A
    record from before configs were logged counts under its profile."""
    metrics = Metrics()
    metrics.observe(make_record(backend="ngram-0", profile="mtp", spec="ngram-simple", tps=30.0))
    metrics.observe(make_record(backend="mtp-0", profile="mtp"))
    metrics.set_backend_health("ngram-0", "ngram-simple", True)
    s = _samples(metrics)
    assert _get(s, "specroute_requests_total", **{"class": "code"}, lang="en",
                spec="ngram-simple", backend="ngram-0", reason="learned", status="200") == 1
    assert _get(s, "specroute_requests_total", **{"class": "code"}, lang="en", spec="mtp",
                backend="mtp-0", reason="learned", status="200") == 1
    assert _get(s, "specroute_decode_tokens_per_second_sum", spec="ngram-simple",
                **{"class": "code"}) == pytest.approx(30.0)
    assert _get(s, "specroute_backend_healthy", backend="ngram-0", spec="ngram-simple") == 1
    assert not any(label == "profile" for _, labels in s for label, _ in labels)


def test_arms_beyond_mtp_and_plain_are_counted() -> None:
    metrics = Metrics()
    chat = make_record(cls="chat", profile="plain")
    arm = "nothink+model=deepseek-chat,thinking=off"
    metrics.observe(replace(chat, decision={**chat.decision, "pool": "nothink", "arm": arm}))
    s = _samples(metrics)
    assert _get(s, "specroute_arm_requests_total", **{"class": "chat"}, pool="nothink",
                arm=arm) == 1


def test_events_backend_health_restarts_failovers_reloads_model_speedup() -> None:
    metrics = Metrics()
    metrics.set_backend_health("mtp-0", "mtp", True)
    metrics.set_backend_health("plain-0", "plain", True)
    metrics.set_backend_health("plain-0", "plain", False)
    metrics.inc_backend_restart("plain-0")
    metrics.observe(make_record(profile="plain", failover_from=("mtp-0",)))
    metrics.policy_reload(True)
    metrics.policy_reload(True)
    metrics.policy_reload(False)
    metrics.set_model_speedup("code", 1.042)
    s = _samples(metrics)
    assert _get(s, "specroute_backend_healthy", backend="mtp-0", spec="mtp") == 1
    assert _get(s, "specroute_backend_healthy", backend="plain-0", spec="plain") == 0
    assert _get(s, "specroute_backend_restarts_total", backend="plain-0") == 1
    assert _get(s, "specroute_failovers_total", from_backend="mtp-0", to_backend="plain-0") == 1
    assert _get(s, "specroute_policy_reloads_total", result="ok") == 2
    assert _get(s, "specroute_policy_reloads_total", result="failed") == 1
    assert _get(s, "specroute_model_speedup", cls="code") == pytest.approx(1.042)


def test_two_apps_never_share_counts() -> None:
    first, second = Metrics(), Metrics()
    first.observe(make_record())
    assert _get(_samples(first), "specroute_proxy_overhead_seconds_count") == 1
    assert _get(_samples(second), "specroute_proxy_overhead_seconds_count") == 0


def test_grafana_dashboard_queries_only_exported_series() -> None:
    dashboard = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"specroute_[a-z_]+", expr)}
    metrics = Metrics()
    metrics.observe(make_record(draft_n=4, accepted=3, explored=True, failover_from=("x",)))
    metrics.set_backend_health("mtp-0", "mtp", True)
    metrics.inc_backend_restart("mtp-0")
    metrics.set_model_speedup("code", 1.05)
    exported = {name for name, _ in _samples(metrics)}
    assert len(dashboard["panels"]) >= 10
    assert used and used <= exported, used - exported
