"""Building llama-server: every build is smoke-tested before it is cached, a failing flag set
falls back once to the conservative one, and a total failure names the flags and quotes the log.

The builders here write real executables (a fake llama-server that serves /health and
/completion on its --port, and one that dies like the AMX build did); the smoke test starts
them as real processes on loopback.
"""

from __future__ import annotations

import json
import platform
import sys
import textwrap
from pathlib import Path

import pytest

from backends.local.build import (
    cached_server,
    ensure_llama_server,
    failure_marker,
    server_dir,
    server_summary,
)
from backends.local.cache import LocalBackendError, Progress
from backends.local.flags import FlagSet, flag_sets
from backends.local.smoke import smoke_test

FAKE_SERVER = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self.reply({{"status": "ok"}})
        def do_POST(self):
            asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.reply({{"content": " Paris.", "tokens_predicted": asked["n_predict"]}})
    print("fake llama-server listening", flush=True)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
""")

CRASHING_SERVER = textwrap.dedent("""\
    #!/bin/sh
    echo "llama threadpool init, n_threads = 1"
    echo "#0 ggml_backend_amx_mul_mat(...)"
    kill -SEGV $$
""")


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


class Builder:
    """Builds the script given for each flag set name; counts the builds."""

    def __init__(self, scripts: dict[str, str]) -> None:
        self.scripts = scripts
        self.built: list[str] = []

    def __call__(self, flags: FlagSet, work: Path, log: Path, progress: Progress) -> Path:
        self.built.append(flags.name)
        if flags.name not in self.scripts:
            raise LocalBackendError(f"cmake failed for {flags.name}\nerror: no compiler")
        return executable(work / "llama-server", self.scripts[flags.name])


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path


BEST, FALLBACK = (flags.name for flags in flag_sets(platform.machine()))


def test_a_working_build_is_smoke_tested_then_cached(tmp_path: Path, model: Path) -> None:
    root, lines = tmp_path / "cache", []
    builder = Builder({BEST: FAKE_SERVER})
    binary = ensure_llama_server(root, lines.append, model, build=builder)
    assert binary == server_dir(root, flag_sets(platform.machine())[0]) / "llama-server"
    assert any(line.startswith("smoke test passed: generated 8 tokens") for line in lines)
    info = json.loads((binary.parent / "build-info.json").read_text())
    assert info["flag_set"] == BEST and info["smoke_test"].startswith("generated 8 tokens")
    assert BEST in server_summary(binary) and str(binary) in server_summary(binary)
    # a second call reuses it without building
    assert ensure_llama_server(root, lines.append, model, build=builder) == binary
    assert builder.built == [BEST] and cached_server(root) == binary


def test_a_crashing_build_is_never_cached_and_falls_back_once(
    tmp_path: Path, model: Path
) -> None:
    root, lines = tmp_path / "cache", []
    builder = Builder({BEST: CRASHING_SERVER, FALLBACK: FAKE_SERVER})
    binary = ensure_llama_server(root, lines.append, model, build=builder)
    best, fallback = flag_sets(platform.machine())
    assert binary == server_dir(root, fallback) / "llama-server"
    assert not server_dir(root, best).exists()  # the untested/crashing binary never landed
    assert any(line.startswith(f"rebuilding once with conservative flags: {FALLBACK}")
               for line in lines)
    marker = json.loads(failure_marker(root, best).read_text())
    assert "exited with code" in marker["detail"] and "amx_mul_mat" in marker["log_tail"]
    # next time the failed set is skipped, not rebuilt
    assert cached_server(root) == binary
    assert ensure_llama_server(root, lines.append, model, build=builder) == binary
    assert builder.built == [BEST, FALLBACK]


def test_when_every_set_fails_the_error_names_the_flags_and_quotes_the_log(
    tmp_path: Path, model: Path
) -> None:
    root = tmp_path / "cache"
    builder = Builder({BEST: CRASHING_SERVER})  # the fallback does not even build
    with pytest.raises(LocalBackendError) as raised:
        ensure_llama_server(root, lambda line: None, model, build=builder)
    message = str(raised.value)
    assert BEST in message and FALLBACK in message and "the build failed" in message
    assert "amx_mul_mat" in message  # the crash of the first set: the last left no server log
    assert cached_server(root) is None
    builder = Builder({BEST: CRASHING_SERVER, FALLBACK: CRASHING_SERVER})
    with pytest.raises(LocalBackendError, match="amx_mul_mat") as raised:
        ensure_llama_server(tmp_path / "other", lambda line: None, model, build=builder)
    assert "end of the last server log" in str(raised.value)
    assert builder.built == [BEST, FALLBACK]


def test_a_better_set_still_untried_is_built_rather_than_settled_for(
    tmp_path: Path, model: Path
) -> None:
    root = tmp_path / "cache"
    ensure_llama_server(root, lambda line: None, model,
                        build=Builder({BEST: CRASHING_SERVER, FALLBACK: FAKE_SERVER}))
    failure_marker(root, flag_sets(platform.machine())[0]).unlink()  # the operator retries
    assert cached_server(root) is None


def test_smoke_test_of_a_binary_that_cannot_start(tmp_path: Path, model: Path) -> None:
    result = smoke_test(tmp_path / "missing", model, tmp_path / "smoke.log", timeout_s=5)
    assert not result.ok and "could not start" in result.detail
