"""``LoopExecutionState``: the frozen, reference-holding state of a run (docs/loop.md).

The state is rebuilt every tick with :func:`dataclasses.replace`, never mutated in place. It holds
*references* to transcript rows, and only those of the current tick, so a checkpoint has the same
size at step 2 and at step 2,000.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from math import isfinite
from typing import Any, Literal

from reverie.core.exits import GracefulReason, ModelUsage, Usage
from reverie.core.fastcopy import fast_frozen, replace

RING = 8
"""Length of the signature and failure-kind rings."""

STATE_SCHEMA_ID = "reverie.loop.state/2"
"""Schema id of the serialised state; bump when the payload's meaning changes.

``/2``: a pending wave names its calls by position in the response, not by provider id.
"""

WavePolicy = Literal["parallel", "sequential"]

DEFINITION_KEY = "definition"
"""The checkpoint payload's key for the run's definition (digests of the agent's instructions,
tools and loop family, written by the host; compared on resume). Optional: a payload without
it resumes as before."""


def pushed(ring: tuple[str, ...], values: tuple[str, ...]) -> tuple[str, ...]:
    """``ring`` with ``values`` pushed on, keeping the last ``RING`` (for one state copy when
    a ring changes with other fields)."""
    return (ring + values)[-RING:]


_NO_USAGE = ModelUsage()
"""What a model not called yet has used (frozen: one for every ledger)."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class BudgetLedger:
    """What the run has consumed so far."""

    model_calls: int = 0
    capability_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    active_s: float = 0.0
    """Running time accumulated before the current segment (time blocked does not count)."""
    by_model: Mapping[str, ModelUsage] = field(default_factory=dict)
    """The model figures split by the name of the model that was called."""

    def charged(self, model: str) -> BudgetLedger:
        """The ledger with one more model call, sent to ``model``."""
        mine = self.by_model.get(model) or _NO_USAGE
        return replace(
            self,
            model_calls=self.model_calls + 1,
            by_model={**self.by_model, model: replace(mine, model_calls=mine.model_calls + 1)},
        )

    def answered(
        self,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        usd: float,
        estimated: bool = False,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> BudgetLedger:
        """The ledger with the tokens and price of an answer from ``model`` (``estimated``:
        the tokens are a local estimate, marked on the model's entry; the cache figures are
        parts of ``input_tokens``, kept on the model's entry)."""
        mine = self.by_model.get(model) or _NO_USAGE
        return replace(
            self,
            input_tokens=self.input_tokens + input_tokens,
            output_tokens=self.output_tokens + output_tokens,
            usd=self.usd + usd,
            by_model={
                **self.by_model,
                model: replace(
                    mine,
                    input_tokens=mine.input_tokens + input_tokens,
                    output_tokens=mine.output_tokens + output_tokens,
                    usd=mine.usd + usd,
                    estimated=mine.estimated or estimated,
                    cache_read_tokens=mine.cache_read_tokens + cache_read_tokens,
                    cache_write_tokens=mine.cache_write_tokens + cache_write_tokens,
                ),
            },
        )

    def usage(self) -> Usage:
        """The ledger as a public :class:`Usage`."""
        return Usage(
            model_calls=self.model_calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            capability_calls=self.capability_calls,
            usd=self.usd,
            by_model=dict(self.by_model),
            estimated=any(u.estimated for u in self.by_model.values()),
            cache_read_tokens=sum(u.cache_read_tokens for u in self.by_model.values()),
            cache_write_tokens=sum(u.cache_write_tokens for u in self.by_model.values()),
        )


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class PendingWave:
    """A wave admitted but not yet committed: what a resume from ``BeforeSideEffect`` replays."""

    assistant_ref: str
    """The assistant row carrying the calls (their ids, names and arguments)."""
    policy: WavePolicy
    admitted: tuple[int, ...]
    """Positions (in the response) of the calls admitted to run."""
    rejected: tuple[tuple[int, str], ...] = ()
    """``(position, message)`` for calls refused at admission (fan-out, budget, stopping)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """How a stop strategy ended the run, so a resume from its ``Final`` checkpoint is exact."""

    kind: str
    """The ``Completed`` kind (e.g. ``structured``), or ``cancelled`` for a cancellation."""
    refs: tuple[str, ...]
    """The rows holding the result."""
    reason: str | None = None
    """Why a cancelled run was cancelled."""


@fast_frozen
@dataclass(frozen=True, kw_only=True)
class LoopExecutionState:
    """Everything the executor needs to continue a run, and nothing it can re-read."""

    iteration: int = 0
    assistant_refs: tuple[str, ...] = ()
    """Assistant rows committed in the latest tick."""
    result_refs: tuple[str, ...] = ()
    """Tool-result rows of the latest wave."""
    transcript_seq: int = 0
    """Highest transcript ``seq`` this run has committed; rows past it are superseded on resume."""
    last_gate: str | None = None
    input_cursor: int = 0
    """Inputs up to this cursor have been taken into the run."""
    surface_version: str = ""
    recent_call_signatures: tuple[str, ...] = ()
    recent_failure_kinds: tuple[str, ...] = ()
    budget: BudgetLedger = field(default_factory=BudgetLedger)
    graceful_stop: GracefulReason | None = None
    """A pending graceful-stop request; the first one wins."""
    pending_wave: PendingWave | None = None
    completion: Completion | None = None
    """Set when a stop strategy finished the run (``Finish``); ``None`` for a plain reply."""
    # A slot for each strategy whose protocol returns state (a strategy reads and returns only
    # its own); the other strategies are pure functions of the state and need none.
    model_state: Mapping[str, Any] = field(default_factory=dict)
    """The model strategy's: which model to call, and the ones given up on."""
    stop_state: Mapping[str, Any] = field(default_factory=dict)
    """The stop strategy's (e.g. how many reprompts a contract used)."""
    host_state: Mapping[str, Any] = field(default_factory=dict)
    """Owned by the host (e.g. poisoned hooks); the loop never reads it."""

    def with_signatures(self, signatures: tuple[str, ...]) -> LoopExecutionState:
        """Push signatures onto the ring (keeps the last ``RING``)."""
        return replace(self, recent_call_signatures=pushed(self.recent_call_signatures, signatures))

    def with_failure_kinds(self, kinds: tuple[str, ...]) -> LoopExecutionState:
        """Push outcome kinds onto the failure ring (keeps the last ``RING``)."""
        return replace(self, recent_failure_kinds=pushed(self.recent_failure_kinds, kinds))

    def with_nested_usage(self, usages: Sequence[Usage | None]) -> LoopExecutionState:
        """Charge what nested runs (subagents) spent for this wave's calls to the ledger.

        Charged when the wave's results are committed, from the outcomes (which the journal
        keeps), so a replayed wave charges each nested run exactly once in the saved state.
        """
        spent = [u for u in usages if u is not None]
        if not spent:
            return self
        b = self.budget
        return replace(
            self,
            budget=replace(
                b,
                model_calls=b.model_calls + sum(u.model_calls for u in spent),
                capability_calls=b.capability_calls + sum(u.capability_calls for u in spent),
                input_tokens=b.input_tokens + sum(u.input_tokens for u in spent),
                output_tokens=b.output_tokens + sum(u.output_tokens for u in spent),
                usd=b.usd + sum(u.usd for u in spent),
                by_model=_merged_by_model(b.by_model, spent),
            ),
        )

    def request_stop(self, reason: GracefulReason) -> LoopExecutionState:
        """Record a graceful-stop request. One-shot: a pending request is never replaced."""
        if self.graceful_stop is not None:
            return self
        return replace(self, graceful_stop=reason)


def _merged_by_model(
    mine: Mapping[str, ModelUsage], nested: Sequence[Usage]
) -> Mapping[str, ModelUsage]:
    """``mine`` with each nested run's models added under their names (each call is counted
    under the model that answered it, so ``by_model`` keeps summing to the totals)."""
    merged = dict(mine)
    for usage in nested:
        for name, u in usage.by_model.items():
            had = merged.get(name) or _NO_USAGE
            merged[name] = replace(
                had,
                model_calls=had.model_calls + u.model_calls,
                input_tokens=had.input_tokens + u.input_tokens,
                output_tokens=had.output_tokens + u.output_tokens,
                usd=had.usd + u.usd,
                estimated=had.estimated or u.estimated,
                cache_read_tokens=had.cache_read_tokens + u.cache_read_tokens,
                cache_write_tokens=had.cache_write_tokens + u.cache_write_tokens,
            )
    return merged


_SLOTS: tuple[str, ...] = ("model_state", "stop_state", "host_state")
_RETIRED_SLOTS: frozenset[str] = frozenset(
    {
        "context_state",
        "capability_state",
        "input_state",
        "batch_state",
        "recovery_state",
        "gate_state",
        "budget_state",
    }
)
"""Slots of strategies that never had state: no code wrote them, so an old payload carries
them empty (or not at all); they are read past."""


def state_to_dict(
    state: LoopExecutionState, *, host_state: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """JSON-able form of the state; ``host_state`` (if given) stands for the state's own."""
    b = state.budget
    wave = state.pending_wave
    done = state.completion
    # Written only when set, so the payloads of ordinary runs are unchanged.
    extra: dict[str, Any] = {}
    if done is not None:
        extra["completion"] = {"kind": done.kind, "refs": list(done.refs)}
        if done.reason is not None:
            extra["completion"]["reason"] = done.reason
    return {
        **extra,
        "iteration": state.iteration,
        "assistant_refs": list(state.assistant_refs),
        "result_refs": list(state.result_refs),
        "transcript_seq": state.transcript_seq,
        "last_gate": state.last_gate,
        "input_cursor": state.input_cursor,
        "surface_version": state.surface_version,
        "recent_call_signatures": list(state.recent_call_signatures),
        "recent_failure_kinds": list(state.recent_failure_kinds),
        "budget": {
            "model_calls": b.model_calls,
            "capability_calls": b.capability_calls,
            "input_tokens": b.input_tokens,
            "output_tokens": b.output_tokens,
            "usd": b.usd,
            "active_s": b.active_s,
            # Optional (older payloads have none): read back as empty.
            **(
                {"by_model": {name: u.to_dict() for name, u in b.by_model.items()}}
                if b.by_model
                else {}
            ),
        },
        "graceful_stop": state.graceful_stop,
        "pending_wave": None
        if wave is None
        else {
            "assistant_ref": wave.assistant_ref,
            "policy": wave.policy,
            "admitted": list(wave.admitted),
            "rejected": [list(r) for r in wave.rejected],
        },
        # Empty slots are left out (state_from_dict restores them as empty).
        "slots": {
            name: dict(value)
            for name in _SLOTS
            if (
                value := host_state
                if name == "host_state" and host_state is not None
                else getattr(state, name)
            )
        },
    }


def _position(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("a call position must be a non-negative integer")
    return value


def state_from_dict(data: Mapping[str, Any]) -> LoopExecutionState:
    """Inverse of :func:`state_to_dict`. Raises ``KeyError``/``TypeError`` on a bad payload."""
    b = data["budget"]
    w = data["pending_wave"]
    slots = data.get("slots") or {}
    done = data.get("completion")
    return LoopExecutionState(
        iteration=int(data["iteration"]),
        assistant_refs=tuple(data["assistant_refs"]),
        result_refs=tuple(data["result_refs"]),
        transcript_seq=int(data["transcript_seq"]),
        last_gate=data["last_gate"],
        input_cursor=int(data["input_cursor"]),
        surface_version=str(data["surface_version"]),
        recent_call_signatures=tuple(data["recent_call_signatures"]),
        recent_failure_kinds=tuple(data["recent_failure_kinds"]),
        budget=BudgetLedger(
            model_calls=int(b["model_calls"]),
            capability_calls=int(b["capability_calls"]),
            input_tokens=int(b["input_tokens"]),
            output_tokens=int(b["output_tokens"]),
            usd=float(b["usd"]),
            active_s=float(b["active_s"]),
            by_model={str(k): ModelUsage.from_dict(v) for k, v in b.get("by_model", {}).items()},
        ),
        graceful_stop=data["graceful_stop"],
        pending_wave=None
        if w is None
        else PendingWave(
            assistant_ref=w["assistant_ref"],
            policy=w["policy"],
            admitted=tuple(_position(i) for i in w["admitted"]),
            rejected=tuple((_position(i), str(m)) for i, m in w["rejected"]),
        ),
        completion=None
        if done is None
        else Completion(
            kind=str(done["kind"]),
            refs=tuple(done["refs"]),
            reason=None if done.get("reason") is None else str(done["reason"]),
        ),
        **{name: dict(value) for name, value in slots.items() if name not in _RETIRED_SLOTS},
    )


def encode_checkpoint(
    state: LoopExecutionState,
    *,
    family_digest: str,
    host_state: Mapping[str, Any] | None = None,
    definition: Mapping[str, Any] | None = None,
) -> bytes:
    """Checkpoint payload: deterministic JSON of the state, the schema id and the family digest.

    ``host_state`` (if given) is written in place of the state's own (the host adds its part
    at each commit without copying the state for it). ``definition`` (if given) is written
    under :data:`DEFINITION_KEY`.

    Sorted keys, no whitespace, no NaN: byte-identical for equal states. Not RFC 8785 (which is
    reserved for hashes, where cross-implementation identity matters): the pure-Python RFC 8785
    encoder costs more than the rest of a tick, and the payload only round-trips through us.
    The bytes are those of the standard encoder over :func:`state_to_dict` (a run's commits
    use a :class:`CheckpointEncoder`, which makes the same bytes faster).
    """
    return CheckpointEncoder(family_digest, definition).encode(state, host_state=host_state)


_CHECKPOINT_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""The reference encoding of a checkpoint (``json.dumps`` with options builds one per call)."""

_string = encode_basestring
_EMPTY_HOST_STATE = '{"host_state":{"poisoned_hooks":[]}}'
"""The ``slots`` of nearly every checkpoint: no strategy state, no poisoned hook, no gate."""


_NO_MEMO: tuple[object, str] = (object(), "")
"""A memo no value is (``is``) the object of."""


def _generic(value: Any) -> str:
    return _CHECKPOINT_JSON.encode(value)


def _number(value: Any) -> str:
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and isfinite(value):
        return float.__repr__(value)
    return _generic(value)  # bools, subclasses, NaN (refused): as the standard encoder does


def _optional_string(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is str:
        return _string(value)
    return _generic(value)


def _strings(values: Sequence[Any]) -> tuple[str, bool]:
    """A sequence of strings as a JSON array, and whether it was one (only then memoised)."""
    for v in values:
        if type(v) is not str:
            return _generic(list(values)), False
    return "[" + ",".join(map(_string, values)) + "]", True


# In the functions below, an exact ``int`` is written as ``f"{n}"`` and a finite exact ``float``
# as ``f"{x!r}"``: the standard encoder's text for them (``x - x == 0.0`` is false for NaN and
# the infinities). Anything else takes the per-value path, which defers to the standard encoder.


def _usage(name: Any, u: Any) -> str:
    if (
        type(name) is not str
        or type(u) is not ModelUsage
        or u.estimated
        or u.cache_read_tokens
        or u.cache_write_tokens
    ):
        raise _Unusual
    a, b, c, usd = u.input_tokens, u.model_calls, u.output_tokens, u.usd
    if int is type(a) is type(b) is type(c) and float is type(usd) and usd - usd == 0.0:
        return (
            f'{_string(name)}:{{"input_tokens":{a},"model_calls":{b},"output_tokens":{c},'
            f'"usd":{usd!r}}}'
        )
    return (
        f'{_string(name)}:{{"input_tokens":{_number(a)},"model_calls":{_number(b)},'
        f'"output_tokens":{_number(c)},"usd":{_number(usd)}}}'
    )


class _Unusual(Exception):
    """A value the fast path does not write (the standard encoder writes it)."""


def _budget(b: BudgetLedger) -> str:
    by_model = b.by_model
    models = ""
    if by_model:
        try:
            if type(by_model) is not dict:
                raise _Unusual
            models = ',"by_model":{' + ",".join(_usage(k, by_model[k]) for k in sorted(by_model))
            models += "}"
        except (_Unusual, TypeError):  # TypeError: keys that do not sort
            usage = {name: u.to_dict() for name, u in by_model.items()}
            models = ',"by_model":' + _generic(usage)
    active, calls, tin, mc, tout, usd = (
        b.active_s,
        b.capability_calls,
        b.input_tokens,
        b.model_calls,
        b.output_tokens,
        b.usd,
    )
    if (
        int is type(calls) is type(tin) is type(mc) is type(tout)
        and float is type(active) is type(usd)
        and active - active == 0.0
        and usd - usd == 0.0
    ):
        return (
            f'{{"active_s":{active!r}{models},"capability_calls":{calls},"input_tokens":{tin},'
            f'"model_calls":{mc},"output_tokens":{tout},"usd":{usd!r}}}'
        )
    return (
        f'{{"active_s":{_number(active)}{models},"capability_calls":{_number(calls)},'
        f'"input_tokens":{_number(tin)},"model_calls":{_number(mc)},'
        f'"output_tokens":{_number(tout)},"usd":{_number(usd)}}}'
    )


def _pending_wave(wave: PendingWave) -> str:
    admitted, rejected = wave.admitted, wave.rejected
    ref, policy = wave.assistant_ref, wave.policy
    # Loops rather than all(<generator>): a wave has a call or two, and a generator per check
    # cost more than the checks.
    plain = type(ref) is str and type(policy) is str
    for i in admitted if plain else ():
        if type(i) is not int:
            plain = False
            break
    for r in rejected if plain else ():
        if not (type(r) is tuple and len(r) == 2 and type(r[0]) is int and type(r[1]) is str):
            plain = False
            break
    if plain:
        refused = ",".join([f"[{i},{_string(m)}]" for i, m in rejected]) if rejected else ""
        return (
            f'{{"admitted":[{",".join(map(str, admitted))}],"assistant_ref":{_string(ref)},'
            f'"policy":{_string(policy)},"rejected":[{refused}]}}'
        )
    return _generic(
        {
            "assistant_ref": ref,
            "policy": policy,
            "admitted": list(admitted),
            "rejected": [list(r) for r in rejected],
        }
    )


def _slots(state: LoopExecutionState, host_state: Mapping[str, Any] | None) -> str:
    own = state.host_state if host_state is None else host_state
    if not state.model_state and not state.stop_state:
        if (
            type(own) is dict
            and len(own) == 1
            and type(hooks := own.get("poisoned_hooks")) is list
            and not hooks
        ):
            return _EMPTY_HOST_STATE
        if not own:
            return "{}"
    # Empty slots are left out (state_from_dict restores them as empty), as in state_to_dict.
    return _generic(
        {
            name: dict(value)
            for name in _SLOTS
            if (value := own if name == "host_state" else getattr(state, name))
        }
    )


class CheckpointEncoder:
    """The checkpoint payloads of one run: the bytes of :func:`encode_checkpoint`, made faster.

    Every field is written in the standard encoder's order (sorted keys) with the standard
    encoder's text for each value (a value of an unexpected type goes through the standard
    encoder itself, so the bytes never differ). The encoded form of the reference tuples (rows,
    rings) is kept from one checkpoint to the next while the tuple is the same object: most of
    them do not change between two boundaries, and a tuple of strings cannot change in place.
    """

    __slots__ = ("_assistant", "_head", "_kinds", "_results", "_signatures", "_surface", "_texts")

    def __init__(self, family_digest: str, definition: Mapping[str, Any] | None = None) -> None:
        # The run's definition never changes within a segment: encoded once, here.
        defined = "" if definition is None else f'"{DEFINITION_KEY}":{_generic(definition)},'
        self._head = (
            f'{{{defined}"family_digest":{_optional_string(family_digest)},'
            f'"schema_id":{_string(STATE_SCHEMA_ID)},"state":{{"assistant_refs":'
        )
        # ``(tuple, its encoded form)`` of the previous checkpoint, one per reference field.
        self._assistant = self._results = self._signatures = self._kinds = _NO_MEMO
        self._surface = _NO_MEMO
        self._texts: dict[str, str] = {}
        """The encoded members of the rings: a ring moves by a value or two per wave, so most
        of its members were encoded for the checkpoint before."""

    def _remember_ring(self, field: str, values: tuple[str, ...]) -> str:
        if type(values) is not tuple:
            return self._remember(field, values)
        texts = self._texts
        if len(texts) > 4 * RING:
            texts.clear()  # what the current rings hold is encoded again below, once
        parts: list[str] = []
        for v in values:
            if type(v) is not str:
                return self._remember(field, values)
            text = texts.get(v)
            if text is None:
                text = texts[v] = _string(v)
            parts.append(text)
        text = "[" + ",".join(parts) + "]"
        setattr(self, field, (values, text))
        return text

    def _remember(self, field: str, values: tuple[str, ...]) -> str:
        text, plain = _strings(values)
        if plain and type(values) is tuple:
            setattr(self, field, (values, text))
        return text

    def encode(
        self, state: LoopExecutionState, *, host_state: Mapping[str, Any] | None = None
    ) -> bytes:
        """The payload of ``state`` (``host_state``, if given, in place of the state's own)."""
        done = state.completion
        completion = ""
        if done is not None:
            fields: dict[str, Any] = {"kind": done.kind, "refs": list(done.refs)}
            if done.reason is not None:
                fields["reason"] = done.reason
            completion = ',"completion":' + _generic(fields)
        wave = state.pending_wave
        pending = "null" if wave is None else _pending_wave(wave)
        cursor: object = state.input_cursor
        iteration: object = state.iteration
        seq: object = state.transcript_seq
        if not int is type(cursor) is type(iteration) is type(seq):
            cursor, iteration, seq = _number(cursor), _number(iteration), _number(seq)
        surface = state.surface_version
        stop = "null" if state.graceful_stop is None else _optional_string(state.graceful_stop)
        gate = "null" if state.last_gate is None else _optional_string(state.last_gate)
        m, values = self._assistant, state.assistant_refs
        assistant = m[1] if m[0] is values else self._remember("_assistant", values)
        m, values = self._results, state.result_refs
        results = m[1] if m[0] is values else self._remember("_results", values)
        m, values = self._signatures, state.recent_call_signatures
        signatures = m[1] if m[0] is values else self._remember_ring("_signatures", values)
        m, values = self._kinds, state.recent_failure_kinds
        kinds = m[1] if m[0] is values else self._remember_ring("_kinds", values)
        m = self._surface
        if m[0] is surface:
            surface_text = m[1]
        else:
            if type(surface) is str:
                surface_text = _string(surface)
                self._surface = (surface, surface_text)
            else:
                surface_text = _generic(surface)
        return (
            f"{self._head}{assistant},"
            f'"budget":{_budget(state.budget)}{completion},'
            f'"graceful_stop":{stop},'
            f'"input_cursor":{cursor},"iteration":{iteration},'
            f'"last_gate":{gate},"pending_wave":{pending},'
            f'"recent_call_signatures":{signatures},"recent_failure_kinds":{kinds},'
            f'"result_refs":{results},'
            f'"slots":{_slots(state, host_state)},'
            f'"surface_version":{surface_text},'
            f'"transcript_seq":{seq}}}}}'
        ).encode()
