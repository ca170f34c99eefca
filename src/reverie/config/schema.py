"""The tables of ``reverie.toml`` as pydantic models (validated by :func:`load_config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from reverie.config.paths import CONFIG_FILE_NAME
from reverie.core.limits import Limits
from reverie.core.settings import Settings
from reverie.core.vocabulary import DriftAction, OnLimit, ThreadPolicy
from reverie.models.compat import ServerKind, StructuredOutput
from reverie.models.pricing import PriceTable
from reverie.models.registry import EndpointConfig
from reverie.models.spec import BUILTIN_PROVIDERS

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
    "SettingsConfig",
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


class GuardrailsConfig(Section):
    """``[guardrails]``: built-in guardrails to switch on (docs/hooks.md)."""

    redact_pii: bool = False
    """Rewrite e-mail addresses and phone numbers in user messages and replies."""
    max_input_chars: int | None = Field(default=None, gt=0)
    """Refuse a user message longer than this many characters."""
    max_reply_chars: int | None = Field(default=None, gt=0)
    """Fail a run whose reply is longer than this many characters (nothing of it is sent)."""
    injection_markers: bool = False
    """Withhold tool output that carries prompt-injection markers from the model."""


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
    finalizer_grace_s: float | None = Field(default=None, ge=0)
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


class SettingsConfig(Section):
    """``settings`` of an agent: the fields of :class:`reverie.Settings`; unset keeps the
    provider's default."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)
    stop: list[str] = Field(default_factory=list, max_length=4)
    seed: int | None = None
    top_p: float | None = Field(default=None, gt=0, le=1)

    def to_settings(self) -> Settings:
        """The :class:`Settings` these keys describe."""
        return Settings(**self.model_dump(exclude_none=True))


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
    settings: SettingsConfig | None = None
    """How the model samples: temperature, max_output_tokens, stop, seed, top_p."""


class EndpointSection(Section):
    """``[models.NAME]``: an OpenAI-compatible endpoint, used as ``NAME:<model>``, and what it
    supports (docs/configuration.md; :mod:`reverie.models.compat`)."""

    base_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """The API root (``…/v1``; for ``anthropic`` with or without it). Required for a name
    other than ``openai``, ``ollama`` and ``anthropic``."""
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The *name* of the environment variable holding the key; ``None`` for no key."""
    server: ServerKind | None = None
    """The kind of server, whose defaults the keys below override."""
    structured_output: StructuredOutput | None = None
    """How typed output is asked for: ``json_schema``, ``json_object``, ``tool``, ``none``."""
    usage_in_streams: bool | None = None
    """The server reports usage in streamed replies (else reverie estimates it)."""
    null_content: bool | None = None
    """The server takes ``"content": null`` beside tool calls (else ``""`` is sent)."""
    parallel_tool_calls: bool | None = None
    """The server takes the ``parallel_tool_calls`` request field."""
    streaming_tool_calls: bool | None = None
    """The server streams replies to requests with tools (else they are asked whole)."""
    prompt_cache: bool | None = None
    """Send prompt-cache markers: OpenAI ``prompt_cache_key`` (default on for OpenAI's API
    only), Anthropic ``cache_control`` breakpoints (default on)."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Read/write timeout of each request, in seconds (default 60)."""
    connect_timeout_s: float | None = Field(default=None, gt=0)
    """Connect timeout of each request, in seconds (default 10)."""


class PriceConfig(Section):
    """``[prices."<model>"]``: US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Input read from the provider's prompt cache (default: the input rate)."""
    cache_write_per_mtok: float | None = Field(default=None, ge=0)
    """Input written to the provider's prompt cache (default: the input rate)."""


class ReverieConfig(Section):
    """The whole of ``reverie.toml``. Build it with :func:`load_config`."""

    pythonpath: list[str] = Field(default_factory=list)
    """Directories (relative to the file) put first on ``sys.path`` before tools are imported."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    models: dict[str, EndpointSection] = Field(default_factory=dict)

    @field_validator("models", mode="after")
    @classmethod
    def _endpoints_have_urls(cls, value: dict[str, EndpointSection]) -> dict[str, EndpointSection]:
        # openai, ollama and anthropic have a URL of their own; any other endpoint needs one.
        for name, endpoint in value.items():
            if endpoint.base_url is None and name not in BUILTIN_PROVIDERS:
                raise ValueError(f"[models.{name}] needs base_url (its server's API root)")
        return value

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
    schedules: dict[str, Any] = Field(default_factory=dict)
    """``[schedules.NAME]``: schedules (checked by ``reverie.config.schedules``)."""
    triggers: dict[str, Any] = Field(default_factory=dict)
    """``[triggers.NAME]``: inbound webhooks (checked by ``reverie.config.triggers``)."""
    serve: dict[str, Any] = Field(default_factory=dict)
    """``[serve]``: where ``reverie serve`` listens, read by :func:`serve_settings`."""
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    """``[telemetry]``: whether spans carry content (docs/observability.md)."""
    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    """``[runtime]``: the default thread policy."""
    guardrails: GuardrailsConfig = Field(default_factory=GuardrailsConfig)
    """``[guardrails]``: built-in guardrails switched on (docs/hooks.md)."""

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
            name: EndpointConfig(**e.model_dump(exclude_none=True))
            for name, e in self.models.items()
        }

    def price_table(self) -> PriceTable:
        """The built-in prices with ``[prices]`` merged over them."""
        return PriceTable.default().merged(
            {name: p.model_dump(exclude_none=True) for name, p in self.prices.items()}
        )
