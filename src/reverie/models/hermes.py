"""The Hermes text protocol: tool calls written as ``<tool_call>{...}</tool_call>`` in the text.

Open-weights models tuned on the Hermes format (Hermes, Qwen, many GGUF builds) call tools by
writing::

    Let me look that up.
    <tool_call>
    {"name": "search", "arguments": {"query": "reverie"}}
    </tool_call>

Servers that host them often take no native ``tools``. :class:`HermesModel` wraps such a model:
it renders the tools into the system prompt, renders past calls and results back as text, and
parses the answer with :func:`parse_hermes` into text and :class:`ToolCall` values.

Parsing never raises. A tag that cannot be read (bad JSON, no name, no closing tag) still becomes
a call, with ``arguments_error`` saying what is wrong, so the loop answers the model with an
``input_invalid`` result and the model can try again (docs/loop.md). A tag inside a fenced code
block (three backticks) is an example the model is showing, not a call.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from reverie.core.content import has_images
from reverie.core.messages import (
    Message,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ResponseComplete,
    ResponsePart,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolSpec,
)
from reverie.errors import ModelError
from reverie.models.base import Model
from reverie.models.openai import loads_strict

__all__ = [
    "MALFORMED_NAME",
    "HermesModel",
    "HermesParse",
    "parse_hermes",
    "render_tools_prompt",
    "to_hermes_messages",
]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
FENCE = "```"
MALFORMED_NAME = "<malformed>"
"""The name of a call whose tag did not say which tool it meant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HermesParse:
    """What :func:`parse_hermes` found in one answer."""

    text_parts: tuple[str, ...] = ()
    """The text around the tags, stripped, empty pieces dropped, in order."""
    calls: tuple[ToolCall, ...] = ()
    """One call per tag (or per element of a JSON array in a tag), in order. A malformed tag
    gives a call with ``arguments_error`` set (name :data:`MALFORMED_NAME` if unknown)."""
    errors: tuple[str, ...] = ()
    """A description of each malformed tag (the same text as its call's ``arguments_error``)."""
    parts: tuple[ResponsePart, ...] = field(default=())
    """Text and calls interleaved in the order they appear."""


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _next_tag(text: str, start: int) -> tuple[int, int] | None:
    """The span ``(tag_start, content_start)`` of the next ``<tool_call>`` outside a fence."""
    pos = start
    while True:
        tag = text.find(OPEN_TAG, pos)
        if tag < 0:
            return None
        fence = text.find(FENCE, pos, tag)
        if fence < 0:
            return tag, tag + len(OPEN_TAG)
        close = text.find(FENCE, fence + len(FENCE))
        if close < 0:
            return None  # an unclosed fence runs to the end: everything after it is text
        pos = close + len(FENCE)


def _call_from_value(value: object, index: int) -> tuple[ToolCall, str | None]:
    """A call from one decoded JSON value, and the problem with it if any."""
    if not isinstance(value, dict):
        error = f"tool call #{index + 1}: expected a JSON object with name and arguments"
        return ToolCall(id=_new_id(), name=MALFORMED_NAME, arguments_error=error), error
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        error = f'tool call #{index + 1}: missing "name" (a string naming the tool)'
        return ToolCall(id=_new_id(), name=MALFORMED_NAME, arguments_error=error), error
    raw = value.get("arguments", value.get("parameters", {}))
    if isinstance(raw, str):
        # Some models double-encode: "arguments": "{\"q\": 1}".
        with contextlib.suppress(ValueError, RecursionError):
            raw = loads_strict(raw) if raw.strip() else {}
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        error = f'tool call #{index + 1} ({name}): "arguments" must be a JSON object'
        return ToolCall(id=_new_id(), name=name, arguments_error=error), error
    call_id = value.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else _new_id(),
        name=name,
        arguments=raw,
    ), None


def _malformed(content: str, index: int, problem: str) -> tuple[ToolCall, str]:
    """A call for a tag whose content is not usable JSON; the name is kept if it can be seen."""
    name = MALFORMED_NAME
    with contextlib.suppress(ValueError, RecursionError):
        # An unterminated tag may still hold a whole object: keep its name for the model.
        value, _ = json.JSONDecoder().raw_decode(content.strip())
        if isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"]:
            name = value["name"]
    error = f"tool call #{index + 1}: {problem}"
    return ToolCall(id=_new_id(), name=name, arguments_error=error), error


