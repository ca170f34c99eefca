"""The owner of a run, a thread and a memory: set by the host, never by model output."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """Who a run acts for. The host sets it on every call; models never choose it."""

    tenant: str
    """The organisation or deployment the owner belongs to."""
    user: str
    """The human (or service) owner within the tenant."""
    agent: str | None = None
    """Optionally narrows memory to one agent of the owner."""
    project: str | None = None
    """Optionally narrows memory to one project of the owner."""

    def __post_init__(self) -> None:
        if not self.tenant or not self.user:
            raise ValueError("Scope needs a non-empty tenant and user")

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
        """Rebuild a scope from :meth:`as_dict` output."""
        tenant, user = data.get("tenant"), data.get("user")
        if not tenant or not user:
            raise ValueError("scope record lacks tenant or user")
        return cls(tenant=tenant, user=user, agent=data.get("agent"), project=data.get("project"))
