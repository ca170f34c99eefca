"""The Agents page: the agents this server serves, their tools and effects, models and
fallbacks, limits — what a person may start runs with. (Agents are the server's configuration,
the same for every scope; no run data is shown here.)"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reverie.runtime.agent import Agent
from reverie.serve.console.access import reading
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.console.views import tool_flags

__all__ = ["agent_routes"]


def _models(agent: Agent, redact: Any) -> list[str]:
    chain = agent.model if isinstance(agent.model, list | tuple) else [agent.model]
    return [redact(m if isinstance(m, str) else type(m).__name__) for m in chain]


def agent_routes(console: Console) -> list[Route]:
    """``/console/agents``."""

    async def page(request: Request, session: Session) -> Response:
        agents = []
        for name, agent in sorted(console.ctx.agents.items()):
            flags = tool_flags(agent)
            others = [
                type(t).__name__ for t in agent.tools if getattr(t, "descriptor", None) is None
            ]
            agents.append(
                {
                    "name": name,
                    "models": _models(agent, console.ctx.redact),
                    "tools": sorted(flags.items()),
                    "servers": sorted(
                        {
                            (str(f["server"]), bool(f["connected"]))
                            for f in flags.values()
                            if f["server"]
                        }
                    ),
                    "toolsets": others,
                    "limits": agent.limits,
                    "on_limit": agent.on_limit,
                    "family": agent.family,
                }
            )
        return console.page(session, "agents.html", agents=agents)

    return [Route("/console/agents", reading(console, page), methods=["GET"])]
