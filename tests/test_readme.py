"""Every command of the README runs: a snippet that drifts is a bug.

The README's commands are the lines of its ```sh blocks (and its first block: `make demo` and
`make test`, which CI runs, .ci/run). Each is listed here with the test that runs it, as
written, in a directory of its own; where a command names a fixed port (8700, 8081, 9002, 6379
...) the test substitutes a free one, as shown in each test, since other processes may hold
those. A command in the README that no test here runs fails the first test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import redis
import yaml
from aiohttp.test_utils import TestServer

from backends.local.envoy import cached_envoy
from backends.local.nginx import nginx_binary
from backends.local.redisserver import redis_binary
from backends.local.simulator import SimState, create_sim_app
from decisionlog.writer import DecisionLog
from fileio.yamlfile import parse_model
from router.config import Config
from tests.missing import ENVOY, NGINX, REDIS, skip_missing
from tests.router.conftest import ServerFactory
from tests.router.test_pools_rewrite import CASUAL, start_ds4

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVE = ".venv/bin/specroute serve --config config.yaml"
CURL = ("curl -s http://127.0.0.1:8700/v1/chat/completions -H 'content-type: application/json' "
        "-d '{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Say hi\"}]}'")
CHECK = ".venv/bin/specroute policy check --config config.yaml"
EXPLAIN = ".venv/bin/specroute policy explain --config config.yaml"
TAIL = ".venv/bin/specroute tail logs/decisions.jsonl"
REPORT = ".venv/bin/specroute report logs/decisions.jsonl --project-onto gb10 --out report/"
REPLICAS_DEMO = ".venv/bin/specroute demo --backends fake --replicas 2 --requests 3"
REDIS_SERVER = "redis-server --bind 10.0.0.10 --port 6379 --save '' --appendonly no"
RENDER = ".venv/bin/specroute epp render-envoy --config config.yaml --out envoy"
EPP = ".venv/bin/specroute epp --config config.yaml --grpc-port 9002"
ENVOY_C = "envoy -c envoy/envoy.yaml"
ENVOY_DEMO = ".venv/bin/specroute demo --backends fake --front envoy --requests 2"
RUN_BY = {  # command -> the test that runs it
    SERVE: "test_point_it_at_your_own_servers", CURL: "test_point_it_at_your_own_servers",
    CHECK: "test_the_policy_commands", EXPLAIN: "test_the_policy_commands",
    REPLICAS_DEMO: "test_two_replicas_then_watching_them",
    TAIL: "test_two_replicas_then_watching_them", REPORT: "test_two_replicas_then_watching_them",
    REDIS_SERVER: "test_the_replicas_store_and_config",
    RENDER: "test_behind_envoy", EPP: "test_behind_envoy", ENVOY_C: "test_behind_envoy",
    ENVOY_DEMO: "test_the_envoy_demo",
}
# commands written inline in the README's prose -> what runs them: a test here, another test
# file's test (`path::name`), or `.ci/run` ("ci")
FAKE_DEMO = ".venv/bin/specroute demo --backends fake"
ENVOY_WHERE = ".venv/bin/python -m backends.local.envoy where"
INLINE_RUN_BY = {
    "make demo": "ci", "make test": "ci", "make lint": "ci", "make vllm": "ci",
    ".venv/bin/specroute demo --engine vllm": "tests/integration/test_vllm_demo.py::"
                                              "test_the_vllm_demo_measures_both_instances_then_routes_on_auto",
    FAKE_DEMO: "test_the_fake_demo",
    "specroute report": "test_two_replicas_then_watching_them",
    "specroute learn": "test_two_replicas_then_watching_them",
    "specroute tail": "test_the_chat_route_in_the_policy_section",
    "specroute epp": "test_behind_envoy",
    "python -m bench.arms": "tests/bench/test_arms.py::"
                            "test_a_tiny_unpaced_run_prints_one_row_per_load_and_the_oracle_wins_alone",
    ENVOY_WHERE: "test_the_envoy_where",
}
COMMAND = re.compile(r"(make|specroute|\.venv/bin/\S+|python -m|curl|envoy|redis-server) \S")
TIMEOUT_S = 300


def blocks(kind: str) -> list[str]:
    return [b.split("```", 1)[0] for b in README.split(f"```{kind}\n")[1:]]


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def commands() -> list[str]:
    lines = [line.strip() for block in blocks("sh") for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def inline_commands() -> list[str]:
    """The README prose's code spans that are commands (two words or more), spans broken
    across lines joined."""
    prose = re.sub(r"```.*?```", "", README, flags=re.DOTALL)
    spans = (" ".join(m.group(1).split()) for m in re.finditer(r"`([^`]+)`", prose))
    return sorted({span for span in spans if COMMAND.match(span)})


def test_every_readme_command_is_run_by_a_test_here() -> None:
    assert sorted(commands()) == sorted(RUN_BY)
    assert all(name in globals() for name in RUN_BY.values())


def test_every_inline_command_is_run_by_a_test_or_by_ci() -> None:
    assert inline_commands() == sorted(INLINE_RUN_BY)
    ci = (ROOT / ".ci" / "run").read_text()
    for command, runner in INLINE_RUN_BY.items():
        if runner == "ci":
            assert f"\n{command}\n" in ci, command
        elif "::" in runner:
            path, name = runner.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), runner
        else:
            assert runner in globals(), runner


def test_the_readme_starts_with_the_two_commands_and_ci_runs_both() -> None:
    first = README.split("```\n", 2)[1]
    assert README.startswith("# specroute\n\n```\nmake demo ")
    assert [line.split()[:2] for line in first.splitlines()] == [["make", "demo"],
                                                                 ["make", "test"]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nmake test\n" in ci and "\nmake demo\n" in ci and "set -euo pipefail" in ci


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def workdir(tmp: Path) -> Path:
    """A directory of its own, where `.venv/bin/specroute` is this checkout's."""
    (tmp / ".venv").symlink_to(ROOT / ".venv")
    return tmp


