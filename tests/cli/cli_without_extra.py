"""Run ``reverie ARGS...`` as if some optional extras were not installed.

``python cli_without_extra.py MOD1,MOD2 ARGS...``: a meta-path finder makes every import of those
top-level modules (and their submodules) fail as a missing package does, then the CLI runs. The
tests simulate a missing extra this way instead of uninstalling it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType


class BlockModules(importlib.abc.MetaPathFinder):
    """Refuses to find the blocked modules, like an environment without them."""

    def __init__(self, blocked: Sequence[str]) -> None:
        self.blocked = tuple(blocked)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main() -> None:
    blocked = [name for name in sys.argv[1].split(",") if name]
    for name in list(sys.modules):
        if name.partition(".")[0] in blocked:
            del sys.modules[name]
    sys.meta_path.insert(0, BlockModules(blocked))
    sys.argv = ["reverie", *sys.argv[2:]]
    runpy.run_module("reverie.cli.app", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
