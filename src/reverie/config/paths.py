"""Where ``reverie.toml`` lives: ``$REVERIE_HOME`` (default ``~/.reverie``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["CONFIG_FILE_NAME", "default_config_path", "reverie_home"]

CONFIG_FILE_NAME: Final = "reverie.toml"


def reverie_home() -> Path:
    """``$REVERIE_HOME``, or ``~/.reverie`` when it is not set."""
    return Path(os.environ.get("REVERIE_HOME") or "~/.reverie").expanduser()


def default_config_path() -> Path:
    """``$REVERIE_HOME/reverie.toml``."""
    return reverie_home() / CONFIG_FILE_NAME
