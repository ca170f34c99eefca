"""Cleaning remembered text before a model sees it: control characters, credentials, size.

These are steps 2–4 of the context pipeline (docs/memory.md) and are also applied to what the
memory tools return and to what the native provider records. They are deliberately
conservative: redaction may hide a harmless string that looks like a key; it must not let a real
key through.
"""

from __future__ import annotations

import re
from typing import Final

from reverie.core.redact import REDACTED as REDACTED, is_secret_name

__all__ = [
    "REDACTED",
    "TRUNCATION_MARKER",
    "clean",
    "redact_credentials",
    "strip_control",
    "truncate_utf8",
    "utf8_len",
]

TRUNCATION_MARKER: Final = " […truncated]"
"""Appended to a snippet cut to its byte budget."""

# C0 controls except tab and newline, DEL, C1 controls; bidi embeddings/overrides/isolates and
# zero-width characters (they can hide or reorder text a person reviewing memory would see).
_CONTROL = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)

_NAME_SEPARATOR = re.compile(r"\b([A-Za-z][A-Za-z0-9_.-]*)[\"']?\s*[:=]\s*")
"""``name=``, ``name: `` or ``"name": `` (a value follows)."""
_VALUE = re.compile(r"([\"']?)[^\s\"',;&]+\1")


def _mask_named_values(text: str) -> str:
    """``name=value`` (``name: value``, ``"name": "value"``) with the value masked when the
    name is secret: the rule is :func:`reverie.core.redact.is_secret_name`, the one for data and
    the environment too."""
    out: list[str] = []
    done = 0
    for found in _NAME_SEPARATOR.finditer(text):
        if found.start() < done or not is_secret_name(found[1]):
            continue  # an ordinary name (its value may itself be "password=…": looked at next)
        value = _VALUE.match(text, found.end())
        if value is None:
            continue
        out += (text[done : found.end()], REDACTED)
        done = value.end()
    return "".join(out) + text[done:] if out else text


_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # PEM private keys, whole block.
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Authorization headers and bearer/basic tokens.
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # Basic credentials are base64: a digit, '+', '/', '=' or a lower→upper switch, unlike prose.
    (
        re.compile(r"\b([Bb]asic)\s+(?=[A-Za-z0-9+/]*?(?:[0-9+/=]|[a-z][A-Z]))[A-Za-z0-9+/]{8,}=*"),
        rf"\1 {REDACTED}",
    ),
    # user:password@ in URLs.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/:@]+:[^\s/@]+@"), rf"\1{REDACTED}@"),
    # Well-known key formats.
    (re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}"), REDACTED),  # OpenAI/…
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),  # Slack
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),  # AWS access key id
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), REDACTED),  # Google API key
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), REDACTED),  # Stripe
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),  # JWT
)


def strip_control(text: str) -> str:
    """Remove control, bidi and zero-width characters; keep tabs and newlines (CR → LF)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def redact_credentials(text: str) -> str:
    """Replace API keys, bearer tokens, ``password=…`` values and private keys by ``[redacted]``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    # key=value / key: value / "key": "value" for secret names (after the URL and bearer rules,
    # whose own text contains ":").
    return _mask_named_values(text)


def utf8_len(text: str) -> int:
    """The size of ``text`` in UTF-8 bytes."""
    return len(text.encode("utf-8"))


def truncate_utf8(text: str, max_bytes: int, marker: str = TRUNCATION_MARKER) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (marker included), on a character edge.

    Text that fits is returned unchanged. When even the marker does not fit, the result is the
    marker cut to the budget (possibly empty).
    """
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    room = max_bytes - utf8_len(marker)
    if room <= 0:
        return marker.encode("utf-8")[: max(0, max_bytes)].decode("utf-8", errors="ignore")
    return encoded[:room].decode("utf-8", errors="ignore") + marker


def clean(text: str) -> str:
    """Steps 2 and 3 of the pipeline: strip control characters, then redact credentials."""
    return redact_credentials(strip_control(text))
