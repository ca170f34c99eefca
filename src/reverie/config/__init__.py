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

The package's modules, each holding one part: ``paths`` (where the file is), ``schema`` (its
tables), ``problems`` (the shape of its errors), ``loading`` (:func:`load_config`), ``agents``
(agents, tools and model specs), ``hooks``, ``services`` (store, memory, MCP servers) and
``serving`` (``[serve]`` and ``[auth.tokens]``). Import the names from ``reverie.config``.
"""

from __future__ import annotations

from reverie.config.agents import build_agents, key_env_for, resolve_model_spec
from reverie.config.hooks import register_hooks
from reverie.config.loading import load_config
from reverie.config.paths import CONFIG_FILE_NAME, default_config_path, reverie_home
from reverie.config.problems import config_error
from reverie.config.schema import (
    AgentConfig,
    EndpointSection,
    LimitsConfig,
    PriceConfig,
    ReverieConfig,
    StoreConfig,
    TelemetryConfig,
)
from reverie.config.services import (
    curation_model,
    mcp_server_settings,
    mcp_servers,
    memory_settings,
    store_url,
)
from reverie.config.serving import ServeConfig, TokenConfig, auth_tokens, serve_settings

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
