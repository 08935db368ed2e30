"""Who may use the console: on a loopback address anyone on this machine; on any other address only a request that
carries the token (``Authorization: Bearer TOKEN``, or ``?token=TOKEN`` once, which sets a cookie). Requests that change
something must come from the console's own page (their Origin, when a browser sends one, is the console's)."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import urlsplit

from grounded_planner.errors import InputError


COOKIE = "grounded_planner_console"
LOOPBACK_NAMES = ("localhost",)


class TokenError(InputError):
    """A token that cannot protect the console (too short)."""


MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: only processes of this machine can reach such a bind."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def console_token(host: str, token: str) -> tuple[str, bool]:
    """(the token the console requires, whether it was generated here); '' on a loopback bind without a token.

    A non-loopback bind without a token gets a random one (printed once by the caller)."""
    if token:
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenError(f"the console token must be at least {MIN_TOKEN_CHARS} characters, got {len(token)}")
        return token, False
    if is_loopback(host):
        return "", False
    return secrets.token_urlsafe(24), True


def token_matches(expected: str, supplied: str | None) -> bool:
    return bool(supplied) and hmac.compare_digest(expected.encode(), str(supplied).encode())


def bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


def same_origin(origin: str | None, host: str | None) -> bool:
    """A browser's Origin header names the console itself (no Origin: not a browser's cross-site request)."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return urlsplit(origin).netloc.lower() == host.lower()
