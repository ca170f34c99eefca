"""Timestamps as the HTTP API and the CLI's JSON show them: one ISO 8601 format, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso_utc"]


def iso_utc(ts: float | None) -> str | None:
    """``2026-12-01T11:22:14.123Z`` for a Unix time (``None`` or 0: ``None``, not set).

    Example::

        >>> iso_utc(0.5)
        '1970-01-01T00:00:00.500Z'
    """
    if not ts:
        return None
    moment = datetime.fromtimestamp(ts, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
