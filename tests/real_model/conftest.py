"""The session's shared real model server (``real_model`` tests; see ``llama_support``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from real_model.llama_support import LlamaServer, llama_server


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One server for the tests that neither kill nor freeze it (a 2,048-token window)."""
    with llama_server(Path(tmp_path_factory.mktemp("llama"))) as server:
        yield server
