"""Logs and traces of CLI processes: ``--log-level``/``--log-format`` and the OTLP exporter.

``reverie serve``, ``worker``, ``run`` and ``chat`` take ``--log-level`` (``debug``, ``info``,
``warning``, ``error``) and ``--log-format`` (``text`` or ``json``, one object per line) for the
``reverie.*`` loggers, written to stderr. ``serve`` and ``worker`` also export spans to an OTLP
collector when ``opentelemetry-exporter-otlp`` is installed and the standard ``OTEL_*``
variables name one (docs/observability.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer

from reverie.core.redact import mask_urls

__all__ = [
    "LogFormatOption",
    "LogLevelOption",
    "configure_logging",
    "configure_tracing",
    "observed",
]

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]

LogLevelOption = Annotated[
    LogLevel | None,
    typer.Option(
        "--log-level",
        help="Log the reverie.* loggers at this level to stderr (serve/worker: info; else "
        "warning).",
        show_default=False,
        case_sensitive=False,
    ),
]
LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format", help="Log lines as text, or as one JSON object per line.", show_default=True
    ),
]

_HANDLER_NAME = "reverie-cli"
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask_urls(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            body["exception"] = mask_urls(self.formatException(record.exc_info))
        return json.dumps(body, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    """The usual text line, with any URL's userinfo masked (a last line of defence)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_urls(super().format(record))


def configure_logging(
    level: str | None, fmt: str = "text", *, default: str = "warning"
) -> logging.Handler:
    """Send the ``reverie.*`` loggers to stderr at ``level`` (else ``default``) in ``fmt``.

    Called once per command; a second call replaces the handler it installed.

    Returns:
        The handler installed.
    """
    logger = logging.getLogger("reverie")
    for old in list(logger.handlers):
        if old.get_name() == _HANDLER_NAME:
            logger.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logger.addHandler(handler)
    logger.setLevel((level or default).upper())
    # The CLI owns these lines; the root logger (and its handlers) would print them twice.
    logger.propagate = False
    return handler


def _exporter() -> Any:
    """An OTLP span exporter from the installed package (HTTP or gRPC), else ``None``."""
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    modules = [
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    ]
    if protocol == "grpc":
        modules.reverse()
    import importlib

    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.OTLPSpanExporter()  # endpoint, headers, timeout: from OTEL_* variables
    return None


def configure_tracing(environ: dict[str, str] | None = None) -> Any:
    """Install a global tracer provider exporting to OTLP, when the environment asks for one.

    It does, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
    set (or ``OTEL_TRACES_EXPORTER`` names ``otlp``) and ``OTEL_SDK_DISABLED`` is not true. A
    provider someone else installed (``opentelemetry-instrument``) is left alone.

    Returns:
        The provider installed (shut it down at exit to flush spans), or ``None``.
    """
    env = os.environ if environ is None else environ
    log = logging.getLogger("reverie.cli")
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    wanted = (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or "otlp" in env.get("OTEL_TRACES_EXPORTER", "")
    )
    if not wanted:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* asks for traces but the otel extra is missing: reverie[otel]")
        return None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None  # already configured by the host process
    exporter = _exporter()
    if exporter is None:
        log.warning(
            "OTEL_* asks for OTLP traces but no exporter is installed: "
            "pip install opentelemetry-exporter-otlp"
        )
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "reverie")})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("exporting traces over OTLP (%s)", type(exporter).__module__.rsplit(".", 2)[-2])
    return provider


def _not_a_model_failure(record: logging.LogRecord) -> bool:
    from reverie.runtime.telemetry import MODEL_FAILURE_LOG

    return record.msg != MODEL_FAILURE_LOG


@contextlib.contextmanager
def observed(
    level: str | None, fmt: str, *, default: str = "warning", shows_failures: bool = False
) -> Iterator[None]:
    """Logging (and OTLP tracing when configured) for the command run inside the block.

    Spans still buffered when the block ends are flushed to the collector. A command that
    ``shows_failures`` (``run``, ``chat``: they print how each run ended) leaves out the
    "model call failed" warning at the default level, so a failure (a rejected key, say) is
    printed once; ``--log-level`` set explicitly keeps it.
    """
    logger = logging.getLogger("reverie")
    before = (logger.level, logger.propagate)
    handler = configure_logging(level, fmt, default=default)
    if shows_failures and level is None:
        handler.addFilter(_not_a_model_failure)
    provider = configure_tracing()
    try:
        yield
    finally:
        if provider is not None:
            provider.shutdown()
        # Leave the process's logging as it was (a command run in-process, e.g. from tests).
        logger.removeHandler(handler)
        logger.setLevel(before[0])
        logger.propagate = before[1]
