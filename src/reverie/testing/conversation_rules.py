"""The providers' conversation rules, enforced by the test doubles.

OpenAI's Chat Completions and Anthropic's Messages API answer HTTP 400 to a conversation that
breaks their pairing rules, and keep answering 400 on every later turn of that conversation. The
doubles (``ScriptedModel``, ``FakeOpenAIServer``, ``FakeAnthropicServer``) check the same rules by
default, so a test that makes reverie send such a conversation fails, naming the rule.

Three forms are checked: reverie's own :class:`~reverie.core.messages.ModelRequest` messages
(:func:`check_messages`), the Chat Completions wire JSON (:func:`check_chat_completions`) and
the Messages API wire JSON (:func:`check_anthropic_messages`). Each is flattened to one neutral
sequence of entries (an Anthropic user message of ``tool_result`` blocks becomes one entry per
result), on which the rules both providers share are checked once:

``tool_calls_answered``
    Every tool call of an assistant message is answered by a tool result right after it: the
    ``tool`` messages that immediately follow it (OpenAI, reverie), or the ``tool_result``
    blocks of the next message (Anthropic). Nothing may come in between, and a conversation
    must not end on unanswered calls.
``tool_result_answers_a_call``
    Every tool result answers a call of the assistant message right before it (no orphan
    result, no result with no call id).
``one_result_per_call``
    No call is answered twice.
``unique_tool_call_ids``
    No tool call id repeats within one assistant message. (Anthropic also requires ids to be
    unique across the whole conversation; that is checked on its wire form only.)
``no_empty_assistant_turn``
    An assistant message has text or tool calls.

Rules only the Messages API enforces are checked on its wire form only:
``first_message_is_user``, ``roles_alternate`` (no two consecutive messages of one role),
``no_empty_content`` (no message without content, no empty text block) and
``tool_results_first`` (in a user message, ``tool_result`` blocks come before any other block).
The first two are what the Messages API on Bedrock and Vertex rejects; Anthropic's own endpoint
merges consecutive turns instead, so a conversation that passes here is valid on all of them.

Each broken rule is a :class:`Violation`, naming the rule, the index of the offending message in
the list checked, and the call ids involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from reverie.core.messages import Message
from reverie.errors import ModelError

__all__ = [
    "ConversationRuleError",
    "Rule",
    "Violation",
    "check_anthropic_messages",
    "check_chat_completions",
    "check_messages",
    "describe",
]

Rule = Literal[
    "tool_calls_answered",
    "tool_result_answers_a_call",
    "one_result_per_call",
    "unique_tool_call_ids",
    "no_empty_assistant_turn",
    "first_message_is_user",
    "roles_alternate",
    "no_empty_content",
    "tool_results_first",
    "tool_choice_needs_tools",
    "tool_choice_names_a_tool",
    "response_format_valid",
    "output_format_valid",
]
"""The name of a conversation rule (see the module docstring), or of a request-shape rule
(:mod:`reverie.testing.request_rules`)."""

STRICT_HINT: Final = "pass strict=False to the test double to send it on purpose"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken conversation rule."""

    rule: Rule
    index: int
    """The offending message's position in the list checked (the wire's ``messages`` array)."""
    detail: str
    """What is wrong, naming the message and the call ids."""
    call_ids: tuple[str, ...] = ()
    param: str | None = None
    """The request field at fault, for a rule about the request rather than a message
    (``index`` is then -1)."""

    def __str__(self) -> str:
        return f"conversation rule {self.rule!r} broken: {self.detail}"


def describe(violations: Sequence[Violation]) -> str:
    """One message for a list of violations: every rule broken, then how to relax the check."""
    return "; ".join(str(v) for v in violations) + f" ({STRICT_HINT})"


class ConversationRuleError(ModelError):
    """A request broke a provider's conversation rule: ``ScriptedModel`` refuses it.

    Its kind is ``internal``, which the default recovery does not retry: the run fails with a
    ``model_error`` whose summary names the rule, as a provider's HTTP 400 would make it fail.
    """

    def __init__(self, violations: Sequence[Violation], *, source: str = "the model") -> None:
        super().__init__("internal", f"{source} refused the request: {describe(violations)}")
        self.violations: tuple[Violation, ...] = tuple(violations)


# ---------------------------------------------------------------------------- shared rules


class _Entry(NamedTuple):
    """A message flattened for the shared rules (a tuple: checked on every scripted request)."""

    at: int
    """The message's index in the list checked."""
    kind: Literal["system", "user", "assistant", "result"]
    has_text: bool = False
    calls: tuple[str, ...] = ()
    answers: str | None = None
    """For a result: the call id it answers (``None`` when it names none)."""


