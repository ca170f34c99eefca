"""The unbound-run tests (a package so its helpers import by name)."""
