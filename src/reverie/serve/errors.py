"""HTTP errors: one OpenAI-style body for every failure the server reports.

Every error response, on every route, has the body OpenAI clients already parse::

    {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": "..."}}

``type`` is ``invalid_request_error`` for 4xx statuses and ``server_error`` for 5xx. Messages
are safe by construction: they come from :class:`APIError` raised here, from the safe messages
of reverie's typed errors, or from a run's ``safe_summary`` — never from a stack trace, a
credential or memory content. Unexpected exceptions are logged on the server and answered with
a generic 500. As a second line of defence, every error body on every route (a 404 quoting the
path too) passes through the app's :class:`Redactor`, which masks every value the process holds
that looks like a secret (the bearer tokens, and the values of secret-named environment
variables by :func:`reverie.core.redact.is_secret_name`) and URL userinfo before it leaves.

Every error response says whether a client should retry it (``x-should-retry``, which the
openai and anthropic SDKs obey): ``false`` unless trying the same request again later can
succeed without repeating work (a busy run, a server shutting down). A failed turn is not
retried: a retry would be a second turn and run its tools again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from reverie.core.exits import Cancelled, Failed, FailureKind, LoopExit
from reverie.core.redact import environ_secrets, redact, scrub
from reverie.errors import (
    ConfigError,
    ConflictError,
    GateEditError,
    GateResolvedError,
    GuardrailTripped,
    ImageTooLarge,
    ModelError,
    NotFoundError,
    ReverieError,
    RunBusy,
    RunEndedError,
    ThreadBusy,
    UnknownAgentError,
    UsageError,
)

__all__ = [
    "SHOULD_RETRY",
    "SHUTDOWN_REASON",
    "APIError",
    "Redactor",
    "error_body",
    "error_response",
    "exception_handlers",
    "failure_error",
    "from_reverie_error",
]

log = logging.getLogger("reverie.serve")

SHOULD_RETRY = "x-should-retry"
"""The response header the openai and anthropic SDKs obey over their own retry rules."""

SHUTDOWN_REASON = "server shutdown"
"""The cancel reason of a streamed turn the server ended when stopping (after the grace)."""

_GENERIC_500 = "the server failed to handle the request; its log has the details"


class APIError(Exception):
    """An error to answer with: status, safe message, and the OpenAI ``code``/``param``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        """Shown to the client: must hold no secret."""
        self.code = code
        self.param = param
        self.retryable = retryable
        """Whether the same request may succeed later without repeating work."""
        self.headers = {SHOULD_RETRY: "true" if retryable else "false", **(headers or {})}


class Redactor:
    """Masks known secret values (and URL userinfo) in text that is about to leave the server.

    The secrets are the ones given (the bearer tokens) and the process's secret-named
    environment variables (:func:`reverie.core.redact.environ_secrets`); the masking is
    :func:`reverie.core.redact.redact`'s.
    """

    def __init__(
        self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None
    ) -> None:
        env = os.environ if environ is None else environ
        self._secrets = frozenset((*secrets, *environ_secrets(env)))

    def __call__(self, text: str) -> str:
        return redact(text, self._secrets)


