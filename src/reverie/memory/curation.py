"""Curation ("dreaming"): the memory side of the passes that tidy an owner's memory.

A provider's manifest *arms* curation by declaring an ``after_turn`` scheduled op with a pass;
the operator *enables* it with ``[memory] curation_interval_turns = N`` (or
``Runtime.open(..., curation_interval_turns=N)``). The runtime then counts each owner's
completed interactive turns and, on every Nth, submits one unbound structured pass
(:mod:`reverie.runtime.curation`). This module holds what that needs without a runtime:

- :func:`curation_op`: the opt-in rules (``N >= 2``; an interval with no declared op is a
  start-up error naming the provider);
- :class:`TurnCounter`: completed turns per owner ``(tenant, user)``, in bounded memory;
- :class:`PassGuard`: write-once and compare-and-swap *in code* — a pass's second
  ``memory_write`` is refused before it reaches the provider, and its one write is conditional
  on the version its ``memory_read`` saw;
- :data:`REPORT_SCHEMA`, :func:`pass_limits`, :func:`pass_id`, :func:`pass_report`: the shape
  of a pass and of the record kept for it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from reverie.core.capability import ENDED_BEFORE_RUNNING
from reverie.core.limits import Limits
from reverie.core.scope import Scope
from reverie.core.transcript import TranscriptItem
from reverie.errors import CapabilityError, ConfigError
from reverie.memory.manifest import PassSpec, ScheduledOp, check_prompt_path
from reverie.memory.provider import MemoryProvider
from reverie.memory.tools import BUDGET_REFUSAL, WriteMode
from reverie.store.documents import MemoryPassRecord

__all__ = [
    "CURATION_HOOK_NAME",
    "DEFAULT_MAX_OWNERS",
    "MIN_INTERVAL_TURNS",
    "PASS_OPENING",
    "PASS_WALL_CLOCK_S",
    "REPORT_NAME",
    "REPORT_SCHEMA",
    "CurationRunner",
    "PassGuard",
    "TurnCounter",
    "WriteMode",
    "WriteOutcome",
    "check_interval",
    "curation_op",
    "load_pass_prompt",
    "pass_id",
    "pass_instructions",
    "pass_limits",
    "pass_prefix",
    "pass_report",
]

CURATION_HOOK_NAME: Final = "reverie.memory.curation"
"""The builtin ``after_turn`` hook that counts turns and submits passes."""

MIN_INTERVAL_TURNS: Final = 2
"""``curation_interval_turns`` below this is a configuration error: a pass after every turn
would double the model traffic of every conversation."""

DEFAULT_MAX_OWNERS: Final = 10_000
"""Owners whose turn counts are kept. Past it the least recently active owner's count is
dropped (that owner's next pass comes N turns after their next turn): memory stays bounded
however many owners a runtime serves."""

PASS_WALL_CLOCK_S: Final = 90.0
"""Wall-clock budget of one pass."""

REPORT_NAME: Final = "memory_curation_report"
"""The output contract's name."""

REPORT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "changed": {"type": "boolean", "description": "Whether you rewrote the document."},
        "summary": {
            "type": "string",
            "maxLength": 500,
            "description": "What you did, in at most 500 characters.",
        },
        "entries_merged": {"type": "integer", "minimum": 0},
        "entries_removed": {"type": "integer", "minimum": 0},
        "conflicts": {
            "type": "array",
            "items": {"type": "string", "maxLength": 500},
            "maxItems": 20,
            "description": "Facts you could not reconcile, or a write that reported conflict.",
        },
    },
    "required": ["changed", "summary"],
    "additionalProperties": False,
}
"""The JSON report a pass ends with (docs/memory.md)."""

PASS_OPENING: Final = (
    "Curate the standing memory document MEMORY.md now, following your instructions. "
    "When you are done, call structured_result once with your report."
)
"""The user message a pass opens with (its instructions are the manifest's prompt)."""

WriteOutcome = Literal["none", "written", "patched", "conflict", "refused", "unknown"]
"""What a pass's one write came to, as the host saw it (``unknown``: interrupted while it ran)."""


