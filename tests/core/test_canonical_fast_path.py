"""canonical_json writes RFC 8785 bytes whichever encoder it picks."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import rfc8785

from reverie.core.canonical import NotCanonicalizable, canonical_json, compiled

VALUES: list[Any] = [
    {},
    [],
    None,
    True,
    "",
    {"b": 1, "a": [True, False, None], "c": {"z": "x", "y": ""}},
    {"text": 'quote " back \\ slash \b\f\n\r\t \x00 \x01 \x1f \x7f end'},
    {"unicode": "é ü 漢字 😀 \u2028 \u2029 \ufeff"},
    {"n": 2**53 - 1, "m": -(2**53) + 1, "zero": 0, "neg": -7},
    {"n": 2**53 - 1 + 1},
    ("a", ("b", 1), [2, {"k": (3,)}]),
    {"é": 1, "e": 2, "\U0001f600": 3, "\uffff": 4},
    {"f": 1.5, "g": 1e21, "h": 0.1, "i": -0.0, "j": 1e-7},
    {"Z": 1, "a": 2, "_": 3, "0": 4, "~": 5},
]


@pytest.mark.parametrize("value", VALUES)
def test_canonical_json_writes_rfc_8785_bytes_for_every_value(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except Exception:
        with pytest.raises(NotCanonicalizable):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


def test_canonical_json_refuses_a_lone_surrogate() -> None:
    with pytest.raises(NotCanonicalizable):
        canonical_json({"s": "\ud800"})


def test_canonical_json_refuses_a_non_string_key() -> None:
    with pytest.raises(NotCanonicalizable):
        canonical_json({1: "x"})


class _Odd:
    def __str__(self) -> str:
        return "odd"


ENCODERS = [
    json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False),
    json.JSONEncoder(ensure_ascii=False, default=str),
    json.JSONEncoder(),
]


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("value", [*VALUES, {"nan": math.nan}, {"odd": _Odd()}, "top", 3.25])
def test_a_compiled_encoder_writes_what_its_encoder_writes(
    encoder: json.JSONEncoder, value: Any
) -> None:
    fast = compiled(encoder)
    try:
        expected = encoder.encode(value)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            fast(value)
        return
    assert fast(value) == expected
    assert fast(value) == expected  # built once, used again
