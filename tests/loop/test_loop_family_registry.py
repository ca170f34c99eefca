"""Loop families, the registry and content-addressed identities (DESIGN §3.4)."""

from __future__ import annotations

import dataclasses

import pytest

from reverie.errors import UnknownFamilyError, UsageError
from reverie.loop.family import LoopFamily, LoopFamilyRegistry, default_families
from reverie.loop.state import LoopExecutionState, state_from_dict, state_to_dict
from reverie.loop.strategies import DefaultRecovery, RepetitionStop


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
