"""Every file rooftune writes is written aside and renamed into place.

A reader (a report open in a browser, ``rooftune exec`` reading ``best.json``, a second run into
the same folder) sees the old file or the new one, never half of one; a writer that raises, a full
disk or Ctrl-C leaves the old file as it was and no temporary file behind.

The temporary file lies in the target's directory (a rename is atomic only within one file
system) under a hidden name that keeps the target's suffix (matplotlib picks a figure's format
from it). It is created with mode 0o666 less the umask, as ``open(path, "w")`` would create the
file: not ``tempfile.mkstemp``'s 0o600, which would leave a report or a configuration unreadable
to the others who can read the folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

#: Permission bits a new file is created with before the umask is applied (what open() uses).
NEW_FILE_MODE = 0o666


def _aside(path: Path) -> Path:
    """A new, empty file beside ``path``, named after it, created with the umask's permissions."""
    while True:
        tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, NEW_FILE_MODE)
        except FileExistsError:  # another writer's name: draw again
            continue
        os.close(fd)
        return tmp


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A path beside ``path`` for a writer that takes a file name (``fig.savefig``,
    ``torch.export.save``, ``shutil.copy2``); moved onto ``path`` when the block ends, removed
    when it raises."""
    target = Path(path)
    tmp = _aside(target)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` for a writer that needs a file object (``csv.writer``): the file is
    written aside, flushed to disk and renamed onto ``path`` when the block ends; the old file
    stays when it raises."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes a whole file: mode 'w' or 'wb', not {mode!r}")
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())  # the content on disk before the name points at it


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole, or leave the old file as it was."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return Path(path)


def copy_atomic(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Path:
    """``shutil.copy2(src, dst)`` (content, mode, times) with ``dst`` replaced whole."""
    with atomic_path(dst) as tmp:
        shutil.copy2(src, tmp)
    return Path(dst)


def save_figure(fig: Any, path: str | os.PathLike[str]) -> Path:
    """A matplotlib figure written to ``path`` whole, in the format its suffix names, then
    closed (pyplot keeps every figure it made until then)."""
    import matplotlib.pyplot as plt

    out = Path(path)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, format=out.suffix.lstrip(".").lower() or None)
    finally:
        plt.close(fig)
    return out


__all__ = ["NEW_FILE_MODE", "atomic_open", "atomic_path", "copy_atomic", "save_figure", "write_atomic"]
