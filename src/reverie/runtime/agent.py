"""``Agent``: what to run — a model, instructions, tools and limits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from reverie.core.limits import Limits
from reverie.errors import UsageError
from reverie.hooks import AgentHook
from reverie.runtime.compaction import Compaction

if TYPE_CHECKING:
    from reverie.models.base import Model


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """An agent definition. Runs record the agent's ``name``; resumes look it up by name."""

    name: str
    model: str | Model
    """A model spec such as ``"openai:gpt-4.1-mini"``, or a ``Model`` instance."""
    instructions: str = ""
    tools: Sequence[Any] = ()
    """``@tool`` functions and other capabilities (anything with ``descriptor`` and ``invoke``)."""
    limits: Limits = field(default_factory=Limits)
    on_limit: Literal["finalize", "fail"] = "finalize"
    family: str = "default"
    """Loop family id for interactive runs."""
    hooks: Sequence[AgentHook] = ()
    """Hooks for this agent's runs only (trusted), on top of the runtime's."""
    compaction: Compaction | None = None
    """Replace older turns of a long conversation by a summary (docs/compaction.md); off when
    ``None``."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise UsageError("Agent needs a non-empty name")
        if self.on_limit not in ("finalize", "fail"):
            raise UsageError("Agent.on_limit must be 'finalize' or 'fail'")
        if self.compaction is not None and not isinstance(self.compaction, Compaction):
            raise UsageError(f"Agent {self.name!r}: compaction must be a Compaction or None")
        seen: set[str] = set()
        for item in self.tools:
            descriptor = getattr(item, "descriptor", None)
            if descriptor is None or not callable(getattr(item, "invoke", None)):
                raise UsageError(
                    f"Agent {self.name!r}: {item!r} is not a tool; decorate the function with "
                    "@tool (from reverie import tool) or pass a capability such as an MCP tool"
                )
            if descriptor.name in seen:
                raise UsageError(f"Agent {self.name!r} has two tools named {descriptor.name!r}")
            seen.add(descriptor.name)
