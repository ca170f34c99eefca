"""Naming models for the fallback chain: labels for events and the failure of a run."""

from __future__ import annotations

from collections.abc import Sequence

from reverie.errors import ModelError


def model_label(names: Sequence[str], index: int) -> str:
    """The name of model ``index`` (the last one past the end, as the model port does)."""
    if not names:
        return ""
    return names[min(index, len(names) - 1)]


def model_failure_summary(names: Sequence[str], failed: Sequence[str], exc: ModelError) -> str:
    """The safe summary of a run whose model call failed for good with ``exc``.

    ``failed`` holds the error kind of each model given up on before (model 0, 1, …, in the
    order they were tried); when there are any, the summary names every model with its kind.
    """
    if not failed:
        return f"model call failed ({exc.kind}): {exc}"
    tried = [f"{model_label(names, i)} ({kind})" for i, kind in enumerate([*failed, exc.kind])]
    return f"every model failed: {', '.join(tried)}; the last said: {exc}"
