"""Every exception reverie raises, in one place.

The hierarchy::

    ReverieError                      base of everything reverie raises on purpose
    ├── ConfigError                   a config file, manifest or option is invalid
    │   ├── MissingExtraError         an optional extra is not installed (also an ImportError)
    │   └── ModelSpecError            a model spec breaks the grammar (reverie.models.spec)
    ├── UsageError                    the API was called wrongly (unknown agent, bad argument)
    │   ├── ImageTooLarge             a message's images exceed ``Limits.max_image_bytes``
    │   ├── NestedTooDeep             data nests arrays/objects past ``MAX_DEPTH`` (also ValueError)
    │   ├── UnknownAgentError         a run names an agent this process has not registered
    │   ├── InvalidScopeError         a Scope field is empty or not a string (also ValueError)
    │   ├── GateEditError             edited gate arguments refused (not editable, invalid)
    │   └── UnknownFamilyError        a profile names a loop family that is not registered
    ├── StoreError                    the store failed or refused a write
    │   ├── ConflictError             a compare-and-swap write lost (stale version)
    │   ├── LeaseLost                 a write carried a stale fencing token
    │   ├── RunBusy                   the run is leased by a live worker
    │   ├── TranscriptConflict        a step commit found the thread moved on
    │   ├── NotFoundError             a run, thread, gate or document does not exist
    │   └── CorruptCheckpointError    a checkpoint row cannot be decoded (names the run)
    ├── ModelError                    a model call failed; ``kind`` is its §4.2 class
    ├── ListenError                   a server cannot listen on its address (in use, refused)
    ├── CapabilityError               a tool failed; ``kind`` is its §4.2 class
    └── RunError                      a run-level operation was refused
        ├── RunEndedError             an input was sent to a run that already ended
        ├── ThreadBusy                the thread already has a running or blocked run
        ├── GateResolvedError         a gate was resolved a second time
        ├── GuardrailTripped          a guardrail refused a user message or a reply
        └── BudgetExceeded            a hard budget would be exceeded

Control signals are not errors and sit outside the tree: :class:`ApprovalRequired` (a tool or
hook asks for a person's approval) and :class:`RetryTool` (a tool asks to be retried).

Every error carries a *safe* message: no credentials, no memory content, no tool arguments. The
underlying cause, when there is one, is kept in ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from reverie.core.messages import TokenUsage

ModelErrorKind = Literal[
    "transient",
    "context_overflow",
    "content_filtered",
    "unavailable",
    "internal",
    "images_unsupported",
    "authentication",
]
"""Classes of model failure (docs/loop.md). ``images_unsupported``: the model (or its text
protocol) cannot take the images of the request (docs/images.md); never retried.
``authentication``: the endpoint refused the key (HTTP 401/403); never retried, but a fallback
model (another endpoint, another key) is tried."""

ToolErrorKind = Literal[
    "transient", "permanent", "input_invalid", "policy_denied", "unavailable", "internal"
]
"""Classes of tool failure (docs/loop.md)."""


def _mask_urls(text: str) -> str:
    # Imported on use: reverie.core.redact imports this module (NestedTooDeep).
    from reverie.core.redact import mask_urls

    return mask_urls(text)


class ReverieError(Exception):
    """Base class of every error reverie raises on purpose."""


class ConfigError(ReverieError):
    """A configuration file, manifest or option is invalid."""


class ModelSpecError(ConfigError):
    """A model spec (``openai:gpt-4o``, …) breaks the grammar of :mod:`reverie.models.spec`.

    The message names the spec (a URL in it masked), the rule it breaks and the accepted forms.
    """

    def __init__(self, spec: str, reason: str, forms: Sequence[str]) -> None:
        self.spec = spec
        """The spec as given."""
        self.reason = reason
        """The rule it breaks, in words."""
        super().__init__(
            _mask_urls(f"invalid model spec {spec!r}: {reason}; accepted forms: {', '.join(forms)}")
        )


EXTRA_OF_MODULE: dict[str, str] = {
    "anthropic": "anthropic",
    "mcp": "mcp",
    "mcp_types": "mcp",
    "starlette": "serve",
    "uvicorn": "serve",
    "sse_starlette": "serve",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "procrastinate": "postgres",
}
"""The optional extra (``pip install 'reverie[EXTRA]'``) that provides each top-level module."""


class MissingExtraError(ConfigError, ImportError):
    """An optional extra this feature needs is not installed.

    Also an :class:`ImportError`, so code that guards an optional import keeps working; the CLI
    reports it as one line with the ``pip install`` command.
    """

    def __init__(self, extra: str, what: str) -> None:
        super().__init__(f"{what} needs the {extra!r} extra. Fix: pip install 'reverie[{extra}]'")
        self.extra = extra
        """The extra to install."""

    @classmethod
    def of(cls, exc: ImportError, what: str) -> MissingExtraError | None:
        """The error for a failed optional import, or ``None`` when no extra provides the module.

        Args:
            exc: The ``ImportError`` an import raised.
            what: What needed the module, e.g. ``"the Anthropic provider"``.
        """
        if isinstance(exc, MissingExtraError):
            return exc
        top = (exc.name or "").partition(".")[0]
        extra = EXTRA_OF_MODULE.get(top)
        return None if extra is None else cls(extra, what)


class ListenError(ReverieError):
    """A server cannot listen on its address: the port is in use, or binding is not permitted."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
        self.host = host
        """The address asked for."""
        self.port = port
        """The port asked for."""


class UsageError(ReverieError):
    """The public API was called in a way it does not support."""


