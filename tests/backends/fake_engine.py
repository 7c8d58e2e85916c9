"""A tiny real server process for the supervisor tests, started the way llama-server is.

The llama.cpp adapter builds `BINARY -m MODEL --host H --port P --metrics ...`; with the Python
interpreter as BINARY and this module's name as MODEL, that command runs this file. It serves
`GET /health` and `GET /v1/models`, and misbehaves on request:
  --starts-file F --fail-starts N   every start counts itself in F; starts 2..N+1 exit at once
  --ready-after S                   /health answers 503 for S seconds first
  --never-ready                     /health always answers 503
  --ignore-term                     ignore SIGTERM (the supervisor must escalate to SIGKILL)
  --grandchild-pidfile F            spawn a sleeping grandchild and write its PID to F
  --hang-file F                     while F exists, requests hang (alive but unresponsive)
  --slots N                         serve llama.cpp's `GET /props` (total_slots N) and
                                    `GET /slots` (N entries); without it, both answer 404
  --no-props                        with --slots: `GET /props` answers 404, `/slots` alone tells
  --slots-file F                    --slots read from F at start (a restart may change it)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _count_start(path: Path) -> int:
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--starts-file", type=Path)
    parser.add_argument("--fail-starts", type=int, default=0)
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--grandchild-pidfile", type=Path)
    parser.add_argument("--hang-file", type=Path)
    parser.add_argument("--slots", type=int, default=0)
    parser.add_argument("--no-props", action="store_true")
    parser.add_argument("--slots-file", type=Path)
    options, _ = parser.parse_known_args()  # the adapter's own flags (--metrics, -md ...)

    if options.starts_file is not None:
        start = _count_start(options.starts_file)
        if 2 <= start <= options.fail_starts + 1:
            print(f"start {start}: failing on purpose", flush=True)
            sys.exit(3)
    if options.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if options.grandchild_pidfile is not None:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        options.grandchild_pidfile.write_text(str(child.pid))
    ready_at = time.monotonic() + options.ready_after
    if options.slots_file is not None:
        options.slots = int(options.slots_file.read_text())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            while options.hang_file is not None and options.hang_file.exists():
                time.sleep(0.05)  # hung: the process lives, nothing answers
            if self.path == "/health":
                ready = not options.never_ready and time.monotonic() >= ready_at
                self._send(200 if ready else 503, {"status": "ok" if ready else "loading"})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
            elif self.path == "/props" and options.slots and not options.no_props:
                self._send(200, {"total_slots": options.slots, "model_path": "fake"})
            elif self.path == "/slots" and options.slots:
                self._send(200, [{"id": i, "is_processing": False} for i in range(options.slots)])
            else:
                self._send(404, {"error": "not found"})

        def _send(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    print(f"fake engine pid {os.getpid()} listening on {options.host}:{options.port}", flush=True)
    ThreadingHTTPServer((options.host, options.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
