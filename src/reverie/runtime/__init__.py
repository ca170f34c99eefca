"""The runtime: runs, handles, results, the exit applier and the host ports."""

from reverie.runtime.agent import Agent
from reverie.runtime.handle import RunHandle
from reverie.runtime.result import Gate, RunResult
from reverie.runtime.runtime import Runtime

__all__ = ["Agent", "Gate", "RunHandle", "RunResult", "Runtime"]
