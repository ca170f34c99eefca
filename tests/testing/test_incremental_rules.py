"""``MessageChecker`` (what ``ScriptedModel`` checks with) gives ``check_messages``'s verdict.

It checks only what a request adds to one it found clean before; these tests pin that the
verdict never differs from a full check, whatever was checked before.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from reverie.core.messages import Message, ModelRequest, ToolCall
from reverie.testing import ScriptedModel, call, reply
from reverie.testing.conversation_rules import (
    ConversationRuleError,
    MessageChecker,
    check_messages,
)

_IDS = st.sampled_from(["a", "b", "c"])
_MESSAGES = st.one_of(
    st.just(Message(role="user", content="hi")),
    st.just(Message(role="system", content="be brief")),
    st.builds(
        lambda text, ids: Message(
            role="assistant",
            content=text,
            tool_calls=tuple(ToolCall(id=i, name="t") for i in ids),
        ),
        st.sampled_from(["", "ok"]),
        st.lists(_IDS, max_size=3),
    ),
    st.builds(
        lambda i: Message(role="tool", content="r", tool_call_id=i, name="t"),
        st.one_of(st.none(), _IDS),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(_MESSAGES, max_size=5), min_size=1, max_size=4),
    st.lists(_MESSAGES, max_size=6),
)
def test_the_incremental_check_gives_the_full_checks_verdict(
    turns: list[list[Message]], other: list[Message]
) -> None:
    checker = MessageChecker()
    sent: list[Message] = []
    for added in turns:
        sent = sent + added  # each request repeats the previous one (the same messages)
        assert checker.check(sent) == check_messages(sent)
        assert checker.check(other) == check_messages(other)  # another conversation between


def _turn(ids: tuple[str, ...]) -> list[Message]:
    return [Message(role="assistant", tool_calls=tuple(ToolCall(id=i, name="t") for i in ids))]


def _result(call_id: str) -> Message:
    return Message(role="tool", content="r", tool_call_id=call_id, name="t")


def test_a_result_repeated_after_a_checked_prefix_is_still_refused() -> None:
    checker = MessageChecker()
    clean = [Message(role="user", content="go"), *_turn(("a",)), _result("a")]
    assert checker.check(clean) == []
    found = checker.check([*clean, _result("a")])
    assert [v.rule for v in found] == ["one_result_per_call"]
    assert found == check_messages([*clean, _result("a")])


def test_a_call_left_unanswered_after_a_checked_prefix_is_still_refused() -> None:
    checker = MessageChecker()
    clean = [Message(role="user", content="go")]
    assert checker.check(clean) == []
    found = checker.check([*clean, *_turn(("a", "b")), _result("a")])
    assert [v.rule for v in found] == ["tool_calls_answered"]


def test_a_refused_request_is_not_taken_as_a_clean_prefix() -> None:
    checker = MessageChecker()
    broken = [Message(role="user", content="go"), *_turn(("a",))]
    assert checker.check(broken) != []
    longer = [*broken, Message(role="user", content="again")]
    assert checker.check(longer) == check_messages(longer) != []


async def test_the_scripted_model_refuses_a_request_that_breaks_a_rule_after_a_clean_one() -> None:
    model = ScriptedModel([call("t", x=1), reply("done")])
    first = [Message(role="user", content="go")]
    async for _ in model.stream(ModelRequest(messages=tuple(first))):
        pass
    with pytest.raises(ConversationRuleError) as refused:
        async for _ in model.stream(ModelRequest(messages=(*first, *_turn(("a",))))):
            pass
    assert [v.rule for v in refused.value.violations] == ["tool_calls_answered"]
    assert [v.rule for v in model.violations] == ["tool_calls_answered"]
