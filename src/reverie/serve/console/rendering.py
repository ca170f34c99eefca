"""Jinja2 templates of the console, with autoescape on for every template.

Everything a page shows from a run, a tool or memory is untrusted; autoescaping makes it text
whatever it holds (``<script>``, ``<img onerror=…>``), and templates never mark it safe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

try:
    import jinja2
except ImportError as exc:  # pragma: no cover - the serve extra brings it
    raise ImportError("the console needs jinja2: pip install 'reverie[serve]'") from exc

from starlette.responses import HTMLResponse

__all__ = ["Templates", "as_json"]


def _when(value: float | None) -> str:
    """An epoch time as ``2026-12-04 17:05:09Z`` (empty for ``None``)."""
    if not value:
        return ""
    return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def as_json(value: Any) -> str:
    """A value as indented JSON (for arguments and outcomes; escaped like any text)."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


class Templates:
    """The console's templates, rendered into responses."""

    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("reverie.serve.console", "templates"),
            autoescape=True,  # every template, whatever its name
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["as_json"] = as_json

    def render(self, name: str, context: Mapping[str, Any]) -> str:
        """The template ``name`` with ``context``."""
        return self.env.get_template(name).render(**context)

    def response(
        self, name: str, context: Mapping[str, Any], *, status_code: int = 200
    ) -> HTMLResponse:
        """The rendered template as an HTML response."""
        return HTMLResponse(self.render(name, context), status_code=status_code)
