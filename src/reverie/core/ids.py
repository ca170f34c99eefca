"""Identifiers: short, sortable by creation time, prefixed by what they name."""

from __future__ import annotations

import os
import time


def new_id(prefix: str) -> str:
    """A new id like ``run_0191f3c2a8b4_9f2c4e1ab37d5e60``: time-ordered, then random."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}_{os.urandom(8).hex()}"
