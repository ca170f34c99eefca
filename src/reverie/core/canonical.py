"""Canonical JSON (RFC 8785) and content digests.

Every hash reverie computes (call signatures, family digests, checkpoint payloads) goes through
here, so key order or float spelling can never change an identity.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import rfc8785


class NotCanonicalizable(ValueError):
    """A value cannot be expressed as canonical JSON (NaN, infinity, non-JSON types)."""


def check_json_value(value: Any) -> None:
    """Raise :class:`NotCanonicalizable` if ``value`` holds NaN, an infinity or a non-str key.

    Cheaper than :func:`canonical_json` when only validity matters (no encoding).
    """
    _check_finite(value)


def _check_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise NotCanonicalizable(f"{value!r} is not representable in JSON")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonicalizable(f"object key {key!r} is not a string")
            _check_finite(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_finite(item)


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` as RFC 8785 canonical JSON bytes.

    Raises:
        NotCanonicalizable: ``value`` holds NaN, an infinity or a non-JSON type.
    """
    _check_finite(value)
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises several types for unsupported values
        raise NotCanonicalizable(str(exc)) from exc


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
