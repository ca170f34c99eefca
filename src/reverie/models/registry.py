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

from collections.abc import Mapping
from dataclasses import dataclass

from reverie.core.redact import mask_url
from reverie.errors import ConfigError
from reverie.models.base import Model

__all__ = ["OLLAMA_BASE_URL", "SPEC_FORMS", "EndpointConfig", "resolve_model"]

OLLAMA_BASE_URL = "http://localhost:11434/v1"
SPEC_FORMS = (
    "openai:<model>",
    "ollama:<model>",
    "openai-compat:<url>#<model>",
    "anthropic:<model>",
    "hermes:<inner spec>",
)
"""The spec forms every registry accepts (configured endpoints add ``<endpoint>:<model>``)."""

_RESERVED = ("hermes", "openai-compat")


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """An OpenAI-compatible endpoint from configuration, used as ``<name>:<model>``."""

    base_url: str
    """The API root the SDK talks to, e.g. ``https://api.together.xyz/v1``."""
    api_key_env: str | None = None
    """The environment variable holding the key; ``None`` for a server that needs none (for the
    built-in names ``openai``/``anthropic``: keep their default variable)."""


def resolve_model(
    spec: str | Model, *, endpoints: Mapping[str, EndpointConfig] | None = None
) -> Model:
    """Turn a model spec into a :class:`Model`; a ``Model`` instance is returned unchanged.

    Nothing is connected and no key is read here: providers read their key at the first call.
    Models built here hold SDK clients; whoever resolves them should ``aclose()`` them when done.

    Raises:
        ConfigError: the spec is malformed or names no known provider or endpoint (the message
            names the spec and the accepted forms).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Model):
            return spec
        raise ConfigError(f"a model must be a spec string or a Model, not {type(spec).__name__}")
    configured = dict(endpoints or {})
    for reserved in _RESERVED:
        if reserved in configured:
            raise ConfigError(
                f"endpoint name {reserved!r} is reserved for the {reserved}: spec form; "
                "choose another name for this endpoint"
            )
    # The providers (and their SDKs) are imported on use, so naming a model costs nothing
    # until a run needs it and ``reverie --help`` never loads the openai SDK.
    from reverie.models.openai import OpenAIChatModel

    text = spec.strip()
    prefix, sep, rest = text.partition(":")
    if not sep:
        hint = f" (did you mean 'openai:{text}'?)" if text else ""
        raise _unknown(spec, configured, f"no provider prefix{hint}")
    rest = rest.strip()
    endpoint = configured.get(prefix)

    if prefix == "hermes":
        from reverie.models.hermes import HermesModel

        if not rest:
            raise _unknown(
                spec, configured, "hermes: needs an inner spec, e.g. hermes:ollama:qwen3"
            )
        return HermesModel(resolve_model(rest, endpoints=configured))
    if prefix == "openai-compat":
        url, _, model = rest.partition("#")
        url, model = url.strip(), model.strip()
        if not url.startswith(("http://", "https://")) or not model:
            raise _unknown(spec, configured, "openai-compat needs <url>#<model>")
        return OpenAIChatModel(
            model, base_url=url, api_key_env=None, name=f"openai-compat:{mask_url(url)}#{model}"
        )
    if not rest:
        raise _unknown(spec, configured, f"{spec!r} has no model name after {prefix!r}")
    if prefix == "openai":
        return OpenAIChatModel(
            rest,
            base_url=endpoint.base_url if endpoint else None,
            api_key_env=(endpoint.api_key_env if endpoint else None) or "OPENAI_API_KEY",
        )
    if prefix == "ollama":
        return OpenAIChatModel(
            rest,
            base_url=endpoint.base_url if endpoint else OLLAMA_BASE_URL,
            api_key_env=endpoint.api_key_env if endpoint else None,
            name=f"ollama:{rest}",
        )
    if prefix == "anthropic":
        from reverie.models.anthropic import AnthropicModel  # optional extra: imported on use

        return AnthropicModel(
            rest,
            base_url=endpoint.base_url if endpoint else None,
            api_key_env=(endpoint.api_key_env if endpoint else None) or "ANTHROPIC_API_KEY",
        )
    if endpoint is not None:
        return OpenAIChatModel(
            rest,
            base_url=endpoint.base_url,
            api_key_env=endpoint.api_key_env,
            name=f"{prefix}:{rest}",
        )
    raise _unknown(spec, configured, f"unknown provider {prefix!r}")


def _unknown(spec: str, endpoints: Mapping[str, EndpointConfig], why: str) -> ConfigError:
    forms = list(SPEC_FORMS)
    forms.extend(f"{name}:<model>" for name in sorted(endpoints) if f"{name}:<model>" not in forms)
    return ConfigError(f"invalid model spec {spec!r}: {why}; accepted forms: {', '.join(forms)}")
