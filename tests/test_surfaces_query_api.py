"""The command line and the HTTP server read runs and gates through ``rt.runs``/``rt.gates``.

They never reach the store: what a surface may see (scope checks, which records exist) is
decided by the runtime's query API, in one place. Every module under ``reverie.cli`` and
``reverie.serve`` is parsed with :mod:`ast`; an attribute named ``store`` fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "reverie"


def _store_attributes(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "store":
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_cli_reads_runs_and_gates_only_through_the_query_api() -> None:
    assert _store_attributes(SRC / "cli") == []


def test_the_server_reads_runs_and_gates_only_through_the_query_api() -> None:
    assert _store_attributes(SRC / "serve") == []


def test_the_check_finds_a_store_attribute(tmp_path: Path) -> None:
    # The check must see what it forbids, so an empty result above means something.
    (tmp_path / "m.py").write_text("async def f(rt):\n    return await rt.store.get_run('r')\n")
    assert _store_attributes(tmp_path) == ["m.py:2: rt.store"]
