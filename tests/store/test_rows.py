"""The row codecs shared by the SQL backends: JSON columns hold the standard encoder's text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from reverie.errors import StoreError
from reverie.store.rows import dumps

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON_VALUES)
def test_a_json_column_holds_the_text_json_dumps_gives_with_the_stores_options(
    value: Any,
) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_a_value_json_cannot_hold_is_a_store_error_naming_no_data() -> None:
    circular: list[Any] = []
    circular.append(circular)
    for bad in ({"key": object()}, circular, {"secret-looking": {1, 2}}):
        with pytest.raises(StoreError, match="not JSON-serialisable") as refused:
            dumps(bad)
        assert "secret" not in str(refused.value)
    # A failed encoding leaves nothing behind: the same containers encode afterwards.
    shared = {"a": [1, 2]}
    with pytest.raises(StoreError):
        dumps([shared, object()])
    assert dumps([shared, shared]) == '[{"a":[1,2]},{"a":[1,2]}]'
