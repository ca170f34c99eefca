"""The runtime: runs, handles, results, the exit applier and the host ports."""

from reverie.runtime.agent import Agent
from reverie.runtime.compaction import Compaction
from reverie.runtime.handle import RunHandle
from reverie.runtime.result import Gate, RunResult
from reverie.runtime.runtime import Runtime
from reverie.runtime.structured import OutputContract
from reverie.runtime.unbound import UnboundTurnService

__all__ = [
    "Agent",
    "Compaction",
    "Gate",
    "OutputContract",
    "RunHandle",
    "RunResult",
    "Runtime",
    "UnboundTurnService",
]