class _Rules:
    """The shared rules over entries fed in order; resumable after a clean prefix."""

    __slots__ = ("answered", "out", "owner", "pending")

    def __init__(self, answered: Iterable[str] = (), owner: int = -1) -> None:
        self.out: list[Violation] = []
        self.pending: dict[str, None] = {}
        """Calls of the last assistant message still unanswered."""
        self.answered: set[str] = set(answered)
        self.owner = owner
        """Index of the assistant message whose calls are pending."""

    def close(self) -> None:
        pending, owner = self.pending, self.owner
        if pending:
            ids = tuple(pending)
            self.out.append(
                Violation(
                    "tool_calls_answered",
                    owner,
                    f"the assistant message at index {owner} has tool calls with no tool result "
                    f"right after it: {', '.join(ids)} (every tool call must be answered before "
                    "the next message)",
                    ids,
                )
            )
        pending.clear()
        self.answered.clear()

    def feed(self, entries: Iterable[_Entry]) -> None:
        out, pending, answered, close = self.out, self.pending, self.answered, self.close
        for entry in entries:
            if entry.kind == "result":
                call_id = entry.answers
                if call_id is not None and call_id in pending:
                    del pending[call_id]
                    answered.add(call_id)
                elif call_id is not None and call_id in answered:
                    out.append(
                        Violation(
                            "one_result_per_call",
                            entry.at,
                            f"the tool result at index {entry.at} answers call {call_id!r} a "
                            "second time",
                            (call_id,),
                        )
                    )
                else:
                    what = "names no call id" if call_id is None else f"answers call {call_id!r}"
                    out.append(
                        Violation(
                            "tool_result_answers_a_call",
                            entry.at,
                            f"the tool result at index {entry.at} {what}, which is not a call of "
                            "the assistant message right before it",
                            () if call_id is None else (call_id,),
                        )
                    )
                continue
            close()
            if entry.kind != "assistant":
                continue
            if not entry.has_text and not entry.calls:
                out.append(
                    Violation(
                        "no_empty_assistant_turn",
                        entry.at,
                        f"the assistant message at index {entry.at} has neither text nor tool "
                        "calls",
                    )
                )
            seen: set[str] = set()
            repeated: dict[str, None] = {}
            for call_id in entry.calls:
                if call_id in seen:
                    repeated[call_id] = None
                seen.add(call_id)
            if repeated:
                ids = tuple(repeated)
                out.append(
                    Violation(
                        "unique_tool_call_ids",
                        entry.at,
                        f"the assistant message at index {entry.at} repeats tool call id(s) "
                        f"{', '.join(ids)}",
                        ids,
                    )
                )
            pending.update(dict.fromkeys(entry.calls))
            self.owner = entry.at

    def finish(self) -> list[Violation]:
        """The violations, once every entry is fed (a conversation ends here)."""
        self.close()
        return sorted(self.out, key=lambda v: v.index)


def _check_entries(entries: Iterable[_Entry]) -> list[Violation]:
    rules = _Rules()
    rules.feed(entries)
    return rules.finish()


# ---------------------------------------------------------------------------- reverie's form


def _message_entries(messages: Sequence[Message], start: int = 0) -> list[_Entry]:
    entries: list[_Entry] = []
    for i in range(start, len(messages)):
        m = messages[i]
        if m.role == "tool":
            entries.append(_Entry(i, "result", False, (), m.tool_call_id or None))
        elif m.role == "assistant":
            calls = tuple(c.id for c in m.tool_calls) if m.tool_calls else ()
            entries.append(_Entry(i, "assistant", bool(m.content), calls))
        else:
            entries.append(_Entry(i, m.role, bool(m.content)))
    return entries


def check_messages(messages: Sequence[Message]) -> list[Violation]:
    """The shared rules, on reverie's own messages (what a ``Model`` receives)."""
    return _check_entries(_message_entries(messages))


class MessageChecker:
    """:func:`check_messages` for the requests of a test double, checking only what is new.

    A conversation's next request repeats the previous one and adds to it. Messages are
    frozen, so a prefix this checker found clean (the same messages, in the same places) is
    clean again, and the rules only need to go on from where that check stopped: the verdict
    is the one :func:`check_messages` gives for the whole list. A request that does not start
    with a request checked before (a first turn, a window that moved) is checked in full. The
    last ``memory`` clean requests are remembered (one double may serve many runs at once).
    """

    def __init__(self, memory: int = 4096) -> None:
        self._memory = max(1, memory)
        # id of a clean request's last message -> (its messages, the calls answered since
        # the last assistant message, that message's index). The messages are held, so no id
        # is reused while it is a key.
        self._clean: dict[int, tuple[tuple[Message, ...], tuple[str, ...], int]] = {}

    def check(self, messages: Sequence[Message]) -> list[Violation]:
        """The violations of ``messages``, as :func:`check_messages` finds them."""
        sent = tuple(messages)
        clean = self._clean
        rules: _Rules | None = None
        start = 0
        for end in range(len(sent) - 1, -1, -1):
            known = clean.get(id(sent[end]))
            if known is not None and len(known[0]) == end + 1 and known[0] == sent[: end + 1]:
                rules = _Rules(known[1], known[2])
                start = end + 1
                break
        if rules is None:
            rules = _Rules()
        rules.feed(_message_entries(sent, start))
        if rules.out or rules.pending:
            return rules.finish()
        if sent:
            state = (sent, tuple(rules.answered), rules.owner)
            clean.pop(id(sent[-1]), None)  # re-inserted as the newest
            clean[id(sent[-1])] = state
            if len(clean) > self._memory:
                del clean[next(iter(clean))]
        return []


