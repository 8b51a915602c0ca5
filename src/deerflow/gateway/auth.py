"""Who is calling: the user id comes from the bearer token (or is `default`), never the request.

Two more checks protect a server that a browser can reach:

* With `auth.mode: none` on loopback, the `Host` header must name a loopback address, so a web
  page whose domain an attacker re-points at 127.0.0.1 (DNS rebinding) cannot read memory.
* A write (POST, PATCH, PUT, DELETE) carrying an `Origin` of another site is refused, so a page
  elsewhere cannot post a form (an import, say) at the local server.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Annotated, Final
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from deerflow.gateway.errors import GatewayError
from deerflow.gateway.lifecycle import gateway_state

__all__ = ["DEFAULT_USER", "CurrentUser", "is_loopback_host", "require_user"]

logger = logging.getLogger(__name__)

DEFAULT_USER: Final = "default"
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE: Final = {"WWW-Authenticate": "Bearer"}

bearer = HTTPBearer(
    auto_error=False,
    description="With `auth.mode: token`: a token from `deerflow auth add-token --user ID`.",
)


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The host of a `Host` header value, without the port."""
    return urlsplit(f"//{host_header}").hostname or ""


def _check_host_and_origin(request: Request, *, loopback_only: bool) -> None:
    host = request.headers.get("host", "")
    if loopback_only and not is_loopback_host(_host_name(host)):
        raise GatewayError(
            403,
            "forbidden_host",
            "without auth this server answers only requests addressed to a loopback host",
        )
    origin = request.headers.get("origin")
    if request.method in _SAFE_METHODS or origin is None:
        return
    if urlsplit(origin).netloc.lower() != host.lower():
        raise GatewayError(403, "cross_origin", "a write from another origin is refused")


async def require_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """The caller's user id.

    Raises:
        GatewayError: 401 without a known token (token mode); 403 for a foreign host or origin;
            500 when the token file cannot be read.
    """
    state = gateway_state(request)
    if state.tokens is None:
        _check_host_and_origin(request, loopback_only=not state.config.server.allow_remote)
        return DEFAULT_USER
    _check_host_and_origin(request, loopback_only=False)
    if credentials is None:
        raise GatewayError(
            401,
            "unauthorized",
            "missing bearer token: send 'Authorization: Bearer <token>'",
            headers=_CHALLENGE,
        )
    try:
        user_id = state.tokens.user_for(credentials.credentials)
    except ValueError as exc:
        logger.error("cannot read the token file: %s", exc)
        raise GatewayError(
            500, "auth_unavailable", "the token store cannot be read; the server log says why"
        ) from None
    if user_id is None:
        raise GatewayError(401, "unauthorized", "unknown or revoked token", headers=_CHALLENGE)
    return user_id


CurrentUser = Annotated[str, Depends(require_user)]
