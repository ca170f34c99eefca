"""The one shape of every configuration error: ``FILE: KEY: PROBLEM. Fix: FIX``.

Messages never quote the values found in the file, only its keys: a misplaced secret must not
leak into a log.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Final

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from reverie.config.schema import (
    AgentConfig,
    CompactionConfig,
    EndpointSection,
    LimitsConfig,
    PriceConfig,
    ReverieConfig,
    StoreConfig,
)
from reverie.errors import ConfigError
from reverie.models.spec import SPEC_FORMS

__all__ = [
    "EXAMPLE_MODEL",
    "MODEL_FIX",
    "MODEL_FORMS",
    "config_error",
    "dotted",
    "from_validation",
    "problem_of",
]

EXAMPLE_MODEL: Final = "openai:gpt-4.1-mini"
MODEL_FORMS: Final = (
    f'"{EXAMPLE_MODEL}" (or '
    + ", ".join(f'"{form}"' for form in SPEC_FORMS if not form.startswith("openai:"))
    + ")"
)
"""The accepted model-spec forms, as a fix states them (the grammar: reverie.models.spec)."""
MODEL_FIX: Final = f"set model = {MODEL_FORMS}"

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
    "agents.*.model": f"set model = {MODEL_FORMS}, or a list of them: the primary model, "
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
    "agents.*.limits.finalizer_grace_s": "set a non-negative number of seconds (default 10)",
    "agents.*.limits.max_usd": "set a non-negative number of US dollars, or remove it",
    "agents.*.limits.max_tokens": "set a non-negative integer, or remove it",
    "agents.*.limits.max_response_bytes": "set an integer of at least 1 (default 4194304)",
    "agents.*.limits.max_image_bytes": "set a non-negative integer (default 5242880)",
    "agents.*.on_limit": 'set on_limit = "finalize" or on_limit = "fail"',
    "agents.*.on_drift": 'set on_drift = "refuse" or on_drift = "continue"',
    "agents.*.output_type": 'set output_type = "package.module:attribute" (a model class)',
    "agents.*.compaction": "write compaction = { trigger_tokens = 100000, keep_last_turns = 4 }",
    "agents.*.compaction.enabled": "set enabled = true or enabled = false",
    "agents.*.compaction.trigger_tokens": "set a positive integer (default 100000)",
    "agents.*.compaction.keep_last_turns": "set an integer of at least 1 (default 4)",
    "agents.*.compaction.model": f"set model = {MODEL_FORMS}, or remove it for the agent's",
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


def dotted(loc: Sequence[str | int]) -> str:
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


def problem_of(err: ErrorDetails) -> str:
    """What a pydantic error says, as the PROBLEM of :func:`config_error` (no input values)."""
    if err["type"] == "missing":
        return "missing"
    if err["type"] == "extra_forbidden":
        return "unknown key"
    msg = str(err["msg"])
    # pydantic puts "Value error, " before what a validator raised: the reader wants the what.
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(noise)
    return msg[:1].lower() + msg[1:]


def _first(exc: ValidationError) -> ErrorDetails:
    errors = exc.errors(include_url=False, include_input=False)
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def table_error(source: str, key: str, exc: ValidationError, fix: str) -> ConfigError:
    """A table validated on its own (``[schedules.NAME]``, ``[triggers.NAME]``) as the one
    configuration error: its first problem (an unknown key first) at ``key.<where>``, worded as
    :func:`problem_of` words it."""
    err = _first(exc)
    where = dotted([p for p in err["loc"] if isinstance(p, str | int)])
    return config_error(source, f"{key}.{where}" if where else key, problem_of(err), fix)


def from_validation(source: str, exc: ValidationError) -> ConfigError:
    # The first problem only: one precise message beats a wall of them. No input values. An
    # unknown key comes first: a misspelt key (``modle``) also makes the real one "missing",
    # and the reader must learn which line to fix.
    err = _first(exc)
    loc = [p for p in err["loc"] if isinstance(p, str | int)]
    key = dotted(loc) or "(top level)"
    pattern = _pattern(loc)
    problem = problem_of(err)
    if err["type"] == "extra_forbidden":
        parent = pattern.rpartition(".")[0] if "." in pattern else ""
        schema = _TABLES.get(parent)
        accepted = ", ".join(schema.model_fields) if schema else ""
        table = dotted(loc[:-1]) or "the top level"
        fix = f"remove it or check its spelling; {table} takes {accepted}"
        near = difflib.get_close_matches(str(loc[-1]), list(schema.model_fields) if schema else [])
        if near and loc:
            fix = f"did you mean {near[0]}? Rename it, or remove it; {table} takes {accepted}"
    else:
        fix = _FIXES.get(pattern, "see docs/configuration.md for the accepted keys and values")
        if pattern == "agents.*.model" and err["type"] == "missing":
            fix = f'set model = "{EXAMPLE_MODEL}"'
    return config_error(source, key, problem, fix)
