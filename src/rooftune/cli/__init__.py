"""The ``rooftune`` command: parses, calls the public API, prints with Rich. Nothing else.

One module per command or family of commands (:mod:`.machine`, :mod:`.analyze`, :mod:`.tune`
with ``exec``, :mod:`.profile`, :mod:`.perfmodel` with train, transfer, select and
model-convert, :mod:`.optimize`, :mod:`.data`); the options they share are declared once in
:mod:`.options`, what they print goes through :mod:`.printing`. :mod:`.main` holds the Typer
app that gathers them and :func:`main`, the only place where errors become exit codes and one-line
messages; this module names them.
"""

from __future__ import annotations

from rooftune.cli.main import app, main, run

__all__ = ["app", "main", "run"]