def _text_of(content: Any) -> bool:
    """Whether a wire ``content`` (a string, a list of parts, ``None``) carries any content."""
    if isinstance(content, str):
        return bool(content)
    if isinstance(content, list):
        return any(_part_has_content(part) for part in content)
    return False


def _part_has_content(part: Any) -> bool:
    if not isinstance(part, Mapping) or part.get("type", "text") != "text":
        return True  # an image, audio, a refusal: content that is not text
    return bool(part.get("text"))


def check_chat_completions(messages: Any) -> list[Violation]:
    """The shared rules, on a Chat Completions request's ``messages`` array."""
    if not isinstance(messages, list):
        return []
    entries: list[_Entry] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            entries.append(_Entry(i, "result", answers=call_id if call_id else None))
        elif role == "assistant":
            raw_calls = m.get("tool_calls") or []
            calls = tuple(
                str(c.get("id", "")) for c in raw_calls if isinstance(c, Mapping) and "id" in c
            )
            entries.append(_Entry(i, "assistant", has_text=_text_of(m.get("content")), calls=calls))
        elif role in ("system", "developer"):
            entries.append(_Entry(i, "system", has_text=_text_of(m.get("content"))))
        else:
            entries.append(_Entry(i, "user", has_text=_text_of(m.get("content"))))
    return _check_entries(entries)


# ---------------------------------------------------------------------------- Messages API


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    """A Messages API ``content`` as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def check_anthropic_messages(messages: Any) -> list[Violation]:
    """The shared rules and the Messages API's own, on a request's ``messages`` array."""
    if not isinstance(messages, list):
        return []
    out: list[Violation] = []
    entries: list[_Entry] = []
    first_use: dict[str, int] = {}  # tool_use id -> index of the message that used it first
    previous_role: str | None = None
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            continue
        role = str(m.get("role"))
        blocks = _blocks(m.get("content"))
        if i == 0 and role != "user":
            out.append(
                Violation(
                    "first_message_is_user",
                    i,
                    f"the first message must use the user role, not {role!r}",
                )
            )
        if previous_role == role:
            out.append(
                Violation(
                    "roles_alternate",
                    i,
                    f"roles must alternate between user and assistant, but the messages at "
                    f"index {i - 1} and {i} are both {role!r}",
                )
            )
        previous_role = role
        out.extend(_content_violations(i, role, blocks, final=i == len(messages) - 1))
        if role == "assistant":
            calls: list[str] = []
            for block in blocks:
                if block.get("type") != "tool_use":
                    continue
                call_id = str(block.get("id", ""))
                calls.append(call_id)
                earlier = first_use.get(call_id)
                if earlier is not None and earlier != i:
                    out.append(
                        Violation(
                            "unique_tool_call_ids",
                            i,
                            f"tool_use id {call_id!r} at index {i} was already used by the "
                            f"message at index {earlier} (tool_use ids must be unique)",
                            (call_id,),
                        )
                    )
                first_use.setdefault(call_id, i)
            has_text = any(b.get("type") != "tool_use" and _block_has_content(b) for b in blocks)
            entries.append(_Entry(i, "assistant", has_text=has_text, calls=tuple(calls)))
        else:
            # The results of a user message first (the API wants them there), then the rest.
            for block in blocks:
                if block.get("type") == "tool_result":
                    answers = block.get("tool_use_id")
                    entries.append(_Entry(i, "result", answers=str(answers) if answers else None))
            if any(b.get("type") != "tool_result" for b in blocks):
                entries.append(_Entry(i, "user", has_text=True))
    out.extend(_check_entries(entries))
    return sorted(out, key=lambda v: v.index)


def _block_has_content(block: Mapping[str, Any]) -> bool:
    if block.get("type") == "text":
        return bool(block.get("text"))
    return True


def _content_violations(
    index: int, role: str, blocks: list[Mapping[str, Any]], *, final: bool
) -> list[Violation]:
    out: list[Violation] = []
    if not blocks and not (final and role == "assistant"):
        # Only a final assistant message (a prefill) may be empty.
        out.append(
            Violation(
                "no_empty_content",
                index,
                f"the message at index {index} has no content (all messages must have "
                "non-empty content except for the optional final assistant message)",
            )
        )
    if any(b.get("type") == "text" and not b.get("text") for b in blocks):
        out.append(
            Violation(
                "no_empty_content",
                index,
                f"the message at index {index} has an empty text block (text content blocks "
                "must be non-empty)",
            )
        )
    if role == "user":
        seen_other = False
        for block in blocks:
            if block.get("type") != "tool_result":
                seen_other = True
            elif seen_other:
                ids = (str(block.get("tool_use_id", "")),)
                out.append(
                    Violation(
                        "tool_results_first",
                        index,
                        f"in the user message at index {index}, a tool_result block comes after "
                        "other content (tool_result blocks must come first)",
                        ids,
                    )
                )
                break
    return out
