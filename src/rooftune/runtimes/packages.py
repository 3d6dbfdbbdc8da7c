"""Whether a runtime's optional package is installed: a missing one removes a choice with a note."""

from __future__ import annotations

import importlib.util


def missing(package: str) -> str | None:
    """None when ``package`` imports, else the note that removes a runtime from the space."""
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed (pip install {package})"
    return None
