"""Drift on resume: a run never continues silently under a changed agent (docs/durability.md).

Every checkpoint records the run's *definition*: digests of the agent's instructions, of each
tool of its surface and of the loop family the agent selects. A resume (after a crash, an
approval, a denial) compares the agent's definition now with the checkpoint's; when they
differ it follows the agent's ``on_drift`` policy — ``"refuse"`` (the default: the run ends
``Failed(resume_drift)`` naming what changed), ``"continue"`` (the run goes on and the change is
recorded: a ``resume_drift`` event, and the run's exit), or a callable that receives the
:class:`ResumeDrift` and answers ``"refuse"`` or ``"continue"``.

A definition is computed once per agent and surface (cached), never per step: a segment
writes the same few bytes into each of its checkpoints. A checkpoint written before
definitions existed has none, and resumes as it always did.
"""

from __future__ import annotations

import inspect
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reverie.core.canonical import digest
from reverie.core.capability import CapabilityDescriptor, Surface
from reverie.core.vocabulary import DRIFT_ACTIONS, DriftAction

__all__ = [
    "DRIFTS_KEY",
    "DriftHook",
    "DriftPolicy",
    "ResumeDrift",
    "RunDefinition",
    "decide",
    "definition_of",
    "drift_between",
]

log = logging.getLogger("reverie.runtime")

DriftHook = Callable[["ResumeDrift"], DriftAction | Awaitable[DriftAction]]
"""A migration hook: given what changed, answer ``"continue"`` or ``"refuse"`` (sync or async)."""
DriftPolicy = DriftAction | DriftHook
"""``Agent.on_drift``: ``"refuse"``, ``"continue"``, or a :data:`DriftHook`."""

DRIFTS_KEY = "drift"
"""The host slot of the checkpoint (and key of the run's exit) listing the drifts the run's
resumes found, each as :meth:`ResumeDrift.to_dict`."""

_SHORT = 16
"""Hex digits kept of each component digest (64 bits: enough to tell a change, and small in
every checkpoint)."""


def _tool_digest(d: CapabilityDescriptor) -> str:
    """A tool as the model and the run's policies see it (what the model is offered, and
    whether a call needs a person)."""
    rule = d.needs_approval
    return digest(
        {
            "name": d.name,
            "description": d.description,
            "parameters": dict(d.parameters),
            "effects": sorted(d.effects or ()),
            "idempotent": d.idempotent,
            "needs_approval": "predicate" if callable(rule) else bool(rule),
        }
    )[:_SHORT]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDefinition:
    """Digests of what a run runs with: instructions, each tool, the agent's loop family."""

    instructions: str
    family: str
    """``<family id>@<digest>`` of the family the agent selects."""
    tools: Mapping[str, str]
    """Tool name → digest of its definition."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, as checkpoints carry it."""
        return {
            "family": self.family,
            "instructions": self.instructions,
            "tools": dict(self.tools),
        }

    @classmethod
    def from_dict(cls, data: object) -> RunDefinition | None:
        """Inverse of :meth:`to_dict`; ``None`` for anything malformed (treated as absent)."""
        if not isinstance(data, Mapping):
            return None
        tools = data.get("tools")
        fields = (data.get("family"), data.get("instructions"))
        if not isinstance(tools, Mapping) or not all(isinstance(f, str) for f in fields):
            return None
        return cls(
            family=str(data["family"]),
            instructions=str(data["instructions"]),
            tools={str(k): str(v) for k, v in tools.items()},
        )


_DEFINITIONS: OrderedDict[tuple[str, str, int], tuple[Surface, RunDefinition]] = OrderedDict()
"""Definitions by (instructions, family, surface identity): every run of an agent shares one."""
_MAX_DEFINITIONS = 256


