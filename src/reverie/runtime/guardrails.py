"""Guardrails on what comes in and what goes out (DESIGN §20, docs/hooks.md).

Two hook points judge text and fail closed (a guardrail that raises or times out denies):

- ``before_input``: every user message — the one that starts a run, steering, follow-ups —
  before it is stored or reaches a model (:func:`guard_input`). A denial raises
  :class:`~reverie.errors.GuardrailTripped` to the sender: nothing is stored, no run starts
  (a steering or follow-up is refused and the run it was for is cancelled, naming the
  guardrail), so no tool runs after a tripped input.
- ``before_reply``: the text of every model response — the run's reply, the finalizer's
  summary, a typed output's JSON, text next to tool calls — before it is stored, streamed,
  logged as an event or traced (:func:`guard_reply`). A denial fails the run with
  ``guardrail_tripped``. While a ``before_reply`` guardrail is registered the model port holds
  the response's deltas and releases the checked text in one piece when the response is
  complete: the time to first token becomes the time to the whole response (the latency
  cost of never leaking unchecked text).

A rewrite (e.g. a redaction) replaces the text; each denial and rewrite is recorded as a
``guardrail`` run event, without the text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reverie.core.content import ContentPart, Image, Text, UserContent, user_parts
from reverie.core.events import GuardrailDecided
from reverie.core.fastcopy import replace
from reverie.core.messages import Message, ModelResponse, TextPart, ToolCallPart
from reverie.errors import GuardrailTripped
from reverie.hooks import GuardResult, InputGuardContext, ReplyGuardContext
from reverie.hooks.points import InputKindName
from reverie.loop.finish import STRUCTURED_RESULT_TOOL

if TYPE_CHECKING:
    from reverie.core.scope import Scope
    from reverie.hooks import HookDispatcher
    from reverie.runtime.host import RunContext

__all__ = ["guard_input", "guard_opening", "guard_reply", "input_events", "text_of", "with_text"]


async def guard_input(
    hooks: HookDispatcher, *, scope: Scope, run_id: str | None, kind: InputKindName, text: str
) -> GuardResult:
    """The ``before_input`` guardrails' verdict on one user message (``allow`` when none).

    Raises:
        GuardrailTripped: a guardrail denied the message (or failed: fail closed).
    """
    if not hooks.registry.hooks("before_input"):
        return GuardResult(decision="allow", text=text)
    result = await hooks.guard(
        "before_input",
        InputGuardContext(scope=scope, run_id=run_id, kind=kind, text=text),
        poisoned=frozenset(),
    )
    if result.decision == "deny":
        raise GuardrailTripped(result.guardrail or "?", result.reason)
    return result


def input_events(run_id: str, rewrites: Sequence[tuple[str, str]]) -> list[GuardrailDecided]:
    """The ``guardrail`` events recording the rewrites of an input (``(guardrail, reason)``)."""
    return [
        GuardrailDecided(
            run_id=run_id, point="before_input", decision="rewrite", guardrail=g, reason=r
        )
        for g, r in rewrites
    ]


async def guard_reply(ctx: RunContext, response: ModelResponse) -> ModelResponse:
    """``response`` with its text (and a typed output's JSON) checked by ``before_reply``.

    Raises:
        GuardrailTripped: a guardrail denied the text (or failed); the run fails with it.
    """
    final = not any(
        isinstance(p, ToolCallPart) and p.call.name != STRUCTURED_RESULT_TOOL
        for p in response.parts
    )
    parts = list(response.parts)
    text = response.text
    if text:
        checked = await _check(ctx, text, final=final)
        if checked != text:
            # One text part where the text parts were, calls kept in the model's order.
            first = next(i for i, p in enumerate(parts) if isinstance(p, TextPart))
            parts = [p for p in parts if not isinstance(p, TextPart)]
            parts.insert(first, TextPart(text=checked))
    for i, part in enumerate(parts):
        if isinstance(part, ToolCallPart) and part.call.name == STRUCTURED_RESULT_TOOL:
            # A typed output is the run's reply too: its JSON is checked as text.
            shown = json.dumps(dict(part.call.arguments), ensure_ascii=False, sort_keys=True)
            checked = await _check(ctx, shown, final=True)
            if checked != shown:
                arguments = _as_object(checked)
                if arguments is None:
                    raise GuardrailTripped(
                        "before_reply", "a rewrite of a typed output must be a JSON object"
                    )
                parts[i] = ToolCallPart(call=replace(part.call, arguments=arguments))
    if parts == list(response.parts):
        return response
    return replace(response, parts=tuple(parts))


async def _check(ctx: RunContext, text: str, *, final: bool) -> str:
    result = await ctx.hooks.guard(
        "before_reply",
        ReplyGuardContext(scope=ctx.scope, run_id=ctx.run_id, text=text, final=final),
        poisoned=ctx.poisoned,
    )
    ctx.record_hook_failures(result.failures, result.newly_poisoned)
    if result.decision == "deny":
        guardrail = result.guardrail or "?"
        ctx.bus.emit(
            GuardrailDecided(
                run_id=ctx.run_id,
                point="before_reply",
                decision="deny",
                guardrail=guardrail,
                reason=result.reason or "denied",
            )
        )
        raise GuardrailTripped(guardrail, result.reason)
    for guardrail, reason in result.rewrites:
        ctx.bus.emit(
            GuardrailDecided(
                run_id=ctx.run_id,
                point="before_reply",
                decision="rewrite",
                guardrail=guardrail,
                reason=reason,
            )
        )
    return result.text


def _as_object(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def text_of(message: UserContent) -> str:
    """The text a ``before_input`` guardrail judges: a message's text parts, joined."""
    if isinstance(message, str):
        return message
    return "\n".join(p.text for p in user_parts(message) if isinstance(p, Text))


def with_text(message: UserContent, text: str) -> UserContent:
    """``message`` with its text replaced by a guardrail's rewrite (its images kept)."""
    if isinstance(message, str):
        return text
    images = [p for p in user_parts(message) if isinstance(p, Image)]
    return [Text(text), *images] if images else text


async def guard_opening(
    hooks: HookDispatcher,
    message: str | Sequence[ContentPart | Message],
    *,
    scope: Scope,
) -> tuple[str | Sequence[ContentPart | Message], list[tuple[str, str]]]:
    """A run's opening message(s) after the ``before_input`` guardrails, and the rewrites made
    (``(guardrail, reason)``): every user message is judged (a user's message, or the
    user-role messages of an unbound turn's opening).

    Raises:
        GuardrailTripped: a guardrail denied one (nothing is stored: no run starts).
    """
    if not hooks.registry.hooks("before_input"):
        return message, []
    if isinstance(message, str) or not all(isinstance(m, Message) for m in message):
        content: UserContent = message  # type: ignore[assignment]
        result = await guard_input(
            hooks, scope=scope, run_id=None, kind="message", text=text_of(content)
        )
        if result.decision == "allow":
            return message, []
        return with_text(content, result.text), list(result.rewrites)
    out: list[ContentPart | Message] = []
    rewrites: list[tuple[str, str]] = []
    for m in message:
        assert isinstance(m, Message)
        if m.role != "user":
            out.append(m)
            continue
        text = text_of(list(m.parts)) if m.parts else m.content
        result = await guard_input(hooks, scope=scope, run_id=None, kind="message", text=text)
        rewrites += result.rewrites
        if result.decision == "allow":
            out.append(m)
        elif m.parts:
            images = tuple(p for p in m.parts if isinstance(p, Image))
            parts: tuple[ContentPart, ...] = (Text(result.text), *images) if images else ()
            out.append(replace(m, content=result.text, parts=parts))
        else:
            out.append(replace(m, content=result.text))
    return out, rewrites
