"""``Compaction``: an agent's setting for long conversations (docs/compaction.md).

The loop does the work (:mod:`reverie.loop.compaction`); this module holds the public setting
and turns it into the loop's :class:`~reverie.loop.compaction.CompactionPolicy` for one run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reverie.errors import UsageError
from reverie.loop.compaction import CompactionPolicy

if TYPE_CHECKING:
    from reverie.models.base import Model

__all__ = ["Compaction", "chars_per_token_for", "run_policy"]

_CHARS_PER_TOKEN: tuple[tuple[str, float], ...] = (
    # Claude's tokenizer cuts English prose finer than OpenAI's o200k/cl100k encodings.
    ("anthropic", 3.5),
    ("claude", 3.5),
)
_DEFAULT_CHARS_PER_TOKEN = 4.0


def chars_per_token_for(model_name: str) -> float:
    """Characters per token for estimating a request to ``model_name`` (a rough, safe figure).

    Args:
        model_name: A model's name or spec, e.g. ``"anthropic:claude-sonnet-4"``.

    Returns:
        3.5 for Anthropic models, 4.0 otherwise.
    """
    lowered = model_name.lower()
    for marker, value in _CHARS_PER_TOKEN:
        if marker in lowered:
            return value
    return _DEFAULT_CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction:
    """Context compaction for an agent: older turns replaced by a summary (off unless set).

    ``Agent(compaction=Compaction())`` turns it on with these defaults; ``compaction=None``
    (the default of :class:`~reverie.Agent`) leaves it off.

    Raises:
        UsageError: A value out of range (named in the message).
    """

    trigger_tokens: int | None = 100_000
    """Compact before a model call estimated at this many input tokens or more. ``None``:
    never by size (only when the row window fills up, or on a ``context_overflow``)."""
    keep_last_turns: int = 4
    """Turns kept verbatim after the summary (an assistant message with its tool results and
    the user messages before it is one turn); at least 1."""
    model: str | Model | None = None
    """The model that writes summaries: a spec such as ``"openai:gpt-4.1-mini"`` or a
    ``Model``; ``None``: the agent's own model."""
    max_summary_tokens: int = 2_048
    """Output cap asked of the model for one summary."""
    chars_per_token: float | None = None
    """Divisor of the size estimate; ``None``: per model (3.5 for Anthropic, else 4). A
    provider's reported ``input_tokens`` replace the estimate for what it has already seen."""

    def __post_init__(self) -> None:
        if self.trigger_tokens is not None and (
            isinstance(self.trigger_tokens, bool) or self.trigger_tokens < 1
        ):
            raise UsageError("Compaction.trigger_tokens must be a positive integer or None")
        if isinstance(self.keep_last_turns, bool) or self.keep_last_turns < 1:
            raise UsageError("Compaction.keep_last_turns must be at least 1")
        if isinstance(self.max_summary_tokens, bool) or self.max_summary_tokens < 1:
            raise UsageError("Compaction.max_summary_tokens must be a positive integer")
        if self.chars_per_token is not None and not (
            math.isfinite(self.chars_per_token) and self.chars_per_token > 0
        ):
            raise UsageError("Compaction.chars_per_token must be a positive number or None")
        if (isinstance(self.model, str) and not self.model.strip()) or not (
            self.model is None
            or isinstance(self.model, str)
            or callable(getattr(self.model, "stream", None))
        ):
            raise UsageError("Compaction.model must be a model spec, a Model, or None")

    def policy(self, *, model_name: str, model_index: int | None) -> CompactionPolicy:
        """The loop's policy for a run whose model is ``model_name``.

        Args:
            model_name: The name of the model the run calls (picks the size estimate).
            model_index: The model port's index of the summary model (``None``: the run's).

        Returns:
            The resolved :class:`~reverie.loop.compaction.CompactionPolicy`.
        """
        return CompactionPolicy(
            trigger_tokens=self.trigger_tokens,
            keep_last_turns=self.keep_last_turns,
            chars_per_token=self.chars_per_token or chars_per_token_for(model_name),
            max_summary_tokens=self.max_summary_tokens,
            model_index=model_index,
        )


def run_policy(
    compaction: Compaction | None, models: list[Model], cache: dict[str, Model]
) -> CompactionPolicy | None:
    """The loop's compaction policy for one run segment (``None``: off).

    A separate summary model is appended to ``models`` (the model port's list) and the policy
    names its index; a spec is resolved once and kept in ``cache``.
    """
    if compaction is None:
        return None
    index: int | None = None
    if compaction.model is not None:
        summary = compaction.model
        if isinstance(summary, str):
            key = f"compaction:{summary}"
            cached = cache.get(key)
            if cached is None:
                from reverie.models.registry import resolve_model

                cached = resolve_model(summary)
                cache[key] = cached
            summary = cached
        models.append(summary)
        index = len(models) - 1
    return compaction.policy(model_name=models[0].name, model_index=index)
