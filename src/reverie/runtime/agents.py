"""The agents a runtime knows: registered by name, the one that started each run, their models.

Runs are keyed by agent identity within a process (a second ``Agent`` registered under the same
name never advances the first one's runs) and by name across processes (a run started
elsewhere, or before a restart, is advanced by the agent registered under its name).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from reverie.core.limits import Limits
from reverie.errors import UnknownAgentError
from reverie.models.base import Model
from reverie.runtime import subagents
from reverie.runtime.agent import Agent
from reverie.store.base import RunRecord

if TYPE_CHECKING:
    from reverie.models.pricing import PriceTable

__all__ = ["RUN_AGENTS_MAX", "AgentDirectory"]

RUN_AGENTS_MAX = 10_000
"""How many runs' starting agents are remembered (oldest dropped; the name lookup remains)."""


class AgentDirectory:
    """Agents by name, the agent object that started each run here, and resolved model specs."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._run_agents: OrderedDict[str, Agent] = OrderedDict()
        """Run id → the agent object that started it (bounded by ``RUN_AGENTS_MAX``)."""
        self._models: dict[str, dict[str, Model]] = {}
        """Agent name → its model specs, resolved (built once per registration)."""
        self.summary_models: dict[str, Model] = {}
        """Compaction's summary models, resolved once per spec."""

    # ------------------------------------------------------------------------------ by name
    def register(self, agent: Agent) -> None:
        """Make ``agent`` the one its name stands for."""
        self._agents[agent.name] = agent
        self._models.pop(agent.name, None)

    def unregister(self, agent: Agent) -> None:
        """Forget ``agent`` (its name only while it still stands for it) and its runs."""
        if self._agents.get(agent.name) is agent:
            del self._agents[agent.name]
            self._models.pop(agent.name, None)
        for run_id in [r for r, a in self._run_agents.items() if a is agent]:
            del self._run_agents[run_id]

    def named(self, name: str) -> Agent | None:
        """The agent registered under ``name``, if any."""
        return self._agents.get(name)

    def get(self, name: str) -> Agent:
        """The agent registered under ``name``.

        Raises:
            UnknownAgentError: None is.
        """
        try:
            return self._agents[name]
        except KeyError:
            raise UnknownAgentError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._agents))

    # ------------------------------------------------------------------------------ by run
    def remember(self, run_id: str, agent: Agent) -> None:
        """``agent`` started ``run_id`` here: it, not its name, advances the run."""
        self._run_agents[run_id] = agent
        while len(self._run_agents) > RUN_AGENTS_MAX:
            self._run_agents.popitem(last=False)  # oldest first; the name lookup remains

    def forget_run(self, run_id: str) -> None:
        """The run ended: nothing of it will be resumed."""
        self._run_agents.pop(run_id, None)

    def started_here(self, run_id: str) -> bool:
        """Whether an agent object of this process started ``run_id``."""
        return run_id in self._run_agents

    def known(self, run: RunRecord) -> Agent | None:
        """The run's agent: the one that started it here, else the one of its name, else None."""
        return self._run_agents.get(run.run_id) or self._agents.get(run.agent_name)

    def for_run(self, run: RunRecord) -> Agent:
        """The agent that advances ``run``, with a child run's narrowed limits.

        Raises:
            UnknownAgentError: It did not start here and no agent has its name.
        """
        started = self._run_agents.get(run.run_id)
        agent = started if started is not None else self.get(run.agent_name)
        return subagents.with_run_limits(agent, run)  # a child run keeps its narrowed limits

    def image_cap(self, run: RunRecord) -> int:
        """``Limits.max_image_bytes`` of the run's agent (the default for one not known here)."""
        agent = self.known(run)
        return (agent.limits if agent is not None else Limits()).max_image_bytes

    # ------------------------------------------------------------------------------ models
    def unpriced(self, agent: Agent, prices: PriceTable) -> list[str]:
        """The agent's models (primary and fallbacks) with no price: spend it cannot measure."""
        return [m.name for m in self.model_chain(agent) if prices.price_for(m.name) is None]

    def model_chain(self, agent: Agent) -> tuple[Model, ...]:
        """The agent's models, specs resolved: the primary, then the fallbacks."""
        from reverie.models.registry import resolve_model

        resolved = self._models.setdefault(agent.name, {})
        chain: list[Model] = []
        for entry in agent.models:
            if isinstance(entry, str):
                if entry not in resolved:
                    resolved[entry] = resolve_model(entry)
                entry = resolved[entry]
            chain.append(entry)
        return tuple(chain)