class GateEditError(UsageError):
    """Arguments a person edited while approving a gate were refused: the tool forbids
    editing (``editable=False``), they do not fit its schema, or they use the mask where
    there is no original secret. Nothing changed: the gate is still pending."""


class UnknownAgentError(UsageError):
    """A run names an agent that is not registered in this process."""

    def __init__(self, agent_name: str) -> None:
        super().__init__(
            f"agent {agent_name!r} is not registered in this process; pass it to "
            f"Runtime.open(..., agents=[...]) or call rt.register(agent)"
        )
        self.agent_name = agent_name


class InvalidScopeError(UsageError, ValueError):
    """A ``Scope`` field is empty or not a string.

    Also a :class:`ValueError`, which ``Scope`` raised before empty strings were refused in every
    field, so existing ``except ValueError`` handlers keep working.
    """


class ImageTooLarge(UsageError):
    """The images of one message hold more bytes than ``Limits.max_image_bytes`` allows.

    Raised before anything of the message is written (docs/images.md).
    """

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"the message's images hold {size_bytes} bytes, over the cap of {limit_bytes} "
            "(Limits.max_image_bytes)"
        )
        self.size_bytes = size_bytes
        """Bytes of the message's images."""
        self.limit_bytes = limit_bytes
        """The cap."""


class NestedTooDeep(UsageError, ValueError):
    """Data nests arrays and objects deeper than a walker takes (``reverie.core.depth``).

    Raised at each boundary where untrusted data comes in (tool-call arguments, HTTP bodies, MCP
    results, memory rows), before anything walks it recursively, so deep input is a typed
    refusal instead of a ``RecursionError``. The message names what was refused and the limit,
    never the data.
    """

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} is nested more than {limit} levels deep")
        self.what = what
        """What was refused, in words (``"the arguments of lookup"``)."""
        self.limit = limit
        """The deepest nesting allowed."""


class UnknownFamilyError(UsageError):
    """A profile names a loop family id that is not in the registry."""


class StoreError(ReverieError):
    """The store failed or refused an operation."""


class ConflictError(StoreError):
    """A compare-and-swap write lost: the expected version is stale."""

    def __init__(self, message: str, *, current_version: int | None = None) -> None:
        super().__init__(message)
        self.current_version = current_version


class LeaseLost(StoreError):
    """A write carried a fencing token that is no longer current for the run."""


class TranscriptConflict(StoreError):
    """A step commit expected the thread's transcript to end at a seq it no longer ends at.

    Another writer appended to the thread; the step was not written. The run resumes from its
    last checkpoint (the transcript is read again).
    """


class RunBusy(StoreError):
    """The run is leased by a worker that is still alive."""


class NotFoundError(StoreError):
    """A run, thread, gate or document does not exist (in the caller's scope)."""


class CorruptCheckpointError(StoreError):
    """A checkpoint row exists but cannot be decoded."""

    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(f"checkpoint of run {run_id} is corrupt: {detail}")
        self.run_id = run_id


class ModelError(ReverieError):
    """A model call failed. ``kind`` classifies it for the recovery strategy."""

    def __init__(
        self, kind: ModelErrorKind, message: str, *, usage: TokenUsage | None = None
    ) -> None:
        # Model errors quote endpoints and remote text: a URL's password never survives here.
        super().__init__(_mask_urls(message))
        self.kind: ModelErrorKind = kind
        self.usage: TokenUsage | None = usage
        """What the failed call consumed before it failed (a stream cut or dropped midway),
        when known: the run's budgets count it like an answer's usage."""


class ModelOutputTooLarge(ReverieError):
    """A model response exceeded the byte cap (``Limits.max_response_bytes``).

    Not a :class:`ModelError`: it is the model's output that is invalid, so it is never retried;
    the run fails with ``invalid_model_output`` and nothing of the response is stored.
    """

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the model's response exceeded the cap of {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class CapabilityError(ReverieError):
    """A tool failed in a classified way. Tools may raise it to choose their class."""

    def __init__(self, kind: ToolErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ToolErrorKind = kind


class RunError(ReverieError):
    """A run-level operation was refused."""


class RunEndedError(RunError):
    """An input was sent to a run that has already ended."""


class ThreadBusy(RunError):
    """A run was started on a thread that already has an active (queued, running or blocked) run.

    A thread holds one active run at a time (the store enforces it, across processes), so a
    conversation can never interleave two runs' rows. ``run_id`` names the active run.
    """

    def __init__(self, thread_id: str, run_id: str, status: str) -> None:
        super().__init__(
            f"thread {thread_id} already has an active run ({run_id}, {status}); wait for it, "
            "or start with thread_policy='enqueue' (queue the message as a follow-up) or "
            "'interrupt' (cancel it first)"
        )
        self.thread_id = thread_id
        self.run_id = run_id
        self.status = status


class GateResolvedError(RunError):
    """A gate was approved or denied a second time."""


class GuardrailTripped(RunError):
    """A guardrail (``before_input`` or ``before_reply`` hook) refused a text.

    The message names the guardrail and never quotes the refused text; nothing of it was
    stored, sent to a model or streamed.
    """

    def __init__(self, guardrail: str, reason: str | None = None) -> None:
        self.guardrail = guardrail
        """The id of the guardrail that refused the text."""
        detail = f": {reason}" if reason else ""
        super().__init__(f"guardrail {guardrail!r} refused the text{detail}")


class BudgetExceeded(RunError):
    """A hard budget would be exceeded by the requested operation."""


class ApprovalRequired(Exception):
    """Control signal: the call needs a person's approval before it may run."""

    def __init__(self, reason: str = "approval required", *, kind: str = "approval") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class RetryTool(Exception):
    """Control signal: a tool asks to be retried (counted as a transient failure)."""
