"""The ``scripted:PATH.json`` model spec: a :class:`ScriptedModel` read from a JSON file.

It lets the CLI and ``reverie.toml`` run agents offline, with no key and no network::

    reverie run --model scripted:examples/scripted_hello.json "What is 2 + 3?"

The file holds a list of steps, one per model call of a turn::

    [
      {"call": "add", "arguments": {"a": 2, "b": 3}},
      {"calls": [["add", {"a": 1, "b": 1}], ["now", {}]], "text": "checking"},
      {"reply": "2 + 3 = 5"},
      {"error": "transient", "message": "scripted outage"}
    ]

A ``{"result": {...}}`` step ends a typed turn: it calls ``structured_result`` with that object.

A memory curation pass (docs/memory.md) is a turn of its own, recognised by its opening
message. It is answered by the file's ``"curation"`` steps when the file is an object
``{"steps": [...], "curation": [...]}``; a plain list that ends a typed turn itself (a
``result`` step or a ``structured_result`` call: a file written as ``[memory] curation_model``)
answers it with its own steps; any other script answers with one step that reports the document
was left as it was — so ``reverie memory curate --now`` shows a pass offline with any script.

Which step answers a request is decided by the request, not by a counter: step *n* answers the
model call that follows *n* assistant messages since the turn's last user message. That keeps a
script deterministic across processes — a run blocked on a gate in one ``reverie`` process and
approved from another continues at the right step, which a counter in memory could not do. A
turn that needs more steps than the file has fails with a ``model_error`` naming the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reverie.core.messages import ModelRequest, ModelResponse
from reverie.errors import ConfigError, ModelError, ModelErrorKind
from reverie.loop.finish import STRUCTURED_RESULT_TOOL
from reverie.memory.curation import PASS_OPENING
from reverie.models.spec import ModelSpec
from reverie.testing.scripted import ScriptedModel, ScriptFunction, calls, error, reply

__all__ = ["SCRIPTED_PREFIX", "load_scripted_model", "step_index"]

SCRIPTED_PREFIX: Final = "scripted:"
"""The spec prefix: ``scripted:<path to a JSON file>``."""

_STEP_FORMS: Final = (
    '{"reply": "text"}, {"call": "tool", "arguments": {...}}, '
    '{"calls": [["tool", {...}], ...]}, {"result": {...}} or {"error": "transient"}'
)
_FORM_KEYS: Final = ("reply", "call", "calls", "error", "result")

DEFAULT_CURATION_REPORT: Final = {
    "changed": False,
    "summary": "The scripted model read MEMORY.md and left it as it was.",
}
"""What a script without ``"curation"`` steps reports for a curation pass."""


class _Step(BaseModel):
    """One step as written in the file; exactly one of its forms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reply: str | None = None
    call: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] | None = None
    text: str | None = None
    """Text sent along with ``calls``."""
    error: ModelErrorKind | None = None
    message: str | None = None
    """The message of a scripted ``error``."""
    result: dict[str, Any] | None = None
    """The arguments of a ``structured_result`` call (a typed turn's, or a pass's, report)."""

    @model_validator(mode="after")
    def _one_form(self) -> _Step:
        forms = [k for k in _FORM_KEYS if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError(
                f"a step needs exactly one of reply, call, calls, error, result "
                f"(found {len(forms)})"
            )
        if self.arguments and self.call is None:
            raise ValueError("'arguments' belongs to a 'call' step")
        if self.text is not None and self.calls is None:
            raise ValueError("'text' belongs to a 'calls' step")
        if self.message is not None and self.error is None:
            raise ValueError("'message' belongs to an 'error' step")
        return self

    def response(self) -> ModelResponse | ModelError:
        """The scripted answer (or failure) this step stands for."""
        if self.reply is not None:
            return reply(self.reply)
        if self.call is not None:
            return calls((self.call, self.arguments))
        if self.calls is not None:
            return calls(*self.calls, text=self.text)
        if self.result is not None:
            return calls((STRUCTURED_RESULT_TOOL, self.result))
        assert self.error is not None  # guaranteed by _one_form
        return error(self.error, self.message)


def _parse_steps(data: object, *, source: str) -> list[_Step]:
    """Validate a parsed script file.

    Args:
        data: The parsed JSON document: a list of step objects.
        source: The file it came from, named in errors.

    Raises:
        ConfigError: The document is not a list of valid steps (names the file, the step and the
            fix; never the step's values).
    """
    if not isinstance(data, list) or not data:
        raise ConfigError(
            f"{source}: a scripted model file must be a non-empty JSON list of steps (or "
            '{"steps": [...], "curation": [...]}). '
            f"Fix: write [step, ...] where each step is one of {_STEP_FORMS}"
        )
    steps: list[_Step] = []
    for index, raw in enumerate(data):
        try:
            step = _Step.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            key = ".".join(str(part) for part in first["loc"])
            where = f"step {index + 1}" + (f", key {key!r}" if key else "")
            raise ConfigError(
                f"{source}: {where}: {first['msg'].lower()}. Fix: make each step one of "
                f"{_STEP_FORMS}"
            ) from None
        steps.append(step)
    return steps


_DEFAULT_CURATION: Final = (_Step(result=dict(DEFAULT_CURATION_REPORT)),)


def step_index(request: ModelRequest) -> int:
    """Which step answers ``request``: assistant messages since the last user message."""
    count = 0
    for message in reversed(request.messages):
        if message.role == "user":
            break
        if message.role == "assistant":
            count += 1
    return count


def load_scripted_model(
    spec: str | ModelSpec, *, base_dir: str | os.PathLike[str] | None = None
) -> ScriptedModel:
    """Build the :class:`ScriptedModel` a ``scripted:PATH.json`` spec names.

    Args:
        spec: ``scripted:`` followed by the path of the JSON script (``~`` is expanded).
        base_dir: Where a relative path is looked up (the config file's directory); the current
            directory when ``None``.

    Raises:
        ConfigError: The spec has no path, the file is missing or unreadable, is not JSON, or
            holds an invalid step.
    """
    parsed = spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)
    if parsed.provider != "scripted":
        raise ConfigError(
            f"invalid model spec {str(parsed)!r}: not a scripted: spec. "
            "Fix: use scripted:path/to/script.json"
        )
    path = Path(parsed.model).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{source}: scripted model file not found. Fix: check the path in {spec!r} "
            "(relative paths start at the config file's directory, or the current directory "
            "for --model)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{source}: cannot be read ({type(exc).__name__}). Fix: check the file"
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg}). "
            "Fix: correct the syntax"
        ) from None
    curation: Sequence[_Step]
    if isinstance(data, dict) and set(data) <= {"steps", "curation"} and "steps" in data:
        steps = _parse_steps(data["steps"], source=source)
        curation = (
            _parse_steps(data["curation"], source=f"{source}: curation")
            if "curation" in data
            else _DEFAULT_CURATION
        )
    else:
        steps = _parse_steps(data, source=source)
        # A plain list that ends a typed turn itself is a curation script already (a file
        # named as [memory] curation_model): its own steps answer the pass.
        curation = steps if any(_ends_typed_turn(s) for s in steps) else _DEFAULT_CURATION
    return ScriptedModel(_by_turn_position(steps, curation, source), name=path.name)


def _ends_typed_turn(step: _Step) -> bool:
    """Whether ``step`` answers with the ``structured_result`` call that ends a typed turn."""
    return step.result is not None or step.call == STRUCTURED_RESULT_TOOL


def _is_curation_pass(request: ModelRequest) -> bool:
    """Whether ``request`` belongs to a memory curation pass (its opening user message)."""
    first = next((m for m in request.messages if m.role == "user"), None)
    return first is not None and first.content == PASS_OPENING


def _by_turn_position(
    turn_steps: Sequence[_Step], curation_steps: Sequence[_Step], source: str
) -> ScriptFunction:
    def answer(request: ModelRequest) -> ModelResponse:
        steps = curation_steps if _is_curation_pass(request) else turn_steps
        index = step_index(request)
        if index >= len(steps):
            raise ModelError(
                "internal",
                f"scripted model {source} has no step {index + 1}: its script of "
                f"{len(steps)} steps is exhausted",
            )
        # Built per request, so every answer carries fresh tool-call ids.
        step = steps[index].response()
        if isinstance(step, ModelError):
            raise ModelError(step.kind, str(step))
        return step

    return answer
