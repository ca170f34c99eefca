"""Which agent a CLI command runs: configured agents, ``--model``, the built-in assistant.

Rules (also in ``docs/cli.md``):

* ``--agent NAME`` picks ``[agents.NAME]`` from ``reverie.toml``.
* ``--model SPEC`` sets the model of the chosen agent. Without ``--agent`` it picks the agent
  named ``assistant``: the configured one if there is one, else the **built-in assistant** — a
  harmless demo agent with the ``add`` and ``now`` tools.
* With neither, a configuration with exactly one agent (or one named ``assistant``) uses it;
  with none, :data:`NO_MODEL_HELP` tells the user what to set.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Final

from reverie.errors import UsageError

if TYPE_CHECKING:
    from reverie.config import ReverieConfig
    from reverie.runtime.agent import Agent

__all__ = [
    "BUILTIN_AGENT",
    "NO_MODEL_HELP",
    "NoAgentConfigured",
    "agents_with_model",
    "builtin_assistant",
    "choose_agent",
]

BUILTIN_AGENT: Final = "assistant"
"""The name of the built-in agent ``reverie run --model SPEC`` uses."""

_BUILTIN_INSTRUCTIONS: Final = (
    "You are a helpful assistant. Answer briefly. Use the add tool for arithmetic and the now "
    "tool for the current date and time."
)

NO_MODEL_HELP: Final = """\
No agent is configured and no --model was given, so there is no model to run.

Either name a model for the built-in assistant (tools: add, now):

  reverie run --model openai:gpt-4.1-mini "What is 2 + 3?"     # needs OPENAI_API_KEY
  reverie run --model ollama:llama3.1 "What is 2 + 3?"         # a local Ollama server
  reverie run --model scripted:examples/scripted_hello.json "hi"   # offline, no key

or configure an agent in {path}:

  # OpenAI: export OPENAI_API_KEY=sk-...
  [agents.assistant]
  model = "openai:gpt-4.1-mini"
  instructions = "You are a helpful assistant."
  tools = ["reverie.cli.demo_tools:add", "reverie.cli.demo_tools:now"]

  # or, instead, a local Ollama server (ollama pull llama3.1; no key needed):
  [agents.assistant]
  model = "ollama:llama3.1"
  instructions = "You are a helpful assistant."

Then check the setup with: reverie doctor
"""


class NoAgentConfigured(UsageError):
    """``reverie run`` has no agent to use and no ``--model``."""


def builtin_assistant(model_spec: str) -> Agent:
    """The built-in demo agent with the model ``model_spec`` (relative ``scripted:`` paths
    start at the current directory)."""
    from reverie.cli.demo_tools import DEMO_TOOLS
    from reverie.config import resolve_model_spec
    from reverie.runtime.agent import Agent

    return Agent(
        name=BUILTIN_AGENT,
        model=resolve_model_spec(model_spec, base_dir=Path.cwd()),
        instructions=_BUILTIN_INSTRUCTIONS,
        tools=DEMO_TOOLS,
    )


def _with_model(agent: Agent, model_spec: str, config: ReverieConfig) -> Agent:
    from reverie.config import resolve_model_spec

    model = resolve_model_spec(model_spec, config=config, base_dir=Path.cwd())
    return dataclasses.replace(agent, model=model)


def choose_agent(config: ReverieConfig, *, name: str | None, model_spec: str | None) -> Agent:
    """The agent ``reverie run`` runs (see the module docstring for the rules).

    Raises:
        NoAgentConfigured: Nothing is configured and no ``--model`` was given.
        UsageError: ``--agent`` names no configured agent, or several agents are configured
            and none was chosen.
        ConfigError: ``--model`` is not a valid spec.
    """
    from reverie.config import build_agents

    agents = {agent.name: agent for agent in build_agents(config)}
    if name is None:
        if model_spec is not None or BUILTIN_AGENT in agents:
            name = BUILTIN_AGENT
        elif len(agents) == 1:
            name = next(iter(agents))
        elif not agents:
            raise NoAgentConfigured(NO_MODEL_HELP.format(path=config.source))
        else:
            raise UsageError(
                f"{config.source} configures several agents ({', '.join(sorted(agents))}); "
                "choose one with --agent NAME"
            )
    agent = agents.get(name)
    if agent is None:
        if name == BUILTIN_AGENT and model_spec is not None:
            return builtin_assistant(model_spec)
        known = ", ".join(sorted(agents)) or "none"
        raise UsageError(
            f"agent {name!r} is not configured in {config.source} (configured: {known}). "
            f"Fix: add [agents.{name}] with a model, or pass --model for the built-in "
            f"{BUILTIN_AGENT!r}"
        )
    return _with_model(agent, model_spec, config) if model_spec is not None else agent


def agents_with_model(config: ReverieConfig, run_agent: str, model_spec: str | None) -> list[Agent]:
    """The agents a command that continues a run registers (resume, approve, deny).

    All configured agents; with ``--model``, the run's agent uses that model instead (and a
    run of the built-in assistant gets the built-in assistant back).
    """
    from reverie.config import build_agents

    agents = build_agents(config)
    if model_spec is None:
        return agents
    for index, agent in enumerate(agents):
        if agent.name == run_agent:
            agents[index] = _with_model(agent, model_spec, config)
            return agents
    if run_agent == BUILTIN_AGENT:
        agents.append(builtin_assistant(model_spec))
    return agents
