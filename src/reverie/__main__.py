"""``python -m reverie``: the ``reverie`` command."""

from reverie.cli import main

if __name__ == "__main__":
    main()