def error_body(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The OpenAI-style error object for ``status``."""
    return {
        "error": {
            "message": message,
            "type": "server_error" if status >= 500 else "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


def error_response(error: APIError, redact: Redactor | None = None) -> JSONResponse:
    """The response for an :class:`APIError` (its message passed through ``redact``)."""
    message = redact(error.message) if redact is not None else error.message
    return JSONResponse(
        error_body(error.status, message, code=error.code, param=error.param),
        status_code=error.status,
        headers=error.headers,
    )


def from_reverie_error(exc: ReverieError) -> APIError:
    """The HTTP error for one of reverie's typed errors (their messages are safe)."""
    # Order matters: the more specific classes first (UnknownAgentError is a UsageError).
    if isinstance(exc, UnknownAgentError):
        # The run's agent is not served here: the operator's configuration, not the caller.
        log.error("request needs an agent this server does not serve: %s", exc)
        return APIError(
            500,
            f"agent {exc.agent_name!r} is not served by this server",
            code="agent_not_served",
        )
    if isinstance(exc, NotFoundError):
        return APIError(404, str(exc), code="not_found")
    if isinstance(exc, RunEndedError):
        return APIError(409, str(exc), code="run_ended")
    if isinstance(exc, GateResolvedError):
        return APIError(409, str(exc), code="gate_resolved")
    if isinstance(exc, GuardrailTripped):
        # A before_input guardrail refused the caller's message: nothing was stored.
        return APIError(400, str(exc), code="guardrail_tripped")
    if isinstance(exc, ThreadBusy):
        # The conversation has an active run; the caller decides (wait, or a thread_policy).
        return APIError(409, str(exc), code="thread_busy")
    if isinstance(exc, RunBusy):
        return APIError(
            409,
            "the run is being advanced by another worker; try again later",
            code="run_busy",
            retryable=True,
        )
    if isinstance(exc, ConflictError):
        return APIError(409, str(exc), code="conflict")
    if isinstance(exc, ImageTooLarge):
        return APIError(413, str(exc), code="image_too_large")
    if isinstance(exc, GateEditError):
        # Edited arguments that the tool refuses: the gate is still pending.
        return APIError(422, str(exc), code="invalid_gate_edit", param="arguments")
    if isinstance(exc, UsageError):
        return APIError(400, str(exc), code="invalid_request")
    if isinstance(exc, ModelError):
        return APIError(502, f"the model call failed ({exc.kind})", code="model_error")
    if isinstance(exc, ConfigError):
        # Configuration messages name files and keys of the operator: keep them server-side.
        log.error("configuration problem while handling a request: %s", exc)
        return APIError(500, "the server is misconfigured; its log has the details")
    log.error("request failed: %s: %s", type(exc).__name__, exc)
    return APIError(500, _GENERIC_500, code=type(exc).__name__)


_FAILURE_STATUS: Mapping[FailureKind, int] = {
    # The model misbehaved or was unreachable: a bad gateway from the caller's point of view.
    "model_error": 502,
    "invalid_model_output": 502,
    "output_contract_violation": 502,
    # The run was stopped by one of its budgets or safety nets.
    "wall_clock_limit": 504,
    "iteration_limit": 422,
    "no_progress_detected": 422,
    "model_call_limit": 422,
    "capability_call_limit": 422,
    "budget_usd": 422,
    "token_limit": 422,
    "host_stop": 422,
    # Policy: a hook or policy refused, or a tool needs a person's approval.
    "policy_denied": 403,
    # The request's images reached a model that takes none.
    "images_unsupported": 400,
    "gate_not_supported": 403,
    # Ours.
    "tool_error": 500,
    "driver_bug": 500,
    "checkpoint_unavailable": 500,
    # The agent changed under a run waiting to resume (its drift policy refused it).
    "resume_drift": 409,
    # A before_reply guardrail refused the model's text (none of it is sent).
    "guardrail_tripped": 403,
}
"""HTTP status for each ``Failed.kind`` when a request waited for its run."""


_UPSTREAM_KINDS = frozenset({"model_error", "invalid_model_output"})
"""Failure kinds whose summary quotes the upstream model server."""
_MAX_UPSTREAM_SUMMARY = 400


def failure_error(exit_: LoopExit, run_id: str) -> APIError:
    """The error for a run that did not complete (``Failed``, ``Cancelled``, ``Blocked``)."""
    headers = {"x-reverie-run-id": run_id}
    if isinstance(exit_, Failed):
        status = _FAILURE_STATUS.get(exit_.kind, 500)
        summary = exit_.safe_summary
        if exit_.kind in _UPSTREAM_KINDS:
            # The summary quotes an upstream model server: a bounded line, without the paths
            # it quotes (its install directory), and the secrets the redactor masks after.
            summary = scrub(summary, _MAX_UPSTREAM_SUMMARY)
        message = f"run {run_id} failed ({exit_.kind}): {summary}"
        if exit_.kind == "gate_not_supported":
            message += (
                "; a tool of this agent needs a person's approval: use POST /v1/runs, which "
                "can wait for POST /v1/gates/{ref}/approve"
            )
        return APIError(status, message, code=exit_.kind, headers=headers)
    if isinstance(exit_, Cancelled) and exit_.reason == SHUTDOWN_REASON:
        # Not the client's doing: a server error the SDKs raise, naming why the turn ended.
        return APIError(
            503,
            f"run {run_id} was cancelled: the server is shutting down",
            code="server_shutdown",
            headers=headers,
        )
    if isinstance(exit_, Cancelled):
        return APIError(
            409, f"run {run_id} was cancelled ({exit_.reason})", code="cancelled", headers=headers
        )
    return APIError(409, f"run {run_id} is {exit_.status}", code=exit_.status, headers=headers)


# ---------------------------------------------------------------------------------- handlers
def _redactor(request: Request) -> Redactor | None:
    found = getattr(request.app.state, "redact", None)
    return found if isinstance(found, Redactor) else None


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc, _redactor(request))


async def _reverie_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ReverieError)
    return error_response(from_reverie_error(exc), _redactor(request))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}"
        code = "not_found"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
        code = "method_not_allowed"
    else:
        message, code = str(exc.detail), None
    # The path is the client's, and a client may put its token there: redacted like the rest.
    error = APIError(exc.status_code, message, code=code, headers=exc.headers)
    return error_response(error, _redactor(request))


async def _unexpected(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback (server side) after this answer; the client gets no trace.
    return error_response(APIError(500, _GENERIC_500, code="internal_error"), _redactor(request))


def exception_handlers() -> dict[Any, Any]:
    """Starlette ``exception_handlers`` turning every failure into an error body."""
    return {
        APIError: _api_error,
        ReverieError: _reverie_error,
        HTTPException: _http_exception,
        Exception: _unexpected,
    }
