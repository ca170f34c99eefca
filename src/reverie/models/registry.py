"""Model specs: the strings an agent or a config file uses to name a model.

=================================  =========================================================
spec                               model
=================================  =========================================================
``openai:<model>``                 OpenAI Chat Completions, key from ``OPENAI_API_KEY``
``ollama:<model>``                 a local Ollama server, ``http://localhost:11434/v1``, no key
``openai-compat:<url>#<model>``    any OpenAI-compatible server at ``<url>``, no key
``anthropic:<model>``              Anthropic Messages API, key from ``ANTHROPIC_API_KEY``
``hermes:<inner spec>``            the inner model, reading Hermes ``<tool_call>`` text
``<endpoint>:<model>``             an OpenAI-compatible endpoint named in configuration
=================================  =========================================================

Configured endpoints (:class:`EndpointConfig`) add names, and may also re-point ``openai``,
``ollama`` and ``anthropic`` (a proxy, a remote Ollama host): the endpoint's ``base_url`` is used
with that provider, and its ``api_key_env`` — when set — replaces the default variable.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reverie.core.redact import mask_url
from reverie.errors import ConfigError, ModelSpecError
from reverie.models.base import Model
from reverie.models.compat import EndpointCompat, ServerKind, StructuredOutput, compat_for
from reverie.models.spec import BUILTIN_PROVIDERS, RESERVED_PROVIDERS, ModelSpec

__all__ = ["OLLAMA_BASE_URL", "SPEC_FORMS", "EndpointConfig", "api_key_env", "resolve_model"]

OLLAMA_BASE_URL = "http://localhost:11434/v1"
SPEC_FORMS = (
    "openai:<model>",
    "ollama:<model>",
    "openai-compat:<url>#<model>",
    "anthropic:<model>",
    "hermes:<inner spec>",
)
"""The spec forms every registry accepts (configured endpoints add ``<endpoint>:<model>``;
``scripted:`` files are read by :func:`reverie.config.resolve_model_spec`)."""

_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """An OpenAI-compatible endpoint from configuration, used as ``<name>:<model>``.

    Besides where it is, it declares what it supports (:mod:`reverie.models.compat`): a
    ``server`` kind brings its defaults, and each field set here overrides one of them.
    """

    base_url: str | None = None
    """The API root the SDK talks to, e.g. ``https://api.together.xyz/v1``; ``None`` keeps a
    built-in provider's own (required for any other name)."""
    api_key_env: str | None = None
    """The environment variable holding the key; ``None`` for a server that needs none (for the
    built-in names ``openai``/``anthropic``: keep their default variable)."""
    server: ServerKind | None = None
    """The kind of server; default from the provider (``ollama`` for ``ollama``, ``openai``
    for OpenAI's API, else ``generic``)."""
    structured_output: StructuredOutput | None = None
    usage_in_streams: bool | None = None
    null_content: bool | None = None
    parallel_tool_calls: bool | None = None
    streaming_tool_calls: bool | None = None
    timeout_s: float | None = None
    connect_timeout_s: float | None = None
    prompt_cache: bool | None = None
    """Send prompt-cache markers (OpenAI ``prompt_cache_key``, Anthropic ``cache_control``)."""

    def compat(self, default_server: ServerKind) -> EndpointCompat:
        """What this endpoint supports: its server kind's defaults with its own fields set.

        Raises:
            ValueError: a field's value is invalid.
        """
        return compat_for(self.server or default_server, **self._declared())

    def _declared(self) -> dict[str, Any]:
        return {
            "structured_output": self.structured_output,
            "usage_in_streams": self.usage_in_streams,
            "null_content": self.null_content,
            "parallel_tool_calls": self.parallel_tool_calls,
            "streaming_tool_calls": self.streaming_tool_calls,
            "timeout_s": self.timeout_s,
            "connect_timeout_s": self.connect_timeout_s,
            "prompt_cache": self.prompt_cache,
        }


def api_key_env(
    spec: str | ModelSpec, endpoints: Mapping[str, EndpointConfig] | None = None
) -> str | None:
    """The environment variable a spec's model reads its key from (``None``: it needs none).

    The variable's value is never read here (``reverie doctor`` names the variable to set).

    Raises:
        ModelSpecError: ``spec`` is not a valid spec.
    """
    parsed = (spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)).base
    if parsed.provider in ("openai-compat", "scripted"):
        return None
    endpoint = (endpoints or {}).get(parsed.provider)
    configured = endpoint.api_key_env if endpoint is not None else None
    # openai and anthropic keep their default variable unless an endpoint names another one;
    # ollama and configured endpoints need a key only when their endpoint names one.
    return configured or _DEFAULT_KEY_ENV.get(parsed.provider)


