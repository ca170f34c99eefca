"""Call signatures for no-progress detection (docs/loop.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from reverie.core.canonical import NotCanonicalizable, canonical_json
from reverie.core.messages import ToolCall


def call_signature(call: ToolCall) -> str:
    """``"<tool>:<sha256 of the RFC 8785 canonical JSON of the arguments>"``.

    Arguments that cannot be canonicalised (NaN, malformed JSON) hash their error instead, so the
    same broken call repeated still counts as a repetition.
    """
    if call.arguments_error is not None:
        body = b"!" + call.arguments_error.encode()
    else:
        try:
            body = canonical_json(dict(call.arguments))
        except NotCanonicalizable as exc:
            body = b"!" + str(exc).encode()
    return f"{call.name}:{hashlib.sha256(body).hexdigest()}"


def wave_signatures(calls: Iterable[ToolCall]) -> tuple[str, ...]:
    """Distinct signatures of a wave, in first-seen order (each pushed at most once per wave)."""
    seen: dict[str, None] = {}
    for call in calls:
        seen.setdefault(call_signature(call), None)
    return tuple(seen)
