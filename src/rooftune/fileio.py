"""Every file rooftune writes is written aside and renamed into place.

A reader (a report open in a browser, ``rooftune exec`` reading ``best.json``, a second run into
the same folder) sees the old file or the new one, never half of one; a writer that raises, a full
disk or Ctrl-C leaves the old file as it was and no temporary file behind.

The temporary file lies in the target's directory (a rename is atomic only within one file
system) under a hidden name that keeps the target's suffix (matplotlib picks a figure's format
from it). It is created with mode 0o666 less the umask, as ``open(path, "w")`` would create the
file: not ``tempfile.mkstemp``'s 0o600, which would leave a report or a configuration unreadable
to the others who can read the folder.

What rooftune prints or writes as JSON is strict JSON (:func:`json_text`): a value JSON cannot
hold (NaN, an infinity) is null, with a note beside it saying what it was. A folder that a later
run writes into again (``optimize --out``) gets a manifest of the files written there with their
sha256 (:func:`write_manifest`); the later run removes the earlier one's files through it
(:func:`remove_written`), and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from rooftune.errors import InvalidArgument

#: Permission bits a new file is created with before the umask is applied (what open() uses).
NEW_FILE_MODE = 0o666
#: The sets :func:`recording_writes` fills, one per open block.
_recorders: list[set[Path]] = []


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
    for written in _recorders:
        written.add(Path(os.path.abspath(target)))


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


# ------------------------------------------------------------------ strict JSON

#: Keys whose value is an interval or one of its bounds: an infinite bound there is the interval
#: too few samples could bound (``bench.stats`` gives ``(-inf, inf)`` then).
_INTERVAL_WORDS = frozenset({"ci", "interval"})


def _not_finite(value: Any) -> list[float]:
    """The NaN and infinite floats in ``value`` itself or in its lists (a dict's are noted inside it)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [value]
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _not_finite(item)]
    return []


def _why_null(key: str, values: list[float]) -> str:
    shown = ", ".join("nan" if math.isnan(v) else "inf" if v > 0 else "-inf" for v in values)
    if all(math.isnan(v) for v in values):
        meaning = "not measured, or undefined"
    elif _INTERVAL_WORDS & set(key.lower().split("_")):
        meaning = "the interval is unbounded there (too few samples to bound it)"
    else:
        meaning = "no finite value (unbounded or unknown)"
    return f"{shown} written as null (JSON has no NaN or infinity): {meaning}"


def json_ready(obj: Any, notes: bool = True) -> Any:
    """``obj`` with every NaN and infinity replaced by None; with ``notes``, a dict that held one
    under a string key ``k`` gains ``k_note`` saying what it was and what it means (where that
    name is taken, ``k_null_note``). Tuples become lists, as JSON writes them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (list, tuple)):
        return [json_ready(v, notes) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: json_ready(v, notes) for k, v in obj.items()}
    if notes:
        for k, v in obj.items():
            bad = _not_finite(v)
            if bad and isinstance(k, str):  # (a number as key: a note's name beside it would break sort_keys)
                name = f"{k}_note" if f"{k}_note" not in out else f"{k}_null_note"
                out.setdefault(name, _why_null(k, bad))
    return out


def json_text(obj: Any, *, notes: bool = True, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)`` as strict JSON, for everything rooftune prints or writes:
    NaN and infinities become null (and, with ``notes``, a note beside each; see
    :func:`json_ready`), so that jq and every other parser read it; ``default``'s answers are
    treated alike."""
    given = default

    def converted(o: Any) -> Any:
        assert given is not None
        return json_ready(given(o), notes)

    return json.dumps(json_ready(obj, notes), allow_nan=False, default=converted if given else None, **kwargs)


def pipe_json(obj: Any) -> str:
    """One JSON line for a pipe between rooftune's own processes: Python's json at both ends,
    which reads NaN and infinities back as the floats they were (a trial's unknown time stays
    NaN); never what a user is shown or given."""
    return json.dumps(obj, allow_nan=True)


#: Deepest nesting of a JSON value read from a user's file: rooftune's own nest a few levels (a
#: platform fingerprint's caches' CPU lists are five deep), and Python's parser recurses once per
#: level, failing with RecursionError near a thousand.
MAX_JSON_DEPTH = 64


def parse_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``text`` read as JSON, else ValueError whose message completes "... is": not JSON (and
    why), nested deeper than ``max_depth``, or holding an integer too long for Python to read."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels (allowed at most {max_depth})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError:
        raise ValueError("not JSON (not UTF-8 text)") from None
    except ValueError:  # Python reads integers of at most sys.get_int_max_str_digits() digits
        raise ValueError("not JSON rooftune reads (an integer of thousands of digits)") from None
    depth, level = 0, [value]
    while containers := [c for c in level if isinstance(c, (dict, list))]:
        depth += 1
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels (allowed at most {max_depth})")
        level = [v for c in containers for v in (c.values() if isinstance(c, dict) else c)]
    return value


