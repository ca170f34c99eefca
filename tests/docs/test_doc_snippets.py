"""Every fenced ``python`` snippet of README.md and docs/*.md runs, so none can rot.

Each snippet runs offline in a fresh temporary ``$REVERIE_HOME`` (and working directory), with
no provider key set: snippets use ``ScriptedModel``. A snippet may use top-level ``await``
(it then runs in an event loop); otherwise it runs as a script.

Two markers, an HTML comment on the line before the fence:

* ``<!-- snippet: continues -->``: the snippet goes on from the one before it in the same file
  (both run, in one namespace), like a reader who keeps the names defined so far;
* ``<!-- snippet: postgres -->``: the snippet needs a PostgreSQL server; it runs with
  ``DATABASE_URL`` set to a fresh schema on ``$REVERIE_TEST_POSTGRES_URL`` (skipped without it,
  like the other PostgreSQL tests);
* ``<!-- snippet: no-run -->``: the snippet cannot run on its own (it needs a running server,
  a key or a worker). Keep this rare: ``test_no_run_snippets_are_rare`` caps it.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reverie import Runtime

REPO = Path(__file__).resolve().parent.parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*snippet:\s*([\w-]+)\s*-->\s*$")
MAX_NO_RUN = 3
"""How many snippets, across all pages, may be marked ``no-run``."""


@dataclass(frozen=True, slots=True)
class Snippet:
    """One fenced ``python`` block."""

    page: Path
    line: int
    code: str
    marker: str | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        found.append(
            Snippet(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                code=match.group(1),
                marker=marker.group(1) if marker else None,
            )
        )
    return found


ALL = [snippet for page in PAGES for snippet in _snippets(page)]


def _chain(snippet: Snippet) -> list[Snippet]:
    """The snippet and, when it continues, the ones before it that it builds on."""
    same_page = [s for s in ALL if s.page == snippet.page]
    index = same_page.index(snippet)
    start = index
    while start > 0 and same_page[start].marker == "continues":
        start -= 1
    return same_page[start : index + 1]


def _compiled(snippet: Snippet) -> types.CodeType:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code: types.CodeType = compile(snippet.code, snippet.id, "exec", flags=flags)
    return code


def _awaits(code: types.CodeType) -> bool:
    return bool(code.co_flags & inspect.CO_COROUTINE)


def _run_chain(chain: list[Snippet], namespace: dict[str, Any]) -> None:
    """Run the snippets in order: as scripts, or — when one awaits at top level — all in one
    event loop (what they open, e.g. ``rt = await Runtime.open(...)``, stays usable)."""
    codes = [_compiled(part) for part in chain]
    if not any(_awaits(code) for code in codes):
        for code in codes:
            exec(code, namespace)
        return

    async def in_one_loop() -> None:
        try:
            for code in codes:
                if _awaits(code):
                    await types.FunctionType(code, namespace)()
                else:
                    exec(code, namespace)
        finally:
            # A page may leave its runtime open for the next snippet; close it here.
            for value in list(namespace.values()):
                if isinstance(value, Runtime):
                    await value.aclose()

    asyncio.run(in_one_loop())


def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path / "home"))
    for variable in [v for v in os.environ if v.endswith("_API_KEY")]:
        monkeypatch.delenv(variable)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    "snippet", [s for s in ALL if s.marker in (None, "continues")], ids=lambda s: s.id
)
def test_the_snippet_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _offline(tmp_path, monkeypatch)
    _run_chain(_chain(snippet), {"__name__": "__main__"})


@pytest.mark.postgres
@pytest.mark.parametrize("snippet", [s for s in ALL if s.marker == "postgres"], ids=lambda s: s.id)
def test_the_postgres_snippet_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = os.environ.get("REVERIE_TEST_POSTGRES_URL")
    if not server:
        pytest.skip("set REVERIE_TEST_POSTGRES_URL to run the PostgreSQL snippets")
    _offline(tmp_path, monkeypatch)
    from reverie.store.postgres import temporary_schema

    async def in_schema() -> None:
        async with temporary_schema(server) as url:
            monkeypatch.setenv("DATABASE_URL", url)
            for code in [_compiled(part) for part in _chain(snippet)]:
                if _awaits(code):
                    await types.FunctionType(code, {"__name__": "__main__"})()
                else:
                    exec(code, {"__name__": "__main__"})

    asyncio.run(in_schema())


def test_every_page_with_python_snippets_has_a_runnable_one() -> None:
    pages = {s.page for s in ALL}
    runnable = {s.page for s in ALL if s.marker != "no-run"}
    assert len(pages) >= 6
    assert sorted(str(p.relative_to(REPO)) for p in pages - runnable) == []
    unknown = [s.id for s in ALL if s.marker not in (None, "continues", "postgres", "no-run")]
    assert unknown == []


def test_no_run_snippets_are_rare() -> None:
    no_run = [s.id for s in ALL if s.marker == "no-run"]
    assert len(no_run) <= MAX_NO_RUN, no_run
