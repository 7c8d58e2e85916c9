"""`specroute epp render-envoy`: the shipped Envoy configs filled in from a config.yaml, which
the real Envoy 1.40 accepts as written (`envoy --mode validate -c`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from router.cli import build_parser, main
from tests.backends.local.test_envoy import require_envoy

CONFIG = """\
backends:
  - {name: mtp-0, engine: llamacpp, profile: mtp, url: "http://127.0.0.1:8081"}
  - {name: plain-0, engine: llamacpp, profile: plain, url: "http://127.0.0.1:8082"}
  - {name: ngram-0, engine: llamacpp, speculation: {type: ngram-simple}, url: "http://10.0.0.7:8083/v1"}
"""


def _socket(address: dict[str, object]) -> tuple[object, object]:
    socket = address["socket_address"]
    assert isinstance(socket, dict)
    return socket["address"], socket["port_value"]


def test_render_envoy_writes_configs_the_real_envoy_accepts_with_every_instance(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    envoy = require_envoy()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "envoy"
    assert main(["epp", "render-envoy", "--config", str(config), "--out", str(out),
                 "--listen-port", "10001", "--grpc-port", "9003", "--admin-port", "9902"]) == 0
    printed = capsys.readouterr().out
    assert f"envoy -c {out / 'envoy.yaml'}" in printed
    assert sorted(p.name for p in out.iterdir()) == ["envoy-fallback.yaml", "envoy.yaml"]
    for path in out.iterdir():
        text = path.read_text()
        assert "${" not in text
        done = subprocess.run([str(envoy), "--mode", "validate", "-c", str(path),
                               "--disable-hot-restart", "-l", "warning"], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        document = yaml.safe_load(text)
        assert _socket(document["admin"]["address"]) == ("127.0.0.1", 9902)
        listener = document["static_resources"]["listeners"][0]
        assert _socket(listener["address"]) == ("127.0.0.1", 10001)
        clusters = {c["name"]: c for c in document["static_resources"]["clusters"]}
        picker = clusters["specroute_picker"]["load_assignment"]["endpoints"][0]["lb_endpoints"]
        assert [_socket(e["endpoint"]["address"]) for e in picker] == [("127.0.0.1", 9003)]
    fallback = yaml.safe_load((out / "envoy-fallback.yaml").read_text())
    pool = {c["name"]: c for c in fallback["static_resources"]["clusters"]}["inference_pool"]
    listed = pool["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [_socket(e["endpoint"]["address"]) for e in listed] == [
        ("127.0.0.1", 8081), ("127.0.0.1", 8082), ("10.0.0.7", 8083)]
    # envoy.yaml sends where the picker says: its text is the shipped one, comments and all
    assert "ORIGINAL_DST" in (out / "envoy.yaml").read_text()
    assert "# No fallback here" in (out / "envoy.yaml").read_text()


@pytest.mark.parametrize(("limits", "expected"), [("", 33 * 2**20),
                                                  ("limits: {max_body_mb: 64}\n", 65 * 2**20)])
def test_envoy_s_body_buffer_is_the_picker_s_limit_plus_a_margin(
        tmp_path: Path, limits: str, expected: int) -> None:
    """Envoy holds the body until the pick; a body past the picker's limit must reach it (its
    413), not stall in Envoy's buffer (a 504 at message_timeout)."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + limits)
    out = tmp_path / "envoy"
    assert main(["epp", "render-envoy", "--config", str(config), "--out", str(out)]) == 0
    for path in out.iterdir():
        routes = yaml.safe_load(path.read_text())["static_resources"]["listeners"][0][
            "filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"][0][
            "routes"]
        assert [route["request_body_buffer_limit"] for route in routes] == [expected] * 2


def test_an_instance_not_named_by_ip_and_port_is_a_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("10.0.0.7", "engine.internal"))
    assert main(["epp", "render-envoy", "--config", str(config), "--out",
                 str(tmp_path / "envoy")]) == 2
    assert "'ngram-0'" in capsys.readouterr().err
    assert not (tmp_path / "envoy").exists()


def test_epp_without_a_command_still_runs_the_picker() -> None:
    args = build_parser().parse_args(["epp", "--config", "c.yaml", "--grpc-port", "0"])
    assert args.epp_command is None and args.grpc_port == 0 and args.func.__name__ == "_epp"