# ------------------------------------------------------------------ the files a user gives to be read

#: The largest file read whole as a document (a configuration, ``best.json``, a selection's
#: JSON): rooftune writes them in kilobytes; /dev/zero or a disk image given by mistake is refused
#: before it is read into memory.
MAX_DOCUMENT_BYTES = 64 << 20


def _open_input(path: str | os.PathLike[str], option: str, allowed: str) -> IO[bytes]:
    """The regular file at ``path`` open for reading; refused in one line (see :func:`read_input`)."""
    name = os.fspath(path)

    def bad(why: str) -> InvalidArgument:
        return InvalidArgument(option, str(name), f"{why}; {allowed}")

    if not name:
        raise bad("give a file name")
    try:
        # O_NONBLOCK: a FIFO opens without waiting for a writer (to be refused below)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise bad("no such file") from None
    except OSError as exc:
        raise bad(f"cannot read it ({exc.strerror or exc})") from None
    except ValueError:  # a NUL character in the name
        raise bad("not a file name") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return open(fd, "rb")
    os.close(fd)
    raise bad("a directory, not a file" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, a device or a socket)")


def check_input(path: str | os.PathLike[str], option: str, allowed: str) -> None:
    """Refuses in one line, as :func:`read_input` does, a file the user gave that a library is to
    open (a .keras archive): missing, unreadable or not a regular file."""
    _open_input(path, option, allowed).close()


def read_input(path: str | os.PathLike[str], option: str, allowed: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the file at ``path``, which the user gave as ``option``; refused in one line,
    with ``allowed`` (what the file should be), where it is missing, unreadable, not a regular file
    (a FIFO would wait for a writer for ever, a device never end) or longer than ``max_bytes``."""
    with _open_input(path, option, allowed) as f:
        try:
            # a file too large is refused by its size, unread; the read is bounded all the same
            # (a file that grows)
            data = f.read(max_bytes + 1) if os.fstat(f.fileno()).st_size <= max_bytes else None
        except OSError as exc:
            raise InvalidArgument(option, os.fspath(path), f"cannot read it ({exc.strerror or exc}); {allowed}") from None
    if data is None or len(data) > max_bytes:
        raise InvalidArgument(option, os.fspath(path), f"larger than {max_bytes} bytes; {allowed}")
    return data


def read_text_input(path: str | os.PathLike[str], option: str, allowed: str,
                    max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """:func:`read_input` as UTF-8 text (a byte-order mark dropped); other bytes refused in one line."""
    data = read_input(path, option, allowed, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(option, os.fspath(path), f"not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                              f"{exc.start}); {allowed}") from None


def read_json_input(path: str | os.PathLike[str], option: str, allowed: str,
                    max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """:func:`read_text_input` read by :func:`parse_json`; what is not JSON of at most
    MAX_JSON_DEPTH levels refused in one line."""
    try:
        return parse_json(read_text_input(path, option, allowed, max_bytes))
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(option, os.fspath(path), f"{exc}; {allowed}") from None


# ------------------------------------------------------------------ what a run wrote, and its removal

#: The file in an output folder naming each file rooftune wrote there and its sha256.
MANIFEST = "rooftune-manifest.json"
#: A manifest larger than this is not one rooftune wrote: it is not read.
MANIFEST_MAX_BYTES = 16 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


@contextmanager
def recording_writes() -> Iterator[set[Path]]:
    """The absolute paths of the files written through this module while the block runs."""
    written: set[Path] = set()
    _recorders.append(written)
    try:
        yield written
    finally:
        for i, r in enumerate(_recorders):
            if r is written:
                del _recorders[i]
                break


def _safe_fs() -> bool:
    """Whether this OS opens and removes relative to a directory's descriptor without following
    links (Linux, macOS): without that a folder is left as it is."""
    return (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
            and {os.open, os.stat, os.unlink, os.rmdir} <= os.supports_dir_fd)


def _parts(rel: object) -> list[str] | None:
    """A manifest's relative path as its names, or None for anything but a plain path below the
    folder (absolute, ``..``, ``.``, empty names, backslashes, NUL)."""
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    return None if any(p in ("", ".", "..") for p in parts) else parts


def _open_dir(root_fd: int, names: list[str]) -> int | None:
    """A descriptor of the folder ``names`` below ``root_fd``, reached without following a link;
    None where one of them is a link, not a folder, or gone."""
    fd = os.dup(root_fd)
    for name in names:
        try:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = inner
    return fd


def _regular_file_sha256(dir_fd: int, name: str, limit: int | None = None) -> tuple[str, os.stat_result] | None:
    """The sha256 of the regular file ``name`` in ``dir_fd`` (not a link, FIFO or device) and its
    stat; None where it is none, is larger than ``limit`` or cannot be read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (limit is not None and st.st_size > limit):
            return None
        h = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
        return h.hexdigest(), st
    except OSError:
        return None
    finally:
        os.close(fd)


def write_manifest(folder: str | os.PathLike[str], written: Iterable[str | os.PathLike[str]]) -> Path:
    """:data:`MANIFEST` in ``folder``: each of ``written`` that is a regular file below
    ``folder``, reached without a link, by its path relative to ``folder`` and its sha256."""
    root = os.path.abspath(folder)
    files: dict[str, str] = {}
    if _safe_fs():
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for p in written:
                rel = os.path.relpath(os.path.abspath(p), root).replace(os.sep, "/")
                parts = _parts(rel)
                if parts is None or rel == MANIFEST:
                    continue
                dir_fd = _open_dir(root_fd, parts[:-1])
                if dir_fd is None:
                    continue
                try:
                    found = _regular_file_sha256(dir_fd, parts[-1])
                finally:
                    os.close(dir_fd)
                if found is not None:
                    files[rel] = found[0]
        finally:
            os.close(root_fd)
    text = json_text({"written_by": "rooftune", "files": dict(sorted(files.items()))}, indent=1)
    return write_atomic(Path(root) / MANIFEST, text)


def _manifest_files(root_fd: int) -> dict[str, str]:
    """The files the manifest in ``root_fd`` lists, as it lists them; empty where there is no
    manifest, or it is a link, too large, or not of the form :func:`write_manifest` writes."""
    try:
        fd = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=root_fd)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MANIFEST_MAX_BYTES:
            return {}
        data = b""
        while chunk := os.read(fd, _CHUNK):
            data += chunk
        doc = json.loads(data)
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)
    files = doc.get("files") if isinstance(doc, dict) else None
    return {k: v for k, v in files.items() if isinstance(v, str)} if isinstance(files, dict) else {}


