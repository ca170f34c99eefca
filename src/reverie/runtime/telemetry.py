"""Run telemetry: OpenTelemetry spans (GenAI semantic conventions) and lifecycle logs.

Spans are built around the host ports of one run segment, never inside the loop:

- ``invoke_agent {agent}`` — one per run segment; a resumed segment carries the run id
  (``reverie.run.id``) and a span link to the segment before it (its span context is kept in
  the checkpoint, so the link survives a crash and a move to another worker);
- ``chat {model}`` — one per model call (usage, response model, finish reasons, ``error.type``
  set to the :class:`~reverie.errors.ModelError` kind);
- ``execute_tool {tool}`` — one per tool call attempt (call id, outcome, ``error.type`` set to
  the typed error kind of a failed call);
- ``gate {tool}`` when a call opens a gate, ``resolve_gate`` around an approve or deny,
  ``resume_run`` around a resume and ``curation_pass`` around a memory curation pass.

Message content and tool arguments go on spans only when the operator opts in
(``Runtime.open(..., trace_content=True)`` or ``[telemetry] trace_content = true``).

Without the ``otel`` extra, or with no tracer provider configured, no span is made and no port
is wrapped: the hot path pays no tracing cost. Logs use the stdlib ``reverie.runtime`` logger:
lifecycle at INFO, retries and degradations at WARNING, details at DEBUG. The model and event
ports write their own (:func:`log_model_failure`, :func:`log_event`): a level check per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from reverie.core.capability import (
    CallCompleted,
    CallDenied,
    CallFailed,
    CallGated,
    CallOutcome,
    CapabilityDescriptor,
    Surface,
)
from reverie.core.events import (
    CallsDenied,
    LimitReached,
    ModelFallback,
    ModelRequested,
    RunEvent,
    ToolStarted,
)
from reverie.core.exits import Blocked, Failed
from reverie.core.messages import ModelResponse, ToolCall
from reverie.core.redact import mask_secrets
from reverie.core.vocabulary import is_unbound_profile
from reverie.errors import LeaseLost
from reverie.loop.control import CancelToken
from reverie.loop.ports import (
    CapabilityPort,
    CheckpointKind,
    CheckpointPort,
    CommitReceipt,
    EventPort,
    InputPort,
    LoopHost,
    ModelPort,
    PromptBundle,
    PromptPort,
    TranscriptPort,
)
from reverie.loop.state import LoopExecutionState
from reverie.models.spec import provider_of

try:  # the ``otel`` extra; everything below works (and costs nothing) without it
    from opentelemetry import context as otel_context, trace as otel_trace
except ImportError:  # pragma: no cover - exercised by installs without the extra
    otel_context = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from reverie.runtime.host import RunHost
    from reverie.runtime.result import RunResult
    from reverie.store.base import RunRecord

log = logging.getLogger("reverie.runtime")

TRACE_STATE_KEY = "trace"
"""Where a segment keeps its span context in the checkpoint's host state (for span links)."""

_MAX_CONTENT_CHARS = 16_000
"""Opted-in content longer than this is cut (span attributes are not a transcript store)."""


