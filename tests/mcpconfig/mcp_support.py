"""Helpers the ``[mcp.servers]`` tests import: the demo server, the official npm servers, TOML.

The official servers (``@modelcontextprotocol/server-everything``, ``server-filesystem``,
``server-memory``) are installed by CI (``.ci/run``) into a directory named by
``REVERIE_TEST_MCP_NODE_DIR`` (default: ``.ci/npm`` of the repository); tests that need them
skip, saying so, when they are absent.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEMO_SERVER = HERE.parent / "capabilities" / "mcp_demo_server.py"
"""The Python demo MCP server of the toolset tests (tools add, pid, kill_pidfile, …)."""

NPM_SERVERS = {
    "everything": "mcp-server-everything",
    "filesystem": "mcp-server-filesystem",
    "memory": "mcp-server-memory",
}
"""The official servers' executables, by short name."""


def node_dir() -> Path:
    """Where the npm servers are installed (``$REVERIE_TEST_MCP_NODE_DIR``, else ``.ci/npm``)."""
    configured = os.environ.get("REVERIE_TEST_MCP_NODE_DIR")
    return Path(configured) if configured else REPO / ".ci" / "npm"


def npm_server(short: str) -> str:
    """The executable of an official npm server; skips the test when it is not installed."""
    path = node_dir() / "node_modules" / ".bin" / NPM_SERVERS[short]
    if not path.exists() or shutil.which("node") is None:
        pytest.skip(
            f"the official MCP server {NPM_SERVERS[short]} is not installed (CI installs it: "
            f"npm install --prefix {node_dir()} … as in .ci/run, or set "
            "REVERIE_TEST_MCP_NODE_DIR)"
        )
    return str(path)


def toml_str(value: str | Path) -> str:
    """A TOML basic string (JSON's escapes are valid TOML)."""
    return json.dumps(str(value))


def toml_list(values: list[str]) -> str:
    """A TOML array of strings."""
    return "[" + ", ".join(toml_str(v) for v in values) + "]"


def demo_server_table(name: str, extra: str = "") -> str:
    """``[mcp.servers.NAME]`` for the Python demo server over stdio."""
    return (
        f"[mcp.servers.{name}]\ncommand = {toml_str(sys.executable)}\n"
        f"args = {toml_list([str(DEMO_SERVER)])}\n{extra}\n"
    )


def pidfile_table(name: str, pidfile: Path, command: str, args: list[str], extra: str = "") -> str:
    """``[mcp.servers.NAME]`` running ``command args`` through ``sh``, which appends the
    server's pid to ``pidfile`` on every start (so a test can kill it and count restarts)."""
    wrapper = 'echo $$ >> "$0"; exec "$@"'
    return (
        f'[mcp.servers.{name}]\ncommand = "sh"\n'
        f"args = {toml_list(['-c', wrapper, str(pidfile), command, *args])}\n{extra}\n"
    )


def script_file(path: Path, steps: Sequence[Mapping[str, object]]) -> str:
    """Write a ``scripted:`` model file; returns its spec."""
    path.write_text(json.dumps([dict(step) for step in steps]), encoding="utf-8")
    return f"scripted:{path}"
