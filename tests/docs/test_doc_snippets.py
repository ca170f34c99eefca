"""Every fenced ``python`` snippet of README.md and docs/*.md runs, so none can rot.

Each snippet runs offline in a fresh temporary ``$REVERIE_HOME`` (and working directory), with
no provider key set: snippets use ``ScriptedModel``. Each runs as a script, as a reader who
pastes it into a file and runs ``python file.py`` would: no top-level ``await`` (async code goes
in ``async def main()`` and ``asyncio.run(main())``).

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

import asyncio
import logging
import os
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*snippet:\s*([\w-]+)\s*-->\s*$")
MAX_NO_RUN = 4
"""How many snippets, across all pages, may be marked ``no-run`` (the README's three-line hello
world names a real model; ``examples/hello.py`` is the same program offline, and
``tests/cli/test_cli_examples.py`` runs it)."""


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
    """The snippet compiled as a script (a top-level ``await`` is a ``SyntaxError``)."""
    return compile(snippet.code, snippet.id, "exec")


def _run_chain(chain: list[Snippet], namespace: dict[str, Any]) -> None:
    """Run the snippets in order in one namespace, each as a script."""
    for code in [_compiled(part) for part in chain]:
        exec(code, namespace)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A snippet may set a logger's level (docs/loop.md turns reverie.loop to DEBUG); later
    tests of this process must not inherit it."""

    def loggers() -> list[logging.Logger]:
        names = list(logging.root.manager.loggerDict)
        return [logging.getLogger(), *(logging.getLogger(name) for name in names)]

    levels = {logger: logger.level for logger in loggers()}
    yield
    for logger in loggers():
        logger.setLevel(levels.get(logger, logging.NOTSET))


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
            # The snippets are scripts (each calls asyncio.run): run them off this loop.
            await asyncio.to_thread(_run_chain, _chain(snippet), {"__name__": "__main__"})

    asyncio.run(in_schema())


@pytest.mark.parametrize("snippet", ALL, ids=lambda s: s.id)
def test_every_snippet_runs_as_a_script_without_top_level_await(snippet: Snippet) -> None:
    # A reader pastes a snippet into a file and runs it with python: top-level await would be
    # a SyntaxError there (it works only in python -m asyncio or a notebook).
    try:
        _compiled(snippet)
    except SyntaxError as exc:
        pytest.fail(f"{snippet.id}: not a script ({exc.msg}); wrap the awaits in async def main()")


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
