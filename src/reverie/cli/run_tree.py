"""Subagent runs as a tree: what ``reverie runs show`` lists under a run (docs/subagents.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from reverie.cli.render import agent_shown

if TYPE_CHECKING:
    from reverie.runtime.queries import Runs
    from reverie.store.base import RunRecord

_MAX_DEPTH = 16
"""Deeper descendants are not listed (a tree that deep is a bug worth seeing elsewhere)."""


@dataclass(slots=True)
class RunNode:
    """A run and its child runs (those its subagent calls started), oldest first."""

    run: RunRecord
    children: list[RunNode] = field(default_factory=list)


async def load_tree(runs: Runs, run: RunRecord, *, depth: int = 0) -> RunNode:
    """``run`` with its descendants, read from the store."""
    node = RunNode(run=run)
    if depth < _MAX_DEPTH:
        for child in await runs.children(run):
            node.children.append(await load_tree(runs, child, depth=depth + 1))
    return node


def parent_call(run: RunRecord) -> tuple[str, str] | None:
    """The parent run id and call key of a child run; ``None`` for a run no call started."""
    parent = run.meta.get("parent_run_id")
    if not isinstance(parent, str):
        return None
    return parent, str(run.meta.get("parent_call", ""))


def tree_payload(node: RunNode) -> list[dict[str, Any]]:
    """The node's children as JSON, each with its own ``children``."""
    return [
        {
            "run_id": c.run.run_id,
            "status": c.run.status,
            "agent": agent_shown(c.run),
            "parent_call": c.run.meta.get("parent_call"),
            "children": tree_payload(c),
        }
        for c in node.children
    ]


def tree_lines(node: RunNode, status: Any, *, indent: int = 1) -> list[str]:
    """Rich-markup lines: the run, then each child indented under its parent."""
    pad = "  " * indent
    lines = [
        f"{pad}{escape(node.run.run_id)}  {status(node.run.status)}  "
        f"{escape(agent_shown(node.run))}"
    ]
    for child in node.children:
        lines += tree_lines(child, status, indent=indent + 1)
    return lines
