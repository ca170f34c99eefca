"""The ``scripted:FILE.json`` model spec."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reverie.core.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolCallPart
from reverie.errors import ConfigError, ModelError
from reverie.models.base import complete
from reverie.testing.scripted_file import load_scripted_model, step_index


def _request(*roles: str) -> ModelRequest:
    """A conversation of these roles, well formed: each assistant message calls the tools whose
    results follow it (a ``ScriptedModel`` refuses an unanswered call or an orphan result)."""
    messages: list[Message] = []
    pending: list[str] = []
    for i, role in enumerate(roles):
        if role == "assistant":
            results = next(
                (n for n, r in enumerate(roles[i + 1 :]) if r != "tool"), len(roles) - i - 1
            )
            pending = [f"call_{i}_{n}" for n in range(results)]
            calls = tuple(ToolCall(id=c, name="add") for c in pending)
            messages.append(Message(role="assistant", content="x", tool_calls=calls))
        elif role == "tool":
            messages.append(Message(role="tool", content="x", tool_call_id=pending.pop(0)))
        else:
            messages.append(Message(role=role, content="x"))  # type: ignore[arg-type]
    return ModelRequest(messages=tuple(messages))


def _answer(model: Any, request: ModelRequest) -> ModelResponse:
    return asyncio.run(complete(model, request))


def test_steps_build_replies_calls_waves_and_errors(write_script: Callable[..., Path]) -> None:
    path = write_script(
        [
            {"call": "add", "arguments": {"a": 1, "b": 2}},
            {"calls": [["add", {"a": 1, "b": 1}], ["now", {}]], "text": "two at once"},
            {"reply": "done"},
            {"error": "transient", "message": "flaky"},
        ]
    )
    model = load_scripted_model(f"scripted:{path}")

    first = _answer(model, _request("system", "user"))
    second = _answer(model, _request("user", "assistant", "tool"))
    third = _answer(model, _request("user", "assistant", "tool", "assistant", "tool", "tool"))

    assert [p.call.name for p in first.parts if isinstance(p, ToolCallPart)] == ["add"]
    assert second.text == "two at once"
    assert [p.call.name for p in second.parts if isinstance(p, ToolCallPart)] == ["add", "now"]
    assert third.text == "done"
    with pytest.raises(ModelError) as info:
        _answer(model, _request("user", "assistant", "assistant", "assistant"))
    assert info.value.kind == "transient"


def test_the_step_is_chosen_by_the_turn_not_by_a_counter(
    write_script: Callable[..., Path],
) -> None:
    # A second process (approving a gate) loads the script afresh and must continue at step 2.
    path = write_script([{"call": "add", "arguments": {}}, {"reply": "after the tool"}])
    fresh = load_scripted_model(f"scripted:{path}")

    answer = _answer(fresh, _request("user", "assistant", "tool"))

    assert answer.text == "after the tool"
    assert step_index(_request("user", "assistant", "tool", "user")) == 0


def test_an_exhausted_script_is_a_model_error_naming_the_file(
    write_script: Callable[..., Path],
) -> None:
    path = write_script([{"reply": "only one"}], "one.json")
    model = load_scripted_model(f"scripted:{path}")

    with pytest.raises(ModelError, match=r"one\.json has no step 2"):
        _answer(model, _request("user", "assistant"))


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ("[]", "non-empty JSON list"),
        ('{"reply": "x"}', "non-empty JSON list"),
        ('[{"reply": "x", "call": "y"}]', "step 1"),
        ('[{"reply": "x"}, {"say": "y"}]', "step 2, key 'say'"),
        ('[{"error": "meteor"}]', "step 1, key 'error'"),
        ('[{"reply": "x", "arguments": {"a": 1}}]', "step 1"),
        ("[{", "line 1, column"),
    ],
)
def test_an_invalid_file_names_the_file_the_step_and_the_fix(
    tmp_path: Path, content: str, where: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ConfigError) as info:
        load_scripted_model(f"scripted:{path}")

    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert where in message
    assert "Fix: " in message


def test_a_relative_path_starts_at_the_base_dir(write_script: Callable[..., Path]) -> None:
    path = write_script([{"reply": "x"}], "rel.json")

    model = load_scripted_model("scripted:rel.json", base_dir=path.parent)

    assert model.name == "scripted:rel.json"


def test_a_spec_without_a_path_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"scripted:path/to/script\.json"):
        load_scripted_model("scripted:")
