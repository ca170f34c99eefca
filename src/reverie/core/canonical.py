"""Canonical JSON (RFC 8785) and content digests.

Every hash reverie computes (call signatures, family digests, checkpoint payloads) goes through
here, so key order or float spelling can never change an identity.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import rfc8785

from reverie.core.depth import WALK_DEPTH


class NotCanonicalizable(ValueError):
    """A value cannot be expressed as canonical JSON (NaN, infinity, non-JSON types, or nesting
    deeper than :data:`~reverie.core.depth.WALK_DEPTH`)."""


def _too_deep() -> NotCanonicalizable:
    return NotCanonicalizable(f"the value is nested more than {WALK_DEPTH} levels deep")


def check_json_value(value: Any) -> None:
    """Raise :class:`NotCanonicalizable` if ``value`` holds NaN, an infinity, a non-str key or
    nests deeper than :data:`~reverie.core.depth.WALK_DEPTH`.

    Cheaper than :func:`canonical_json` when only validity matters (no encoding).
    """
    _check_finite(value, 0)


def _check_finite(value: Any, depth: int) -> None:
    # Bounded, so the recursion here (and the RFC 8785 encoder's after it) cannot run out.
    if isinstance(value, float) and not math.isfinite(value):
        raise NotCanonicalizable(f"{value!r} is not representable in JSON")
    if isinstance(value, dict):
        if depth >= WALK_DEPTH:
            raise _too_deep()
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonicalizable(f"object key {key!r} is not a string")
            _check_finite(item, depth + 1)
    elif isinstance(value, list | tuple):
        if depth >= WALK_DEPTH:
            raise _too_deep()
        for item in value:
            _check_finite(item, depth + 1)


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` as RFC 8785 canonical JSON bytes.

    Raises:
        NotCanonicalizable: ``value`` holds NaN, an infinity or a non-JSON type, or nests
            deeper than :data:`~reverie.core.depth.WALK_DEPTH`.
    """
    if _plain(value, 0):
        try:
            return _PLAIN_JSON(value).encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: the RFC 8785 encoder below says why it is refused
    _check_finite(value, 0)
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # rfc8785 raises several types for unsupported values
        raise NotCanonicalizable(str(exc)) from exc


def compiled(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``, with the standard library's C encoder built once instead of per call.

    The text is the same. Circular references are not looked for (``check_circular`` off): the
    values encoded this way come from JSON or are built by the library, and a cycle among them
    still stops, with ``RecursionError`` rather than ``ValueError``. Without the C extension
    this is ``encoder.encode`` itself.
    """
    # The C encoder factory json.encoder uses itself (not in typeshed's stubs; None without C).
    c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None or encoder.indent is not None:
        return encoder.encode
    make = c_make_encoder(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii
        if encoder.ensure_ascii
        else json.encoder.encode_basestring,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    join = "".join

    def encode(value: Any) -> str:
        return join(make(value, 0))

    return encode


_PLAIN_JSON = compiled(
    json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
)
"""For :func:`_plain` values the standard library writes RFC 8785 byte for byte: the same
escapes (the short ones, else lowercase ``\\u00xx`` for control characters, nothing else),
ASCII keys sort the same by code point as by UTF-16 unit, and no floats are involved. It is
C code; the RFC 8785 package is pure Python and its cost showed in every model call."""

_SAFE_INT = 2**53 - 1
"""RFC 8785 numbers are IEEE doubles: past this an integer is not written as-is."""


def _plain(value: Any, depth: int) -> bool:
    """Whether ``value`` holds only exact ``str``/``bool``/``None``/safe ``int`` leaves and
    ``dict`` (ASCII keys), ``list`` and ``tuple`` containers (anything else takes the RFC 8785
    encoder: floats, subclasses, non-ASCII keys, large integers).

    Raises:
        NotCanonicalizable: it nests deeper than :data:`~reverie.core.depth.WALK_DEPTH` (one
            frame or two per level, so the walk stays well inside Python's recursion limit).
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    if kind is dict:
        if depth >= WALK_DEPTH:
            raise _too_deep()
        for key, item in value.items():
            if type(key) is not str or not key.isascii() or not _plain(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        if depth >= WALK_DEPTH:
            raise _too_deep()
        return all(_plain(item, depth + 1) for item in value)
    return False


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
