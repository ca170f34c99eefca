"""The Memory page: the person's standing document, its versions as diffs, curation passes
with their reports, and search — all through ``rt.memory`` with the session's scope (a scope
sees only its own memory: there is no parameter naming another)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reverie.errors import UsageError
from reverie.memory.native import STANDING_DOCUMENT
from reverie.serve.console.access import reading
from reverie.serve.console.rendering import as_json
from reverie.serve.console.sessions import Session
from reverie.serve.console.state import Console
from reverie.serve.console.views import clipped

__all__ = ["memory_routes"]

VERSIONS_SHOWN = 20
PASSES_SHOWN = 20
SEARCH_HITS = 20
MAX_QUERY = 500


def _diff(older: str, newer: str, *, old_label: str, new_label: str) -> list[dict[str, str]]:
    """A unified diff as lines tagged ``add`` / ``del`` / ``hunk`` / ``same`` (for styling)."""
    lines = []
    for line in difflib.unified_diff(
        older.splitlines(), newer.splitlines(), old_label, new_label, lineterm="", n=2
    ):
        if line.startswith(("+++", "---")):
            tag = "head"
        elif line.startswith("@@"):
            tag = "hunk"
        elif line.startswith("+"):
            tag = "add"
        elif line.startswith("-"):
            tag = "del"
        else:
            tag = "same"
        lines.append({"tag": tag, "text": line})
    return lines


def _pass_view(report: Mapping[str, Any], redact: Callable[[str], str]) -> dict[str, Any]:
    """A curation pass's report as shown: its outcome and summary first, then the whole JSON."""
    write = report.get("write")
    changed = report.get("changed")
    outcome = str(write) if write else ("changed" if changed else "unchanged")
    merged, removed = report.get("entries_merged"), report.get("entries_removed")
    return {
        "outcome": redact(outcome),
        "summary": redact(str(report.get("summary", ""))),
        "merged": merged if isinstance(merged, int) else None,
        "removed": removed if isinstance(removed, int) else None,
        "conflicts": [redact(str(c)) for c in report.get("conflicts") or ()][:20],
        "report": redact(as_json(dict(report))),
    }


def memory_routes(console: Console) -> list[Route]:
    """``/console/memory``."""

    async def page(request: Request, session: Session) -> Response:
        memory, redact = console.rt.memory, console.ctx.redact
        query = (request.query_params.get("q") or "").strip()[:MAX_QUERY]
        context: dict[str, Any] = {"query": query, "enabled": True, "path": STANDING_DOCUMENT}
        try:
            doc = await memory.read(session.scope)
            versions = await memory.history(session.scope, limit=VERSIONS_SHOWN + 1)
        except UsageError:
            context.update(enabled=False, document=None, versions=[], hits=[])
        else:
            context["document"] = {"text": clipped(redact(doc.text)), "version": doc.version}
            shown = []
            for index, version in enumerate(versions[:VERSIONS_SHOWN]):
                older = versions[index + 1].text if index + 1 < len(versions) else ""
                shown.append(
                    {
                        "version": version.version,
                        "created_at": version.created_at,
                        "diff": _diff(
                            redact(older),
                            redact(version.text),
                            old_label=f"v{version.version - 1}",
                            new_label=f"v{version.version}",
                        ),
                    }
                )
            context["versions"] = shown
            hits = await memory.search(session.scope, query, limit=SEARCH_HITS) if query else []
            context["hits"] = [
                {"kind": h.kind, "ref": h.ref, "text": clipped(redact(h.text))} for h in hits
            ]
        passes = await memory.passes(session.scope, limit=PASSES_SHOWN)
        context["passes"] = [
            _pass_view(p.report, redact)
            | {
                "run_id": p.run_id,
                "created_at": p.created_at,
            }
            for p in passes
        ]
        return console.page(session, "memory.html", **context)

    return [Route("/console/memory", reading(console, page), methods=["GET"])]