def _error_type(exc: BaseException) -> str:
    """The typed kind of an error for ``error.type``: a reverie kind, else the class name."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, LeaseLost):
        return "lease_lost"
    kind = getattr(exc, "kind", None)
    return kind if isinstance(kind, str) else type(exc).__qualname__


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CONTENT_CHARS else text[: _MAX_CONTENT_CHARS - 1] + "…"


class Telemetry:
    """The spans and logs of one runtime.

    Args:
        tracer_provider: Where spans go; ``None`` for the global one (``opentelemetry.trace``).
        trace_content: Put message content and tool arguments on spans (off by default).
    """

    def __init__(self, *, tracer_provider: Any = None, trace_content: bool = False) -> None:
        self._provider = tracer_provider
        self.trace_content = trace_content
        """Whether spans carry message content and tool arguments (operator opt-in)."""

    def tracer(self) -> Tracer | None:
        """The tracer to use now, or ``None`` when there is nowhere for spans to go."""
        if otel_trace is None:
            return None
        provider = self._provider or otel_trace.get_tracer_provider()
        # No SDK configured (the API's proxy or no-op provider): skip all span work.
        if isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider):
            return None
        tracer: Tracer = provider.get_tracer("reverie")
        return tracer

    def segment(self, run: RunRecord, *, resumed: bool) -> Segment:
        """The telemetry of one segment of ``run`` (started by :meth:`Segment.instrument`)."""
        return Segment(self, run, resumed=resumed)

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, str | int | bool]) -> Iterator[None]:
        """A span around a runtime operation, current while the block runs.

        An exception leaving the block is recorded as ``error.type`` (its typed kind).
        """
        tracer = self.tracer()
        if tracer is None:
            yield
            return
        with tracer.start_as_current_span(
            name, attributes=dict(attributes), record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield
            except BaseException as exc:
                _set_error(span, _error_type(exc))
                raise

    def curation_pass(self, pass_id: str) -> PassSpan:
        """A span for one memory curation pass (ended by :meth:`PassSpan.end`)."""
        tracer = self.tracer()
        span = None
        if tracer is not None:
            span = tracer.start_span(
                "curation_pass",
                attributes={"gen_ai.operation.name": "invoke_agent", "reverie.pass.id": pass_id},
            )
        return PassSpan(span)


class PassSpan:
    """The span of a curation pass: current while the pass's run is submitted, ended after."""

    def __init__(self, span: Span | None) -> None:
        self._span = span

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the pass's span current, so the run it submits is its child."""
        if self._span is None or otel_trace is None:
            yield
            return
        with otel_trace.use_span(self._span, end_on_exit=False):
            yield

    def end(self, *, status: str | None = None, error: BaseException | None = None) -> None:
        """End the span with the pass run's status, or the error that stopped it."""
        if self._span is None:
            return
        if status is not None:
            self._span.set_attribute("reverie.run.status", status)
            if status == "failed":
                _set_error(self._span, "failed")
        if error is not None:
            _set_error(self._span, _error_type(error))
        self._span.end()
        self._span = None


