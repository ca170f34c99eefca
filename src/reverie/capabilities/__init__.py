"""Capabilities: ``@tool`` functions and MCP toolsets (docs/tools.md).

``MCPToolset`` and ``MCPTool`` need the ``mcp`` extra and are imported on first use, so this
package imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reverie.capabilities.context import ToolContext
from reverie.capabilities.output import (
    DEFAULT_MAX_OUTPUT_BYTES,
    cap_output,
    render_output,
    serialize_output,
)
from reverie.capabilities.schema import ArgumentsSpec, parse_docstring
from reverie.capabilities.tool import (
    TOOL_NAME_PATTERN,
    Capability,
    Tool,
    Toolset,
    normalize_effects,
    outcome_from_exception,
    tool,
    tools_by_name,
    validate_tool_name,
)

if TYPE_CHECKING:
    from reverie.capabilities.mcp import MCPTool, MCPToolset

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "TOOL_NAME_PATTERN",
    "ArgumentsSpec",
    "Capability",
    "MCPTool",
    "MCPToolset",
    "Tool",
    "ToolContext",
    "Toolset",
    "cap_output",
    "normalize_effects",
    "outcome_from_exception",
    "parse_docstring",
    "render_output",
    "serialize_output",
    "tool",
    "tools_by_name",
    "validate_tool_name",
]

_LAZY = {"MCPTool", "MCPToolset"}


def __getattr__(name: str) -> Any:
    # The mcp SDK is an optional extra: import it only when an MCP name is used.
    if name in _LAZY:
        from reverie.capabilities import mcp

        return getattr(mcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
