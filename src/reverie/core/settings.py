"""``Settings``: how an agent's model samples (temperature, output cap, stop sequences, ...).

Passed to the provider on every request of the agent's runs (``Agent(settings=...)``,
``[agents.NAME] settings = {...}``); ``None`` leaves the provider's default. Each provider maps
what it has (docs/configuration.md): OpenAI-compatible servers take all five; Anthropic takes
``temperature``, ``max_output_tokens`` (its required ``max_tokens``), ``stop`` (its
``stop_sequences``) and ``top_p``, and has no ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reverie.core.messages import ModelSettings
from reverie.errors import UsageError

__all__ = ["Settings"]

_MAX_STOP = 4
"""OpenAI takes up to four stop sequences; more is refused by the API."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Sampling settings of an agent's model calls; ``None``: the provider's default."""

    temperature: float | None = None
    """Sampling temperature, 0 to 2."""
    max_output_tokens: int | None = None
    """Cap on the tokens of each reply (not a budget: ``Limits.max_tokens`` is the run's)."""
    stop: Sequence[str] = ()
    """Up to four sequences that end a reply."""
    seed: int | None = None
    """Ask for reproducible sampling (where the provider supports it)."""
    top_p: float | None = None
    """Nucleus sampling mass, above 0 and at most 1."""

    def __post_init__(self) -> None:
        t = self.temperature
        if t is not None and (not _number(t) or not 0 <= t <= 2):
            raise UsageError("Settings.temperature must be a number from 0 to 2")
        cap = self.max_output_tokens
        if cap is not None and (type(cap) is not int or cap < 1):
            raise UsageError("Settings.max_output_tokens must be a positive integer")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        stop = tuple(self.stop)
        if len(stop) > _MAX_STOP or not all(isinstance(s, str) and s for s in stop):
            raise UsageError("Settings.stop must be at most 4 non-empty strings")
        object.__setattr__(self, "stop", stop)
        if self.seed is not None and type(self.seed) is not int:
            raise UsageError("Settings.seed must be an integer")
        p = self.top_p
        if p is not None and (not _number(p) or not 0 < p <= 1):
            raise UsageError("Settings.top_p must be a number above 0 and at most 1")

    def model_settings(self) -> ModelSettings:
        """The settings as every request carries them."""
        return ModelSettings(
            temperature=None if self.temperature is None else float(self.temperature),
            max_tokens=self.max_output_tokens,
            stop=tuple(self.stop),
            seed=self.seed,
            top_p=None if self.top_p is None else float(self.top_p),
        )


def _number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
