"""Token prices per model, for the USD budget (docs/loop.md).

A :class:`PriceTable` maps model names to :class:`Price` values (US dollars per million tokens).
The built-in table covers a few well-known OpenAI and Anthropic models; configuration merges its
own entries over it (``PriceTable.default().merged({...})``). An unknown model has no price
(``None``), and the runtime must then refuse a USD limit as a configuration error rather than
guess.

Lookup tries, in order: the name as given (``openai:gpt-4.1-mini``), then the name with its
provider prefix removed (``gpt-4.1-mini``; ``hermes:``, ``openai:``, ``anthropic:``, ``ollama:``
and an ``openai-compat:<url>#`` prefix are understood), then the same without a date or
``-latest`` suffix (``gpt-4o-2024-08-06`` → ``gpt-4o``). Models served by Ollama run locally and
cost nothing unless the table says otherwise.

Input served from a provider's prompt cache is priced apart: ``cached_input_per_mtok`` for
tokens read from the cache, ``cache_write_per_mtok`` for tokens written to it (Anthropic charges a
write a quarter more than plain input; OpenAI nothing extra). Either rate left out is the plain
input rate, so a price without them never undercharges.

Prices change; the built-in figures are list prices at the time of writing and are meant to be
overridden from configuration where money matters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from reverie.core.messages import TokenUsage
from reverie.errors import ConfigError, ModelSpecError
from reverie.models.spec import ModelSpec

__all__ = ["BUILTIN_PRICES", "Price", "PriceTable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """What one model charges, in US dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    """Input read from the provider's prompt cache; ``None``: the plain input rate."""
    cache_write_per_mtok: float | None = None
    """Input written to the provider's prompt cache; ``None``: the plain input rate."""

    def __post_init__(self) -> None:
        rates = (
            self.input_per_mtok,
            self.output_per_mtok,
            self.cached_input_per_mtok or 0.0,
            self.cache_write_per_mtok or 0.0,
        )
        if any(rate < 0 for rate in rates):
            raise ValueError(f"a price cannot be negative: {self}")

    def cost(self, usage: TokenUsage) -> float:
        """The dollar cost of ``usage`` at this price (cached input at the cached rates)."""
        read, written = usage.cache_read_tokens, usage.cache_write_tokens
        plain = max(usage.input_tokens - read - written, 0)
        read_rate = (
            self.input_per_mtok
            if self.cached_input_per_mtok is None
            else (self.cached_input_per_mtok)
        )
        write_rate = (
            self.input_per_mtok
            if self.cache_write_per_mtok is None
            else (self.cache_write_per_mtok)
        )
        return (
            plain * self.input_per_mtok
            + read * read_rate
            + written * write_rate
            + usage.output_tokens * self.output_per_mtok
        ) / 1_000_000


def _p(
    input_per_mtok: float,
    output_per_mtok: float,
    cached: float | None = None,
    write: float | None = None,
) -> Price:
    return Price(
        input_per_mtok=input_per_mtok,
        output_per_mtok=output_per_mtok,
        cached_input_per_mtok=cached,
        cache_write_per_mtok=write,
    )


def _claude(input_per_mtok: float, output_per_mtok: float) -> Price:
    # Anthropic: a cache read costs 0.1x the input rate, a (5-minute) cache write 1.25x.
    return _p(input_per_mtok, output_per_mtok, input_per_mtok * 0.1, input_per_mtok * 1.25)


BUILTIN_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        # OpenAI
        # OpenAI (input, output, cached input; cache writes cost nothing extra)
        "gpt-4o": _p(2.50, 10.00, 1.25),
        "gpt-4o-mini": _p(0.15, 0.60, 0.075),
        "gpt-4.1": _p(2.00, 8.00, 0.50),
        "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
        "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
        "gpt-5": _p(1.25, 10.00, 0.125),
        "gpt-5-mini": _p(0.25, 2.00, 0.025),
        "gpt-5-nano": _p(0.05, 0.40, 0.005),
        "o3": _p(2.00, 8.00, 0.50),
        "o3-mini": _p(1.10, 4.40, 0.55),
        "o4-mini": _p(1.10, 4.40, 0.275),
        # Anthropic
        "claude-opus-4-1": _claude(15.00, 75.00),
        "claude-opus-4-0": _claude(15.00, 75.00),
        "claude-opus-4": _claude(15.00, 75.00),
        "claude-sonnet-4-5": _claude(3.00, 15.00),
        "claude-sonnet-4-0": _claude(3.00, 15.00),
        "claude-sonnet-4": _claude(3.00, 15.00),
        "claude-3-7-sonnet": _claude(3.00, 15.00),
        "claude-haiku-4-5": _claude(1.00, 5.00),
        "claude-3-5-haiku": _claude(0.80, 4.00),
    }
)
"""The built-in prices, keyed by the provider's model id without a date suffix."""

