"""Request bodies, validated with pydantic at the boundary.

:func:`parse_body` reads a JSON object and validates it against a model. Problems become
:class:`~reverie.serve.errors.APIError` with a message naming the field and the rule, never the
value sent (it may be a secret): invalid JSON is 400; a body that does not fit the model is 422
on reverie's own API and 400 on the OpenAI-compatible route (as OpenAI answers).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from reverie.core.vocabulary import ThreadPolicy
from reverie.serve.errors import APIError
from reverie.serve.limits import check_depth

__all__ = [
    "FollowUpBody",
    "ResolveBody",
    "StartRunBody",
    "SteerBody",
    "describe_validation",
    "parse_body",
]

ModelT = TypeVar("ModelT", bound=BaseModel)


class _Strict(BaseModel):
    # Unknown fields are refused: a misspelt "thread" must not silently start a new thread.
    model_config = ConfigDict(extra="forbid", frozen=True)


class StartRunBody(_Strict):
    """``POST /v1/runs``."""

    agent: str = Field(min_length=1)
    """The agent to run (a name ``GET /v1/models`` lists)."""
    input: str = Field(min_length=1)
    """The user's message."""
    thread_id: str | None = Field(default=None, min_length=1)
    """Continue this conversation (one of the caller's); omitted: a new thread."""
    thread_policy: ThreadPolicy | None = None
    """When the thread has a running or blocked run: 409 (``reject``, the server's default
    unless configured), join it as a follow-up (``enqueue``), or cancel it first
    (``interrupt``)."""


class SteerBody(_Strict):
    """``POST /v1/runs/{id}/steer``."""

    text: str = Field(min_length=1)


class FollowUpBody(_Strict):
    """``POST /v1/runs/{id}/follow_up``."""

    text: str = Field(min_length=1)


class ResolveBody(_Strict):
    """``POST /v1/gates/{ref}/approve`` and ``/deny`` (the body may be empty)."""

    reason: str | None = Field(default=None, max_length=2000)
    """Why (deny only): the model is told."""
    arguments: dict[str, Any] | None = None
    """Approve only: run the call with these arguments instead of the model's (the same tool;
    checked against its schema, 422 otherwise with the gate still pending)."""


def describe_validation(exc: ValidationError) -> tuple[str, str | None]:
    """``(message, param)`` for the first problem: ``"messages[0].role: Input should be …"``."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = errors[0]
    param = _dotted(first["loc"])
    where = param or "body"
    message = f"{where}: {first['msg']}"
    if len(errors) > 1:
        more = len(errors) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return message, param


def _dotted(loc: tuple[int | str, ...]) -> str | None:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or None


async def parse_body(
    request: Request, model: type[ModelT], *, invalid_status: int = 422, allow_empty: bool = False
) -> ModelT:
    """Read the request's JSON object and validate it as ``model``.

    Args:
        request: The request.
        model: The pydantic model of the body.
        invalid_status: The status for a body that is JSON but does not fit ``model``.
        allow_empty: Treat an empty body as ``{}``.

    Raises:
        APIError: 400 for an empty body (unless allowed), invalid JSON, a non-object or JSON
            nested too deeply; ``invalid_status`` for a field problem.
    """
    raw = await request.body()
    if not raw.strip():
        if not allow_empty:
            raise APIError(
                400, "the request body is empty: send a JSON object", code="invalid_json"
            )
        raw = b"{}"
    try:
        data: Any = json.loads(raw)
    except RecursionError:
        # json.loads recurses per nesting level: a body of 5,000 "[" would otherwise be a 500.
        raise APIError(400, "the request body is nested too deeply", code="invalid_json") from None
    except UnicodeDecodeError:
        raise APIError(400, "the request body is not UTF-8 JSON", code="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise APIError(
            400,
            f"the request body is not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno})",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    check_depth(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise APIError(invalid_status, message, code="invalid_request", param=param) from None
