"""`specroute epp render-envoy`: the shipped Envoy configs (deploy/envoy/*.yaml) with their ports
and instances filled in from a config.yaml, ready for `envoy -c`.

The placeholders are filled by `backends.local.envoy.render_config`, as for the tests and the
demo. A config that lists its instances (envoy-fallback.yaml's override_host cluster) then gets
one endpoint per backend of config.yaml, in its order; envoy.yaml's ORIGINAL_DST cluster lists
none (it sends to the `ip:port` the picker names), and its text is kept as shipped, comments
and all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from backends.local.envoy import PICKER_CONFIG, PLACEHOLDER, render_config
from backends.spec import BackendSpec
from router.config import Config
from router.epp.exchange import endpoint_of
from router.epp.messages import OURS_NAMESPACE
from router.epp.server import check_endpoints

# envoy.yaml first: the one `specroute epp` answers by default (--endpoints primary)
TEMPLATES = tuple(sorted(PICKER_CONFIG.parent.glob("*.yaml"), key=lambda p: (p != PICKER_CONFIG, p.name)))
POOL_CLUSTER = "inference_pool"  # the cluster the shipped configs route to
SHIPPED_BUFFER_LIMIT = "request_body_buffer_limit: 34603008"  # 32 MiB, the default, + 1 MiB
# Envoy's buffer above the picker's limit: a body past it reaches the picker, which says 413
BUFFER_MARGIN = 2**20


@dataclass(frozen=True)
class EnvoyPorts:
    listen: int  # where clients send their OpenAI requests
    picker: int  # `specroute epp --grpc-port`
    admin: int  # Envoy's admin API


def render_envoy(template: Path, config: Config, ports: EnvoyPorts) -> str:
    """`template` for `config`'s instances; every placeholder filled or an error."""
    check_endpoints(config)  # ip:port each: what Envoy connects to
    values: dict[str, str | int] = {"LISTEN_PORT": ports.listen, "PICKER_PORT": ports.picker,
                                    "ADMIN_PORT": ports.admin}
    for profile in ("mtp", "plain"):  # the shipped two-instance list, replaced below
        spec = next((s for s in config.backends if s.profile == profile), config.backends[0])
        values[f"{profile.upper()}_PORT"] = endpoint_of(spec.base_url).rpartition(":")[2]
    wanted = set(PLACEHOLDER.findall(template.read_text()))
    text = render_config(template, **{k: v for k, v in values.items() if k in wanted})
    text = text.replace(SHIPPED_BUFFER_LIMIT, "request_body_buffer_limit: "
                        f"{config.limits.max_body_bytes + BUFFER_MARGIN}")
    document = yaml.safe_load(text)
    cluster = _pool_cluster(document, template)
    if "load_assignment" not in cluster:
        return text
    cluster["load_assignment"]["endpoints"] = [
        {"lb_endpoints": [_endpoint(spec) for spec in config.backends]}]
    return (f"# {template.name} as shipped (its comments explain each field), rendered by "
            "`specroute epp render-envoy`:\n# one endpoint per backend of the config, in its "
            "order.\n" + yaml.safe_dump(document, sort_keys=False, width=100))


def write_envoy_configs(config: Config, ports: EnvoyPorts, out: Path,
                        templates: tuple[Path, ...] = TEMPLATES) -> list[Path]:
    check_endpoints(config)  # before anything is written
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for template in templates:
        path = out / template.name
        path.write_text(render_envoy(template, config, ports))
        written.append(path)
    return written


def _pool_cluster(document: Any, template: Path) -> dict[str, Any]:
    clusters = document.get("static_resources", {}).get("clusters", [])
    for cluster in clusters:
        if isinstance(cluster, dict) and cluster.get("name") == POOL_CLUSTER:
            return cluster
    raise ValueError(f"{template}: no cluster named {POOL_CLUSTER!r}")


def _endpoint(spec: BackendSpec) -> dict[str, Any]:
    host, _, port = endpoint_of(spec.base_url).rpartition(":")
    # the answer's x-specroute-backend and -profile name the instance that served it
    named = {"x-specroute-backend": spec.name, "x-specroute-profile": spec.profile}
    return {"endpoint": {"address": {"socket_address": {"address": host.strip("[]"),
                                                        "port_value": int(port)}}},
            "metadata": {"filter_metadata": {OURS_NAMESPACE: named}}}