def resolve_model(
    spec: str | Model, *, endpoints: Mapping[str, EndpointConfig] | None = None
) -> Model:
    """Turn a model spec into a :class:`Model`; a ``Model`` instance is returned unchanged.

    Nothing is connected and no key is read here: providers read their key at the first call.
    Models built here hold SDK clients; whoever resolves them should ``aclose()`` them when done.

    Raises:
        ConfigError: the spec is malformed (a :class:`~reverie.errors.ModelSpecError`) or names
            no known provider or endpoint (the message names the spec and the accepted forms).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Model):
            return spec
        raise ConfigError(f"a model must be a spec string or a Model, not {type(spec).__name__}")
    configured = dict(endpoints or {})
    for reserved in RESERVED_PROVIDERS:
        if reserved in configured:
            raise ConfigError(
                f"endpoint name {reserved!r} is reserved for the {reserved}: spec form; "
                "choose another name for this endpoint"
            )
    try:
        parsed = ModelSpec.parse(spec)
    except ModelSpecError as exc:
        raise _invalid(spec, configured, exc.reason) from None
    return _build(spec, parsed, configured)


def _build(text: str, spec: ModelSpec, endpoints: Mapping[str, EndpointConfig]) -> Model:
    # The providers (and their SDKs) are imported on use, so naming a model costs nothing
    # until a run needs it and ``reverie --help`` never loads the openai SDK.
    from reverie.models.openai import OpenAIChatModel

    if spec.inner is not None:
        from reverie.models.hermes import HermesModel

        return HermesModel(_build(text, spec.inner, endpoints))
    if spec.base_url is not None:
        return OpenAIChatModel(
            spec.model,
            base_url=spec.base_url,
            api_key_env=None,
            name=f"openai-compat:{mask_url(spec.base_url)}#{spec.model}",
            server="generic",
        )
    if spec.provider == "scripted":
        raise _invalid(
            text,
            endpoints,
            "a scripted: file is read where its path has a directory to start from "
            "(reverie.toml and the CLI: reverie.config.resolve_model_spec); in Python, pass a "
            "reverie.testing.ScriptedModel",
        )
    endpoint = endpoints.get(spec.provider)
    if spec.provider not in BUILTIN_PROVIDERS and endpoint is None:
        known = [*BUILTIN_PROVIDERS, *RESERVED_PROVIDERS, *endpoints]
        near = difflib.get_close_matches(spec.provider, known, n=1)
        hint = f" (did you mean '{near[0]}:{spec.model}'?)" if near else ""
        raise _invalid(text, endpoints, f"unknown provider {spec.provider!r}{hint}")
    key_env = api_key_env(spec, endpoints)
    base_url = endpoint.base_url if endpoint else None
    if spec.provider == "anthropic":
        from reverie.models.anthropic import AnthropicModel  # optional extra: imported on use

        declared = endpoint.compat("generic") if endpoint else EndpointCompat()
        return AnthropicModel(
            spec.model,
            base_url=base_url,
            api_key_env=key_env,
            timeout_s=declared.timeout_s,
            connect_timeout_s=declared.connect_timeout_s,
            prompt_cache=endpoint is None or endpoint.prompt_cache is not False,
        )
    if spec.provider == "ollama":
        base_url = base_url or OLLAMA_BASE_URL
    elif spec.provider != "openai" and base_url is None:
        raise _invalid(text, endpoints, f"endpoint {spec.provider!r} has no base_url")
    default: ServerKind = "generic"  # a configured endpoint, or a proxy behind openai:
    if spec.provider == "ollama":
        default = "ollama"
    elif spec.provider == "openai" and (base_url is None or "api.openai.com" in base_url):
        default = "openai"
    try:
        compat = endpoint.compat(default) if endpoint else compat_for(default)
    except ValueError as exc:
        raise _invalid(text, endpoints, str(exc)) from None
    return OpenAIChatModel(
        spec.model,
        base_url=base_url,
        api_key_env=key_env,
        name=None if spec.provider == "openai" else str(spec),
        compat=compat,
    )


def _invalid(spec: str, endpoints: Mapping[str, EndpointConfig], why: str) -> ModelSpecError:
    forms = list(SPEC_FORMS)
    forms.extend(f"{name}:<model>" for name in sorted(endpoints) if f"{name}:<model>" not in forms)
    return ModelSpecError(spec, why, forms)
