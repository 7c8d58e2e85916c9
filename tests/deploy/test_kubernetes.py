"""deploy/kubernetes: no cluster here, so the manifests are held to what can be checked: the
InferencePool's fields as the Gateway API Inference Extension's v1 reference defines them, the
picker's ports and health probes, and a config.yaml that specroute itself accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from router.cli import build_parser
from router.config import Config
from router.epp.server import check_endpoints

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "specroute-epp.yaml"
# inference.networking.k8s.io/v1: InferencePoolSpec, EndpointPickerRef and Port
POOL_SPEC = {"selector", "targetPorts", "endpointPickerRef"}
PICKER_REF = {"group", "kind", "name", "port", "failureMode"}


def _documents() -> dict[str, dict[str, Any]]:
    return {d["kind"] + "/" + d["metadata"]["name"]: d
            for d in yaml.safe_load_all(MANIFESTS.read_text(encoding="utf-8"))}


def test_the_inference_pool_uses_the_v1_api_s_fields() -> None:
    pool = _documents()["InferencePool/ds4"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    spec = pool["spec"]
    assert set(spec) <= POOL_SPEC and set(spec) >= {"selector", "targetPorts"}
    assert set(spec["selector"]) == {"matchLabels"}
    assert 1 <= len(spec["targetPorts"]) <= 8 and all(set(p) == {"number"}
                                                      for p in spec["targetPorts"])
    ref = spec["endpointPickerRef"]
    assert set(ref) <= PICKER_REF and ref["failureMode"] in ("FailOpen", "FailClose")
    assert ref["kind"] == "Service" and set(ref["port"]) == {"number"}


def test_the_pool_s_picker_is_the_specroute_service_on_its_grpc_port() -> None:
    docs = _documents()
    ref = docs["InferencePool/ds4"]["spec"]["endpointPickerRef"]
    service = docs[f"Service/{ref['name']}"]
    assert ref["port"]["number"] in [p["port"] for p in service["spec"]["ports"]]
    deployment = docs["Deployment/specroute-epp"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "epp" and args[args.index("--grpc-port") + 1] == str(ref["port"]["number"])
    assert container["readinessProbe"]["grpc"]["service"] == "readiness"
    # one instance per answer: what a gateway routing on the header (ORIGINAL_DST) takes
    assert build_parser().parse_args(args).endpoints == "primary"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_config_map_is_a_config_the_picker_accepts() -> None:
    docs = _documents()
    text = docs["ConfigMap/specroute-epp"]["data"]["config.yaml"]
    config = Config.model_validate(yaml.safe_load(text))
    check_endpoints(config)  # every instance as ip:port
    ips = {s["spec"]["clusterIP"] for k, s in docs.items() if k.startswith("Service/ds4-")}
    assert {b.base_url.split("//")[1].split(":")[0] for b in config.backends} == ips
