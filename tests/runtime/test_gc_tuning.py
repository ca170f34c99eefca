"""docs/scaling.md, "Garbage collection": servers freeze start-up objects and raise thresholds."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reverie.cli.app import app
from reverie.errors import ConfigError
from reverie.runtime.gc_tuning import (
    GC_THRESHOLDS_ENV,
    SERVER_GC_THRESHOLDS,
    gc_thresholds_from_env,
    tune_gc_for_server,
)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """Put the collector back as the test process had it."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_server_tuning_freezes_start_up_objects_and_sets_the_thresholds(
    restored_gc: None,
) -> None:
    gc.unfreeze()
    frozen = tune_gc_for_server(SERVER_GC_THRESHOLDS)

    assert frozen is not None and frozen > 0
    assert gc.get_freeze_count() == frozen
    assert gc.get_threshold() == SERVER_GC_THRESHOLDS


def test_tuning_off_changes_nothing(restored_gc: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()

    assert tune_gc_for_server(None) is None
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_server_thresholds_are_the_default() -> None:
    assert gc_thresholds_from_env({}) == SERVER_GC_THRESHOLDS
    assert gc_thresholds_from_env({GC_THRESHOLDS_ENV: " "}) == SERVER_GC_THRESHOLDS


def test_the_environment_sets_the_thresholds_or_turns_tuning_off() -> None:
    assert gc_thresholds_from_env({GC_THRESHOLDS_ENV: "2000, 10, 0"}) == (2000, 10, 0)
    assert gc_thresholds_from_env({GC_THRESHOLDS_ENV: "OFF"}) is None


@pytest.mark.parametrize("value", ["a,b,c", "1000,10", "1000,10,10,10", "0,10,10", "100,-1,10"])
def test_a_malformed_threshold_setting_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=GC_THRESHOLDS_ENV):
        gc_thresholds_from_env({GC_THRESHOLDS_ENV: value})


@pytest.mark.parametrize("command", [["serve"], ["worker", "--store", "postgresql://h/db"]])
def test_serve_and_worker_refuse_a_malformed_gc_setting_before_start_up(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVERIE_HOME", str(tmp_path))
    monkeypatch.setenv(GC_THRESHOLDS_ENV, "lots")
    result = CliRunner().invoke(app, command)

    assert result.exit_code == 2, result.output
    assert f"{GC_THRESHOLDS_ENV}='lots' is not valid" in result.output
