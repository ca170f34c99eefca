"""A stand-in for $EDITOR in the ``reverie memory edit`` tests: ``python cli_fake_editor.py FILE``.

It replaces the file's text with ``$FAKE_EDIT_TEXT`` (unset: leaves it unchanged). With
``$FAKE_EDIT_RACE_STORE`` set to a store URL, it first writes ``$FAKE_EDIT_RACE_TEXT`` to the
edited document itself — another writer landing while the person edits. ``$FAKE_EDIT_EXIT``
sets its exit status.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path


async def race(url: str, text: str) -> None:
    from reverie import Runtime, Scope
    from reverie.memory import NativeMemory

    scope = Scope(tenant="local", user=os.environ.get("USER") or "tester")
    async with Runtime.open(url, memory=NativeMemory()) as rt:
        current = await rt.memory.read(scope, "MEMORY.md")
        await rt.memory.write(scope, "MEMORY.md", text, expected_version=current.version)


def main() -> int:
    path = Path(sys.argv[1])
    url = os.environ.get("FAKE_EDIT_RACE_STORE")
    if url:
        asyncio.run(race(url, os.environ["FAKE_EDIT_RACE_TEXT"]))
    text = os.environ.get("FAKE_EDIT_TEXT")
    if text is not None:
        path.write_text(text, encoding="utf-8")
    return int(os.environ.get("FAKE_EDIT_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
