"""Error classification and safe messages shared by the providers."""

from __future__ import annotations

import pytest

from reverie.errors import ModelError, ModelErrorKind
from reverie.models.errors import ClientHolder, classify_api_error, detail, redact, resolve_api_key


@pytest.mark.parametrize(
    ("status", "code", "type_", "message", "kind"),
    [
        (429, None, None, "Rate limit reached on tokens per min", "transient"),
        (429, "insufficient_quota", None, "You exceeded your quota", "unavailable"),
        (500, None, None, None, "transient"),
        (503, None, None, None, "transient"),
        (529, None, "overloaded_error", "Overloaded", "transient"),
        (408, None, None, None, "transient"),
        (401, None, None, None, "authentication"),
        (403, None, None, None, "authentication"),
        (500, None, "internal_server_error", "7 validation errors for Request", "internal"),
        (409, None, None, None, "transient"),
        (404, "model_not_found", None, None, "unavailable"),
        (400, "context_length_exceeded", None, None, "context_overflow"),
        (400, None, None, "prompt is too long: 210000 tokens > 200000 maximum", "context_overflow"),
        (413, None, "request_too_large", None, "context_overflow"),
        (400, "content_filter", None, None, "content_filtered"),
        (400, None, None, "flagged by our content management policy", "content_filtered"),
        (400, None, "invalid_request_error", "Invalid value", "internal"),
        (422, None, None, None, "internal"),
        (None, None, "overloaded_error", "Overloaded", "transient"),
        (None, "server_error", None, None, "transient"),
        (None, None, None, "weird", "internal"),
    ],
)
def test_classification_table(
    status: int | None,
    code: str | None,
    type_: str | None,
    message: str | None,
    kind: ModelErrorKind,
) -> None:
    assert classify_api_error(status, code=code, type_=type_, message=message) == kind


def test_redact_removes_every_occurrence_of_the_secret() -> None:
    assert redact("key sk-abc123 and sk-abc123", "sk-abc123") == "key *** and ***"
    assert redact("nothing", None) == "nothing"


def test_detail_is_short_single_line_and_redacted() -> None:
    text = detail("line one\nline two sk-secret-9 " + "x" * 1000, "sk-secret-9")
    assert "\n" not in text
    assert "sk-secret-9" not in text
    assert len(text) <= 300


class Recorder:
    """A stand-in SDK client factory that counts creations and closes."""

    def __init__(self) -> None:
        self.made: list[int] = []
        self.closed: list[int] = []

    def make(self) -> int:
        self.made.append(len(self.made))
        return self.made[-1]

    async def close(self, client: int) -> None:
        self.closed.append(client)


async def test_unentered_holder_makes_and_closes_a_client_per_request() -> None:
    recorder = Recorder()
    holder = ClientHolder(recorder.make, recorder.close)
    for _ in range(2):
        async with holder.lease() as client:
            assert client == recorder.made[-1]
    assert recorder.made == [0, 1]
    assert recorder.closed == [0, 1]


async def test_entered_holder_keeps_one_client_until_exit() -> None:
    recorder = Recorder()
    holder = ClientHolder(recorder.make, recorder.close)
    holder.enter()
    for _ in range(3):
        async with holder.lease():
            pass
    assert recorder.made == [0]
    assert recorder.closed == []
    await holder.exit()
    assert recorder.closed == [0]


async def test_missing_key_is_read_at_first_request_and_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SOME_KEY", raising=False)
    with pytest.raises(ModelError) as info:
        resolve_api_key("m", api_key=None, api_key_env="SOME_KEY", placeholder="x")
    assert info.value.kind == "unavailable"
    assert "set SOME_KEY" in str(info.value)
    assert resolve_api_key("m", api_key=None, api_key_env=None, placeholder="x") == "x"
    assert resolve_api_key("m", api_key="k", api_key_env="SOME_KEY", placeholder="x") == "k"
