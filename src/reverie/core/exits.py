"""How a loop ends: the ``LoopExit`` union (docs/loop.md) and run usage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, get_args

from reverie.core.fastcopy import fast_frozen
from reverie.core.vocabulary import ExitStatus

FailureKind = Literal[
    "iteration_limit",
    "no_progress_detected",
    "model_call_limit",
    "capability_call_limit",
    "wall_clock_limit",
    "budget_usd",
    "token_limit",
    "model_error",
    "invalid_model_output",
    "policy_denied",
    "gate_not_supported",
    "checkpoint_unavailable",
    "output_contract_violation",
    "driver_bug",
    "host_stop",
    "tool_error",
    "resume_limit",
    "not_resumable",
    "images_unsupported",
    "resume_drift",
    "guardrail_tripped",
]
"""Why a run failed. ``host_stop`` is a host graceful stop whose summary was rejected;
``not_resumable``: an unbound run another process cannot rebuild (its model or tools existed
only in the process that submitted it); ``images_unsupported``: the model refused the images of
the conversation (it has no vision, or speaks a text-only protocol); ``resume_drift``: a resume
refused because the agent's instructions, tools or loop family changed since the checkpoint;
``guardrail_tripped``: a ``before_reply`` guardrail denied the model's text (the summary names
the guardrail; nothing of the text was stored or streamed)."""
FAILURE_KINDS: Final[tuple[FailureKind, ...]] = get_args(FailureKind)

HostStopReason = Literal["no_progress", "max_iterations", "host"]
"""The graceful-stop reasons a host may request (``RunHandle.stop``, a ``graceful_stop``
input, a stop strategy's ``GracefulStop``)."""
HOST_STOP_REASONS: Final[tuple[HostStopReason, ...]] = get_args(HostStopReason)

GracefulReason = Literal[HostStopReason, "capability_call_limit", "wall_clock_limit"]
"""Why the finalizer runs: a host-requestable reason, or a budget that ran out."""
GRACEFUL_REASONS: Final[tuple[GracefulReason, ...]] = get_args(GracefulReason)

COMPLETION_KINDS_WITHOUT_REPLY: frozenset[str] = frozenset({"structured"})
"""Completion kinds whose result is not a text reply (structured output carries JSON)."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class ModelUsage:
    """What one model of a run consumed (an entry of :attr:`Usage.by_model`)."""

    model_calls: int = 0
    """Requests sent to this model, failed ones included (each was charged)."""
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    """Priced with this model's own price."""
    estimated: bool = False
    """Some of these tokens are reverie's local estimate: the endpoint reported no usage for a
    call (docs/budgets.md)."""
    cache_read_tokens: int = 0
    """The part of ``input_tokens`` read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """The part of ``input_tokens`` written to the provider's prompt cache."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``estimated`` and the cache figures only when set)."""
        out: dict[str, Any] = {
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": self.usd,
        }
        if self.estimated:
            out["estimated"] = True
        if self.cache_read_tokens:
            out["cache_read_tokens"] = self.cache_read_tokens
        if self.cache_write_tokens:
            out["cache_write_tokens"] = self.cache_write_tokens
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelUsage:
        """Inverse of :meth:`to_dict`."""
        return cls(
            model_calls=int(data.get("model_calls", 0)),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            usd=float(data.get("usd", 0.0)),
            estimated=data.get("estimated") is True,
            cache_read_tokens=int(data.get("cache_read_tokens", 0)),
            cache_write_tokens=int(data.get("cache_write_tokens", 0)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What a run consumed."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    capability_calls: int = 0
    usd: float = 0.0
    by_model: Mapping[str, ModelUsage] = field(default_factory=dict)
    """The model figures split by model name, in the order the models were first called (a
    run with fallback models calls more than one); the totals above are their sums."""
    estimated: bool = False
    """Some token counts (and so ``usd``) are reverie's conservative local estimate: an
    endpoint reported no usage for a call. Never 0 in its place (docs/budgets.md)."""
    cache_read_tokens: int = 0
    """The part of ``input_tokens`` the providers read from their prompt caches (priced at the
    cached-read rate)."""
    cache_write_tokens: int = 0
    """The part of ``input_tokens`` the providers wrote to their prompt caches (priced at the
    cache-write rate)."""

    @property
    def cached_share(self) -> float:
        """``cache_read_tokens / input_tokens`` (0.0 without input)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    def __str__(self) -> str:
        """One readable line: ``2 model calls, 1 tool call, 310 tokens (250 in, 60 out),
        $0.0004`` (the dollars only when priced)."""

        def count(n: int, what: str) -> str:
            return f"{n} {what}{'' if n == 1 else 's'}"

        tokens = self.input_tokens + self.output_tokens
        text = (
            f"{count(self.model_calls, 'model call')}, "
            f"{count(self.capability_calls, 'tool call')}, {count(tokens, 'token')}"
        )
        if tokens:
            cached = f", {self.cache_read_tokens} cached" if self.cache_read_tokens else ""
            text += f" ({self.input_tokens} in{cached}, {self.output_tokens} out)"
        if self.usd:
            text += f", ${self.usd:.4f}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``by_model`` only when a model was called, ``estimated`` and the
        cache figures only when set)."""
        out: dict[str, Any] = {
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "capability_calls": self.capability_calls,
            "usd": self.usd,
        }
        if self.estimated:
            out["estimated"] = True
        if self.cache_read_tokens:
            out["cache_read_tokens"] = self.cache_read_tokens
        if self.cache_write_tokens:
            out["cache_write_tokens"] = self.cache_write_tokens
        if self.by_model:
            out["by_model"] = {name: u.to_dict() for name, u in self.by_model.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        """Inverse of :meth:`to_dict`."""
        by_model = data.get("by_model")
        return cls(
            model_calls=int(data.get("model_calls", 0)),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            capability_calls=int(data.get("capability_calls", 0)),
            usd=float(data.get("usd", 0.0)),
            estimated=data.get("estimated") is True,
            cache_read_tokens=int(data.get("cache_read_tokens", 0)),
            cache_write_tokens=int(data.get("cache_write_tokens", 0)),
            by_model={str(k): ModelUsage.from_dict(v) for k, v in by_model.items()}
            if isinstance(by_model, Mapping)
            else {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """The run produced its answer."""

    status: ClassVar[ExitStatus] = "completed"
    kind: str = "reply"
    """``reply``, ``graceful_summary`` or ``structured``."""
    reply_refs: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    reason: GracefulReason | None = None
    """For ``graceful_summary``: which limit or request caused it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocked:
    """The run waits for a gate to be resolved."""

    status: ClassVar[ExitStatus] = "blocked"
    kind: str = "approval"
    gate_ref: str
    usage: Usage = field(default_factory=Usage)
    """What the run consumed until it blocked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """The run was cancelled."""

    status: ClassVar[ExitStatus] = "cancelled"
    reason: str = "cancelled"
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed:
    """The run failed; ``safe_summary`` holds no secrets and no memory content."""

    status: ClassVar[ExitStatus] = "failed"
    kind: FailureKind
    safe_summary: str
    usage: Usage = field(default_factory=Usage)


LoopExit = Completed | Blocked | Cancelled | Failed


def exit_to_dict(exit_: LoopExit) -> dict[str, Any]:
    """JSON-able form of an exit (stored on the run row)."""
    match exit_:
        case Completed():
            return {
                "status": "completed",
                "kind": exit_.kind,
                "reply_refs": list(exit_.reply_refs),
                "usage": exit_.usage.to_dict(),
                "reason": exit_.reason,
            }
        case Blocked():
            return {
                "status": "blocked",
                "kind": exit_.kind,
                "gate_ref": exit_.gate_ref,
                "usage": exit_.usage.to_dict(),
            }
        case Cancelled():
            return {"status": "cancelled", "reason": exit_.reason, "usage": exit_.usage.to_dict()}
        case Failed():
            return {
                "status": "failed",
                "kind": exit_.kind,
                "safe_summary": exit_.safe_summary,
                "usage": exit_.usage.to_dict(),
            }


def exit_from_dict(data: dict[str, Any]) -> LoopExit:
    """Inverse of :func:`exit_to_dict`."""
    status = data.get("status")
    usage = Usage.from_dict(data.get("usage") or {})
    if status == "completed":
        return Completed(
            kind=data["kind"],
            reply_refs=tuple(data.get("reply_refs") or ()),
            usage=usage,
            reason=data.get("reason"),
        )
    if status == "blocked":
        return Blocked(kind=data["kind"], gate_ref=data["gate_ref"], usage=usage)
    if status == "cancelled":
        return Cancelled(reason=data.get("reason", "cancelled"), usage=usage)
    if status == "failed":
        return Failed(kind=data["kind"], safe_summary=data["safe_summary"], usage=usage)
    raise ValueError(f"unknown exit status {status!r}")
