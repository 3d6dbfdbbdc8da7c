"""rooftune.fileio: a file is replaced whole or not at all, with the permissions open() would give."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rooftune.fileio import atomic_open, atomic_path, copy_atomic, save_figure, write_atomic


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_writer_that_raises_leaves_the_old_file_and_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "best.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk full"), atomic_open(target) as f:
        f.write("new, half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json"]

    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_text("new, half")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json"]


def test_a_file_written_whole_replaces_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("old")
    assert write_atomic(target, '{"a": 1}') == target
    assert target.read_text() == '{"a": 1}'
    write_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_new_files_get_the_umasks_permissions_not_mkstemps(tmp_path: Path, umask_022: None) -> None:
    written = write_atomic(tmp_path / "report.html", "<html></html>")
    assert _mode(written) == 0o644
    with atomic_open(tmp_path / "ops.csv", "w", newline="") as f:
        f.write("a,b\n")
    assert _mode(tmp_path / "ops.csv") == 0o644
    os.umask(0o027)
    assert _mode(write_atomic(tmp_path / "best.json", "{}")) == 0o640


def test_a_copy_keeps_the_source_mode_and_content(tmp_path: Path) -> None:
    src = tmp_path / "model.onnx"
    src.write_bytes(b"onnx")
    src.chmod(0o640)
    dst = copy_atomic(src, tmp_path / "best_model.onnx")
    assert dst.read_bytes() == b"onnx" and _mode(dst) == 0o640


def test_only_whole_file_modes_are_taken(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"), atomic_open(tmp_path / "x", "a"):
        pass


def test_a_figure_is_saved_in_its_suffixs_format_and_a_failed_save_keeps_the_old(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    svg = save_figure(fig, tmp_path / "roofline.svg")
    assert svg.read_text().lstrip().startswith("<?xml") and not plt.get_fignums()

    png = tmp_path / "roofline.png"
    png.write_bytes(b"old png")
    fig, _ = plt.subplots()
    fig.savefig = lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device"))  # type: ignore[method-assign]
    with pytest.raises(OSError):
        save_figure(fig, png)
    assert png.read_bytes() == b"old png" and not plt.get_fignums()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roofline.png", "roofline.svg"]
