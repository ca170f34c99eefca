"""Reading TOML files reverie is given (``reverie.toml``, hook and memory manifests).

Every problem becomes one :class:`~reverie.errors.ConfigError` shaped
``FILE: WHERE: PROBLEM. Fix: FIX``, whatever the bytes are: another encoding (UTF-16/32, Latin-1),
binary data, invalid TOML, or nesting deep enough to exhaust the parser's recursion.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from reverie.errors import ConfigError

__all__ = ["MAX_TOML_DEPTH", "parse_toml"]

MAX_TOML_DEPTH = 32
"""How deeply tables and arrays of a reverie TOML file may nest (none needs more than a few)."""

_UTF16_32_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def parse_toml(raw: bytes | str, source: str) -> dict[str, Any]:
    """Decode and parse a TOML file, every problem a one-line :class:`ConfigError`.

    Args:
        raw: The file's bytes (or its text, already decoded).
        source: The file's name, the ``FILE`` of ``FILE: KEY: PROBLEM. Fix: …``.

    Returns:
        The parsed document.

    Raises:
        ConfigError: The bytes are not UTF-8 text (UTF-16/32, another encoding, binary data),
            not valid TOML (names the line), or nest deeper than :data:`MAX_TOML_DEPTH`.
    """
    if isinstance(raw, str):
        return _parse_text(raw, source)
    for bom, encoding in _UTF16_32_BOMS:
        if raw.startswith(bom):
            raise ConfigError(
                f"{source}: line 1: the file is {encoding} text, TOML must be UTF-8. "
                "Fix: save the file as UTF-8"
            )
    if b"\x00" in raw:
        line = raw.count(b"\n", 0, raw.index(b"\x00")) + 1
        raise ConfigError(
            f"{source}: line {line}: a NUL byte; this is binary data, not TOML text. "
            "Fix: point at the reverie TOML file, saved as UTF-8 text"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}: line {line}: not UTF-8 (byte 0x{raw[exc.start]:02x}). "
            "Fix: save the file as UTF-8"
        ) from None
    # A UTF-8 byte-order mark is what some editors write; TOML itself has no use for it.
    return _parse_text(text.removeprefix("\ufeff"), source)


def _parse_text(text: str, source: str) -> dict[str, Any]:
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ConfigError(
            f"{source}: line {line}: a NUL character; this is binary data, not TOML text. "
            "Fix: point at the reverie TOML file, saved as UTF-8 text"
        )
    too_deep = ConfigError(
        f"{source}: (top level): tables or arrays nest more than {MAX_TOML_DEPTH} levels deep. "
        "Fix: flatten the structure; reverie's keys need only a few levels"
    )
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(source, exc) from None
    except RecursionError:
        # tomllib parses nested arrays and inline tables recursively.
        raise too_deep from None
    if _depth(document) > MAX_TOML_DEPTH:
        raise too_deep
    return document


def _depth(value: object) -> int:
    """How many tables and arrays nest in ``value`` (iterative: any depth is safe to measure)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = list(item)
        else:
            continue
        deepest = max(deepest, level + 1)
        if level + 1 > MAX_TOML_DEPTH:
            return level + 1
        stack.extend((child, level + 1) for child in children)
    return deepest


def _syntax_error(source: str, exc: tomllib.TOMLDecodeError) -> ConfigError:
    # tomllib (3.11) puts "(at line L, column C)" in its message, never the file's content.
    text = str(exc)
    where = re.search(r"\(at line (\d+), column (\d+)\)", text)
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", text)
    reason = reason[:1].lower() + reason[1:]
    if where:
        line, column = where.groups()
        return ConfigError(
            f"{source}: line {line}, column {column}: invalid TOML: {reason}. "
            f"Fix: correct the syntax on line {line}"
        )
    return ConfigError(f"{source}: end of file: invalid TOML: {reason}. Fix: correct the syntax")
