"""Garbage-collector settings for long-running processes (docs/scaling.md, "Garbage collection").

A server allocates many short-lived objects per run step (messages, events, state copies), and
CPython's default thresholds (700 allocations for a young collection) make the collector
re-scan the same long-lived start-up objects — modules, the configuration, agents, compiled
schemas — over and over. :func:`tune_gc_for_server` moves everything allocated so far into the
permanent generation (:func:`gc.freeze`) and raises the thresholds, so collections are rarer and
scan only what the serving itself allocated. Reference counting still frees almost everything
at once; the cyclic collector only handles cycles, which the runtime keeps rare.

``reverie serve`` and ``reverie worker`` call it once their runtime is open, with the thresholds
of :func:`gc_thresholds_from_env`: ``REVERIE_GC_THRESHOLDS`` (``"g0,g1,g2"``; ``off`` keeps
Python's defaults and freezes nothing), else :data:`SERVER_GC_THRESHOLDS`.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Mapping

from reverie.errors import ConfigError

__all__ = [
    "GC_THRESHOLDS_ENV",
    "SERVER_GC_THRESHOLDS",
    "gc_thresholds_from_env",
    "tune_gc_for_server",
]

log = logging.getLogger("reverie.runtime")

GC_THRESHOLDS_ENV = "REVERIE_GC_THRESHOLDS"
"""The variable that overrides the thresholds (``g0,g1,g2``) or turns the tuning ``off``."""

SERVER_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 20, 100)
"""A young collection every 50,000 net allocations (Python's default is 700); the older
generations every 20 and 100 of the one below (defaults 10 and 10)."""


def gc_thresholds_from_env(
    environ: Mapping[str, str] | None = None,
) -> tuple[int, int, int] | None:
    """The thresholds :func:`tune_gc_for_server` applies: ``None`` when tuning is ``off``.

    Raises:
        ConfigError: ``REVERIE_GC_THRESHOLDS`` is neither ``off`` nor three non-negative
            integers separated by commas (the first one positive).
    """
    env = os.environ if environ is None else environ
    raw = env.get(GC_THRESHOLDS_ENV, "").strip()
    if not raw:
        return SERVER_GC_THRESHOLDS
    if raw.lower() == "off":
        return None
    parts = [p.strip() for p in raw.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3 or any(v < 0 for v in values) or values[0] == 0:
        raise ConfigError(
            f"{GC_THRESHOLDS_ENV}={raw!r} is not valid. Fix: set it to three integers "
            f"'g0,g1,g2' with g0 > 0 (e.g. '{','.join(map(str, SERVER_GC_THRESHOLDS))}'), "
            "or to 'off' to keep Python's defaults"
        )
    return values[0], values[1], values[2]


def tune_gc_for_server(
    thresholds: tuple[int, int, int] | None = SERVER_GC_THRESHOLDS,
) -> int | None:
    """Freeze what start-up allocated and set ``thresholds`` (see the module docstring).

    Call it once, after start-up (the runtime, agents and servers built); calling it again
    also freezes what was allocated since, which is harmless.

    Args:
        thresholds: ``(g0, g1, g2)`` for :func:`gc.set_threshold`; ``None`` changes nothing
            (what :func:`gc_thresholds_from_env` returns for ``off``).

    Returns:
        How many objects are now frozen, or ``None`` when nothing was changed.
    """
    if thresholds is None:
        return None
    # Collect first so the frozen generation holds live objects, not garbage awaiting a pass.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    log.info(
        "garbage collector tuned for a server: %d start-up objects frozen, thresholds %s",
        gc.get_freeze_count(),
        thresholds,
    )
    return gc.get_freeze_count()
