"""Loop families, the registry and content-addressed identities (DESIGN §3.4)."""

from __future__ import annotations

import dataclasses

import pytest

from reverie.errors import UnknownFamilyError, UsageError
from reverie.loop.family import LoopFamily, LoopFamilyRegistry, default_families
from reverie.loop.state import LoopExecutionState, state_from_dict, state_to_dict
from reverie.loop.strategies import DefaultRecovery, RepetitionStop, WindowContext


def test_registry_rejects_duplicate_family_ids() -> None:
    with pytest.raises(UsageError):
        LoopFamilyRegistry([LoopFamily(id="x"), LoopFamily(id="x")])


def test_unknown_family_id_is_a_typed_error() -> None:
    registry = LoopFamilyRegistry(default_families())
    with pytest.raises(UnknownFamilyError, match="nope"):
        registry.get("nope")


def test_default_registry_has_the_four_families() -> None:
    assert set(LoopFamilyRegistry(default_families()).ids()) == {
        "default",
        "default_structured",
        "unbound",
        "unbound_structured",
    }


def test_family_digest_is_content_addressed() -> None:
    a = LoopFamily(id="f")
    assert a.identity.digest == LoopFamily(id="f").identity.digest
    changed = LoopFamily(id="f", recovery=DefaultRecovery(max_tool_retries=5))
    assert changed.identity.digest != a.identity.digest
    other_stop = LoopFamily(id="f", stop=RepetitionStop(repeat_threshold=4))
    assert other_stop.identity.digest != a.identity.digest


def test_a_family_derived_after_its_digest_was_computed_gets_its_own_digest() -> None:
    a = LoopFamily(id="f")
    first = a.identity  # computed once and kept
    assert a.identity is first
    derived = dataclasses.replace(a, stop=RepetitionStop(repeat_threshold=4))
    assert derived.identity.digest != first.digest
    assert derived == dataclasses.replace(a, stop=RepetitionStop(repeat_threshold=4))


def test_state_is_frozen_and_round_trips() -> None:
    state = LoopExecutionState(iteration=3, recent_call_signatures=("a:1",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.iteration = 4  # type: ignore[misc]
    assert state_from_dict(state_to_dict(state)) == state


def test_signature_and_failure_rings_keep_eight() -> None:
    state = LoopExecutionState().with_signatures(tuple(str(i) for i in range(12)))
    assert state.recent_call_signatures == tuple(str(i) for i in range(4, 12))
    state = state.with_failure_kinds(("x",) * 20)
    assert len(state.recent_failure_kinds) == 8


def test_graceful_stop_request_is_one_shot() -> None:
    state = LoopExecutionState().request_stop("host").request_stop("no_progress")
    assert state.graceful_stop == "host"


def test_checkpoint_size_does_not_grow_with_iterations() -> None:
    from reverie.loop.state import encode_checkpoint

    small = encode_checkpoint(LoopExecutionState(iteration=2), family_digest="d")
    big = encode_checkpoint(
        LoopExecutionState(iteration=2000, transcript_seq=4000), family_digest="d"
    )
    assert len(big) - len(small) < 16


def test_a_checkpoint_carrying_the_retired_strategy_slots_still_decodes() -> None:
    state = LoopExecutionState(
        iteration=2, model_state={"index": 1}, stop_state={"reprompts": 1}, host_state={"h": 1}
    )
    old = state_to_dict(state)
    # A reverie.loop.state/2 payload from before the slots of stateless strategies were retired.
    retired = ["context_state", "capability_state", "input_state", "batch_state"]
    retired += ["recovery_state", "gate_state", "budget_state"]
    old["slots"] = {**{name: {} for name in retired}, **old["slots"]}
    assert state_from_dict(old) == state
    assert set(state_to_dict(state)["slots"]) == {"model_state", "stop_state", "host_state"}


def test_leaving_memory_out_of_the_context_is_part_of_the_family_digest() -> None:
    default = LoopFamily(id="f")
    # The default's description is unchanged, so existing checkpoints keep their digest.
    assert WindowContext().describe() == {"window": 100}
    assert LoopFamily(id="f", context=WindowContext()).identity.digest == default.identity.digest
    without = LoopFamily(id="f", context=WindowContext(include_memory=False))
    assert without.identity.digest != default.identity.digest
    assert not WindowContext(include_memory=False).plan(LoopExecutionState()).include_memory
