"""reverie: a durable, safe runtime for tool-using LLM agents, with memory that tidies itself.

The public face::

    from reverie import Agent, Runtime, Scope, Limits, tool, RunResult, RunHandle

The names are imported on first use (PEP 562), so ``import reverie.cli.app`` — and with it
``reverie --help`` — does not load the runtime, the store backends or a model SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reverie.core.version import __version__ as __version__

if TYPE_CHECKING:
    from reverie.capabilities import tool
    from reverie.core.content import Image, Text
    from reverie.core.limits import Limits
    from reverie.core.scope import Scope
    from reverie.core.settings import Settings
    from reverie.runtime import Agent, Compaction, Gate, RunHandle, RunResult, Runtime
    from reverie.runtime.schedules import Schedule

__all__ = [
    "Agent",
    "Compaction",
    "Gate",
    "Image",
    "Limits",
    "RunHandle",
    "RunResult",
    "Runtime",
    "Schedule",
    "Scope",
    "Settings",
    "Text",
    "tool",
]

_HOMES = {
    "Agent": "reverie.runtime",
    "Compaction": "reverie.runtime",
    "Gate": "reverie.runtime",
    "Image": "reverie.core.content",
    "Limits": "reverie.core.limits",
    "RunHandle": "reverie.runtime",
    "RunResult": "reverie.runtime",
    "Runtime": "reverie.runtime",
    "Schedule": "reverie.runtime.schedules",
    "Scope": "reverie.core.scope",
    "Settings": "reverie.core.settings",
    "Text": "reverie.core.content",
    "tool": "reverie.capabilities",
}


def __getattr__(name: str) -> Any:
    """Import a public name from the module that holds it, on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'reverie' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
