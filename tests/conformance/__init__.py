"""Conformance suite for ``Store`` backends (a package so its helpers import by name)."""
