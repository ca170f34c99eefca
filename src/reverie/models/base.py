"""The ``Model`` protocol every provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from reverie.core.messages import ModelEvent, ModelRequest, ModelResponse, ResponseComplete
from reverie.errors import ModelError


@runtime_checkable
class Model(Protocol):
    """A chat model. Implementations raise :class:`reverie.errors.ModelError` on failure."""

    @property
    def name(self) -> str:
        """A stable label for telemetry and price lookup, e.g. ``openai:gpt-4.1-mini``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one response: text deltas, then exactly one ``ResponseComplete``."""
        ...


async def complete(model: Model, request: ModelRequest) -> ModelResponse:
    """Drain ``model.stream(request)`` and return the assembled response."""
    final: ModelResponse | None = None
    async for event in model.stream(request):
        if isinstance(event, ResponseComplete):
            final = event.response
    if final is None:
        raise ModelError("internal", f"model {model.name} ended its stream without a response")
    return final
