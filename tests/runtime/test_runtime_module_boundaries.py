"""The runtime's sub-services see it through narrow interfaces, never the ``Runtime`` class.

Subagent calls, unbound turns, curation, queue dispatch, handles and the segment runner are
given what they use (``reverie.runtime.ports`` Protocols, the agent directory, a spawner...);
none imports ``reverie.runtime.runtime`` (not even under ``TYPE_CHECKING``), so the module
graph under ``reverie.runtime`` has no circle through it, and none reaches into a runtime's
private attributes.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "src" / "reverie" / "runtime"
MODULE = "reverie.runtime.runtime"
EXPORTED = {"Runtime", "THREAD_POLICIES"}
"""What ``reverie.runtime`` re-exports from that module (importing it by name is the same)."""
RUNTIME_NAMES = {"rt", "runtime", "_rt", "_runtime"}
DECLARED: set[str] = set()
"""Private members a Protocol of a sub-service declares (none: keep it that way)."""


def _sources(root: Path) -> list[tuple[Path, ast.Module]]:
    skip = {"__init__.py", "runtime.py"}
    return [
        (path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for path in sorted(root.glob("*.py"))
        if path.name not in skip
    ]


def _imports_of_the_runtime(root: Path) -> list[str]:
    found = []
    for path, tree in _sources(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name == MODULE]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    target = ".".join(filter(None, ["reverie.runtime", node.module]))
                else:
                    target = node.module or ""
                names = {a.name for a in node.names}
                bad = (
                    [target]
                    if target == MODULE
                    or (target == "reverie.runtime" and names & (EXPORTED | {"runtime"}))
                    else []
                )
            else:
                continue
            found += [f"{path.name}:{node.lineno}: {name}" for name in bad]
    return found


def _private_reaches(root: Path) -> list[str]:
    found = []
    for path, tree in _sources(root):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or node.attr in DECLARED:
                continue
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else None
            if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name):
                name = owner.attr if owner.value.id == "self" else None
            if name in RUNTIME_NAMES:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_runtime_module_imports_the_runtime_class_module() -> None:
    assert _imports_of_the_runtime(RUNTIME) == []


def test_no_runtime_module_reaches_into_a_runtimes_private_attributes() -> None:
    assert _private_reaches(RUNTIME) == []


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from reverie.runtime.runtime import Runtime\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .runtime import Runtime\n"
    )
    (tmp_path / "c.py").write_text("from reverie.runtime import Runtime, subagents\n")
    (tmp_path / "d.py").write_text(
        "def f(rt, self):\n    return rt._agents, self._rt._spawn, rt.store, self._x\n"
    )
    assert _imports_of_the_runtime(tmp_path) == [
        "a.py:1: reverie.runtime.runtime",
        "b.py:3: reverie.runtime.runtime",
        "c.py:1: reverie.runtime",
    ]
    assert _private_reaches(tmp_path) == ["d.py:2: rt._agents", "d.py:2: self._rt._spawn"]
