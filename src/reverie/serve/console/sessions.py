"""Console sessions: a bearer token exchanged once for a cookie, and the CSRF token of each.

A person logs in with the same bearer token the API takes (the form, or ``?token=`` in a URL
``reverie dev`` prints); the console answers with a random session id in an ``HttpOnly``,
``SameSite=Strict`` cookie (``Secure`` over TLS) and never sees the token again. The session
holds the token's :class:`~reverie.Scope` — the only identity every page uses — a CSRF token
that every state-changing form carries, and an absolute expiry. Sessions live in the serving
process (a restart logs everyone out); only the session id's digest is kept as the key, so a
memory dump does not hand out live cookies.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from reverie.core.scope import Scope
from reverie.serve.auth import TokenTable

__all__ = ["DEFAULT_SESSION_TTL_S", "MAX_SESSIONS", "Session", "Sessions"]

DEFAULT_SESSION_TTL_S = 8 * 3600.0
"""How long a console session lasts after login (``[serve] console_session_ttl_s``)."""

MAX_SESSIONS = 10_000
"""Live sessions kept per process; past it the oldest is dropped (a login flood cannot grow
the server's memory without bound)."""


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8")).digest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One logged-in browser."""

    session_id: str
    """The cookie's value (random, 256 bits)."""
    scope: Scope
    """The scope of the token the person logged in with: all they may see and do."""
    csrf: str
    """Every state-changing request carries it in a form field (``csrf``)."""
    expires_at: float

    def csrf_ok(self, sent: str | None) -> bool:
        """Whether ``sent`` is this session's CSRF token (compared in constant time)."""
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf.encode())


class Sessions:
    """Sessions by id, made from tokens of a :class:`TokenTable`."""

    def __init__(self, tokens: TokenTable, *, ttl_s: float = DEFAULT_SESSION_TTL_S) -> None:
        self._tokens = tokens
        self.ttl_s = ttl_s
        self._live: dict[bytes, Session] = {}

    def login(self, token: str, *, now: float | None = None) -> Session | None:
        """A new session for a known token; ``None`` for an unknown one."""
        scope = self._tokens.scope_for(f"Bearer {token.strip()}") if token.strip() else None
        if scope is None:
            return None
        now = time.time() if now is None else now
        self._evict(now)
        session = Session(
            session_id=secrets.token_urlsafe(32),
            scope=scope,
            csrf=secrets.token_urlsafe(32),
            expires_at=now + self.ttl_s,
        )
        self._live[_key(session.session_id)] = session
        return session

    def get(self, session_id: str | None, *, now: float | None = None) -> Session | None:
        """The live session of a cookie value; an expired one is dropped and answers ``None``."""
        if not session_id:
            return None
        key = _key(session_id)
        session = self._live.get(key)
        if session is None:
            return None
        if session.expires_at <= (time.time() if now is None else now):
            del self._live[key]
            return None
        return session

    def logout(self, session_id: str | None) -> None:
        """End a session (a missing one is no error)."""
        if session_id:
            self._live.pop(_key(session_id), None)

    def _evict(self, now: float) -> None:
        for key in [k for k, s in self._live.items() if s.expires_at <= now]:
            del self._live[key]
        while len(self._live) >= MAX_SESSIONS:
            del self._live[next(iter(self._live))]  # dicts keep insertion order: the oldest
