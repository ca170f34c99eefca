"""reverie: a durable, safe runtime for tool-using LLM agents, with memory that tidies itself.

The public face (DESIGN §2)::

    from reverie import Agent, Runtime, Scope, Limits, tool, RunResult, RunHandle
"""

from reverie.capabilities import tool
from reverie.core.limits import Limits
from reverie.core.scope import Scope
from reverie.runtime import Agent, Gate, RunHandle, RunResult, Runtime

__all__ = ["Agent", "Gate", "Limits", "RunHandle", "RunResult", "Runtime", "Scope", "tool"]
__version__ = "0.1.0"
