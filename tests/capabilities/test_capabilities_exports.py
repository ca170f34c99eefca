"""The capabilities package's public face is exactly its ``__all__``."""

from __future__ import annotations

from types import ModuleType

import reverie.capabilities as capabilities

_IMPORT_HELPERS = {"annotations", "TYPE_CHECKING", "Any"}
_LAZY = {"MCPTool", "MCPToolset"}  # need the optional mcp extra, imported on first use


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(capabilities).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and name not in _IMPORT_HELPERS
    }
    assert public | _LAZY == set(capabilities.__all__)


def test_every_exported_name_resolves() -> None:
    for name in capabilities.__all__:
        assert getattr(capabilities, name) is not None
