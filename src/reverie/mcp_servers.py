"""``[mcp.servers.NAME]`` of ``reverie.toml``: MCP servers as tools of configured agents.

Each table describes one server (DESIGN §9.4); an agent gets the tools of the servers its
``mcp_servers = [...]`` names::

    [mcp.servers.files]                  # stdio: a command, started by reverie
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
    env = { LOG_LEVEL = "info", API_TOKEN = "${FILES_TOKEN}" }   # ${VAR}: from the environment
    cwd = "."                            # relative to this file (default: the file's directory)
    allow_tools = ["read_text_file", "list_directory"]           # only these (default: all)

    [mcp.servers.search]                 # streamable HTTP
    url = "https://search.example.com/mcp"
    headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
    deny_tools = ["delete_index"]
    prefix = "web"                       # tool names web_<tool> (default: the server's NAME;
                                         # "" for none)
    connect_timeout_s = 60               # start-up, handshake and tool listing
    call_timeout_s = 30                  # each call
    optional = true                      # failing to start is a warning: the agent runs without

    [agents.helper]
    model = "openai:gpt-4.1-mini"
    mcp_servers = ["files", "search"]

:class:`MCPServers` owns the servers of one process: each is started once, when the first agent
that names it is set up, and shared by every run of the process (``reverie run``, ``chat``,
``serve``, ``worker``); a server that dies is restarted by its toolset. Values of ``env`` and
``headers`` may carry credentials: ``${VAR}`` is read from the environment when the server
starts, and neither the values nor the expansions are ever logged or shown.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reverie.errors import CapabilityError, ConfigError, UsageError
from reverie.runtime.agent import Agent

if TYPE_CHECKING:
    from reverie.capabilities.mcp import MCPTool, MCPToolset

__all__ = ["MCPServerConfig", "MCPServers", "parse_mcp_servers"]

log = logging.getLogger("reverie.mcp")

_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9_-]{1,48}$")
_VAR_RE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FIX: Final = (
    'give each server either command = "..." (with args, env, cwd) or url = "https://…/mcp" '
    "(with headers); see docs/configuration.md"
)
_FIELD_FIXES: Final[Mapping[str, str]] = {
    "command": 'set command = "npx" (the executable; its arguments go in args = [...])',
    "args": 'set args = ["-y", "@modelcontextprotocol/server-filesystem", "."]',
    "env": 'set env = { NAME = "value" } (use "${VAR}" to pass a variable of this environment)',
    "cwd": 'set cwd = "." (a directory, relative to this file)',
    "url": 'set url = "https://host/mcp" (an http:// or https:// URL)',
    "headers": 'set headers = { Authorization = "Bearer ${TOKEN_VAR}" }',
    "prefix": 'set prefix = "files" (a-z, A-Z, 0-9, "_", "-"; at most 48), or "" for none',
    "connect_timeout_s": "set a positive number of seconds (default 60)",
    "call_timeout_s": "set a positive number of seconds (default 30)",
    "allow_tools": 'set allow_tools = ["tool", ...] (the server\'s tool names)',
    "deny_tools": 'set deny_tools = ["tool", ...] (the server\'s tool names)',
    "optional": "set optional = true or optional = false",
}


class MCPServerConfig(BaseModel):
    """One ``[mcp.servers.NAME]`` table."""

    # Strict like the rest of the file: "30" for a number of seconds is a mistake to report.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    command: str | None = Field(default=None, min_length=1)
    """stdio: the executable (looked up on ``PATH``; a relative path with ``/`` starts at the
    file's directory)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment of a stdio server; ``${VAR}`` in a value is read from this process's
    environment at start-up (nothing else of it is passed on but the SDK's safe defaults)."""
    cwd: str | None = Field(default=None, min_length=1)
    """The working directory of a stdio server, relative to the file (default: its directory)."""
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """Streamable HTTP: the endpoint."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers; ``${VAR}`` in a value is read from the environment at start-up."""
    prefix: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{0,48}$")
    """Tool names become ``PREFIX_tool``; default: the server's NAME; ``""``: no prefix."""
    connect_timeout_s: float = Field(default=60.0, gt=0)
    call_timeout_s: float = Field(default=30.0, gt=0)
    allow_tools: list[str] | None = None
    """Offer only these tools of the server (its names, before the prefix)."""
    deny_tools: list[str] = Field(default_factory=list)
    """Never offer these tools of the server."""
    optional: bool = False
    """Failing to start is a warning (the agents run without its tools), not an error."""

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command (stdio) and url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd apply to command servers, not url ones")
        if self.command is not None and self.headers:
            raise ValueError("headers apply to url servers, not command ones")
        return self


def parse_mcp_servers(
    table: Mapping[str, Any], *, source: str = "reverie.toml"
) -> dict[str, MCPServerConfig]:
    """Validate the ``[mcp]`` table: its ``servers``, by name.

    Args:
        table: The parsed ``[mcp]`` table (empty: no servers).
        source: The file, named in errors.

    Raises:
        ConfigError: ``FILE: KEY: PROBLEM. Fix: …`` for an unknown key, a bad name or value, a
            malformed ``${VAR}``, or a server that is not exactly one of stdio and HTTP.
    """
    unknown = sorted(set(table) - {"servers"})
    if unknown:
        raise _error(source, f"mcp.{unknown[0]}", "unknown key", "remove it; [mcp] takes servers")
    servers = table.get("servers", {})
    if not isinstance(servers, dict):
        raise _error(
            source, "mcp.servers", "not a table", "write each server as [mcp.servers.NAME]"
        )
    parsed: dict[str, MCPServerConfig] = {}
    for name, entry in servers.items():
        key = f"mcp.servers.{name}" if _NAME_RE.fullmatch(name) else 'mcp.servers."…"'
        if not _NAME_RE.fullmatch(name):
            raise _error(
                source,
                key,
                "invalid server name",
                'name it with a-z, A-Z, 0-9, "_", "-" (at most 48): it is the default tool prefix',
            )
        if not isinstance(entry, dict):
            raise _error(source, key, "not a table", f"write it as [mcp.servers.{name}]")
        try:
            spec = MCPServerConfig.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            loc = [str(part) for part in err["loc"]]
            where = ".".join([key, *loc])
            if err["type"] == "missing":
                problem = "missing"
            elif err["type"] == "extra_forbidden":
                problem = "unknown key"
            else:
                msg = str(err["msg"]).removeprefix("Value error, ")
                problem = msg[:1].lower() + msg[1:]
            if err["type"] == "extra_forbidden":
                fix = "remove it or check its spelling; a server takes " + ", ".join(
                    MCPServerConfig.model_fields
                )
            else:
                fix = _FIELD_FIXES.get(loc[0], _FIX) if loc else _FIX
            raise _error(source, where, problem, fix) from None
        for field, values in (("env", spec.env), ("headers", spec.headers)):
            for var_key, value in values.items():
                if "${" in _VAR_RE.sub("", value):
                    raise _error(
                        source,
                        f"{key}.{field}.{var_key}",
                        "malformed ${VAR} reference",
                        "write ${NAME} with NAME a variable name (letters, digits, _)",
                    )
        parsed[name] = spec
    return parsed


def _error(source: str, key: str, problem: str, fix: str) -> ConfigError:
    # The shape of reverie.config.config_error (not imported: config imports this module).
    return ConfigError(f"{source}: {key}: {problem}. Fix: {fix}")


class MCPServers:
    """The configured MCP servers of one process: started once, shared by all its runs.

    Use as ``async with MCPServers(specs, source=..., base_dir=...) as servers``, then
    :meth:`start` the servers agents name and :meth:`equip` the agents. Leaving the block stops
    every server.

    Args:
        specs: The servers, by name (:func:`parse_mcp_servers`).
        source: The configuration file, named in errors.
        base_dir: Where a relative ``cwd`` or ``command`` path starts (the file's directory).
        environ: Where ``${VAR}`` is read (default: this process's environment).
    """

    def __init__(
        self,
        specs: Mapping[str, MCPServerConfig],
        *,
        source: str = "reverie.toml",
        base_dir: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._specs = dict(specs)
        self._source = source
        self._base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        self._environ = environ
        self._toolsets: dict[str, MCPToolset] = {}
        self._skipped: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def names(self) -> tuple[str, ...]:
        """Every configured server's name."""
        return tuple(self._specs)

    @property
    def warnings(self) -> dict[str, str]:
        """Optional servers that failed to start, and why (credential-free)."""
        return dict(self._skipped)

    def toolset(self, name: str) -> MCPToolset | None:
        """The started toolset of server ``name`` (``None``: not started, or skipped)."""
        return self._toolsets.get(name)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self, names: Iterable[str] | None = None) -> None:
        """Start the servers ``names`` (default: all) that are not started yet, concurrently.

        Raises:
            ConfigError: a name is not configured, or a ``${VAR}`` it needs is not set.
            CapabilityError: kind ``unavailable``: a server that is not ``optional`` failed to
                start; the message names it. (An optional one is logged and skipped.)
            UsageError: the servers were closed.
        """
        wanted = list(dict.fromkeys(self.names if names is None else names))
        for name in wanted:
            if name not in self._specs:
                known = ", ".join(self._specs) or "none"
                raise ConfigError(
                    f"{self._source}: mcp.servers.{name}: no such server (configured: {known}). "
                    f"Fix: add [mcp.servers.{name}], or remove the name"
                )
        async with self._lock:
            if self._closed:
                raise UsageError("the MCP servers were closed")
            pending = [n for n in wanted if n not in self._toolsets and n not in self._skipped]
            toolsets = {name: self._toolset_for(name) for name in pending}
            results = await asyncio.gather(
                *(ts.__aenter__() for ts in toolsets.values()), return_exceptions=True
            )
            failure: BaseException | None = None
            for (name, toolset), result in zip(toolsets.items(), results, strict=True):
                if not isinstance(result, BaseException):
                    self._toolsets[name] = toolset
                    continue
                if not isinstance(result, CapabilityError):
                    failure = failure or result
                    continue
                if self._specs[name].optional:
                    self._skipped[name] = str(result)
                    log.warning(
                        "%s: mcp.servers.%s: optional server did not start, its tools are left "
                        "out: %s",
                        self._source,
                        name,
                        result,
                    )
                elif failure is None:
                    failure = CapabilityError(
                        "unavailable",
                        f"{self._source}: mcp.servers.{name}: the server did not start "
                        f"({result}). Fix: check its command or url (run `reverie doctor`), "
                        "or set optional = true to run without it",
                    )
            if failure is not None:
                raise failure

    def tools(self, names: Iterable[str]) -> list[MCPTool]:
        """The tools of the started servers ``names``, in that order (skipped ones: none).

        Raises:
            UsageError: a server is neither started nor skipped (call :meth:`start` first).
        """
        tools: list[MCPTool] = []
        for name in names:
            toolset = self._toolsets.get(name)
            if toolset is not None:
                tools.extend(toolset.tools())
            elif name not in self._skipped:
                raise UsageError(f"MCP server {name!r} is not started: await start() first")
        return tools

    def equip(self, agent: Agent, names: Sequence[str], *, key: str | None = None) -> Agent:
        """``agent`` with the tools of the servers ``names`` added after its own.

        Args:
            agent: The agent as configured.
            names: Its ``mcp_servers``.
            key: The agent's table (``agents.NAME``), named when a tool name collides.

        Raises:
            ConfigError: two of the agent's tools would have the same name.
            UsageError: a server is not started.
        """
        if not names:
            return agent
        try:
            return dataclasses.replace(agent, tools=[*agent.tools, *self.tools(names)])
        except UsageError as exc:
            if "two tools named" not in str(exc):
                raise
            where = key or f"agents.{agent.name}"
            raise ConfigError(
                f"{self._source}: {where}.mcp_servers: {exc}. Fix: give the servers a prefix "
                '(prefix = "NAME") or leave the tool out with deny_tools = [...]'
            ) from None

    async def aclose(self) -> None:
        """Stop every started server. Idempotent."""
        async with self._lock:
            self._closed = True
            toolsets, self._toolsets = list(self._toolsets.values()), {}
        await asyncio.gather(*(ts.aclose() for ts in toolsets), return_exceptions=True)

    def _toolset_for(self, name: str) -> MCPToolset:
        try:
            from reverie.capabilities.mcp import MCPToolset
        except ImportError:
            raise ConfigError(
                f"{self._source}: mcp.servers.{name}: the 'mcp' package is not installed. "
                "Fix: pip install 'reverie[mcp]'"
            ) from None
        spec = self._specs[name]
        key = f"mcp.servers.{name}"
        common: dict[str, Any] = {
            "prefix": name if spec.prefix is None else (spec.prefix or None),
            "timeout_s": spec.call_timeout_s,
            "connect_timeout_s": spec.connect_timeout_s,
            "allow_tools": spec.allow_tools,
            "deny_tools": spec.deny_tools,
            "label": name,
        }
        if spec.url is not None:
            headers = {h: self._expand(v, f"{key}.headers.{h}") for h, v in spec.headers.items()}
            return MCPToolset(url=spec.url, headers=headers or None, **common)
        assert spec.command is not None  # one transport, by the schema
        command = spec.command
        if "/" in command and not os.path.isabs(command):
            command = str(self._base_dir / command)
        env = {var: self._expand(v, f"{key}.env.{var}") for var, v in spec.env.items()}
        cwd = self._base_dir / spec.cwd if spec.cwd is not None else self._base_dir
        return MCPToolset([command, *spec.args], env=env or None, cwd=cwd, **common)

    def _expand(self, template: str, key: str) -> str:
        environ = os.environ if self._environ is None else self._environ

        def value(match: re.Match[str]) -> str:
            variable = match.group(1)
            found = environ.get(variable)
            if found is None:
                raise ConfigError(
                    f"{self._source}: {key}: the environment variable {variable} is not set. "
                    f"Fix: export {variable}=… before starting reverie"
                )
            return found

        return _VAR_RE.sub(value, template)
