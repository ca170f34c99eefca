"""What the file says about the store, memory and MCP servers a process opens."""

from __future__ import annotations

from pathlib import Path

from reverie.config.agents import extra_fix, resolve_model_spec
from reverie.config.problems import MODEL_FIX, config_error
from reverie.config.schema import ReverieConfig
from reverie.errors import ConfigError
from reverie.mcp_servers import MCPServerConfig, MCPServers, parse_mcp_servers
from reverie.memory.config import MemoryConfig, memory_from_config
from reverie.models.base import Model

__all__ = ["curation_model", "mcp_server_settings", "mcp_servers", "memory_settings", "store_url"]


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
            config.source, "memory.curation_model", problem, fix or MODEL_FIX
        ) from None
    except ImportError as exc:
        raise config_error(
            config.source,
            "memory.curation_model",
            f"the provider's package is not installed ({exc.name or exc})",
            extra_fix(exc),
        ) from None
