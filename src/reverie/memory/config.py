"""The ``[memory]`` table of ``reverie.toml``: which provider, bound by configuration only.

::

    [memory]
    provider = "native"              # "native" | "mcp" | "none" (default)
    budget_bytes = 6000              # recalled snippets per prompt (aggregate)
    document_budget_bytes = 8000     # native: largest document a model write may leave

    [memory.mcp]                     # provider = "mcp"
    command = ["reverie", "mcp-memory"]      # or url = "https://memory.example/mcp"
    credential_env = "MEM_TOKEN"             # the variable's name; its value is never logged
    search_tool = "memory_search"
    record_tool = "memory_add_session"
    timeout_s = 5                            # each call
    connect_timeout_s = 30                   # start-up, handshake, tool listing (and restarts)
    max_rows = 50
    max_bytes = 64000

    curation_interval_turns = 10     # curation (docs/memory.md): a pass every 10th turn (>= 2)
    curation_model = "openai:gpt-4.1-mini"   # default: the model of the triggering agent

``curation_interval_turns`` is checked here (a whole number >= 2); whether the provider
declares a curation pass is checked when the runtime opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reverie.errors import ConfigError
from reverie.memory.mcp_provider import MCPMemory
from reverie.memory.native import NativeMemory
from reverie.memory.provider import MemoryProvider

__all__ = ["MemoryConfig", "memory_from_config"]


class _MCPTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    credential_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    search_tool: str = "memory_search"
    record_tool: str | None = "memory_add_session"
    timeout_s: float = Field(default=5.0, gt=0)
    connect_timeout_s: float = Field(default=30.0, gt=0)
    max_rows: int = Field(default=50, ge=1)
    max_bytes: int = Field(default=64_000, ge=1)

    @model_validator(mode="after")
    def _one_server(self) -> _MCPTable:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of command = [...] and url = '...'")
        return self


class _MemoryTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["native", "mcp", "none"] = "none"
    budget_bytes: int | None = Field(default=None, ge=1)
    document_budget_bytes: int = Field(default=8_000, ge=1)
    mcp: _MCPTable | None = None
    # Strict: `true` or "10" for a number of turns is a mistake to report, not to coerce.
    curation_interval_turns: int | None = Field(default=None, ge=2, strict=True)
    curation_model: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _mcp_table(self) -> _MemoryTable:
        if self.provider == "mcp" and self.mcp is None:
            raise ValueError("provider = 'mcp' needs a [memory.mcp] table")
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryConfig:
    """What ``[memory]`` asks for, ready for ``Runtime.open``."""

    provider: MemoryProvider | None
    """``memory=`` (``None``: memory off)."""
    budget_bytes: int | None
    """``memory_budget_bytes=``."""
    curation_interval_turns: int | None = None
    """``Runtime.open(curation_interval_turns=...)`` (``None``: curation off)."""
    curation_model: str | None = None
    """The model spec of curation passes (``None``: the triggering agent's model)."""


_FIXES = {
    "curation_interval_turns": (
        "set curation_interval_turns = 10 (a pass after every 10th completed turn; at least "
        "2), or remove it to keep curation off"
    ),
    "curation_model": 'set curation_model = "openai:gpt-4.1-mini" (a model spec), or remove it',
}


def memory_from_config(
    section: Mapping[str, Any] | None, *, source: str = "reverie.toml"
) -> MemoryConfig:
    """Build the provider a ``[memory]`` table names.

    Args:
        section: The parsed ``[memory]`` table (``None`` or empty: memory off).
        source: The file, named in errors.

    Raises:
        ConfigError: An unknown key, a bad value, or an incomplete ``[memory.mcp]``.
    """
    try:
        table = _MemoryTable.model_validate(dict(section or {}))
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(part) for part in error["loc"])
        where = f"[memory] {loc}" if loc else "[memory]"
        fix = _FIXES.get(loc)
        tail = f". Fix: {fix}" if fix else ""
        raise ConfigError(f"{source}: {where}: {error['msg']}{tail}") from None
    provider: MemoryProvider | None = None
    if table.provider == "native":
        provider = NativeMemory(document_budget_bytes=table.document_budget_bytes)
    elif table.provider == "mcp":
        mcp = table.mcp
        assert mcp is not None  # checked by the validator
        provider = MCPMemory(
            command=mcp.command,
            url=mcp.url,
            credential_env=mcp.credential_env,
            search_tool=mcp.search_tool,
            record_tool=mcp.record_tool,
            timeout_s=mcp.timeout_s,
            connect_timeout_s=mcp.connect_timeout_s,
            max_rows=mcp.max_rows,
            max_bytes=mcp.max_bytes,
        )
    return MemoryConfig(
        provider=provider,
        budget_bytes=table.budget_bytes,
        curation_interval_turns=table.curation_interval_turns,
        curation_model=table.curation_model,
    )
