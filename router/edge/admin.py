"""Who may read the operator pages (`/metrics`, `/dashboard`): loopback clients, and, when
`admin.token` is configured, any client that presents it as `Authorization: Bearer <token>`.

They show traffic metadata (classes, backends, error rates) the operator may not want to expose
on the serving port; the OpenAI-compatible API itself is not guarded here.
"""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import web


def is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return remote == "unix"  # aiohttp's test/unix-socket transports have no IP


def admin_allowed(request: web.Request, token: str) -> bool:
    if is_loopback(request.remote):
        return True
    if not token:
        return False
    presented = request.headers.get("Authorization", "")
    scheme, _, value = presented.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def guard_admin(request: web.Request, token: str) -> None:
    """Raise 403 (an OpenAI-style error through the middleware) for a client not allowed."""
    if not admin_allowed(request, token):
        raise web.HTTPForbidden(
            reason="Forbidden",
            text="answers loopback clients only, or those presenting the admin token\n",
        )
