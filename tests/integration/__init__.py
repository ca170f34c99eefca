"""The crash tests (a package so its helpers import by name)."""
