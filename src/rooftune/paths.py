"""Where rooftune writes files: every output path is checked before any work is done.

A path that cannot be written (an existing directory where a file is meant, a missing or
read-only directory, a file where a directory is meant, ``/proc``) is refused with a one-line
:class:`~rooftune.errors.InvalidArgument`, instead of failing after minutes of measuring.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from rooftune.errors import InvalidArgument


def _writable(directory: Path, option: str, path: str, role: str = "its directory") -> None:
    """``directory`` must be one, and writable: a temporary file is created and dropped in it, the
    only test that holds for root, for read-only mounts and for pseudo file systems alike."""
    if not directory.is_dir():
        what = f"{directory} is a file, not a directory" if directory.exists() else f"{role} does not exist ({directory})"
        raise InvalidArgument(option, path, what)
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise InvalidArgument(option, path, f"cannot write in {directory} ({exc.strerror or exc})") from None


def output_file(path: str | Path, option: str, suffixes: Sequence[str] = (), parents: bool = False) -> Path:
    """``path`` as a file rooftune may create or replace (creating its missing directories when
    ``parents``); ``suffixes``: the endings allowed."""
    name = str(path)
    if not name.strip():
        raise InvalidArgument(option, name, "give a file name")
    p = Path(name)
    if suffixes and p.suffix.lower() not in suffixes:
        raise InvalidArgument(option, name, f"allowed extensions {', '.join(suffixes)}")
    if p.is_dir():
        raise InvalidArgument(option, name, "is a directory; give a file name")
    _writable(_existing(p.parent, parents), option, name)
    return p


def output_dir(path: str | Path, option: str, parents: bool = False) -> Path:
    """``path`` as a directory rooftune may create (with its missing parents when ``parents``)
    or write into."""
    name = str(path)
    if not name.strip():
        raise InvalidArgument(option, name, "give a directory name")
    p = Path(name)
    if p.exists():
        if not p.is_dir():
            raise InvalidArgument(option, name, "exists and is not a directory")
        _writable(p, option, name)
        return p
    _writable(_existing(p.parent, parents), option, name, "its parent directory")
    return p


def _existing(directory: Path, parents: bool) -> Path:
    """``directory``, or with ``parents`` its nearest ancestor that exists (where the missing
    directories will be created)."""
    while parents and not directory.exists() and directory != directory.parent:
        directory = directory.parent
    return directory
