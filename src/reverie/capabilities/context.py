"""The trusted context the host hands to a tool call (docs/tools.md).

A tool that needs to know *who* it acts for declares a parameter annotated with
:class:`ToolContext`. The host fills it in; it never appears in the JSON Schema the model sees,
so a model can neither read nor forge the scope or the run id.
"""

from __future__ import annotations

from dataclasses import dataclass

from reverie.core.fastcopy import fast_frozen
from reverie.core.scope import Scope


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Host-provided facts about one tool call. Injected, never model-visible."""

    run_id: str
    """The run this call belongs to."""
    call_id: str
    """The stable id of this call (the side-effect journal's key)."""
    scope: Scope
    """Who the run acts for, as set by the host."""
    tool_name: str
    """The name the model used to call the tool."""
