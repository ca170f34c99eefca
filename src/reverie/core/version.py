"""The package version, in the lowest layer so that every layer (the CLI's ``--version`` too)
can read it without importing the package facade. ``pyproject.toml`` holds the same number (a
test keeps them equal)."""

__version__ = "0.1.0"
