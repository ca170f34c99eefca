"""Call signatures for no-progress detection (docs/loop.md)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from reverie.core.canonical import NotCanonicalizable, canonical_json
from reverie.core.messages import ToolCall


def call_signature(call: ToolCall) -> str:
    """``"<tool>:<sha256 of the RFC 8785 canonical JSON of the arguments>"``.

    Arguments RFC 8785 cannot express (NaN or an infinity in them) hash a deterministic
    rendering of the arguments themselves (sorted keys, ``NaN``/``Infinity`` spelt out), marked
    so it never equals a canonical body: the same call repeated is a repetition, and two calls
    that differ elsewhere are not. Malformed JSON (no arguments to render) hashes its error.
    """
    if call.arguments_error is not None:
        body = b"!" + call.arguments_error.encode()
    else:
        arguments = dict(call.arguments)
        try:
            body = canonical_json(arguments)
        except NotCanonicalizable as exc:
            body = b"~" + _rendered(arguments, exc).encode()
    return f"{call.name}:{hashlib.sha256(body).hexdigest()}"


def _rendered(arguments: dict[str, object], error: NotCanonicalizable) -> str:
    """Arguments outside canonical JSON, rendered deterministically (their error if not even
    that works: a non-string key mixed with string keys cannot be sorted)."""
    try:
        return json.dumps(
            arguments, sort_keys=True, allow_nan=True, separators=(",", ":"), default=repr
        )
    except (TypeError, ValueError):
        return f"!{error}"


def wave_signatures(calls: Iterable[ToolCall]) -> tuple[str, ...]:
    """Distinct signatures of a wave, in first-seen order (each pushed at most once per wave)."""
    seen: dict[str, None] = {}
    for call in calls:
        seen.setdefault(call_signature(call), None)
    return tuple(seen)
