"""The owner of a run, a thread and a memory: set by the host, never by model output."""

from __future__ import annotations

import contextlib
import getpass
import os
from dataclasses import dataclass

from reverie.errors import InvalidScopeError

DEFAULT_TENANT = "local"
"""The tenant of :meth:`Scope.local`: what the CLI and ``Agent.run`` use when none is given."""


def default_user() -> str:
    """``$USER`` (or the login name), else ``local``."""
    with contextlib.suppress(Exception):
        return os.environ.get("USER") or getpass.getuser() or "local"
    return "local"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """Who a run acts for. The host sets it on every call; models never choose it.

    Every field that is set is a non-empty string: ``Scope(agent="")`` raises
    :class:`~reverie.errors.InvalidScopeError` (a ``UsageError``) rather than meaning "unset".
    """

    tenant: str
    """The organisation or deployment the owner belongs to."""
    user: str
    """The human (or service) owner within the tenant."""
    agent: str | None = None
    """Optionally narrows memory to one agent of the owner."""
    project: str | None = None
    """Optionally narrows memory to one project of the owner."""

    def __post_init__(self) -> None:
        # One rule on every backend: an empty string is not "unset". The SQL stores keep an unset
        # agent/project as '' in their key columns, so Scope(agent="") would alias the unset scope
        # there while the in-memory store keeps the two apart; refusing "" removes the ambiguity.
        for name in ("tenant", "user"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidScopeError(f"Scope needs a non-empty {name} string")
        for name in ("agent", "project"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidScopeError(f"Scope {name} must be a non-empty string or None (unset)")

    @classmethod
    def local(cls, user: str | None = None) -> Scope:
        """The single-user scope: tenant ``local``, user ``user`` (default: ``$USER``, else the
        login name, else ``local``).

        What ``reverie run``/``chat`` use without ``--tenant``/``--user``, and what
        ``Agent.run``/``Agent.run_sync`` use without ``scope=``, so a script and the CLI see the
        same runs and memory. Multi-tenant hosts pass their own scope on every call.
        """
        return cls(tenant=DEFAULT_TENANT, user=default_user() if user is None else user)

    def key(self) -> str:
        """A stable string for indexing rows by scope."""
        return "\x1f".join((self.tenant, self.user, self.agent or "", self.project or ""))

    def as_dict(self) -> dict[str, str | None]:
        """The scope as plain JSON-able fields."""
        return {
            "tenant": self.tenant,
            "user": self.user,
            "agent": self.agent,
            "project": self.project,
        }

    @classmethod
    def from_dict(cls, data: dict[str, str | None]) -> Scope:
        """Rebuild a scope from :meth:`as_dict` output.

        Raises:
            InvalidScopeError: the record lacks a tenant or user.
        """
        tenant, user = data.get("tenant"), data.get("user")
        if not tenant or not user:
            raise InvalidScopeError("scope record lacks tenant or user")
        # Records written before empty strings were refused may hold "" for an unset field.
        return cls(
            tenant=tenant,
            user=user,
            agent=data.get("agent") or None,
            project=data.get("project") or None,
        )
