"""Approving a gated call with edited arguments (DESIGN §20, docs/tools.md).

A person may approve a call with other arguments than the model's. The rules kept here:

- the tool cannot change, only its arguments, and only when it allows editing
  (``@tool(..., editable=False)`` forbids it);
- the edited arguments fit the tool's schema, checked before anything is stored (a
  :class:`~reverie.errors.GateEditError`, the gate stays pending);
- people see the arguments sanitised (secret-named values read as the mask): an edit that leaves
  a secret as the mask keeps the model's original value, so the mask string never reaches the
  tool, and a mask where nothing was masked is refused;
- the model is told: the result it sees says a person approved the call with edited arguments
  and shows the difference (secrets masked), while its own call stays in the transcript as made.

The runtime checks an edit (:func:`resolution_for`) and stores it with the approval in one write;
the run's tool port restores masked secrets (:func:`unmask`) and writes the note
(:func:`edit_note`) into the journaled outcome, so a crash between the approval and the call
runs the edited call exactly once, and a replay answers with the same note.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from reverie.capabilities.schema import InvalidArguments
from reverie.core.canonical import NotCanonicalizable, check_json_value, digest
from reverie.core.redact import REDACTED, is_secret_name, mask_secrets, redact
from reverie.errors import GateEditError, NestedTooDeep
from reverie.store.base import GateRecord, GateResolution

__all__ = ["edit_note", "resolution_for", "unmask"]

_NOTE_VALUE_CHARS = 200
"""A value longer than this is cut in the note the model reads (the whole edit is journaled)."""


def resolution_for(
    gate: GateRecord,
    capability: Any | None,
    arguments: Mapping[str, Any] | None,
    *,
    by: str | None,
) -> GateResolution:
    """What an approval of ``gate`` stores: who, the digests, and the checked edit if any.

    Raises:
        GateEditError: the tool is unknown here or forbids editing, or the arguments are not a
            JSON object that fits its schema, or they put the mask where nothing was masked.
    """
    shown = digest(dict(gate.arguments))
    if arguments is None:
        return GateResolution(resolved_by=by, shown_digest=shown, approved_digest=shown)
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise GateEditError(f"gate {gate.ref}: the edited arguments must be a JSON object")
    edited = dict(arguments)
    try:
        check_json_value(edited)
    except (NotCanonicalizable, NestedTooDeep) as exc:
        raise GateEditError(f"gate {gate.ref}: invalid edited arguments: {exc}") from None
    if edited == dict(gate.arguments):
        # Nothing changed: an approval of the call as made.
        return GateResolution(resolved_by=by, shown_digest=shown, approved_digest=shown)
    if capability is None:
        raise GateEditError(
            f"gate {gate.ref}: the tool {gate.tool} is not known to this process, so edited "
            "arguments cannot be checked; approve it as made or deny it"
        )
    if not getattr(capability.descriptor, "editable", True):
        raise GateEditError(
            f"gate {gate.ref}: the tool {gate.tool} does not allow editing its arguments "
            "(editable=False); approve the call as made or deny it"
        )
    _check_masks(gate, edited, gate.arguments, path="")
    _validate(gate, capability, edited)
    return GateResolution(
        resolved_by=by,
        shown_digest=shown,
        approved_digest=digest(edited),
        edited_arguments=edited,
    )


def _check_masks(gate: GateRecord, edited: Any, shown: Any, *, path: str) -> None:
    """A mask in the edit must stand where the person was shown one (an original secret)."""
    if isinstance(edited, Mapping):
        for key, value in edited.items():
            there = shown.get(key) if isinstance(shown, Mapping) else None
            if value == REDACTED and is_secret_name(key) and there != REDACTED:
                raise GateEditError(
                    f"gate {gate.ref}: {path}{key} is the mask {REDACTED!r} but no secret was "
                    "masked there; give the value itself"
                )
            _check_masks(gate, value, there, path=f"{path}{key}.")
    elif isinstance(edited, list):
        for i, value in enumerate(edited):
            there = shown[i] if isinstance(shown, list) and i < len(shown) else None
            _check_masks(gate, value, there, path=f"{path}{i}.")


def _validate(gate: GateRecord, capability: Any, edited: dict[str, Any]) -> None:
    """The edit fits the tool's schema: the tool's own validator, else its JSON Schema."""
    check = getattr(capability, "validate_arguments", None)
    try:
        if callable(check):
            check(edited)
        else:
            jsonschema.validate(edited, dict(capability.descriptor.parameters))
    except InvalidArguments as exc:
        problem = redact(str(exc), _secret_values(edited))
        raise GateEditError(
            f"gate {gate.ref}: the edited arguments do not fit: {problem}"
        ) from None
    except jsonschema.ValidationError as exc:
        problem = redact(exc.message, _secret_values(edited))
        raise GateEditError(
            f"gate {gate.ref}: the edited arguments do not fit: {problem}"
        ) from None


def _secret_values(value: Any, *, secret: bool = False) -> list[str]:
    """The values under secret-named keys, as text: an error quoting a value must not show
    them (it reaches an HTTP answer, a terminal, a log)."""
    if isinstance(value, Mapping):
        found: list[str] = []
        for key, item in value.items():
            found += _secret_values(item, secret=secret or is_secret_name(key))
        return found
    if isinstance(value, list):
        return [v for item in value for v in _secret_values(item, secret=secret)]
    if not secret or value is None:
        return []
    text = str(value)
    return [text, repr(value), json.dumps(value)]


def unmask(edited: Any, original: Any) -> Any:
    """``edited`` with each secret-named value left as the mask replaced by the model's value
    at the same place in ``original``: the mask string is never what a tool receives."""
    if isinstance(edited, Mapping):
        out: dict[str, Any] = {}
        for key, value in edited.items():
            there = original.get(key) if isinstance(original, Mapping) else None
            if value == REDACTED and is_secret_name(key) and isinstance(original, Mapping):
                if key in original:
                    out[key] = original[key]
                continue  # nothing to restore: the mask is not passed on (checked on approval)
            out[key] = unmask(value, there)
        return out
    if isinstance(edited, list):
        return [
            unmask(v, original[i] if isinstance(original, list) and i < len(original) else None)
            for i, v in enumerate(edited)
        ]
    return edited


def edit_note(original: Mapping[str, Any], ran: Mapping[str, Any]) -> str:
    """What the model reads before the result: a person edited the call, and how (secret
    values masked, long values cut)."""
    before = mask_secrets(dict(original))
    after = mask_secrets(dict(ran))
    changes: list[str] = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            changes.append(f"{key}: removed (was {_show(before[key])})")
        elif key not in before:
            changes.append(f"{key}: added {_show(after[key])}")
        elif before[key] != after[key]:
            changes.append(f"{key}: {_show(before[key])} -> {_show(after[key])}")
    return (
        f"[A person approved this call with edited arguments; it ran with them, not as you "
        f"made it. Changed: {'; '.join(changes) or 'nothing visible'}. Result follows.]"
    )


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) > _NOTE_VALUE_CHARS:
        return text[:_NOTE_VALUE_CHARS] + "…"
    return text
