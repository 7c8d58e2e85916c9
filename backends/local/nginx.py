"""A real nginx on loopback in front of specroute replicas, running the shipped
deploy/nginx/specroute.conf (round robin) with its placeholders filled in: for the demo of two
replicas. Debian's package (`apt-get install nginx`); its own prefix directory, in the
foreground, stopped by PID (never by name).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backends.local.cache import LocalBackendError, free_loopback_port, stop_process
from backends.local.envoy import render_config

SITE = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "specroute.conf"
START_TIMEOUT_S = 10.0
MAIN = """daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi; uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
    include {site};
}}
"""


@dataclass
class Nginx:
    port: int
    process: subprocess.Popen[bytes]
    work: Path

    def stop(self) -> None:
        stop_process(self.process)


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/bin/nginx") if Path(p).exists()), None)


def site_config(listen: str, upstreams: Sequence[str]) -> str:
    """The shipped site, listening on `listen` in front of `upstreams` (`host:port` each)."""
    servers = "\n    ".join(f"server {u};" for u in upstreams)
    return render_config(SITE, LISTEN=listen, SERVERS=servers)


def start_nginx(upstreams: Sequence[str], work: Path) -> Nginx:
    """nginx on 127.0.0.1 and a free port, accepting connections when this returns."""
    binary = nginx_binary()
    if binary is None:
        raise LocalBackendError("nginx is not installed (Debian: apt-get install -y nginx)")
    work.mkdir(parents=True, exist_ok=True)
    port = free_loopback_port()
    site = work / "specroute.conf"
    site.write_text(site_config(f"127.0.0.1:{port}", upstreams))
    main = work / "nginx.conf"
    main.write_text(MAIN.format(work=work, site=site))
    process = subprocess.Popen([binary, "-c", str(main), "-p", str(work)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    nginx = Nginx(port, process, work)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise LocalBackendError(f"nginx exited {process.returncode}: {error[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return nginx
        except OSError:
            time.sleep(0.05)
    nginx.stop()
    raise LocalBackendError(f"nginx did not listen on 127.0.0.1:{port} within "
                            f"{START_TIMEOUT_S:.0f} s")