def definition_of(instructions: str, surface: Surface, family: str) -> RunDefinition:
    """The definition of a run with these instructions, tool surface and family label."""
    key = (instructions, family, id(surface))
    known = _DEFINITIONS.get(key)
    if known is not None and known[0] is surface:
        return known[1]
    tools = {d.name: _tool_digest(d) for d in surface.descriptors}
    made = RunDefinition(instructions=digest(instructions)[:_SHORT], family=family, tools=tools)
    if len(_DEFINITIONS) >= _MAX_DEFINITIONS:
        _DEFINITIONS.popitem(last=False)
    _DEFINITIONS[key] = (surface, made)
    return made


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeDrift:
    """What changed in a run's agent between its checkpoint and a resume."""

    instructions: bool = False
    """The instructions (system prompt) differ."""
    tools_added: tuple[str, ...] = ()
    tools_removed: tuple[str, ...] = ()
    tools_changed: tuple[str, ...] = ()
    """Tools whose definition differs (description, parameters, effects, idempotency, or
    whether a call needs approval)."""
    family_before: str | None = None
    """The loop family the agent selected at the checkpoint (``None``: unchanged)."""
    family_now: str | None = None
    action: DriftAction = "refuse"
    """What the resume did. A drift hook is given the drift before it decides, with the
    default (``refuse``): what happens unless it answers ``continue``."""

    @property
    def family(self) -> bool:
        """Whether the loop family changed."""
        return self.family_before is not None

    @property
    def tools(self) -> tuple[str, ...]:
        """Every tool added, removed or changed, sorted."""
        return tuple(sorted({*self.tools_added, *self.tools_removed, *self.tools_changed}))

    def describe(self) -> str:
        """One line naming what changed (names only: no instructions or tool text)."""
        parts: list[str] = []
        if self.instructions:
            parts.append("the instructions changed")
        named = [
            *(f"{n} (added)" for n in self.tools_added),
            *(f"{n} (removed)" for n in self.tools_removed),
            *(f"{n} (changed)" for n in self.tools_changed),
        ]
        if named:
            parts.append("tools changed: " + ", ".join(named))
        if self.family_before is not None:
            before, now = _family_id(self.family_before), _family_id(self.family_now or "")
            parts.append(
                f"the loop family changed ({before} -> {now})"
                if before != now
                else f"the loop family {before!r} changed its definition"
            )
        return "; ".join(parts) or "the agent's definition changed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the run's exit and HTTP carry it)."""
        return {
            "action": self.action,
            "instructions": self.instructions,
            "tools_added": list(self.tools_added),
            "tools_removed": list(self.tools_removed),
            "tools_changed": list(self.tools_changed),
            "family_before": self.family_before,
            "family_now": self.family_now,
            "summary": self.describe(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResumeDrift:
        """Inverse of :meth:`to_dict`."""
        action = data.get("action")
        return cls(
            instructions=bool(data.get("instructions")),
            tools_added=tuple(str(n) for n in data.get("tools_added") or ()),
            tools_removed=tuple(str(n) for n in data.get("tools_removed") or ()),
            tools_changed=tuple(str(n) for n in data.get("tools_changed") or ()),
            family_before=_optional(data.get("family_before")),
            family_now=_optional(data.get("family_now")),
            action="continue" if action == "continue" else "refuse",
        )


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def _family_id(label: str) -> str:
    return label.rsplit("@", 1)[0]


def drift_between(stored: RunDefinition, now: RunDefinition) -> ResumeDrift | None:
    """What differs between a checkpoint's definition and the agent's now (``None``: nothing)."""
    if stored == now:
        return None
    before, after = stored.tools, now.tools
    family = stored.family != now.family
    drift = ResumeDrift(
        instructions=stored.instructions != now.instructions,
        tools_added=tuple(sorted(n for n in after if n not in before)),
        tools_removed=tuple(sorted(n for n in before if n not in after)),
        tools_changed=tuple(sorted(n for n in after if n in before and before[n] != after[n])),
        family_before=stored.family if family else None,
        family_now=now.family if family else None,
    )
    return drift


async def decide(policy: DriftPolicy, drift: ResumeDrift, *, run_id: str) -> ResumeDrift:
    """``drift`` with the action the agent's policy takes.

    A hook that raises or answers anything but ``"continue"``/``"refuse"`` refuses: a resume
    under a changed agent goes on only when something said it may.
    """
    if isinstance(policy, str):
        action: object = policy
    else:
        try:
            action = policy(drift)
            if inspect.isawaitable(action):
                action = await action
        except Exception as exc:
            log.warning(
                "run %s: the drift hook raised %s; the resume is refused",
                run_id,
                type(exc).__name__,
            )
            action = "refuse"
    if action not in DRIFT_ACTIONS:
        log.warning("run %s: the drift hook answered %r; the resume is refused", run_id, action)
        action = "refuse"
    return replace(drift, action="continue" if action == "continue" else "refuse")
