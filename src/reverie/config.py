"""``reverie.toml``: the operator's configuration file (DESIGN §16).

The file lives at ``$REVERIE_HOME/reverie.toml`` (``REVERIE_HOME`` defaults to ``~/.reverie``);
the CLI's ``--config PATH`` reads another one. A missing default file is an empty configuration.
Full reference: ``docs/configuration.md``. In short::

    pythonpath = ["."]                          # dirs (relative to this file) to import from

    [store]
    url = "sqlite:///reverie.db"                # relative paths start at this file's directory

    [agents.helper]
    model = "openai:gpt-4.1-mini"               # or ollama:…, anthropic:…, scripted:file.json, …
    instructions = "You are helpful."
    tools = ["reverie.cli.demo_tools:add", "mytools:send_email"]
    limits = { max_iterations = 16, max_usd = 0.50 }
    on_limit = "finalize"
    mcp_servers = ["files"]                     # the tools of [mcp.servers.files] too

    [models.together]                           # an OpenAI-compatible endpoint: together:<model>
    base_url = "https://api.together.xyz/v1"
    api_key_env = "TOGETHER_API_KEY"

    [prices."together:meta-llama/Llama-3-70b"]
    input_per_mtok = 0.9
    output_per_mtok = 0.9

    [memory]                                    # memory and curation (docs/memory.md)
    provider = "native"
    curation_interval_turns = 10                # tidy each owner's memory every 10th turn

    [[hooks]]                                   # trusted hooks (reverie.hooks.manifest)
    point = "before_capability"
    callable = "mypolicy:no_deletes"
    name = "no-deletes"

    [mcp.servers.files]                         # MCP servers (reverie.mcp_servers)
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "."]

    [serve]                                     # ``reverie serve`` (docs/http.md)
    host = "127.0.0.1"
    port = 8400

    [auth.tokens]                               # bearer tokens of ``reverie serve`` → scopes
    ana = { token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }

Loading validates everything and imports every tool, so a mistake surfaces before any run starts.
Every problem is a :class:`~reverie.errors.ConfigError` whose message names the file, the key as
a dotted path and the fix::

    /home/ana/.reverie/reverie.toml: agents.helper.model: missing. Fix: set model = "openai:…"

Messages never quote the values found in the file: a misplaced key must not leak into a log.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from reverie.capabilities import tool
from reverie.capabilities.tool import Capability
from reverie.core.limits import Limits
from reverie.core.scope import Scope
from reverie.core.tomlfile import parse_toml
from reverie.core.vocabulary import OnLimit, ThreadPolicy
from reverie.errors import ConfigError, MissingExtraError, UsageError
from reverie.hooks.manifest import (
    read_hook_specs,
    register_config_hooks,
    register_manifest_hooks,
)
from reverie.hooks.registry import HookRegistration, HookRegistry
from reverie.mcp_servers import MCPServerConfig, MCPServers, parse_mcp_servers
from reverie.memory.config import MemoryConfig, memory_from_config
from reverie.models.base import Model
from reverie.models.pricing import PriceTable
from reverie.models.registry import EndpointConfig, resolve_model
from reverie.runtime.agent import Agent
from reverie.runtime.compaction import Compaction

__all__ = [
    "CONFIG_FILE_NAME",
    "AgentConfig",
    "EndpointSection",
    "LimitsConfig",
    "PriceConfig",
    "ReverieConfig",
    "ServeConfig",
    "StoreConfig",
    "TelemetryConfig",
    "TokenConfig",
    "auth_tokens",
    "build_agents",
    "config_error",
    "curation_model",
    "default_config_path",
    "key_env_for",
    "load_config",
    "mcp_server_settings",
    "mcp_servers",
    "memory_settings",
    "register_hooks",
    "resolve_model_spec",
    "reverie_home",
    "serve_settings",
    "store_url",
]

CONFIG_FILE_NAME: Final = "reverie.toml"
EXAMPLE_MODEL: Final = "openai:gpt-4.1-mini"
_MODEL_FORMS: Final = (
    f'"{EXAMPLE_MODEL}" (or "ollama:<model>", "anthropic:<model>", '
    '"openai-compat:<url>#<model>", "<endpoint>:<model>", "scripted:path/to/script.json")'
)
_RESERVED_ENDPOINTS: Final = ("hermes", "openai-compat", "scripted")
_REF: Final = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
_ENV_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"


def reverie_home() -> Path:
    """``$REVERIE_HOME``, or ``~/.reverie`` when it is not set."""
    return Path(os.environ.get("REVERIE_HOME") or "~/.reverie").expanduser()


def default_config_path() -> Path:
    """``$REVERIE_HOME/reverie.toml``."""
    return reverie_home() / CONFIG_FILE_NAME


# ---------------------------------------------------------------------------------- schema
class _Section(BaseModel):
    # Strict: TOML already types its values, so "3" for an integer is a mistake to report,
    # not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class StoreConfig(_Section):
    """``[store]``: where runs are kept."""

    url: str | None = Field(default=None, min_length=1)
    """A store URL (``sqlite:///path.db``, ``:memory:``, ``postgresql://…``); ``None`` for the
    default ``sqlite:///$REVERIE_HOME/reverie.db``."""


class RuntimeSection(_Section):
    """``[runtime]``: defaults of the runtime every command opens."""

    thread_policy: ThreadPolicy = "reject"
    """What a run started on a thread with a running or blocked run does (docs/durability.md):
    refuse (``ThreadBusy``), become its follow-up, or cancel it first."""


class TelemetryConfig(_Section):
    """``[telemetry]``: what spans may carry (docs/observability.md)."""

    trace_content: bool = False
    """Put message content and tool arguments on spans (off: only names, ids, usage, kinds)."""


class LimitsConfig(_Section):
    """``limits`` of an agent: the fields of :class:`reverie.Limits`; unset keeps the default."""

    max_iterations: int | None = Field(default=None, ge=1)
    max_model_calls: int | None = Field(default=None, ge=0)
    max_capability_calls: int | None = Field(default=None, ge=0)
    max_calls_per_batch: int | None = Field(default=None, ge=1)
    wall_clock_s: float | None = Field(default=None, gt=0)
    max_usd: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_response_bytes: int | None = Field(default=None, ge=1)
    max_image_bytes: int | None = Field(default=None, ge=0)

    def to_limits(self) -> Limits:
        """The :class:`Limits` these settings describe."""
        return Limits(**self.model_dump(exclude_none=True))


class CompactionConfig(_Section):
    """``compaction`` of an agent (docs/compaction.md): the fields of :class:`reverie.Compaction`.

    The table turns compaction on; ``enabled = false`` turns it off again.
    """

    enabled: bool = True
    trigger_tokens: int | None = Field(default=None, ge=1)
    keep_last_turns: int | None = Field(default=None, ge=1)
    model: str | None = Field(default=None, min_length=1)
    """A model spec for the summaries (default: the agent's model)."""
    max_summary_tokens: int | None = Field(default=None, ge=1)
    chars_per_token: float | None = Field(default=None, gt=0)


class AgentConfig(_Section):
    """``[agents.NAME]``: one agent."""

    model: str | list[str]
    """A model spec (:func:`resolve_model_spec`), or a list of them: the primary model, then
    the fallback models."""

    @field_validator("model", mode="plain")
    @classmethod
    def _specs(cls, value: object) -> str | list[str]:
        # One check for both forms, so an error names ``model`` (not a branch of a union).
        specs = value if isinstance(value, list) else [value]
        if not specs:
            raise ValueError("the list names no model")
        for spec in specs:
            if not isinstance(spec, str):
                raise ValueError("a model spec must be a string")
            if not spec.strip():
                raise ValueError("a model spec must not be empty")
        return value  # type: ignore[return-value]

    @property
    def model_specs(self) -> list[str]:
        """``model`` as a list (the primary first)."""
        return [self.model] if isinstance(self.model, str) else list(self.model)

    instructions: str = ""
    tools: list[str] = Field(default_factory=list)
    """``"package.module:attribute"`` references, imported when the file is loaded."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    on_limit: OnLimit = "finalize"
    mcp_servers: list[str] = Field(default_factory=list)
    """Names of ``[mcp.servers.NAME]`` whose tools this agent gets (after its own)."""
    output_type: str | None = None
    """``"package.module:attribute"`` naming a pydantic model class or a JSON Schema (a dict):
    the agent's runs end with a validated value (docs/output.md)."""
    compaction: CompactionConfig | None = None
    """Context compaction; off without the table (or with ``enabled = false``)."""


class EndpointSection(_Section):
    """``[models.NAME]``: an OpenAI-compatible endpoint, used as ``NAME:<model>``."""

    base_url: str = Field(pattern=r"^https?://\S+$")
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    """The *name* of the environment variable holding the key; ``None`` for no key."""


class PriceConfig(_Section):
    """``[prices."<model>"]``: US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class ReverieConfig(_Section):
    """The whole of ``reverie.toml``. Build it with :func:`load_config`."""

    pythonpath: list[str] = Field(default_factory=list)
    """Directories (relative to the file) put first on ``sys.path`` before tools are imported."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    models: dict[str, EndpointSection] = Field(default_factory=dict)
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    hooks: list[dict[str, Any]] = Field(default_factory=list)
    """``[[hooks]]`` tables, validated here and registered as ``trusted`` by
    :func:`register_hooks`."""
    extensions: list[str] = Field(default_factory=list)
    """Extension manifests (TOML, relative to the file) whose ``[[hooks]]`` are registered as
    ``installed``: they may deny or pause, never allow, and never bind ``after_turn``."""
    auth: dict[str, Any] = Field(default_factory=dict)
    """``[auth.tokens]``: bearer tokens of ``reverie serve``, read (and checked) by
    :func:`auth_tokens` when the server starts."""
    mcp: dict[str, Any] = Field(default_factory=dict)
    """``[mcp.servers.NAME]``: MCP servers, validated by :func:`mcp_server_settings`."""
    memory: dict[str, Any] = Field(default_factory=dict)
    """``[memory]``: the provider and curation settings, validated by
    :func:`reverie.memory.memory_from_config` (see :func:`memory_settings`)."""
    serve: dict[str, Any] = Field(default_factory=dict)
    """``[serve]``: where ``reverie serve`` listens, read by :func:`serve_settings`."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """``[telemetry]``: whether spans carry content (docs/observability.md)."""
    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    """``[runtime]``: the default thread policy."""

    _source: str = PrivateAttr(default=CONFIG_FILE_NAME)
    _base_dir: Path | None = PrivateAttr(default=None)
    _exists: bool = PrivateAttr(default=False)

    @property
    def source(self) -> str:
        """The file this configuration was read from (named in every error)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """Where relative paths in the file start: the file's directory."""
        return self._base_dir or Path.cwd()

    @property
    def exists(self) -> bool:
        """Whether the file existed (a missing default file is an empty configuration)."""
        return self._exists

    def endpoints(self) -> dict[str, EndpointConfig]:
        """``[models.NAME]`` as the model registry takes them."""
        return {
            name: EndpointConfig(base_url=e.base_url, api_key_env=e.api_key_env)
            for name, e in self.models.items()
        }

    def price_table(self) -> PriceTable:
        """The built-in prices with ``[prices]`` merged over them."""
        return PriceTable.default().merged(
            {name: p.model_dump() for name, p in self.prices.items()}
        )


# ---------------------------------------------------------------------------------- errors
_EXTENSIONS_FIX: Final = 'set extensions = ["ext/audit.toml"] (manifests, relative to this file)'
_FIXES: Final[Mapping[str, str]] = {
    "pythonpath": 'set pythonpath = ["."] (directories, relative to this file)',
    "pythonpath.[]": 'set pythonpath = ["."] (directories, relative to this file)',
    "extensions": _EXTENSIONS_FIX,
    "extensions.[]": _EXTENSIONS_FIX,
    "store": 'write a [store] table with url = "sqlite:///path/to/reverie.db"',
    "store.url": 'set url = "sqlite:///path/to/reverie.db" (or ":memory:"), or remove it',
    "agents": f'write each agent as a table: [agents.assistant] with model = "{EXAMPLE_MODEL}"',
    "agents.*": f'write the agent as a table: [agents.NAME] with model = "{EXAMPLE_MODEL}"',
    "agents.*.model": f"set model = {_MODEL_FORMS}, or a list of them: the primary model, "
    "then its fallbacks",
    "agents.*.instructions": 'set instructions = "You are helpful." (a string)',
    "agents.*.tools": 'set tools = ["package.module:attribute", ...]',
    "agents.*.tools.[]": (
        'name each tool as "package.module:attribute", e.g. "reverie.cli.demo_tools:add"'
    ),
    "agents.*.limits": "write limits = { max_iterations = 32, ... } (keys of reverie.Limits)",
    "agents.*.limits.max_iterations": "set an integer of at least 1 (default 32)",
    "agents.*.limits.max_model_calls": "set a non-negative integer, or remove it for no limit",
    "agents.*.limits.max_capability_calls": "set a non-negative integer, or remove it",
    "agents.*.limits.max_calls_per_batch": "set an integer of at least 1 (default 32)",
    "agents.*.limits.wall_clock_s": "set a positive number of seconds, or remove it",
    "agents.*.limits.max_usd": "set a non-negative number of US dollars, or remove it",
    "agents.*.limits.max_tokens": "set a non-negative integer, or remove it",
    "agents.*.limits.max_response_bytes": "set an integer of at least 1 (default 4194304)",
    "agents.*.limits.max_image_bytes": "set a non-negative integer (default 5242880)",
    "agents.*.on_limit": 'set on_limit = "finalize" or on_limit = "fail"',
    "agents.*.output_type": 'set output_type = "package.module:attribute" (a model class)',
    "agents.*.compaction": "write compaction = { trigger_tokens = 100000, keep_last_turns = 4 }",
    "agents.*.compaction.enabled": "set enabled = true or enabled = false",
    "agents.*.compaction.trigger_tokens": "set a positive integer (default 100000)",
    "agents.*.compaction.keep_last_turns": "set an integer of at least 1 (default 4)",
    "agents.*.compaction.model": f"set model = {_MODEL_FORMS}, or remove it for the agent's",
    "agents.*.compaction.max_summary_tokens": "set a positive integer (default 2048)",
    "agents.*.compaction.chars_per_token": "set a positive number, or remove it for the default",
    "agents.*.mcp_servers": 'set mcp_servers = ["files"] (names of [mcp.servers.NAME] tables)',
    "agents.*.mcp_servers.[]": 'name a server of [mcp.servers.NAME], e.g. "files"',
    "models": 'write each endpoint as a table: [models.NAME] with base_url = "https://host/v1"',
    "models.*": 'write the endpoint as a table: [models.NAME] with base_url = "https://host/v1"',
    "models.*.base_url": 'set base_url = "https://host/v1" (an http:// or https:// URL)',
    "models.*.api_key_env": (
        'set api_key_env = "VARIABLE_NAME": the name of the environment variable that holds '
        "the key, never the key itself"
    ),
    "prices": 'write each price as a table: [prices."openai:gpt-4.1-mini"]',
    "prices.*": (
        'write [prices."<model>"] with input_per_mtok = 0.4 and output_per_mtok = 1.6 '
        "(US dollars per million tokens)"
    ),
    "prices.*.input_per_mtok": "set input_per_mtok to a non-negative number (USD per 1M tokens)",
    "prices.*.output_per_mtok": "set output_per_mtok to a non-negative number (USD per 1M tokens)",
    "hooks": "write each hook as a [[hooks]] table (double brackets)",
    "hooks.[]": "write each hook as a [[hooks]] table (double brackets)",
    "auth": "write it as a table: [auth.tokens]",
    "mcp": "write it as a table: [mcp.servers.NAME]",
    "memory": "write it as a table: [memory]",
    "serve": "write it as a table: [serve]",
}

_TABLES: Final[Mapping[str, type[BaseModel]]] = {
    "": ReverieConfig,
    "store": StoreConfig,
    "agents.*": AgentConfig,
    "agents.*.limits": LimitsConfig,
    "agents.*.compaction": CompactionConfig,
    "models.*": EndpointSection,
    "prices.*": PriceConfig,
}
"""Which schema a table path has, to list the keys it takes when an unknown one appears."""

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _dotted(loc: Sequence[str | int]) -> str:
    """A TOML-style dotted key: ``agents.helper.tools[0]``, ``prices."openai:gpt-4o"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        text = part if _BARE_KEY.match(part) else '"' + part.replace('"', '\\"') + '"'
        out += f".{text}" if out else text
    return out


def _pattern(loc: Sequence[str | int]) -> str:
    """The schema path of a location: names of agents, endpoints and prices become ``*``."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            parts.append("[]")
        elif i == 1 and loc[0] in ("agents", "models", "prices"):
            parts.append("*")
        else:
            parts.append(part)
    return ".".join(parts)


def config_error(source: str, key: str, problem: str, fix: str) -> ConfigError:
    """``FILE: KEY: PROBLEM. Fix: FIX`` — the one shape of every configuration error."""
    return ConfigError(f"{source}: {key}: {problem}. Fix: {fix}")


def _from_validation(source: str, exc: ValidationError) -> ConfigError:
    # The first problem only: one precise message beats a wall of them. No input values.
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = [p for p in err["loc"] if isinstance(p, str | int)]
    key = _dotted(loc) or "(top level)"
    pattern = _pattern(loc)
    if err["type"] == "missing":
        problem = "missing"
    elif err["type"] == "extra_forbidden":
        problem = "unknown key"
    else:
        msg = str(err["msg"])
        problem = msg[:1].lower() + msg[1:]
    if err["type"] == "extra_forbidden":
        parent = pattern.rpartition(".")[0] if "." in pattern else ""
        schema = _TABLES.get(parent)
        accepted = ", ".join(schema.model_fields) if schema else ""
        table = _dotted(loc[:-1]) or "the top level"
        fix = f"remove it or check its spelling; {table} takes {accepted}"
    else:
        fix = _FIXES.get(pattern, "see docs/configuration.md for the accepted keys and values")
        if pattern == "agents.*.model" and err["type"] == "missing":
            fix = f'set model = "{EXAMPLE_MODEL}"'
    return config_error(source, key, problem, fix)


# ---------------------------------------------------------------------------------- loading
def load_config(path: str | os.PathLike[str] | None = None) -> ReverieConfig:
    """Read, validate and check ``reverie.toml``.

    Args:
        path: The file to read; ``None`` for ``$REVERIE_HOME/reverie.toml``, where a missing
            file means an empty configuration. An explicit path must exist.

    Returns:
        The validated configuration. Every agent's tools were imported and its model spec
        resolved (nothing connects, and no key is read, until a run calls the model).

    Raises:
        ConfigError: The file cannot be read, is not valid TOML (names the line), or a key is
            invalid (names the key and the fix).
    """
    explicit = path is not None
    file = Path(path).expanduser() if path is not None else default_config_path()
    source = str(file)
    try:
        with open(file, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                f"{source}: file not found. Fix: check the --config path, or create the file"
            ) from None
        return _finish(ReverieConfig(), source=source, base_dir=file.parent, exists=False)
    except IsADirectoryError:
        raise ConfigError(
            f"{source}: is a directory. Fix: point --config at a reverie.toml file"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{source}: cannot be read ({type(exc).__name__}). Fix: check the file's permissions"
        ) from exc
    document = parse_toml(raw, source)
    try:
        config = ReverieConfig.model_validate(document)
    except ValidationError as exc:
        raise _from_validation(source, exc) from None
    config = _finish(config, source=source, base_dir=file.parent.resolve(), exists=True)
    _check(config)
    return config


def _finish(config: ReverieConfig, *, source: str, base_dir: Path, exists: bool) -> ReverieConfig:
    config._source = source
    config._base_dir = base_dir
    config._exists = exists
    return config


def _check(config: ReverieConfig) -> None:
    """The checks a schema cannot express: names, imports, model specs, prices."""
    source = config.source
    for name in config.models:
        if name in _RESERVED_ENDPOINTS:
            raise config_error(
                source,
                _dotted(["models", name]),
                f"the name {name!r} is reserved for the {name}: spec form",
                "choose another name for this endpoint",
            )
    if config.hooks:
        read_hook_specs({"hooks": config.hooks}, source=source)
    memory_settings(config)
    servers = mcp_server_settings(config)
    for name, agent in config.agents.items():
        for index, server in enumerate(agent.mcp_servers):
            if server not in servers:
                known = ", ".join(servers) or "none"
                raise config_error(
                    source,
                    f"{_dotted(['agents', name, 'mcp_servers'])}[{index}]",
                    f"no MCP server named {server!r} (configured: {known})",
                    f"add a [mcp.servers.{server}] table, or remove the name",
                )
    _extend_path(config)
    build_agents(config)
    curation_model(config)
    prices = config.price_table()
    for name, agent in config.agents.items():
        unpriced = [spec for spec in agent.model_specs if prices.price_for(spec) is None]
        if agent.limits.max_usd is not None and unpriced:
            raise config_error(
                source,
                _dotted(["agents", name, "limits", "max_usd"]),
                f"no price is known for model {unpriced[0]!r}, so spend cannot be counted",
                f'add [prices."{unpriced[0]}"] with input_per_mtok and output_per_mtok, '
                "or remove max_usd",
            )


def _extend_path(config: ReverieConfig) -> None:
    for entry in reversed(config.pythonpath):
        directory = Path(entry).expanduser()
        if not directory.is_absolute():
            directory = config.base_dir / directory
        text = str(directory)
        if text not in sys.path:
            sys.path.insert(0, text)


# ---------------------------------------------------------------------------------- agents
def resolve_model_spec(
    spec: str,
    *,
    config: ReverieConfig | None = None,
    base_dir: str | os.PathLike[str] | None = None,
) -> Model:
    """Turn a model spec into a :class:`Model`: ``scripted:FILE.json`` or a registry spec.

    Args:
        spec: ``scripted:path.json`` (:mod:`reverie.testing.scripted_file`) or any spec
            :func:`reverie.models.registry.resolve_model` accepts.
        config: Supplies the ``[models.NAME]`` endpoints.
        base_dir: Where a relative ``scripted:`` path starts (default: the current directory).

    Raises:
        ConfigError: The spec is malformed, names an unknown provider, or its script is invalid.
    """
    from reverie.testing.scripted_file import SCRIPTED_PREFIX, load_scripted_model

    text = spec.strip()
    if text.startswith(SCRIPTED_PREFIX):
        return load_scripted_model(text, base_dir=base_dir)
    return resolve_model(text, endpoints=config.endpoints() if config else None)


def build_agents(config: ReverieConfig) -> list[Agent]:
    """The agents of ``[agents.*]``, with tools imported and models resolved.

    Models are built fresh on every call and may hold SDK clients: close them with
    ``await model.aclose()`` when done (the CLI does).

    Raises:
        ConfigError: A tool cannot be imported or is not a tool, a model spec is invalid, or the
            agent's settings are refused (names the key).
    """
    agents: list[Agent] = []
    for name, section in config.agents.items():
        key = _dotted(["agents", name])
        tools: list[Any] = []
        for index, ref in enumerate(section.tools):
            tools.extend(_import_tools(config.source, f"{key}.tools[{index}]", ref))
        models: list[Model] = []
        for index, spec in enumerate(section.model_specs):
            where = f"{key}.model" if isinstance(section.model, str) else f"{key}.model[{index}]"
            try:
                models.append(resolve_model_spec(spec, config=config, base_dir=config.base_dir))
            except ConfigError as exc:
                # A scripted file's error carries its own fix; a registry error gets ours.
                problem, _, fix = str(exc).partition(". Fix: ")
                raise config_error(config.source, where, problem, fix or _MODEL_FIX) from None
            except ImportError as exc:
                raise config_error(
                    config.source,
                    where,
                    f"the provider's package is not installed ({exc.name or exc})",
                    _extra_fix(exc),
                ) from None
        output_type = None
        if section.output_type is not None:
            where = f"{key}.output_type"
            output_type = _import_ref(config.source, where, section.output_type, _OUTPUT_TYPE_FIX)
        try:
            agents.append(
                Agent(
                    name=name,
                    model=models[0] if len(models) == 1 else models,
                    instructions=section.instructions,
                    tools=tools,
                    limits=section.limits.to_limits(),
                    on_limit=section.on_limit,
                    output_type=output_type,
                    compaction=_compaction(config, f"{key}.compaction", section.compaction),
                )
            )
        except UsageError as exc:
            where = f"{key}.output_type" if "output_type" in str(exc) else key
            raise config_error(
                config.source, where, str(exc), "see docs/configuration.md for agents"
            ) from None
    return agents


_MODEL_FIX: Final = f"set model = {_MODEL_FORMS}"


def _compaction(
    config: ReverieConfig, key: str, section: CompactionConfig | None
) -> Compaction | None:
    """An agent's :class:`Compaction` from its ``compaction`` table (``None``: off)."""
    if section is None or not section.enabled:
        return None
    settings: dict[str, Any] = section.model_dump(exclude_none=True, exclude={"enabled", "model"})
    if section.model is not None:
        try:
            settings["model"] = resolve_model_spec(
                section.model, config=config, base_dir=config.base_dir
            )
        except ConfigError as exc:
            problem, _, fix = str(exc).partition(". Fix: ")
            raise config_error(config.source, f"{key}.model", problem, fix or _MODEL_FIX) from None
    try:
        return Compaction(**settings)
    except UsageError as exc:
        raise config_error(config.source, key, str(exc), "see docs/compaction.md") from None


def _import_tools(source: str, key: str, ref: str) -> list[Any]:
    """Import ``package.module:attribute`` and return the capabilities it names."""
    target = _import_ref(source, key, ref, _TOOL_FIX)
    items = list(target) if isinstance(target, list | tuple) else [target]
    tools: list[Any] = []
    for item in items:
        if isinstance(item, Capability):
            tools.append(item)
        elif callable(item):
            # A plain function: wrapped like a bare @tool (undeclared effects run exclusively).
            try:
                tools.append(tool(item))
            except UsageError as exc:
                raise config_error(source, key, str(exc), _TOOL_FIX) from None
        else:
            raise config_error(
                source, key, f"{ref!r} is a {type(item).__name__}, not a tool", _TOOL_FIX
            )
    return tools


def _import_ref(source: str, key: str, ref: str, fix: str) -> object:
    """Import ``package.module:attribute`` and return the object it names."""
    if not re.match(_REF, ref):
        raise config_error(source, key, "not a 'package.module:attribute' reference", fix)
    module_name, _, attribute = ref.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise config_error(
            source,
            key,
            f"cannot import module {module_name!r}",
            "install the package, or add its directory to pythonpath = [...] at the top of "
            "this file",
        ) from exc
    except Exception as exc:
        raise config_error(
            source, key, f"importing module {module_name!r} raised {type(exc).__name__}", fix
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise config_error(
                source, key, f"{ref!r} does not exist (no attribute {part!r})", fix
            ) from None
    return target


_OUTPUT_TYPE_FIX: Final = (
    'set output_type = "package.module:attribute" naming a pydantic model class or a JSON '
    "Schema dict with an object root"
)
_TOOL_FIX: Final = (
    'name an @tool function, a plain function, or a list of tools as "package.module:attribute"'
)


# ---------------------------------------------------------------------------------- runtime
def store_url(config: ReverieConfig, override: str | None = None) -> str:
    """The store to open: ``override`` (``--store``), else ``[store] url``, else the default.

    A relative SQLite path in the file starts at the file's directory, so the same file means
    the same store from any working directory.
    """
    from reverie.store import default_store_url

    if override:
        return override
    url = config.store.url
    if not url:
        return default_store_url()
    prefix = "sqlite:///"
    if url.startswith(prefix):
        path, sep, query = url[len(prefix) :].partition("?")
        return prefix + str(_under(config.base_dir, path)) + sep + query
    if "://" not in url and url.endswith(".db"):
        return str(_under(config.base_dir, url))
    return url


def _under(base: Path, path: str) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def mcp_server_settings(config: ReverieConfig) -> dict[str, MCPServerConfig]:
    """``[mcp.servers.NAME]``, validated, by name.

    Raises:
        ConfigError: A key is invalid (names the file and the key).
    """
    return parse_mcp_servers(config.mcp, source=config.source)


def mcp_servers(config: ReverieConfig) -> MCPServers:
    """The owner of the file's MCP servers (none started yet: :meth:`MCPServers.start`).

    Relative ``cwd`` and ``command`` paths start at the file's directory.
    """
    return MCPServers(mcp_server_settings(config), source=config.source, base_dir=config.base_dir)


def memory_settings(config: ReverieConfig) -> MemoryConfig:
    """What ``[memory]`` asks for: a fresh provider (``None``: memory off) and its settings.

    Raises:
        ConfigError: A key of ``[memory]`` is invalid (names the file and the key).
    """
    return memory_from_config(config.memory, source=config.source)


def curation_model(config: ReverieConfig) -> Model | None:
    """The model ``[memory] curation_model`` names (``None``: passes use the triggering
    agent's model). Resolved like an agent's model: endpoints, ``scripted:`` paths relative
    to the file.

    Raises:
        ConfigError: The spec is invalid (names ``memory.curation_model``).
    """
    spec = memory_settings(config).curation_model
    if spec is None:
        return None
    try:
        return resolve_model_spec(spec, config=config, base_dir=config.base_dir)
    except ConfigError as exc:
        problem, _, fix = str(exc).partition(". Fix: ")
        raise config_error(
            config.source, "memory.curation_model", problem, fix or _MODEL_FIX
        ) from None
    except ImportError as exc:
        raise config_error(
            config.source,
            "memory.curation_model",
            f"the provider's package is not installed ({exc.name or exc})",
            _extra_fix(exc),
        ) from None


def _extra_fix(exc: ImportError) -> str:
    missing = MissingExtraError.of(exc, "the model provider")
    if missing is None:
        return "install the package the provider needs"
    return f"pip install 'reverie[{missing.extra}]'"


def register_hooks(config: ReverieConfig, registry: HookRegistry) -> tuple[HookRegistration, ...]:
    """Register the file's ``[[hooks]]`` as ``trusted`` and its extensions' as ``installed``.

    Raises:
        ConfigError: A hook's callable cannot be imported or the registry refuses it.
    """
    registered: tuple[HookRegistration, ...] = ()
    if config.hooks:
        registered += register_config_hooks(registry, {"hooks": config.hooks}, source=config.source)
    for manifest in config.extensions:
        path = Path(manifest)
        if not path.is_absolute():
            path = config.base_dir / path
        if not path.is_file():
            raise ConfigError(
                f"{config.source}: extensions: {manifest!r} does not exist. Fix: point it at "
                "an extension manifest (a TOML file with [[hooks]] tables), relative to "
                "this file"
            )
        registered += register_manifest_hooks(registry, path)
    return registered


def key_env_for(spec: str, config: ReverieConfig | None = None) -> str | None:
    """The environment variable a model spec reads its key from (``None``: needs no key).

    Mirrors :func:`reverie.models.registry.resolve_model`; used by ``reverie doctor`` to say
    which variable to set without ever reading its value.
    """
    endpoints = config.endpoints() if config else {}
    prefix, _, rest = spec.strip().partition(":")
    endpoint = endpoints.get(prefix)
    if prefix == "hermes":
        return key_env_for(rest, config)
    if prefix == "openai":
        return (endpoint.api_key_env if endpoint else None) or "OPENAI_API_KEY"
    if prefix == "anthropic":
        return (endpoint.api_key_env if endpoint else None) or "ANTHROPIC_API_KEY"
    if prefix in ("openai-compat", "scripted"):
        return None
    # ollama (no key unless an endpoint re-points it) and configured endpoints.
    return endpoint.api_key_env if endpoint else None


# ---------------------------------------------------------------------------------- serve
class ServeConfig(_Section):
    """``[serve]``: where ``reverie serve`` listens (``--host``/``--port`` win)."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8400, ge=0, le=65535)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    """Larger request bodies are answered 413."""
    cors_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed to call the API (``"*"``: any); empty: no CORS."""
    shutdown_grace_s: float = Field(default=5.0, ge=0)
    """On SIGTERM, how long open streams may go on before their runs are cancelled."""


class TokenConfig(_Section):
    """One entry of ``[auth.tokens]``: the scope a bearer token acts for.

    The entry's key is the token itself, unless ``token_env`` names the environment variable
    that holds it (then the key is only a label)::

        [auth.tokens]
        "tok-3f9a…" = { tenant = "acme", user = "ana" }
        bob = { token_env = "API_TOKEN_BOB", tenant = "acme", user = "bob" }
    """

    tenant: str = Field(min_length=1)
    user: str = Field(min_length=1)
    token_env: str | None = Field(default=None, pattern=_ENV_NAME)
    """The *name* of the environment variable holding the token; the key is then a label."""


_TOKEN_FIX: Final = (
    'write each token as "<token>" = { tenant = "acme", user = "ana" }, or keep the secret out '
    'of the file: label = { token_env = "API_TOKEN_ANA", tenant = "acme", user = "ana" }'
)
_TOKEN_FIELD_FIXES: Final[Mapping[str, str]] = {
    "tenant": 'set tenant = "acme" (a non-empty string)',
    "user": 'set user = "ana" (a non-empty string)',
    "token_env": (
        'set token_env = "VARIABLE_NAME": the name of the environment variable that holds the '
        "token, never the token itself"
    ),
}


_SERVE_FIXES = {
    "host": 'set host = "127.0.0.1" (or "0.0.0.0" to listen on every interface)',
    "port": "set port = 8400 (0 to 65535)",
    "max_body_bytes": "set max_body_bytes = 4194304 (bytes, at least 1)",
    "cors_origins": 'set cors_origins = ["https://app.example.com"] (a list of origins)',
    "shutdown_grace_s": "set shutdown_grace_s = 5 (seconds, 0 or more)",
}


def serve_settings(config: ReverieConfig) -> ServeConfig:
    """``[serve]``, validated.

    Raises:
        ConfigError: A key of ``[serve]`` is invalid (names the file and the key).
    """
    try:
        return ServeConfig.model_validate(config.serve)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "(table)"
        if err["type"] == "extra_forbidden":
            problem = "unknown key"
            fix = (
                "remove it; [serve] takes host, port, max_body_bytes, cors_origins and "
                "shutdown_grace_s"
            )
        else:
            msg = str(err["msg"])
            problem = msg[:1].lower() + msg[1:]
            fix = _SERVE_FIXES.get(field.split(".")[0], _SERVE_FIXES["host"])
        raise config_error(config.source, f"serve.{field}", problem, fix) from None


def auth_tokens(
    config: ReverieConfig, environ: Mapping[str, str] | None = None
) -> dict[str, Scope]:
    """The bearer tokens of ``[auth.tokens]`` and the scope each acts for.

    Tokens given by ``token_env`` are read from ``environ`` (default: the process environment)
    now. Messages never quote a token: an entry whose key is a token is named by its position
    (``auth.tokens.<entry 2>``), an entry with ``token_env`` by its label.

    Raises:
        ConfigError: The table is malformed, an entry lacks ``tenant`` or ``user``, a
            ``token_env`` variable is not set, or two entries have the same token.
    """
    env = os.environ if environ is None else environ
    source = config.source
    unknown = sorted(set(config.auth) - {"tokens"})
    if unknown:
        raise config_error(
            source, _dotted(["auth", unknown[0]]), "unknown key", "remove it; [auth] takes tokens"
        )
    table = config.auth.get("tokens", {})
    if not isinstance(table, dict):
        raise config_error(source, "auth.tokens", "not a table", _TOKEN_FIX)
    tokens: dict[str, Scope] = {}
    owners: dict[str, str] = {}
    for index, (key, entry) in enumerate(table.items(), start=1):
        labelled = isinstance(entry, dict) and "token_env" in entry
        # The key of an inline entry is the secret itself: never print it.
        name = _dotted(["auth", "tokens", key]) if labelled else f"auth.tokens.<entry {index}>"
        if not isinstance(entry, dict):
            raise config_error(source, name, "not a table", _TOKEN_FIX)
        try:
            spec = TokenConfig.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(p) for p in err["loc"])
            if err["type"] == "missing":
                problem = "missing"
            elif err["type"] == "extra_forbidden":
                problem = "unknown key"
            else:
                msg = str(err["msg"])
                problem = msg[:1].lower() + msg[1:]
            fix = _TOKEN_FIELD_FIXES.get(field, "an entry takes tenant, user and token_env")
            raise config_error(source, f"{name}.{field}", problem, fix) from None
        if spec.token_env is not None:
            token = env.get(spec.token_env, "").strip()
            if not token:
                raise config_error(
                    source,
                    f"{name}.token_env",
                    f"the environment variable {spec.token_env} is not set",
                    f"export {spec.token_env}=<token> before starting reverie serve",
                )
        else:
            token = key
            if not token.strip() or token != token.strip() or any(c.isspace() for c in token):
                raise config_error(
                    source, name, "a token cannot be empty or contain whitespace", _TOKEN_FIX
                )
        if token in tokens:
            raise config_error(
                source,
                name,
                f"the same token is already given by {owners[token]}",
                "give every caller a token of their own",
            )
        tokens[token] = Scope(tenant=spec.tenant, user=spec.user)
        owners[token] = name
    return tokens
