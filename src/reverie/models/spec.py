"""The model-spec grammar: one parser for every string that names a model.

=================================  =========================================================
spec                               names
=================================  =========================================================
``openai:<model>``                 OpenAI Chat Completions
``ollama:<model>``                 a local Ollama server (``ollama:qwen2.5:7b``: the model is
                                   everything after the first colon)
``anthropic:<model>``              Anthropic Messages API
``openai-compat:<url>#<model>``    any OpenAI-compatible server at an ``http(s)://`` ``<url>``
``hermes:<inner spec>``            the inner spec's model, reading Hermes ``<tool_call>`` text
``scripted:<path.json>``           a scripted model read from a JSON file (``reverie.toml`` and
                                   the CLI; :mod:`reverie.testing.scripted_file`)
``<endpoint>:<model>``             an OpenAI-compatible endpoint named in configuration
=================================  =========================================================

The rules, each checked by :meth:`ModelSpec.parse`:

- whitespace around the spec and around each of its parts is ignored;
- the provider is the text before the first ``:``; a bare name without one (``gpt-4o``) is
  refused, with a hint;
- every form needs its part after the colon: a model name, a path, a ``<url>#<model>`` pair or
  an inner spec;
- ``hermes:`` wraps any other spec except ``scripted:`` (nested, it is still one spec).

Whether an ``<endpoint>`` exists is not a matter of syntax: the resolver that knows the
configured endpoints (:func:`reverie.models.registry.resolve_model`) decides. A list of specs
(:meth:`ModelSpec.parse_list`) is a primary model and its fallbacks, in order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from reverie.errors import ModelSpecError

__all__ = [
    "BUILTIN_PROVIDERS",
    "RESERVED_PROVIDERS",
    "SPEC_FORMS",
    "ModelSpec",
    "provider_of",
]

SPEC_FORMS: Final = (
    "openai:<model>",
    "ollama:<model>",
    "openai-compat:<url>#<model>",
    "anthropic:<model>",
    "hermes:<inner spec>",
    "scripted:<path.json>",
    "<endpoint>:<model>",
)
"""Every form of the grammar, as error messages list them."""

BUILTIN_PROVIDERS: Final = ("openai", "ollama", "anthropic")
"""Providers with a model name after the colon that configuration may re-point."""

RESERVED_PROVIDERS: Final = ("hermes", "openai-compat", "scripted")
"""Prefixes with a grammar of their own: never the name of a configured endpoint."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model spec. Build it with :meth:`parse`; ``str(spec)`` is its canonical text."""

    provider: str
    """The prefix: ``openai``, ``ollama``, ``anthropic``, ``openai-compat``, ``hermes``,
    ``scripted``, or the name of a configured endpoint."""
    model: str
    """The model the provider serves; for ``scripted:`` the path of the script; for
    ``hermes:`` the inner spec's model."""
    base_url: str | None = None
    """The server of an ``openai-compat:`` spec; ``None`` for every other form."""
    inner: ModelSpec | None = None
    """The wrapped spec of a ``hermes:`` spec; ``None`` for every other form."""

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """Parse ``text`` by the grammar of this module.

        Raises:
            ModelSpecError: ``text`` is not a string or breaks a rule (the message names the
                spec, the rule and the accepted forms).
        """
        if not isinstance(text, str):
            raise _error(f"<{type(text).__name__}>", "a model spec must be a string")
        return _parse(text)

    @classmethod
    def parse_list(cls, value: str | Sequence[str]) -> tuple[ModelSpec, ...]:
        """One spec, or a list of them (the primary model first, then its fallbacks).

        Raises:
            ModelSpecError: The list is empty, or an entry is not a valid spec.
        """
        if isinstance(value, str):
            return (cls.parse(value),)
        specs = tuple(cls.parse(entry) for entry in value)
        if not specs:
            raise _error("[]", "the list names no model")
        return specs

    @property
    def base(self) -> ModelSpec:
        """The spec a ``hermes:`` wrapper reads through (``self`` for every other form)."""
        return self.inner.base if self.inner is not None else self

    def __str__(self) -> str:
        if self.inner is not None:
            return f"hermes:{self.inner}"
        if self.base_url is not None:
            return f"openai-compat:{self.base_url}#{self.model}"
        return f"{self.provider}:{self.model}"


@functools.lru_cache(maxsize=512)
def _parse(text: str) -> ModelSpec:
    # Cached: prices and telemetry look the same few names up on every model call.
    spec = text.strip()
    prefix, sep, rest = spec.partition(":")
    prefix, rest = prefix.strip(), rest.strip()
    if not spec:
        raise _error(text, "a model spec must not be empty")
    if not sep:
        if spec in (*BUILTIN_PROVIDERS, *RESERVED_PROVIDERS):
            raise _error(text, f"{spec!r} names a provider but no model (e.g. '{spec}:<model>')")
        raise _error(text, f"no provider prefix (did you mean 'openai:{spec}'?)")
    if not prefix:
        raise _error(text, "no provider before ':'")
    if any(c.isspace() for c in prefix):
        raise _error(text, "the provider name cannot contain whitespace")
    if prefix == "hermes":
        if not rest:
            raise _error(text, "hermes: needs an inner spec, e.g. hermes:ollama:qwen3")
        try:
            inner = _parse(rest)
        except ModelSpecError as exc:
            raise _error(text, f"its inner spec is invalid: {exc.reason}") from None
        if inner.provider == "scripted":
            raise _error(text, "hermes: cannot wrap a scripted: model")
        return ModelSpec(provider="hermes", model=inner.model, inner=inner)
    if prefix == "openai-compat":
        url, _, model = rest.partition("#")
        url, model = url.strip(), model.strip()
        if not url.startswith(("http://", "https://")) or not model:
            raise _error(text, "openai-compat needs <url>#<model>")
        return ModelSpec(provider=prefix, model=model, base_url=url)
    if not rest:
        if prefix == "scripted":
            raise _error(text, "it needs a path, e.g. scripted:path/to/script.json")
        raise _error(text, f"it needs a model name after {prefix!r}")
    return ModelSpec(provider=prefix, model=rest)


def _error(spec: str, reason: str) -> ModelSpecError:
    return ModelSpecError(spec, reason, SPEC_FORMS)


def provider_of(model_name: str) -> str:
    """The provider a model's name leads with (``openai`` of ``openai:gpt-4.1-mini``).

    A name that is not a spec (a custom :class:`~reverie.models.base.Model`'s) is returned
    whole.
    """
    try:
        return _parse(model_name).provider
    except ModelSpecError:
        return model_name
