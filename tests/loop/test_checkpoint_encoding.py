"""Checkpoint payloads: a run's encoder writes the standard encoder's bytes (docs/durability.md).

Old checkpoints must resume, so the payload is pinned to one encoding: sorted keys, no
whitespace, no NaN, over :func:`~reverie.loop.state.state_to_dict`. The run's
:class:`~reverie.loop.state.CheckpointEncoder` writes it faster (and keeps the encoded form of
unchanged reference tuples between checkpoints); these tests hold it to the same bytes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from reverie import Agent, Runtime, Scope, tool
from reverie.core.exits import ModelUsage
from reverie.loop.state import (
    DEFINITION_KEY,
    STATE_SCHEMA_ID,
    BudgetLedger,
    CheckpointEncoder,
    Completion,
    LoopExecutionState,
    PendingWave,
    encode_checkpoint,
    pushed,
    state_from_dict,
    state_to_dict,
)
from reverie.testing import ScriptedModel, call, reply


def _standard(
    state: LoopExecutionState,
    family_digest: str,
    host_state: dict[str, Any] | None = None,
    definition: dict[str, Any] | None = None,
) -> bytes:
    """The reference payload: the standard library's encoder over ``state_to_dict``."""
    return json.dumps(
        {
            "schema_id": STATE_SCHEMA_ID,
            "family_digest": family_digest,
            "state": state_to_dict(state, host_state=host_state),
            **({} if definition is None else {DEFINITION_KEY: definition}),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode()


texts = st.text(max_size=12)
ints = st.integers(min_value=-(2**70), max_value=2**70)
floats = st.floats(allow_nan=False, allow_infinity=False)
# Values a strategy slot may hold (JSON-shaped), including bools and ints that equal floats.
json_values = st.recursive(
    st.none() | st.booleans() | ints | floats | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
slots = st.dictionaries(texts, json_values, max_size=3)
# An unusual type where a number is expected goes through the standard encoder's own path.
numbers = ints | st.booleans()
USAGE_FIELDS: dict[str, Any] = dict(
    model_calls=ints,
    input_tokens=ints,
    output_tokens=ints,
    usd=floats | ints,
    estimated=st.booleans(),
    cache_read_tokens=ints,
    cache_write_tokens=ints,
)
usages = st.builds(ModelUsage, **USAGE_FIELDS)
LEDGER_FIELDS: dict[str, Any] = dict(
    model_calls=numbers,
    capability_calls=numbers,
    input_tokens=numbers,
    output_tokens=numbers,
    usd=floats | ints,
    active_s=floats,
    by_model=st.dictionaries(texts, usages, max_size=3),
)
ledgers = st.builds(BudgetLedger, **LEDGER_FIELDS)
refs = st.lists(texts, max_size=4).map(tuple)
WAVE_FIELDS: dict[str, Any] = dict(
    assistant_ref=texts,
    policy=st.sampled_from(["parallel", "sequential"]),
    admitted=st.lists(numbers, max_size=3).map(tuple),
    rejected=st.lists(st.tuples(numbers, texts), max_size=2).map(tuple),
)
waves = st.builds(PendingWave, **WAVE_FIELDS)
COMPLETION_FIELDS: dict[str, Any] = dict(kind=texts, refs=refs, reason=st.none() | texts)
completions = st.builds(Completion, **COMPLETION_FIELDS)
STATE_FIELDS: dict[str, Any] = dict(
    iteration=numbers,
    assistant_refs=refs,
    result_refs=refs,
    transcript_seq=numbers,
    last_gate=st.none() | texts,
    input_cursor=numbers,
    surface_version=texts,
    recent_call_signatures=refs,
    recent_failure_kinds=refs,
    budget=ledgers,
    graceful_stop=st.none() | st.sampled_from(["host", "max_iterations", "no_progress"]),
    pending_wave=st.none() | waves,
    completion=st.none() | completions,
    model_state=slots,
    stop_state=slots,
    host_state=slots,
)
states = st.builds(LoopExecutionState, **STATE_FIELDS)


@pytest.mark.parametrize(
    ("kind", "drawn"),
    [
        (LoopExecutionState, STATE_FIELDS),
        (BudgetLedger, LEDGER_FIELDS),
        (ModelUsage, USAGE_FIELDS),
        (PendingWave, WAVE_FIELDS),
        (Completion, COMPLETION_FIELDS),
    ],
)
def test_the_encoding_property_draws_every_field_of_the_checkpointed_state(
    kind: type, drawn: dict[str, Any]
) -> None:
    # A field the run's encoder does not write would be lost from checkpoints; the property
    # below only catches it if its states set that field.
    assert set(drawn) == {f.name for f in dataclasses.fields(kind)}


@settings(max_examples=300, deadline=None)
@given(state=states, digest=texts, host=st.none() | slots, definition=st.none() | slots)
def test_the_checkpoint_payload_is_the_standard_encoding_of_the_state(
    state: LoopExecutionState,
    digest: str,
    host: dict[str, Any] | None,
    definition: dict[str, Any] | None,
) -> None:
    expected = _standard(state, digest, host, definition)
    assert CheckpointEncoder(digest, definition).encode(state, host_state=host) == expected
    assert (
        encode_checkpoint(state, family_digest=digest, host_state=host, definition=definition)
        == expected
    )


@settings(max_examples=100, deadline=None)
@given(sequence=st.lists(states, min_size=2, max_size=5), shared=refs)
def test_a_reused_checkpoint_encoder_writes_each_state_as_a_fresh_one_would(
    sequence: list[LoopExecutionState], shared: tuple[str, ...]
) -> None:
    # The same tuple objects recur from one checkpoint to the next (as in a run), and change.
    encoder = CheckpointEncoder("d")
    previous = sequence[0]
    for state in sequence:
        for s in (state, LoopExecutionState(assistant_refs=shared, result_refs=shared), previous):
            assert encoder.encode(s) == _standard(s, "d")
        previous = state


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_checkpoint_with_a_non_finite_number_is_refused(bad: float) -> None:
    for state in (
        LoopExecutionState(budget=BudgetLedger(usd=bad)),
        LoopExecutionState(budget=BudgetLedger(by_model={"m": ModelUsage(usd=bad)})),
        LoopExecutionState(host_state={"x": bad}),
    ):
        with pytest.raises(ValueError, match="not JSON compliant"):
            CheckpointEncoder("d").encode(state)


@tool(effects=set())
async def bump(n: int) -> int:
    """Return n + 1."""
    return n + 1


async def test_a_runs_checkpoints_are_the_standard_encoding_of_their_state() -> None:
    agent = Agent(
        name="enc",
        model=ScriptedModel([call("bump", n=1), call("bump", n=2), reply("done")]),
        tools=[bump],
    )
    payloads: list[bytes] = []
    async with Runtime.open(":memory:") as rt:
        store = rt.store
        save = store.commit_step

        async def spy(run_id: str, step: Any, *, fence: int) -> Any:
            if step.checkpoint is not None:
                payloads.append(bytes(step.checkpoint))
            return await save(run_id, step, fence=fence)

        store.commit_step = spy  # type: ignore[method-assign]
        result = await rt.run(agent, "go", scope=Scope(tenant="t", user="u"))
    assert result.status == "completed"
    assert len(payloads) >= 4  # BeforeModel, two BeforeSideEffect (pure waves), Final
    for payload in payloads:
        data = json.loads(payload)
        state = state_from_dict(data["state"])
        host = data["state"]["slots"].get("host_state")
        assert payload == _standard(state, data["family_digest"], host, data[DEFINITION_KEY])


@settings(max_examples=100, deadline=None)
@given(start=refs, pushes=st.lists(st.lists(texts | ints, max_size=3).map(tuple), max_size=12))
def test_a_ring_pushed_between_checkpoints_is_written_as_a_fresh_encoder_would(
    start: tuple[str, ...], pushes: list[tuple[Any, ...]]
) -> None:
    # Rings move by a push (one member or a few, and sometimes none or a non-string): the
    # encoder reuses what it wrote for the members that stayed, never their bytes when a
    # member changed.
    encoder = CheckpointEncoder("d")
    signatures, kinds = start, start
    for values in pushes:
        signatures = pushed(signatures, values)
        kinds = pushed(kinds, values[:1])
        state = LoopExecutionState(recent_call_signatures=signatures, recent_failure_kinds=kinds)
        assert encoder.encode(state) == _standard(state, "d")
        assert encoder.encode(state) == CheckpointEncoder("d").encode(state)
