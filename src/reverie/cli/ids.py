"""Ids as people type them: a whole run id, gate ref or thread id, its short form, or any
unique prefix or suffix of one.

Ids start with their creation time (``run_01a24200f058_3eac832d981c02cb``), so ids made the
same day share a long prefix. The part after the last ``_`` is random: its first
:data:`SHORT_LENGTH` characters are the id's *short form* (:func:`short_id`, ``3eac832d``),
which ``runs list`` and ``gates list`` show in their ``ID`` column.

Every command that takes one resolves it here, once, before it acts:

* a whole id is used as it is (when it is in the scope);
* otherwise the ids the text names are looked up (threads: those of the scope's runs): those
  that start with it, with or without the kind's ``run_``/``gate_``/``thr_`` prefix, those
  whose random part starts with it (the short form), and those that end with it. One match
  is used, none is :class:`~reverie.errors.NotFoundError`, several are
  :class:`AmbiguousIdError` listing them (both exit 2).

The lookup is limited to a scope when one is given: ``run`` and ``chat`` look threads up in
their ``--tenant``/``--user`` scope; the ``runs`` and ``gates`` commands pass ``None``, because
the CLI is an operator's tool that sees every scope's records (``runs list`` shows every scope).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

from reverie.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from reverie.core.scope import Scope
    from reverie.runtime.queries import Gates, Runs

__all__ = [
    "SCAN_LIMIT",
    "AmbiguousIdError",
    "resolve_gate_ref",
    "resolve_run_id",
    "resolve_thread_id",
    "short_id",
]

SHORT_LENGTH: Final = 8
"""How many characters of an id's random part its short form keeps."""

SCAN_LIMIT: Final = 10_000
"""How many of the newest runs a prefix is matched against (a whole id always works)."""

_SHOWN: Final = 8
"""How many candidates an ambiguity error lists."""


class AmbiguousIdError(UsageError):
    """An id prefix matches more than one run or gate."""

    def __init__(self, kind: str, prefix: str, candidates: Sequence[str]) -> None:
        self.candidates = tuple(candidates)
        """Every id the prefix matches, newest first."""
        shown = ", ".join(self.candidates[:_SHOWN])
        more = len(self.candidates) - _SHOWN
        if more > 0:
            shown += f" and {more} more"
        super().__init__(
            f"{kind} {prefix!r} is ambiguous: it matches {len(self.candidates)} {kind}s "
            f"({shown}); type more of the id"
        )


def _in_scope(record_scope: Scope, scope: Scope | None) -> bool:
    return scope is None or (record_scope.tenant, record_scope.user) == (scope.tenant, scope.user)


def short_id(full: str) -> str:
    """The short form of an id: the first characters of its random part (after the last
    ``_``), e.g. ``3eac832d`` for ``run_01a24200f058_3eac832d981c02cb``."""
    return full.rsplit("_", 1)[-1][:SHORT_LENGTH]


def _names(full: str, text: str, kind_prefix: str) -> bool:
    """Whether ``text`` names the id ``full``: a prefix (with or without the kind's prefix), a
    prefix of its random part (the short form), or a suffix."""
    return (
        full.startswith((text, kind_prefix + text))
        or full.rsplit("_", 1)[-1].startswith(text)
        or full.endswith(text)
    )


def _matching(ids: Sequence[str], text: str, kind_prefix: str) -> list[str]:
    return [one for one in ids if _names(one, text, kind_prefix)]


def _scope_note(scope: Scope | None) -> str:
    return f" for {scope.tenant}/{scope.user}" if scope is not None else ""


async def resolve_run_id(runs: Runs, text: str, *, scope: Scope | None = None) -> str:
    """The run id ``text`` names: the whole id, or the one run it is a prefix, short form or
    suffix of.

    Raises:
        NotFoundError: No run of ``scope`` (any scope when ``None``) matches.
        AmbiguousIdError: Several do; the error lists them.
    """

    async def exact(key: str) -> tuple[str, Scope]:
        run = await runs.get(key)
        return run.run_id, run.scope

    async def every() -> list[str]:
        return [run.run_id for run in await runs.list(scope=scope, limit=SCAN_LIMIT)]

    return await _resolve("run", "run_", "reverie runs list", text, scope, exact, every)


async def resolve_gate_ref(gates: Gates, text: str, *, scope: Scope | None = None) -> str:
    """The gate ref ``text`` names: the whole ref, or the one gate it is a prefix, short form
    or suffix of.

    Raises:
        NotFoundError: No gate of ``scope`` (any scope when ``None``) matches.
        AmbiguousIdError: Several do; the error lists them.
    """

    async def exact(key: str) -> tuple[str, Scope]:
        gate = await gates.get(key)
        return gate.ref, gate.scope

    async def every() -> list[str]:
        return [gate.ref for gate in await gates.list(scope=scope, status=None)]

    return await _resolve("gate", "gate_", "reverie gates list", text, scope, exact, every)


async def _resolve(
    what: str,
    prefix: str,
    listing: str,
    text: str,
    scope: Scope | None,
    exact: Callable[[str], Awaitable[tuple[str, Scope]]],
    every: Callable[[], Awaitable[list[str]]],
) -> str:
    """One id lookup: the whole id first, then the unique id ``text`` names."""
    text = text.strip()
    if not text:
        raise UsageError(f"a {what} id is empty")
    try:
        key, owner = await exact(text)
    except NotFoundError:
        pass
    else:
        if _in_scope(owner, scope):
            return key
    found = _matching(await every(), text, prefix)
    if not found:
        raise NotFoundError(f"no {what} {text!r}{_scope_note(scope)} (see: {listing})")
    if len(found) > 1:
        raise AmbiguousIdError(what, text, found)
    return found[0]


async def resolve_thread_id(runs: Runs, text: str, *, scope: Scope | None = None) -> str:
    """The thread id ``text`` names: the whole id, or the one thread of the scope's runs it is
    a prefix, short form or suffix of.

    Raises:
        NotFoundError: No thread of ``scope`` (any scope when ``None``) matches.
        AmbiguousIdError: Several do; the error lists them.
    """
    text = text.strip()
    if not text:
        raise UsageError("a thread id is empty")
    try:
        thread = await runs.thread(text)
    except NotFoundError:
        pass
    else:
        if _in_scope(thread.scope, scope):
            return thread.thread_id
    listed = await runs.list(scope=scope, limit=SCAN_LIMIT)
    threads = list(dict.fromkeys(run.thread_id for run in listed))  # newest first, once each
    found = _matching(threads, text, "thr_")
    if not found:
        raise NotFoundError(f"no thread {text!r}{_scope_note(scope)} (see: reverie runs list)")
    if len(found) > 1:
        raise AmbiguousIdError("thread", text, found)
    return found[0]
