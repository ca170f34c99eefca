"""Memory: scoped providers, the standing document, memory tools, MCP providers (docs/memory.md).

::

    from reverie.memory import NativeMemory, MCPMemory

    async with Runtime.open(":memory:", memory=NativeMemory()) as rt:
        doc = await rt.memory.read(scope, "MEMORY.md")            # Document(text, version)
        await rt.memory.write(scope, "MEMORY.md", "text", expected_version=doc.version)
        hits = await rt.memory.search(scope, "query", limit=5)

    MCPMemory(command=["reverie", "mcp-memory"], credential_env="MEM_TOKEN")   # or url="http://…/mcp"

With memory on, every interactive run gets the standing document ``MEMORY.md`` and what the
provider recalls for the user's message in its prompt (enveloped, in a user-role message), the
tools ``memory_read``/``memory_write``/``memory_search``, and its turn recorded afterwards. The
scope is always the host's. ``Runtime.open(..., curation_interval_turns=N)`` also tidies each
owner's ``MEMORY.md`` in the background every N completed turns (:mod:`reverie.memory.curation`,
docs/memory.md); ``rt.memory.passes(scope)`` lists the passes. See ``docs/memory.md``.
"""

from __future__ import annotations

from reverie.memory.config import MemoryConfig, memory_from_config
from reverie.memory.context import AssembledContext, MemoryBudgets, assemble_context
from reverie.memory.manifest import (
    LANES,
    MEMORY_TOOLS,
    Lane,
    MemoryManifest,
    PassSpec,
    ScheduledOp,
    load_memory_manifest,
    parse_memory_manifest,
)
from reverie.memory.mcp_provider import MCPMemory
from reverie.memory.native import STANDING_DOCUMENT, NativeMemory
from reverie.memory.provider import (
    EMPTY,
    DocumentProvider,
    Empty,
    LaneResult,
    MemoryProvider,
    MemorySnippet,
    Snippets,
    Unavailable,
)
from reverie.memory.sanitize import redact_credentials, strip_control
from reverie.memory.service import RuntimeMemory
from reverie.memory.tools import memory_tools
from reverie.store.documents import Document, DocumentStore

__all__ = [
    "EMPTY",
    "LANES",
    "MEMORY_TOOLS",
    "STANDING_DOCUMENT",
    "AssembledContext",
    "Document",
    "DocumentProvider",
    "DocumentStore",
    "Empty",
    "Lane",
    "LaneResult",
    "MCPMemory",
    "MemoryBudgets",
    "MemoryConfig",
    "MemoryManifest",
    "MemoryProvider",
    "MemorySnippet",
    "NativeMemory",
    "PassSpec",
    "RuntimeMemory",
    "ScheduledOp",
    "Snippets",
    "Unavailable",
    "assemble_context",
    "load_memory_manifest",
    "memory_from_config",
    "memory_tools",
    "parse_memory_manifest",
    "redact_credentials",
    "strip_control",
]
