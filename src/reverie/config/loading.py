"""Reading ``reverie.toml``: parse, validate, then the checks a schema cannot express."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import ValidationError

from reverie.config.agents import build_agents
from reverie.config.paths import default_config_path
from reverie.config.problems import config_error, dotted, from_validation
from reverie.config.schema import ReverieConfig
from reverie.config.services import curation_model, mcp_server_settings, memory_settings
from reverie.core.tomlfile import parse_toml
from reverie.errors import ConfigError
from reverie.hooks.manifest import read_hook_specs
from reverie.models.spec import RESERVED_PROVIDERS

__all__ = ["load_config"]


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
        raise from_validation(source, exc) from None
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
        if name in RESERVED_PROVIDERS:
            raise config_error(
                source,
                dotted(["models", name]),
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
                    f"{dotted(['agents', name, 'mcp_servers'])}[{index}]",
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
                dotted(["agents", name, "limits", "max_usd"]),
                f"no price is known for model '{unpriced[0]}', so spend cannot be counted",
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
