"""rooftune.fileio.remove_written: whatever a folder's manifest says (paths out of the folder,
absolute paths, links, a user's file under any hash but its own, malformed entries), no file but
one rooftune wrote there, unchanged, is removed, and nothing raises."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rooftune.fileio import MANIFEST, remove_written

USER = {"mydata.csv": b"a,b\n", "figures/roofline.svg": b"<svg/>", "selection/mine.py": b"x = 1"}
OURS = {"best.json": b"{}", "figures/roofline.png": b"png", "selection/load.py": b"load"}
OUTSIDE = b"precious"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_NAMES = st.sampled_from(["..", ".", "", "/", "mydata.csv", "figures", "roofline.svg", "selection", "mine.py",
                          "best.json", "load.py", "link", "linkdir", "victim.txt", "outside", MANIFEST, "a\\b", "\0"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=4).map("/".join) | st.sampled_from(list(USER) + list(OURS))
_HASHES = st.sampled_from([_sha(OUTSIDE), _sha(b"wrong"), "NOT-HEX", *(_sha(v) for v in OURS.values())]) | st.integers()
_MANIFESTS = st.dictionaries(_PATHS, _HASHES, max_size=8).map(lambda f: json.dumps({"files": f}).encode()) | st.binary(
    max_size=64)


_BASE: list[Path] = []


def _folder() -> Path:
    """The folder the examples share (made once; an example puts back what it removed): the
    user's files, rooftune's, a file outside and links to it."""
    if not _BASE:
        base = Path(tempfile.mkdtemp(prefix="rooftune-fuzz-"))
        atexit.register(shutil.rmtree, base, True)
        (base / "outside").mkdir()
        (base / "outside" / "victim.txt").write_bytes(OUTSIDE)
        out = base / "out"
        for rel, data in {**USER, **OURS}.items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        os.symlink(base / "outside" / "victim.txt", out / "link")
        os.symlink(base / "outside", out / "linkdir")
        _BASE.append(base)
    return _BASE[0]


@given(_MANIFESTS)
def test_no_manifest_removes_a_file_rooftune_did_not_write(manifest: bytes) -> None:
    base = _folder()
    out = base / "out"
    (out / MANIFEST).write_bytes(manifest)
    removed = remove_written(out)
    try:
        assert set(removed) <= set(OURS)
        assert (base / "outside" / "victim.txt").read_bytes() == OUTSIDE
        assert all((out / rel).read_bytes() == data for rel, data in USER.items())
        assert (out / "link").is_symlink() and (out / "linkdir").is_symlink()
    finally:
        for rel in removed:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(OURS[rel])