def _set_error(span: Span, kind: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


class Segment:
    """Spans and lifecycle logs of one run segment.

    Made before the segment's lease is used; :meth:`instrument` starts it, :meth:`finished`
    records the result, and :meth:`close` (always, in a ``finally``) ends whatever is open.
    """

    def __init__(self, telemetry: Telemetry, run: RunRecord, *, resumed: bool) -> None:
        self._telemetry = telemetry
        self._run = run
        self._resumed = resumed
        self._span: Span | None = None
        self._token: object | None = None
        self._done = False

    @property
    def run_id(self) -> str:
        """The run this segment advances."""
        return self._run.run_id

    def instrument(self, host: RunHost, state: LoopExecutionState) -> LoopHost:
        """Log the start, open the segment's span, and wrap the ports that report to it."""
        run = self._run
        log.info(
            "run %s %s (agent %s, thread %s, iteration %d)",
            run.run_id,
            "resumed" if self._resumed else "started",
            run.agent_name,
            run.thread_id,
            state.iteration,
        )
        tracer = self._telemetry.tracer()
        if tracer is not None:
            self._start_span(tracer, state)
        if self._span is None or tracer is None:
            return host  # no span to report to: the loop talks to the plain ports
        return _ObservedHost(
            run_id=host.run_id,
            token=host.token,
            prompt=host.prompt,
            model=_ObservedModel(host.model, self, tracer),
            capabilities=_ObservedTools(host.capabilities, self, tracer),
            transcript=host.transcript,
            checkpoints=_TracedCheckpoints(host.checkpoints, self._span),
            inputs=host.inputs,
            events=host.events,
        )

    def _start_span(self, tracer: Tracer, state: LoopExecutionState) -> None:
        from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags

        assert otel_trace is not None and otel_context is not None
        run = self._run
        links: list[Link] = []
        earlier = state.host_state.get(TRACE_STATE_KEY)
        if isinstance(earlier, Mapping):
            # A malformed record costs the link, never the run.
            with contextlib.suppress(KeyError, ValueError):
                links.append(
                    Link(
                        SpanContext(
                            trace_id=int(str(earlier["trace_id"]), 16),
                            span_id=int(str(earlier["span_id"]), 16),
                            is_remote=True,
                            trace_flags=TraceFlags(TraceFlags.SAMPLED),
                        ),
                        attributes={
                            "reverie.run.id": run.run_id,
                            "reverie.link": "earlier_segment",
                        },
                    )
                )
        # An unbound turn's agent is named per turn: span names stay low-cardinality.
        agent = "unbound" if is_unbound_profile(run.profile) else run.agent_name
        span = tracer.start_span(
            f"invoke_agent {agent}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent,
                "gen_ai.agent.id": run.agent_name,
                "gen_ai.conversation.id": run.thread_id,
                "reverie.run.id": run.run_id,
                "reverie.run.profile": run.profile,
                "reverie.run.resumed": self._resumed,
                "reverie.run.iteration": state.iteration,
            },
            links=links,
        )
        if not span.is_recording():  # sampled out: as good as no tracing
            span.end()
            return
        self._span = span
        # Current for the segment, so tool code's own spans (an HTTP client's) nest under it.
        self._token = otel_context.attach(otel_trace.set_span_in_context(span))

    def finished(self, result: RunResult) -> RunResult:
        """Log the segment's result and record it on its span; returns ``result``."""
        self._done = True
        u = result.usage
        exit_ = result.exit
        if log.isEnabledFor(logging.INFO):  # the usage line is formatted only to be logged
            usage = (
                f"model calls {u.model_calls}, tokens {u.input_tokens} in / "
                f"{u.output_tokens} out{' (estimated)' if u.estimated else ''}, "
                f"tool calls {u.capability_calls}, ${u.usd:.4f}"
            )
            if isinstance(exit_, Blocked):
                log.info("run %s blocked on gate %s (%s)", result.run_id, exit_.gate_ref, usage)
            elif isinstance(exit_, Failed):
                log.info("run %s finished: failed (%s) (%s)", result.run_id, exit_.kind, usage)
            else:
                log.info("run %s finished: %s (%s)", result.run_id, result.status, usage)
        if isinstance(exit_, Failed):
            log.debug("run %s failure: %s", result.run_id, exit_.safe_summary)
        span = self._span
        if span is not None:
            span.set_attribute("reverie.run.status", result.status)
            span.set_attribute("gen_ai.usage.input_tokens", u.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", u.output_tokens)
            span.set_attribute("reverie.usage.model_calls", u.model_calls)
            span.set_attribute("reverie.usage.tool_calls", u.capability_calls)
            span.set_attribute("reverie.usage.estimated", u.estimated)
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", u.cache_read_tokens)
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", u.cache_write_tokens)
            if isinstance(exit_, Blocked):
                span.set_attribute("reverie.gate.ref", exit_.gate_ref)
            if isinstance(exit_, Failed):
                _set_error(span, exit_.kind)
        return result

    def close(self) -> None:
        """End the segment's span (with the error that stopped it, if any) and detach it."""
        span, self._span = self._span, None
        if not self._done:
            exc = sys.exc_info()[1]
            if exc is not None:
                log.info("run %s: segment stopped (%s)", self.run_id, _error_type(exc))
                if span is not None:
                    _set_error(span, _error_type(exc))
        if span is not None:
            span.end()
        if self._token is not None and otel_context is not None:
            token, self._token = self._token, None
            otel_context.detach(token)  # type: ignore[arg-type]


@dataclass(slots=True, kw_only=True)
class _ObservedHost:
    """A ``LoopHost`` whose model, tool, checkpoint and event ports report to telemetry."""

    run_id: str
    token: CancelToken
    prompt: PromptPort
    model: ModelPort
    capabilities: CapabilityPort
    transcript: TranscriptPort
    checkpoints: CheckpointPort
    inputs: InputPort
    events: EventPort


class _ObservedModel:
    """``chat {model}`` spans around the model port (which logs its own failures)."""

    def __init__(self, inner: Any, segment: Segment, tracer: Tracer) -> None:
        self._inner = inner
        self._segment = segment
        self._tracer = tracer

    @property
    def names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = self._inner.names
        return names

    def _model_name(self, model_index: int) -> tuple[str, str]:
        models: Sequence[Any] = getattr(self._inner, "models", ())
        if not models:
            return "unknown", "unknown"
        model = models[min(model_index, len(models) - 1)]
        name = str(getattr(model, "name", "unknown"))
        return name, str(getattr(model, "model", None) or name)

    async def call(
        self,
        bundle: PromptBundle,
        *,
        model_index: int,
        emit_text: bool = True,
        max_bytes: int | None = None,
    ) -> ModelResponse:
        from opentelemetry.trace import SpanKind

        run_id = self._segment.run_id
        name, request_model = self._model_name(model_index)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_of(name),
            "gen_ai.request.model": request_model,
            "reverie.model.name": name,
            "reverie.run.id": run_id,
        }
        if self._segment._telemetry.trace_content:
            attributes["gen_ai.input.messages"] = _clip(
                json.dumps(
                    [{"role": m.role, "content": m.content} for m in bundle.request.messages],
                    ensure_ascii=False,
                )
            )
        span = self._tracer.start_span(
            f"chat {request_model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        assert otel_trace is not None
        try:
            with otel_trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                response: ModelResponse = await self._inner.call(
                    bundle, model_index=model_index, emit_text=emit_text, max_bytes=max_bytes
                )
        except BaseException as exc:
            _set_error(span, _error_type(exc))
            span.end()
            raise
        span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
        span.set_attribute("reverie.usage.estimated", response.usage.estimated)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", response.usage.cache_read_tokens)
        span.set_attribute(
            "gen_ai.usage.cache_creation.input_tokens", response.usage.cache_write_tokens
        )
        if response.model_name:
            span.set_attribute("gen_ai.response.model", response.model_name)
        if response.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        if self._segment._telemetry.trace_content:
            span.set_attribute(
                "gen_ai.output.messages",
                _clip(
                    json.dumps(
                        [
                            {
                                "role": "assistant",
                                "content": response.text,
                                "tool_calls": [c.name for c in response.tool_calls],
                            }
                        ],
                        ensure_ascii=False,
                    )
                ),
            )
        span.end()
        return response

    def cost(self, response: ModelResponse, *, model_index: int) -> float:
        value: float = self._inner.cost(response, model_index=model_index)
        return value


class _ObservedTools:
    """``execute_tool {tool}`` and ``gate {tool}`` spans around the capability port."""

    def __init__(self, inner: CapabilityPort, segment: Segment, tracer: Tracer) -> None:
        self._inner = inner
        self._segment = segment
        self._tracer = tracer

    def surface(self) -> Surface:
        return self._inner.surface()

    async def invoke(
        self,
        call: ToolCall,
        descriptor: CapabilityDescriptor | None,
        *,
        attempt: int,
        key: str,
        replay: bool = True,
    ) -> CallOutcome:
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "reverie.call.key": key,
            "reverie.call.attempt": attempt,
            "reverie.run.id": self._segment.run_id,
        }
        if self._segment._telemetry.trace_content:
            # Even when opted in, values of secret-looking keys stay masked.
            attributes["gen_ai.tool.call.arguments"] = _clip(
                json.dumps(mask_secrets(dict(call.arguments)), ensure_ascii=False, default=str)
            )
        span = self._tracer.start_span(
            f"execute_tool {call.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        assert otel_trace is not None
        try:
            with otel_trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                outcome = await self._inner.invoke(
                    call, descriptor, attempt=attempt, key=key, replay=replay
                )
        except BaseException as exc:
            _set_error(span, _error_type(exc))
            span.end()
            raise
        span.set_attribute("reverie.tool.outcome", outcome.kind)
        if isinstance(outcome, CallFailed):
            _set_error(span, outcome.error_kind)
        elif isinstance(outcome, CallDenied):
            _set_error(span, "denied")
        elif outcome.kind in ("cancelled", "interrupted"):
            _set_error(span, outcome.kind)
        elif isinstance(outcome, CallCompleted) and self._segment._telemetry.trace_content:
            span.set_attribute("gen_ai.tool.call.result", _clip(outcome.output))
        span.end()
        return outcome

    async def open_gate(self, call: ToolCall, gated: CallGated, *, key: str) -> str:
        with self._tracer.start_as_current_span(
            f"gate {call.name}",
            attributes={
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "reverie.call.key": key,
                "reverie.gate.kind": gated.gate_kind,
                "reverie.run.id": self._segment.run_id,
            },
        ) as span:
            ref = await self._inner.open_gate(call, gated, key=key)
            span.set_attribute("reverie.gate.ref", ref)
            return ref


class _TracedCheckpoints:
    """Keeps the segment span's context in each checkpoint, for the next segment's link."""

    def __init__(self, inner: CheckpointPort, span: Span) -> None:
        self._inner = inner
        sc = span.get_span_context()
        self._state = {"trace_id": f"{sc.trace_id:032x}", "span_id": f"{sc.span_id:016x}"}

    async def commit(
        self,
        kind: CheckpointKind | None,
        state: LoopExecutionState,
        *,
        guard_cursor: int | None = None,
        ack_cursor: int | None = None,
        seal: bool = False,
    ) -> CommitReceipt:
        from dataclasses import replace

        if kind is not None:
            state = replace(state, host_state={**state.host_state, TRACE_STATE_KEY: self._state})
        return await self._inner.commit(
            kind, state, guard_cursor=guard_cursor, ack_cursor=ack_cursor, seal=seal
        )


def log_event(event: RunEvent) -> None:
    """Log a run event: retries and limits at WARNING, every event at DEBUG.

    Called by the event port for every event it publishes (a failed hook is logged at WARNING
    by the hook dispatcher itself). The kind is looked up first, so an event with nothing to
    warn of (a first attempt has ``attempt`` 0) costs one level check.
    """
    kind = event.kind
    if kind in _WARNED_KINDS:
        attempt: object = getattr(event, "attempt", None)  # a limit or a fallback has none
        if attempt != 0:
            _warn(event)
    if kind == "text_delta" or not log.isEnabledFor(logging.DEBUG):
        return  # deltas are the reply itself, not a detail of the run
    detail = {
        f.name: getattr(event, f.name)
        for f in fields(event)
        if f.name not in ("kind", "run_id", "text")
    }
    log.debug("run %s: %s %s", event.run_id, event.kind, detail)


_WARNED_KINDS = frozenset(
    {"model_request", "tool_started", "limit_reached", "model_fallback", "calls_denied"}
)
"""The kinds :func:`log_event` may warn of (requests and tool starts only when retried)."""


def _warn(event: RunEvent) -> None:
    if isinstance(event, ModelRequested) and event.attempt > 0:
        log.warning("run %s: retrying the model call (attempt %d)", event.run_id, event.attempt)
    elif isinstance(event, ToolStarted) and event.attempt > 0:
        log.warning(
            "run %s: retrying tool %s (attempt %d)", event.run_id, event.tool, event.attempt
        )
    elif isinstance(event, LimitReached):
        log.warning("run %s: limit reached: %s (%s)", event.run_id, event.reason, event.action)
    elif isinstance(event, CallsDenied) and event.hidden:
        # A security event: the model called a tool the capability strategy hid from it.
        log.warning(
            "run %s: the model called %s, hidden from it (denied; security event)",
            event.run_id,
            ", ".join(event.hidden),
        )
    elif isinstance(event, ModelFallback):
        log.warning(
            "run %s: model %s failed (%s); falling back to model %s",
            event.run_id,
            event.from_model,
            event.error_kind,
            event.to_model,
        )


MODEL_FAILURE_LOG = "run %s: model %s call failed (%s)"
"""The WARNING a failed model call logs (a command that prints the run's failure itself, such
as ``reverie run``, leaves it out: :func:`reverie.cli.observability.observed`)."""


def log_model_failure(run_id: str, model: str, exc: BaseException) -> None:
    """Log a failed model call at WARNING (the error itself at DEBUG); a cancellation is not
    a failure and is not logged."""
    if isinstance(exc, asyncio.CancelledError):
        return
    log.warning(MODEL_FAILURE_LOG, run_id, model, _error_type(exc))
    log.debug("run %s: model error: %s", run_id, exc)


__all__ = [
    "MODEL_FAILURE_LOG",
    "TRACE_STATE_KEY",
    "PassSpan",
    "Segment",
    "Telemetry",
    "log_event",
    "log_model_failure",
]