def sh(command: str, cwd: Path, subs: Mapping[str, str] | None = None,
       timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    for old, new in (subs or {}).items():
        assert old in command, f"{old!r} is not in {command!r}"
        command = command.replace(old, new)
    env = {k: v for k, v in os.environ.items() if k != "SPECROUTE_REQUIRE_LOCAL"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def spawn(command: str, cwd: Path, subs: Mapping[str, str] | None = None
          ) -> subprocess.Popen[bytes]:
    for old, new in (subs or {}).items():
        assert old in command
        command = command.replace(old, new)
    return subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def wait_listening(port: int, process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        if listening(port):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {seconds} s")


async def test_point_it_at_your_own_servers(aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    config_text = section("Point it at your own servers").split("```yaml\n", 1)[1].split("```")[0]
    assert yaml.safe_load(config_text)["backends"] == yaml.safe_load(
        (ROOT / "config.yaml").read_text())["backends"]  # the shipped config's instances
    engines: dict[str, TestServer] = {}
    for profile in ("mtp", "plain"):
        engines[profile] = await aiohttp_server(create_sim_app(SimState(profile=profile)))
    port = free_port()
    (cwd / "config.yaml").write_text(
        config_text.replace("8081", str(engines["mtp"].port))
        .replace("8082", str(engines["plain"].port))
        + f"listen: {{port: {port}}}\nsupervisor: {{startup_probe: false}}\n")
    serve = spawn(SERVE, cwd)
    try:
        await wait_listening(port, serve)
        done = await asyncio.to_thread(sh, CURL, cwd, {"8700": str(port)})
        answer = json.loads(done.stdout)
        assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]
    finally:
        stop(serve)


def test_the_policy_commands() -> None:
    check = sh(CHECK, ROOT)
    assert check.returncode == 0, check.stdout + check.stderr
    explain = sh(EXPLAIN, ROOT)
    assert explain.returncode == 0, explain.stdout + explain.stderr
    assert explain.stdout.startswith("Rules, in the order they are checked")


async def test_the_chat_route_in_the_policy_section(
    aiohttp_server: ServerFactory, tmp_path: Path
) -> None:
    """The pool and the route shown are the shipped ds4 ones; the route, as a whole policy file,
    sends casual chat to the pool as `deepseek-chat` without thinking; `specroute tail` prints
    the README's line for it (but the clock)."""
    shown = section("The policy")
    pools_text, policy_text = (b.split("```")[0] for b in shown.split("```yaml\n")[1:3])
    ds4_config = yaml.safe_load((ROOT / "config.ds4-gb10.yaml").read_text())
    assert yaml.safe_load(pools_text)["pools"] == ds4_config["pools"] == {"nothink": ["ds4-plain"]}
    ds4_policy = yaml.safe_load((ROOT / "policies" / "ds4-gb10.yaml").read_text())
    assert yaml.safe_load(policy_text)["routes"]["chat"] == ds4_policy["routes"]["chat"]
    ds4 = await start_ds4(aiohttp_server, tmp_path, policy_text=policy_text)  # its pools: these
    async with ds4.client() as client:
        await client.chat.completions.create(**CASUAL)  # type: ignore[call-overload]
    assert ds4.plain.last_body()["model"] == "deepseek-chat" and ds4.mtp.received == []
    cwd = workdir(tmp_path)
    with DecisionLog(cwd / "logs" / "decisions.jsonl") as log:
        log.write_record(ds4.last)
    tail = sh(TAIL, cwd)
    assert tail.returncode == 0, tail.stderr
    line = shown.split("```text\n", 1)[1].split("\n", 1)[0]
    assert tail.stdout.splitlines()[0][8:] == line[8:]


def test_two_replicas_then_watching_them(tmp_path: Path) -> None:
    for binary, missing in ((redis_binary(), REDIS), (nginx_binary(), NGINX)):
        if binary is None:
            skip_missing(missing)
    cwd = workdir(tmp_path)
    done = sh(REPLICAS_DEMO, cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = re.search(r"replica a: \d+ = its own \d+ \+ \d+ learned from the other",
                      " ".join(section("Two replicas").split()))
    assert shown and re.search(r"replica a: \d+ = its own \d+ \+ [1-9]\d* learned", done.stdout)
    assert "the conversation stayed on its instance" in done.stdout
    (cwd / "logs" / "decisions.jsonl").write_text(
        (cwd / "logs" / "demo" / "decisions-a.jsonl").read_text())
    tail = sh(TAIL, cwd)
    assert tail.returncode == 0 and "mtp-0" in tail.stdout
    report = sh(REPORT, cwd)
    assert report.returncode == 0, report.stderr[-2000:]
    assert list((cwd / "report").glob("*.md")) and list((cwd / "report").glob("*.png"))
    learn = sh(".venv/bin/specroute learn logs/decisions.jsonl --out learned.json", cwd)
    assert learn.returncode == 0, learn.stderr[-2000:]
    assert json.loads((cwd / "learned.json").read_text())


def test_the_fake_demo(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    done = sh(FAKE_DEMO, cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\d+ decisions in ", done.stdout)
    assert list((cwd / "logs" / "demo").glob("decisions*.jsonl"))


def test_the_envoy_where() -> None:
    if cached_envoy() is None:
        skip_missing(ENVOY)
    where = sh(ENVOY_WHERE, ROOT)
    assert where.returncode == 0, where.stderr[-2000:]
    path = Path(where.stdout.strip().splitlines()[-1])
    assert path.is_file() and os.access(path, os.X_OK)


def test_the_replicas_store_and_config(tmp_path: Path) -> None:
    if redis_binary() is None:
        skip_missing(REDIS)
    port = free_port()
    server = spawn(REDIS_SERVER, tmp_path, {"10.0.0.10": "127.0.0.1", "6379": str(port)})
    try:
        for _ in range(100):  # bounded: 10 s
            if listening(port):
                break
            time.sleep(0.1)
        client = redis.Redis(port=port)
        assert client.ping() and client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        client.close()
    finally:
        stop(server)
    replica = section("Two replicas").split("```yaml\n", 1)[1].split("```")[0]
    backends = yaml.safe_load((ROOT / "config.yaml").read_text())["backends"]
    config = parse_model(replica + yaml.safe_dump({"backends": backends}), Config, path="README")
    assert config.replicas.store == "redis://10.0.0.10:6379/0" and config.replicas.id
    assert (ROOT / "deploy" / "nginx" / "specroute.conf").exists()  # what the demo runs


async def test_behind_envoy(tmp_path: Path) -> None:
    envoy = cached_envoy()
    if envoy is None:
        skip_missing(ENVOY)
    cwd = workdir(tmp_path)
    http_port, grpc_port = free_port(), free_port()
    (cwd / "config.yaml").write_text((ROOT / "config.yaml").read_text().replace(
        "port: 8700", f"port: {http_port}") + "supervisor: {startup_probe: false}\n")
    shutil.copytree(ROOT / "policies", cwd / "policies", ignore=shutil.ignore_patterns(
        "*.learned*.json", "__pycache__"))
    done = sh(RENDER, cwd)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (cwd / "envoy").iterdir()} == {"envoy.yaml", "envoy-fallback.yaml"}
    # `envoy -c` in validate mode: Envoy builds the config without listening on its ports
    checked = sh(ENVOY_C, cwd, {"envoy -c": f"{envoy} --mode validate --disable-hot-restart -c"})
    assert checked.returncode == 0, checked.stdout + checked.stderr
    picker = spawn(EPP, cwd, {"9002": str(grpc_port)})
    try:
        await wait_listening(grpc_port, picker)
        await wait_listening(http_port, picker)
    finally:
        stop(picker)


def test_the_envoy_demo(tmp_path: Path) -> None:
    if cached_envoy() is None:
        skip_missing(ENVOY)
    done = sh(ENVOY_DEMO, workdir(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "specroute its endpoint picker" in done.stdout
