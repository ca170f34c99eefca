"""The tables of ``reverie.toml`` as pydantic models (validated by :func:`load_config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from reverie.config.paths import CONFIG_FILE_NAME
from reverie.core.limits import Limits
from reverie.core.vocabulary import DriftAction, OnLimit, ThreadPolicy
from reverie.models.pricing import PriceTable
from reverie.models.registry import EndpointConfig

__all__ = [
    "ENV_NAME",
    "AgentConfig",
    "CompactionConfig",
    "EndpointSection",
    "LimitsConfig",
    "PriceConfig",
    "ReverieConfig",
    "RuntimeSection",
    "Section",
    "StoreConfig",
    "TelemetryConfig",
]

ENV_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What an ``*_env`` key holds: the name of an environment variable."""


class Section(BaseModel):
    # Strict: TOML already types its values, so "3" for an integer is a mistake to report,
    # not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class StoreConfig(Section):
    """``[store]``: where runs are kept."""

    url: str | None = Field(default=None, min_length=1)
    """A store URL (``sqlite:///path.db``, ``:memory:``, ``postgresql://…``); ``None`` for the
    default ``sqlite:///$REVERIE_HOME/reverie.db``."""


class RuntimeSection(Section):
    """``[runtime]``: defaults of the runtime every command opens."""

    thread_policy: ThreadPolicy = "reject"
    """What a run started on a thread with a running or blocked run does (docs/durability.md):
    refuse (``ThreadBusy``), become its follow-up, or cancel it first."""


class TelemetryConfig(Section):
    """``[telemetry]``: what spans may carry (docs/observability.md)."""

    trace_content: bool = False
    """Put message content and tool arguments on spans (off: only names, ids, usage, kinds)."""


class LimitsConfig(Section):
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


class CompactionConfig(Section):
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


class AgentConfig(Section):
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
    on_drift: DriftAction = "refuse"
    """What a resume does when the agent changed since the run's checkpoint (docs/durability.md)."""
    mcp_servers: list[str] = Field(default_factory=list)
    """Names of ``[mcp.servers.NAME]`` whose tools this agent gets (after its own)."""
    output_type: str | None = None
    """``"package.module:attribute"`` naming a pydantic model class or a JSON Schema (a dict):
    the agent's runs end with a validated value (docs/output.md)."""
    compaction: CompactionConfig | None = None
    """Context compaction; off without the table (or with ``enabled = false``)."""


class EndpointSection(Section):
    """``[models.NAME]``: an OpenAI-compatible endpoint, used as ``NAME:<model>``."""

    base_url: str = Field(pattern=r"^https?://\S+$")
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The *name* of the environment variable holding the key; ``None`` for no key."""


class PriceConfig(Section):
    """``[prices."<model>"]``: US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class ReverieConfig(Section):
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
    promoted_hooks: list[str] = Field(default_factory=list)
    """Ids of ``installed`` hooks (from ``extensions``) whose text reaches the model verbatim
    (still enveloped) instead of as a bounded summary: the operator's promotion."""
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