def remove_written(folder: str | os.PathLike[str], keep: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """Remove from ``folder`` the files an earlier run wrote there, as its :data:`MANIFEST` lists
    them, and the folders that removal leaves empty; the relative paths removed.

    A manifest is read as a claim, not trusted: a file goes only when its path lies below
    ``folder`` (no absolute path, no ``..``), no name on the way to it is a link, it is a regular
    file, its content's sha256 is the one listed (a file edited since, or another's file listed
    under a wrong hash, stays), and it is not one of ``keep`` (what this run wrote already). Each
    is opened and removed through its folder's descriptor, so a link swapped in on the way leads
    nowhere. A folder goes only when nothing is left in it.
    """
    if not _safe_fs():
        return []
    root = os.path.abspath(folder)
    kept = {os.path.abspath(p) for p in keep}
    removed: list[str] = []
    emptied: set[tuple[str, ...]] = set()
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return removed
    try:
        for rel, digest in sorted(_manifest_files(root_fd).items()):
            parts = _parts(rel)
            if (parts is None or rel == MANIFEST or not _SHA256.fullmatch(digest)
                    or os.path.join(root, *parts) in kept):
                continue
            dir_fd = _open_dir(root_fd, parts[:-1])
            if dir_fd is None:
                continue
            try:
                found = _regular_file_sha256(dir_fd, parts[-1])
                if found is None or found[0] != digest:
                    continue
                now = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                if (now.st_dev, now.st_ino) != (found[1].st_dev, found[1].st_ino):
                    continue  # replaced since it was read
                os.unlink(parts[-1], dir_fd=dir_fd)
            except OSError:
                continue
            finally:
                os.close(dir_fd)
            removed.append(rel)
            emptied.update(tuple(parts[:i]) for i in range(1, len(parts)))
        for names in sorted(emptied, key=len, reverse=True):  # the deepest first
            dir_fd = _open_dir(root_fd, list(names[:-1]))
            if dir_fd is None:
                continue
            try:
                os.rmdir(names[-1], dir_fd=dir_fd)  # refused unless empty
            except OSError:
                pass
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)
    return removed


__all__ = ["MANIFEST", "NEW_FILE_MODE", "atomic_open", "atomic_path", "check_input", "copy_atomic", "json_ready",
           "json_text", "pipe_json", "read_input", "read_json_input", "read_text_input", "recording_writes",
           "remove_written", "save_figure", "write_atomic", "write_manifest"]
