"""``python -m rooftune``: the command line."""

from rooftune.cli import run

run()
