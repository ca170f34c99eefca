"""Each closed vocabulary (statuses, kinds, reasons) is one ``Literal``, spelt out once.

Every module under ``src/reverie`` is parsed with :mod:`ast`: a ``Literal[...]`` of two or more
strings must not have the same members as another one, and a tuple, list or set of strings
with the members of a ``Literal`` is a second definition of it (a runtime check must use the
tuple ``typing.get_args`` derives from the ``Literal``). Where a check cannot be a plain tuple
(a Typer choice enum, a query-string table, a mapping keyed by the vocabulary), the second
test asserts it accepts exactly the ``Literal``'s members.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path
from typing import get_args

from reverie.cli.gates import GateStatusChoice
from reverie.cli.runs import RunStatusChoice
from reverie.core.exits import (
    FAILURE_KINDS,
    GRACEFUL_REASONS,
    HOST_STOP_REASONS,
    FailureKind,
    GracefulReason,
    HostStopReason,
)
from reverie.core.vocabulary import (
    ACTIVE_STATUSES,
    CHECKPOINT_KINDS,
    EXIT_STATUSES,
    GATE_KINDS,
    GATE_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
    UNBOUND_PROFILES,
    as_gate_kind,
    is_unbound_profile,
)
from reverie.loop.family import default_families
from reverie.loop.finalizer import FINALIZER_PROMPTS, REASON_FAILURE_KIND
from reverie.serve import errors as serve_errors
from reverie.serve.runs import _GATE_STATUSES
from reverie.store import base as store_base

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "reverie"

ALLOWED: dict[tuple[str, frozenset[str]], str] = {}
"""(module, members) → why a second spelling is tolerated. Empty, and it stays empty: a new
vocabulary is a ``Literal`` in reverie.core.vocabulary (or core.exits) and its tuple."""


def _strings(node: ast.expr) -> frozenset[str] | None:
    elts = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    if len(elts) < 2:
        return None
    values = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return frozenset(values) if len(values) == len(elts) else None


def _spellings() -> tuple[dict[frozenset[str], list[str]], list[tuple[str, frozenset[str]]]]:
    """Each ``Literal`` of strings (members → where), and each tuple/list/set of strings."""
    literals: dict[frozenset[str], list[str]] = defaultdict(list)
    displays: list[tuple[str, frozenset[str]]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        slices: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and ast.unparse(node.value) in (
                "Literal",
                "typing.Literal",
            ):
                slices.add(id(node.slice))
                members = _strings(node.slice)
                if members is not None:
                    literals[members].append(f"{module}:{node.lineno}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("unbound")
            ):
                displays.append((module, frozenset({"startswith('unbound')"})))
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in slices:
                members = _strings(node)
                if members is not None:
                    displays.append((module, members))
    return literals, displays


def test_each_vocabulary_is_defined_once() -> None:
    literals, displays = _spellings()
    seen: set[tuple[str, frozenset[str]]] = set()
    problems: list[str] = []
    for members, places in literals.items():
        modules = [p.split(":")[0] for p in places]
        for module in modules[1:]:
            seen.add((module, members))
            if (module, members) not in ALLOWED:
                problems.append(f"Literal{sorted(members)} is defined again: {', '.join(places)}")
    for module, members in displays:
        if members in literals or members == frozenset({"startswith('unbound')"}):
            seen.add((module, members))
            if (module, members) not in ALLOWED:
                problems.append(
                    f"{module} spells out {sorted(members)}: derive it from the Literal with "
                    "typing.get_args (or use is_unbound_profile)"
                )
    gone = sorted(f"{m} {sorted(s)}" for m, s in set(ALLOWED) - seen)
    assert not problems, "\n".join(problems)
    assert not gone, f"fixed: remove these entries from ALLOWED: {gone}"


def test_the_runtime_checks_accept_exactly_their_vocabulary() -> None:
    assert {c.value for c in RunStatusChoice} == set(RUN_STATUSES)
    assert {c.value for c in GateStatusChoice} == {*GATE_STATUSES, "all"}
    assert {k for k, v in _GATE_STATUSES.items() if v is not None} == set(GATE_STATUSES)
    assert set(FINALIZER_PROMPTS) == set(GRACEFUL_REASONS)
    assert set(REASON_FAILURE_KIND) == set(GRACEFUL_REASONS)
    assert set(REASON_FAILURE_KIND.values()) <= set(FAILURE_KINDS)
    assert set(serve_errors._FAILURE_STATUS) <= set(FAILURE_KINDS)
    assert {f.id for f in default_families() if is_unbound_profile(f.id)} == set(UNBOUND_PROFILES)
    # The store re-exports the core's vocabularies; it does not keep its own.
    assert store_base.CHECKPOINT_KINDS is CHECKPOINT_KINDS
    assert store_base.TERMINAL_STATUSES is TERMINAL_STATUSES
    assert store_base.ACTIVE_STATUSES is ACTIVE_STATUSES


def test_the_derived_tuples_are_their_literals_members() -> None:
    assert get_args(FailureKind) == FAILURE_KINDS
    assert get_args(HostStopReason) == HOST_STOP_REASONS
    assert set(GRACEFUL_REASONS) == {
        *HOST_STOP_REASONS,
        "capability_call_limit",
        "wall_clock_limit",
    }
    assert set(GracefulReason.__args__) == set(GRACEFUL_REASONS)  # type: ignore[attr-defined]


def test_run_statuses_are_active_or_terminal_never_both() -> None:
    assert set(ACTIVE_STATUSES) | set(TERMINAL_STATUSES) == set(RUN_STATUSES)
    assert not set(ACTIVE_STATUSES) & set(TERMINAL_STATUSES)
    assert set(EXIT_STATUSES) <= set(RUN_STATUSES)


def test_an_unknown_gate_kind_asks_for_approval() -> None:
    assert [as_gate_kind(k) for k in GATE_KINDS] == list(GATE_KINDS)
    assert as_gate_kind("something-else") == "approval"


def test_an_unbound_profile_is_exactly_one_of_the_unbound_families() -> None:
    assert all(is_unbound_profile(p) for p in UNBOUND_PROFILES)
    # A family whose id merely starts with "unbound" is a named agent's family.
    assert not is_unbound_profile("unbounded")
    assert not is_unbound_profile("default")