def check_interval(value: object, *, key: str = "curation_interval_turns") -> int | None:
    """``value`` as a curation interval (``None``: curation off).

    Raises:
        ConfigError: Not a whole number, or below :data:`MIN_INTERVAL_TURNS`; names ``key``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_INTERVAL_TURNS:
        raise ConfigError(
            f"{key}: must be a whole number of turns, at least {MIN_INTERVAL_TURNS}. Fix: set "
            f"{key} = 10 (a pass after every 10th completed turn), or leave it unset to keep "
            "curation off"
        )
    return value


def curation_op(provider: MemoryProvider | None, interval: int | None) -> ScheduledOp | None:
    """The provider's ``after_turn`` op, checked against the operator's interval.

    Returns:
        The op (``None`` when the provider declares none and curation is not asked for).

    Raises:
        ConfigError: An interval is set but there is no provider, or its manifest declares no
            ``after_turn`` pass (the message names the provider).
    """
    op = provider.manifest.op_for("after_turn") if provider is not None else None
    if interval is None or op is not None:
        return op
    if provider is None:
        raise ConfigError(
            "curation_interval_turns is set but memory is off. Fix: give the runtime a memory "
            'provider (memory=NativeMemory(), or [memory] provider = "native"), or remove '
            "curation_interval_turns"
        )
    name = provider.manifest.name
    raise ConfigError(
        f"curation_interval_turns is set but memory provider {name!r} declares no curation "
        f'pass ([[memory.scheduled_ops]] with trigger = "after_turn" in its manifest '
        f"{provider.manifest.source}). Fix: remove curation_interval_turns, or use a provider "
        'that declares one (e.g. provider = "native")'
    )


def load_pass_prompt(op: ScheduledOp, *, provider: str, base_dir: str | None) -> str:
    """The pass's instructions: the manifest's ``prompt`` file, inside the manifest's directory.

    The path is relative (checked when the manifest was built) and, once every symlink is
    resolved, must still lie inside ``base_dir``: a manifest cannot point a pass at a file
    elsewhere on the machine.

    Raises:
        ConfigError: The manifest has no directory; the file is outside it, cannot be read or
            is empty (names the provider and the path).
    """
    prompt = check_prompt_path(op.pass_.prompt)
    if base_dir is None:
        raise ConfigError(
            f"memory provider {provider!r}: its manifest has no directory to read the curation "
            f"prompt {prompt!r} from. Fix: build the manifest with base_dir=..."
        )
    root = Path(base_dir).resolve()
    path = (root / prompt).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            f"memory provider {provider!r}: the curation prompt {prompt!r} resolves outside "
            "the manifest's directory (a symlink?). Fix: ship the file itself next to the "
            "manifest"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"memory provider {provider!r}: the curation prompt {prompt!r} cannot be read "
            f"({type(exc).__name__}). Fix: ship the file next to the provider's manifest"
        ) from exc
    if not text.strip():
        raise ConfigError(f"memory provider {provider!r}: the curation prompt {prompt!r} is empty")
    return text


def pass_id(scope: Scope, trigger: str) -> str:
    """``memory-curation-{tenant}-{user}-{trigger}``: the pass's id and idempotency key.

    ``trigger`` is the id of the run whose completion made the pass due, so every interval
    gets its own pass and a repeated submit for the same turn returns the same pass. A scope
    with an agent or a project (one turn may make several of the owner's scopes due) adds
    ``-{digest of the scope}``.
    """
    base = f"{pass_prefix(scope)}{trigger}"
    if scope.agent is None and scope.project is None:
        return base
    return f"{base}-{hashlib.sha256(scope.key().encode('utf-8')).hexdigest()[:12]}"


def pass_prefix(scope: Scope) -> str:
    """What every pass id of the owner ``(scope.tenant, scope.user)`` starts with."""
    return f"memory-curation-{scope.tenant}-{scope.user}-"


def pass_instructions(prompt: str, spec: PassSpec) -> str:
    """A pass's system prompt: the manifest's ``prompt`` and, after it, the pass's budget.

    The budget is stated in the prompt (not only enforced), with the rule that matters when it
    runs short: a pass that ends without its report is worse than one that changed nothing —
    the report is what says whether memory was touched.
    """
    calls = spec.max_model_calls
    return (
        f"{prompt.rstrip()}\n\n"
        f"Your budget: at most {calls} model calls for this whole pass (each of your replies "
        "is one), and one memory_write. Ending without calling structured_result is worse "
        "than changing nothing: if you are running short, stop and report (changed=false if "
        "you did not write). If MEMORY.md is missing or empty, make no edits and report that.\n"
    )


def pass_limits(spec: PassSpec) -> Limits:
    """A pass's hard budgets: model calls from the manifest, ``max(4·tools, 4)`` capability
    calls, :data:`PASS_WALL_CLOCK_S` of wall clock."""
    return Limits(
        max_model_calls=spec.max_model_calls,
        max_capability_calls=max(4 * len(spec.tools), 4),
        wall_clock_s=PASS_WALL_CLOCK_S,
    )


class TurnCounter:
    """Completed turns per owner ``(tenant, user)``, for at most ``max_owners`` owners.

    An ``OrderedDict`` used as an LRU: counting a turn moves its owner to the end, and an
    owner beyond the cap evicts the least recently active one. An owner not in the map is
    :meth:`seed`-ed first (the runtime counts their turns since their last pass in the store),
    so a new process — or an owner evicted earlier — picks up where the count was.

    Args:
        interval: A pass is due on every ``interval``-th counted turn of an owner.
        max_owners: How many owners' counts are kept (:data:`DEFAULT_MAX_OWNERS`).
    """

    def __init__(self, interval: int, *, max_owners: int = DEFAULT_MAX_OWNERS) -> None:
        if max_owners < 1:
            raise ValueError("max_owners must be at least 1")
        self.interval = interval
        self.max_owners = max_owners
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def count(self, owner: tuple[str, str]) -> bool:
        """Count one completed turn of ``owner``; whether a pass is due now."""
        n = self._counts.pop(owner, 0) + 1
        if n >= self.interval:
            n = 0  # due: the next interval starts over
        self._counts[owner] = n
        while len(self._counts) > self.max_owners:
            self._counts.popitem(last=False)
        return n == 0

    def seed(self, owner: tuple[str, str], turns: int) -> None:
        """Start ``owner`` at ``turns`` already counted (at most one short of a pass)."""
        self._counts[owner] = max(0, min(turns, self.interval - 1))
        self._counts.move_to_end(owner)
        while len(self._counts) > self.max_owners:
            self._counts.popitem(last=False)

    def __contains__(self, owner: object) -> bool:
        return owner in self._counts

    def get(self, owner: tuple[str, str]) -> int:
        """Turns counted for ``owner`` since its last pass."""
        return self._counts.get(owner, 0)

    def __len__(self) -> int:
        return len(self._counts)


class PassGuard:
    """Write-once and compare-and-swap for one pass, enforced in the tools (a ``WriteGuard``).

    - Each ``memory_read`` records the version it saw, per path.
    - ``memory_write`` is admitted once per pass. Any later write is refused with a tool
      error (``policy_denied``) and never reaches the provider.
    - The admitted write is a **replace** of the whole document, conditional on the version
      the pass read: ``append`` and ``old_string`` patches are refused (an appended "tidied"
      copy would duplicate every fact); a path it did not read, or read while it did not
      exist (version 0: a pass tidies memory, it never creates it from nothing), is refused;
      an ``expected_version`` other than the one read is refused and an omitted one is filled
      in; a document that was empty (whitespace only) when read is refused like a missing one
      (there is nothing to tidy, and a pass never writes memory into it); an empty new
      document is refused (erasing memory is not tidying it). So a person's
      write that lands between the pass's read and its write wins, and the pass gets
      ``conflict``.

    Every refusal is a ``policy_denied`` tool error the model sees, and does not use the
    budget. The guard's state is rebuilt from the pass's own transcript when the pass is
    resumed (``load``), so a crash cannot grant a second write.

    Args:
        load: Returns the pass run's transcript rows; read once, before the first tool call
            this guard sees (``None``: a fresh pass with nothing to restore).
    """

    def __init__(
        self, load: Callable[[], Awaitable[Sequence[TranscriptItem]]] | None = None
    ) -> None:
        self._load = load
        self._read: dict[str, int] = {}
        self._empty: set[str] = set()
        self.writes = 0
        """Writes admitted (at most 1)."""
        self.outcome: WriteOutcome = "none"
        """What the admitted write came to."""
        self.path: str | None = None
        """The path the admitted write targeted."""

    @classmethod
    def from_transcript(cls, rows: Sequence[TranscriptItem]) -> PassGuard:
        """The guard of a pass whose transcript is ``rows`` (what its tools saw and did)."""
        guard = cls()
        guard.replay(rows)
        return guard

    async def ready(self) -> None:
        """Restore the state from the pass's transcript, once (a resumed pass)."""
        if self._load is not None:
            load, self._load = self._load, None
            self.replay(await load())

    def replay(self, rows: Sequence[TranscriptItem]) -> None:
        """Apply the memory tool results in ``rows`` (in order) to this guard."""
        for row in rows:
            if row.role != "tool" or row.superseded:
                continue
            if row.name == "memory_read":
                seen = _read_result(row.content)
                if seen is not None:
                    path, version, empty = seen
                    self.read(path, version, empty=empty)
            elif row.name == "memory_write":
                outcome = _write_result(row.content)
                if outcome is not None:
                    self.writes += 1
                    self.outcome = outcome
                    self.path = _write_target(row.content)

    def read(self, path: str, version: int, *, empty: bool = False) -> None:
        """Remember the version ``path`` was read at, and whether it was empty (whitespace
        only); the latest read wins."""
        self._read[path] = version
        if empty:
            self._empty.add(path)
        else:
            self._empty.discard(path)

    def admit(
        self,
        path: str,
        expected_version: int | None,
        *,
        mode: WriteMode = "replace",
        content: str = "",
    ) -> int:
        """Admit the pass's one write: a replace, conditional on the version read.

        Raises:
            CapabilityError: ``policy_denied``: a second write; a path not read or read while
                missing; an append or a patch; another version; an empty document.
        """
        if self.writes >= 1:
            raise _denied(
                "a curation pass may write once, and this pass has written already. "
                "Finish now: call structured_result with your report."
            )
        version = self._read.get(path)
        if version is None:
            raise _denied(
                f"read {path} with memory_read first. A curation pass's write is conditional "
                "on the version it read."
            )
        if version == 0:
            raise _denied(
                f"{path} does not exist, and a curation pass never creates a document: there "
                "is nothing to tidy. Finish now: call structured_result with changed=false."
            )
        if path in self._empty:
            raise _denied(
                f"{path} is empty, and a curation pass never writes into an empty document: "
                "there is nothing to tidy. Finish now: call structured_result with "
                f"changed=false and a summary saying {path} was empty."
            )
        if mode != "replace":
            raise _denied(
                f"a curation pass rewrites the whole document; {mode} is not allowed (an "
                "appended or patched copy would duplicate or lose facts). Call memory_write "
                f"once with content = the whole tidied document and expected_version={version}."
            )
        if expected_version is not None and expected_version != version:
            raise _denied(f"expected_version must be the version you read ({version}).")
        if not content.strip():
            raise _denied(
                "the new document is empty; a curation pass tidies memory, it never erases "
                "it. Keep every distinct fact."
            )
        self.writes += 1
        self.path = path
        return version

    def wrote(self, path: str, status: str) -> None:
        """Record what the admitted write came to."""
        if status in ("written", "patched", "conflict", "refused"):
            self.outcome = status  # type: ignore[assignment]

    @property
    def changed(self) -> bool:
        """Whether the pass's write changed a document."""
        return self.outcome in ("written", "patched")


def _denied(message: str) -> CapabilityError:
    return CapabilityError("policy_denied", f"refused: {message} Nothing was written.")


_VERSION = re.compile(r'"version":\s*(\d+)')
_PATH = re.compile(r'"path":\s*"([^"\\]+)"')


def _read_result(content: str) -> tuple[str, int, bool] | None:
    """``(path, version, empty)`` of a ``memory_read`` result row (``None``: it failed)."""
    if not content.startswith("{"):
        return None
    try:
        value = json.loads(content)
    except ValueError:
        # A long document may have been cut by the output cap: read the leading fields by
        # pattern. They are serialised in order, ``path`` and ``version`` before ``content``.
        head = content[: content.find('"content"')] if '"content"' in content else ""
        path, version = _PATH.search(head), _VERSION.search(head)
        if path is None or version is None:
            return None
        return path.group(1), int(version.group(1)), False  # cut: it was long, not empty
    if not isinstance(value, dict) or not isinstance(value.get("version"), int):
        return None
    text = value.get("content")
    empty = not isinstance(text, str) or not text.strip()
    return str(value.get("path")), int(value["version"]), empty


def _write_result(content: str) -> WriteOutcome | None:
    """What a ``memory_write`` result row says about the guard's one write.

    ``None``: it never got past the guard (malformed, refused by policy, denied by a hook, not
    run). Otherwise the outcome: ``written``/``patched``/``conflict`` as reported, ``refused``
    when the provider refused it (over budget, a store error), ``unknown`` when the pass was
    interrupted while it ran (it may have landed).
    """
    if content.startswith("{"):
        try:
            status = json.loads(content).get("status")
        except (ValueError, AttributeError):
            return None
        return status if status in ("written", "patched", "conflict") else None
    if content.startswith(ENDED_BEFORE_RUNNING):
        return None  # the run ended before the call started (e.g. it was gated): no write
    if content.startswith(("interrupted:", "cancelled:")):
        return "unknown"
    if content.startswith("error ("):
        kind = content[len("error (") :].split(")", 1)[0]
        if kind == "policy_denied" or (kind == "input_invalid" and BUDGET_REFUSAL not in content):
            return None  # refused before the provider saw it
        return "refused"
    return None


def _write_target(content: str) -> str | None:
    found = _PATH.search(content[:512])
    return found.group(1) if found is not None else None


def pass_report(
    output: object,
    *,
    status: str,
    guard: PassGuard,
    error: str | None = None,
) -> dict[str, Any]:
    """The report kept for a pass: the model's report plus what the host saw.

    The host's facts win over the model's claims: ``changed`` is whether the write landed,
    ``write`` is its outcome (``none``/``written``/``patched``/``conflict``/``refused``), and a
    write that got ``conflict`` is always listed in ``conflicts``. ``status`` is the pass run's
    (``completed``, ``failed``, ``cancelled``); ``error`` says why a pass did not complete.
    """
    report: dict[str, Any] = dict(output) if isinstance(output, Mapping) else {}
    if "summary" not in report:
        report["summary"] = f"the pass ended {status}" + (f": {error}" if error else "")
    report["changed"] = guard.changed
    report["write"] = guard.outcome
    report["status"] = status
    if error:
        report["error"] = error
    if guard.outcome == "conflict":
        note = (
            f"{guard.path} changed between the pass's read and its write; the newer text was "
            "kept and the pass wrote nothing"
        )
        conflicts = [str(c) for c in report.get("conflicts") or ()]
        report["conflicts"] = [*conflicts, note]
    return report


class CurationRunner(Protocol):
    """What ``rt.memory`` asks of the runtime's curation (:mod:`reverie.runtime.curation`)."""

    async def run_now(self, scope: Scope, *, model: Any = None) -> MemoryPassRecord:
        """Run one pass for ``scope`` now and wait for its record."""
        ...

    async def wait(self) -> list[MemoryPassRecord]:
        """Wait for the passes in flight; their records."""
        ...
