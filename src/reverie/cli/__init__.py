"""The ``reverie`` command line (Typer + Rich): see :mod:`reverie.cli.app` and ``docs/cli.md``.

Nothing is imported here, so ``import reverie.cli.scripted_file`` stays light.
"""
