"""``ScriptedModel``: a model whose answers are written in advance (README.md).

It ships in the library so users can test their own agents: script the model's answers, run the
agent through the real runtime, and assert on the result and on ``model.requests``.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from reverie.core.fastcopy import maker
from reverie.core.messages import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    TextDelta,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolCallPart,
)
from reverie.errors import ModelError, ModelErrorKind, UsageError
from reverie.testing.conversation_rules import ConversationRuleError, MessageChecker, Violation
from reverie.testing.request_rules import check_model_request

ScriptFunction = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
ScriptStep = ModelResponse | ModelError
_ids = itertools.count(1)
_response_complete = maker(ResponseComplete)
"""Builds the end of each stream (a class call with keywords costs more)."""


def _call_id() -> str:
    return f"call_{next(_ids)}_{os.urandom(3).hex()}"


def reply(text: str, *, usage: TokenUsage | None = None) -> ModelResponse:
    """A response with text and no tool calls."""
    return ModelResponse(
        parts=(TextPart(text=text),), usage=usage or TokenUsage(), finish_reason="stop"
    )


def call(name: str, /, **arguments: Any) -> ModelResponse:
    """A response with one tool call: ``call("add", a=1, b=2)``."""
    return calls((name, arguments))


def calls(*items: tuple[str, Mapping[str, Any]], text: str | None = None) -> ModelResponse:
    """A response with several tool calls (a wave): ``calls(("add", {"a": 1}), ...)``."""
    parts: list[TextPart | ToolCallPart] = []
    if text:
        parts.append(TextPart(text=text))
    for name, arguments in items:
        parts.append(ToolCallPart(call=ToolCall(id=_call_id(), name=name, arguments=arguments)))
    return ModelResponse(parts=tuple(parts), finish_reason="tool_calls")


def raw_call(name: str, *, arguments_error: str, call_id: str | None = None) -> ModelResponse:
    """A response with a tool call whose arguments could not be parsed (malformed JSON)."""
    bad = ToolCall(
        id=call_id or _call_id(), name=name, arguments={}, arguments_error=arguments_error
    )
    return ModelResponse(parts=(ToolCallPart(call=bad),), finish_reason="tool_calls")


def error(kind: ModelErrorKind, message: str | None = None) -> ModelError:
    """A scripted model failure of a §4.2 class. Put it in a script, or ``raise`` it."""
    return ModelError(kind, message or f"scripted model error ({kind})")


class ScriptedModel:
    """A ``Model`` that answers from a script.

    Args:
        script: A list of responses (built with :func:`reply`, :func:`call`, :func:`calls`) and
            errors (:func:`error`), consumed one per request; or a sync or async function of the
            :class:`ModelRequest` returning a response (or raising :func:`error`).
        name: Label used in telemetry and in the message when a list script runs out.
        stream_chunk: Characters per streamed text delta.
        strict: Refuse a request that breaks the providers' conversation rules (a tool call
            with no result right after it, an orphan or repeated result, a repeated call id
            within one message, an empty assistant message; see
            :mod:`reverie.testing.conversation_rules`; a ``tool_choice`` naming a tool not
            offered, :mod:`reverie.testing.request_rules`), as OpenAI and Anthropic answer it with
            HTTP 400: :class:`~reverie.testing.conversation_rules.ConversationRuleError`, a
            ``ModelError`` of kind ``internal`` naming the rule, the message index and the call
            ids, which fails the run. The refused request is still recorded in
            :attr:`requests` and its violations in :attr:`violations`; no script step is
            used. ``strict=False`` answers any request, for tests that send a malformed
            conversation on purpose.
    """

    def __init__(
        self,
        script: Sequence[ScriptStep] | Iterable[ScriptStep] | ScriptFunction,
        *,
        name: str = "scripted",
        stream_chunk: int = 16,
        strict: bool = True,
    ) -> None:
        self._name = name
        self._strict = strict
        self._fn: ScriptFunction | None = None
        self._steps: list[ScriptStep] = []
        if callable(script):
            self._fn = script
        else:
            self._steps = list(script)
            for step in self._steps:
                if not isinstance(step, ModelResponse | ModelError):
                    raise UsageError(
                        f"ScriptedModel script items must be reply()/call()/calls()/error(), "
                        f"got {type(step).__name__}"
                    )
        self._position = 0
        self._chunk = max(1, stream_chunk)
        # Each request is checked from where the check of the request it extends stopped.
        self._rules = MessageChecker()
        self.requests: list[ModelRequest] = []
        """Every request the loop sent, in order (refused ones included)."""
        self.violations: list[Violation] = []
        """The conversation rules the refused requests broke, in order (strict mode only)."""

    @property
    def name(self) -> str:
        """``scripted:<name>``."""
        return f"scripted:{self._name}"

    @property
    def remaining(self) -> int:
        """Steps of a list script not yet consumed."""
        return len(self._steps) - self._position

    async def _next(self, request: ModelRequest) -> ModelResponse:
        if self._fn is not None:
            result = self._fn(request)
            if inspect.isawaitable(result):
                result = await result
            if not isinstance(result, ModelResponse):
                raise ModelError(
                    "internal",
                    f"script function of {self.name} returned {type(result).__name__}, "
                    "not a ModelResponse",
                )
            return result
        if self._position >= len(self._steps):
            raise ModelError(
                "internal",
                f"ScriptedModel {self._name!r} has no answer left: its script of "
                f"{len(self._steps)} steps is exhausted",
            )
        step = self._steps[self._position]
        self._position += 1
        if isinstance(step, ModelError):
            raise ModelError(step.kind, str(step))
        return step

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield the next scripted response, its text streamed in chunks."""
        self.requests.append(request)
        if self._strict:
            violations = self._rules.check(request.messages) + check_model_request(request)
            if violations:
                self.violations.extend(violations)
                raise ConversationRuleError(violations, source=self.name)
        response = await self._next(request)
        text = response.text
        for i in range(0, len(text), self._chunk):
            yield TextDelta(text=text[i : i + self._chunk])
        yield _response_complete(response=response)