def parse_hermes(text: str) -> HermesParse:
    """Split a Hermes-format answer into text and tool calls. Never raises.

    Several tags per answer are allowed; a tag may also hold a JSON array of calls. Text before,
    between and after tags is kept as progress text. Tags inside fenced code blocks are text.
    """
    text_parts: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    parts: list[ResponsePart] = []

    def add_text(piece: str) -> None:
        piece = piece.strip()
        if piece:
            text_parts.append(piece)
            parts.append(TextPart(text=piece))

    def add_call(call: ToolCall, error: str | None) -> None:
        calls.append(call)
        parts.append(ToolCallPart(call=call))
        if error is not None:
            errors.append(error)

    pos = 0
    while pos <= len(text):
        span = _next_tag(text, pos)
        if span is None:
            add_text(text[pos:])
            break
        tag_start, content_start = span
        add_text(text[pos:tag_start])
        close = text.find(CLOSE_TAG, content_start)
        if close < 0:
            add_call(
                *_malformed(
                    text[content_start:],
                    len(calls),
                    f"unterminated {OPEN_TAG} tag: end each call with {CLOSE_TAG}",
                )
            )
            break
        content = text[content_start:close].strip()
        pos = close + len(CLOSE_TAG)
        try:
            value = loads_strict(content)
        except ValueError as exc:
            where = (
                f" (line {exc.lineno}, column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else ""
            )
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            add_call(*_malformed(content, len(calls), f"not valid JSON: {problem}{where}"))
            continue
        except RecursionError:
            add_call(*_malformed("", len(calls), "JSON nested too deeply"))
            continue
        for item in value if isinstance(value, list) and value else [value]:
            add_call(*_call_from_value(item, len(calls)))
    return HermesParse(
        text_parts=tuple(text_parts), calls=tuple(calls), errors=tuple(errors), parts=tuple(parts)
    )


def _partial_tag_length(text: str) -> int:
    """How many trailing characters could be the start of a ``<tool_call>`` tag."""
    for keep in range(min(len(OPEN_TAG) - 1, len(text)), 0, -1):
        if OPEN_TAG.startswith(text[-keep:]):
            return keep
    return 0