_STRIPPED = ("hermes", "openai", "anthropic", "openai-compat")
"""Providers whose prefix a lookup removes (their model ids are priced under the bare id)."""
_FREE = _p(0.0, 0.0)
_FOUND_CAP = 1024
"""Names whose lookup a table keeps (a bound, since names can come from requests)."""
_DATE_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


def _spec(name: str) -> ModelSpec | None:
    try:
        return ModelSpec.parse(name)
    except ModelSpecError:
        return None  # a custom model's name: looked up as given


def _candidates(model_name: str) -> Iterator[str]:
    """The names to look up, most specific first."""
    name = model_name.strip()
    yield name
    spec = _spec(name)
    while spec is not None and spec.provider in _STRIPPED:
        inner = spec.inner
        name = str(inner) if inner is not None else spec.model
        yield name
        spec = inner
    if spec is not None and spec.provider == "ollama":
        yield spec.model
    undated = _DATE_SUFFIX.sub("", name)
    if undated != name:
        yield undated


def _is_local(model_name: str) -> bool:
    spec = _spec(model_name)
    return spec is not None and spec.base.provider == "ollama"


class PriceTable:
    """Prices by model name. Immutable: :meth:`merged` returns a new table."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        """Args:
        prices: model name → price. ``None`` for an empty table (see :meth:`default`).
        """
        self._prices: dict[str, Price] = dict(prices or {})
        # The table never changes, so a name's answer never does: every model call asks.
        self._found: dict[str, Price | None] = {}

    @classmethod
    def default(cls) -> PriceTable:
        """A table holding :data:`BUILTIN_PRICES`."""
        return cls(BUILTIN_PRICES)

    def merged(self, entries: Mapping[str, Price | Mapping[str, Any]]) -> PriceTable:
        """A new table with ``entries`` added over this one's.

        Entries may be :class:`Price` values or mappings as a config file holds them:
        ``{"input_per_mtok": 2.5, "output_per_mtok": 10}``, optionally with
        ``cached_input_per_mtok`` and ``cache_write_per_mtok``.

        Raises:
            ConfigError: an entry is not a price (names the model and the expected keys).
        """
        prices = dict(self._prices)
        for name, entry in entries.items():
            prices[name] = entry if isinstance(entry, Price) else _price_from_mapping(name, entry)
        return PriceTable(prices)

    def price_for(self, model_name: str) -> Price | None:
        """The price of ``model_name``, or ``None`` if the table does not know it."""
        try:
            return self._found[model_name]
        except KeyError:
            pass
        found = self._look_up(model_name)
        if len(self._found) < _FOUND_CAP:
            self._found[model_name] = found
        return found

    def _look_up(self, model_name: str) -> Price | None:
        for candidate in _candidates(model_name):
            price = self._prices.get(candidate)
            if price is not None:
                return price
        if _is_local(model_name):
            return _FREE
        return None

    def cost(self, model_name: str, usage: TokenUsage) -> float | None:
        """The dollar cost of ``usage`` on ``model_name``, or ``None`` if its price is unknown."""
        price = self.price_for(model_name)
        return None if price is None else price.cost(usage)

    def __contains__(self, model_name: object) -> bool:
        return isinstance(model_name, str) and self.price_for(model_name) is not None

    def __len__(self) -> int:
        return len(self._prices)

    def __repr__(self) -> str:
        return f"PriceTable({len(self._prices)} models)"


_REQUIRED = ("input_per_mtok", "output_per_mtok")
_CACHE_RATES = ("cached_input_per_mtok", "cache_write_per_mtok")


def _price_from_mapping(name: str, entry: object) -> Price:
    expected = (
        "a table with input_per_mtok and output_per_mtok (US dollars per million tokens), "
        "optionally cached_input_per_mtok and cache_write_per_mtok"
    )
    if not isinstance(entry, Mapping):
        raise ConfigError(f"price for model {name!r} must be {expected}")
    unknown = set(entry) - {*_REQUIRED, *_CACHE_RATES}
    if unknown:
        raise ConfigError(
            f"price for model {name!r} has unknown keys {sorted(unknown)}: expected {expected}"
        )
    missing = [key for key in _REQUIRED if key not in entry]
    if missing:
        raise ConfigError(f"price for model {name!r} lacks {missing[0]}: expected {expected}")
    rates = {key: entry[key] for key in (*_REQUIRED, *_CACHE_RATES) if key in entry}
    for value in rates.values():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(
                f"price for model {name!r} must be non-negative numbers: expected {expected}"
            )
    return Price(**{key: float(value) for key, value in rates.items()})