_TOOLS_PROMPT = """\
You are a function calling AI model. You are provided with function signatures within \
<tools></tools> XML tags. You may call one or more functions to assist with the user query. \
Don't make assumptions about what values to plug into functions. Here are the available tools:
<tools>
{tools}
</tools>
For each function call return a json object with function name and arguments within \
<tool_call></tool_call> XML tags as follows:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def render_tools_prompt(tools: tuple[ToolSpec, ...], tool_choice: str = "auto") -> str:
    """The Hermes system-prompt block that offers ``tools`` to the model."""
    lines = "\n".join(
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
        )
        for t in tools
    )
    prompt = _TOOLS_PROMPT.format(tools=lines)
    if tool_choice == "required":
        prompt += "\nYou must call at least one function in this answer."
    elif tool_choice not in ("auto", "none"):
        prompt += f"\nYou must call the function {tool_choice} in this answer."
    return prompt


def _render_call(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": dict(call.arguments)})
    return f"{OPEN_TAG}\n{body}\n{CLOSE_TAG}"


def _render_result(message: Message) -> str:
    body = json.dumps({"name": message.name or "", "content": message.content})
    return f"<tool_response>\n{body}\n</tool_response>"


def to_hermes_messages(request: ModelRequest) -> tuple[Message, ...]:
    """The request's conversation as plain text messages in Hermes format.

    Tools go into the system prompt (unless ``tool_choice`` is ``none`` or there are none);
    assistant calls become ``<tool_call>`` text; consecutive tool results become one user message
    of ``<tool_response>`` blocks (servers without native tools reject the ``tool`` role).
    """
    out: list[Message] = []
    pending_results: list[str] = []

    def flush() -> None:
        if pending_results:
            out.append(Message(role="user", content="\n".join(pending_results)))
            pending_results.clear()

    for message in request.messages:
        if message.role == "tool":
            pending_results.append(_render_result(message))
            continue
        flush()
        if message.role == "assistant" and message.tool_calls:
            pieces = [message.content] if message.content else []
            pieces.extend(_render_call(c) for c in message.tool_calls)
            out.append(Message(role="assistant", content="\n".join(pieces)))
        else:
            out.append(Message(role=message.role, content=message.content))
    flush()
    if request.tools and request.tool_choice != "none":
        block = render_tools_prompt(request.tools, request.tool_choice)
        if out and out[0].role == "system":
            first = out[0]
            content = f"{first.content}\n\n{block}" if first.content else block
            out[0] = Message(role="system", content=content)
        else:
            out.insert(0, Message(role="system", content=block))
    return tuple(out)


class HermesModel:
    """Wraps a model that writes Hermes ``<tool_call>`` text, turning that text into tool calls.

    The inner model (typically an :class:`~reverie.models.openai.OpenAIChatModel` on a local
    server) gets no native tools: they are rendered into its system prompt instead. Text deltas
    are passed on until the first call tag begins; the rest of the answer arrives in the final
    response only, so raw call JSON never reaches a user's screen.
    """

    def __init__(self, inner: Model, *, name: str | None = None) -> None:
        """Args:
        inner: the model to wrap.
        name: the label for telemetry and price lookup; default ``hermes:<inner name>``.
        """
        self._inner = inner
        self._name = name or f"hermes:{inner.name}"

    @property
    def name(self) -> str:
        """``hermes:<inner name>`` unless given."""
        return self._name

    @property
    def inner(self) -> Model:
        """The wrapped model."""
        return self._inner

    def __repr__(self) -> str:
        return f"HermesModel({self._inner!r})"

    async def __aenter__(self) -> HermesModel:
        """Enter the inner model too, if it is an async context manager."""
        enter = getattr(self._inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        exit_ = getattr(self._inner, "__aexit__", None)
        if exit_ is not None:
            await exit_(*exc_info)

    async def aclose(self) -> None:
        """Close the inner model if it can be closed."""
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the inner model's answer, then the answer parsed into text and calls.

        Raises:
            ModelError: ``images_unsupported``: the conversation holds images, which the text
                protocol cannot carry (refused, never dropped).
        """
        if any(has_images(m.parts) for m in request.messages):
            raise ModelError(
                "images_unsupported",
                f"{self.name}: the Hermes text protocol cannot carry images; use a model "
                "with native vision",
            )
        inner_request = ModelRequest(
            messages=to_hermes_messages(request),
            tools=None,
            output_schema=request.output_schema,
            settings=request.settings,
        )
        buffer = ""
        emitted = 0
        in_call = False
        final: ModelResponse | None = None
        async for event in self._inner.stream(inner_request):
            if isinstance(event, ResponseComplete):
                final = event.response
                continue
            buffer += event.text
            if in_call:
                continue
            # Text before the first real tag is certainly not part of a call; a trailing "<tool_"
            # is held back until the next delta says whether it becomes a tag.
            span = _next_tag(buffer, 0)
            if span is not None:
                in_call = True
                end = span[0]
            else:
                end = len(buffer) - _partial_tag_length(buffer)
            if end > emitted:
                yield TextDelta(text=buffer[emitted:end])
                emitted = end
        if final is None:
            raise ModelError("internal", f"{self._inner.name} ended its stream without a response")
        yield ResponseComplete(response=_parse_response(final))


def _parse_response(response: ModelResponse) -> ModelResponse:
    """The inner response with its text parsed; native calls (if any) are kept after."""
    parsed = parse_hermes(response.text)
    native = tuple(ToolCallPart(call=c) for c in response.tool_calls)
    parts = parsed.parts + native
    finish = response.finish_reason
    if parts and any(isinstance(p, ToolCallPart) for p in parts) and finish in (None, "stop"):
        finish = "tool_calls"
    return ModelResponse(
        parts=parts,
        usage=response.usage,
        finish_reason=finish,
        model_name=response.model_name,
    )
