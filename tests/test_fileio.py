"""rooftune.fileio: a file is replaced whole or not at all, with the permissions open() would give."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rooftune.fileio import (
    MANIFEST,
    atomic_open,
    atomic_path,
    copy_atomic,
    json_text,
    recording_writes,
    remove_written,
    save_figure,
    write_atomic,
    write_manifest,
)


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


# ------------------------------------------------------------------ strict JSON


def _strict(text: str) -> object:
    def refuse(token: str) -> object:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinities_are_written_as_null_with_the_reason_beside_them() -> None:
    result = {"best_fp32_peer": {"ratio": 1.2, "ci_low": -math.inf, "ci_high": math.inf},
              "latency_s": math.nan, "ci": (0.9, math.inf), "cv": math.inf, "ok": 2.0,
              "per_thread": {1: math.nan}, "all": [math.nan, 1.0]}
    text = json_text(result, indent=2)
    d = _strict(text)
    h = d["best_fp32_peer"]
    assert h["ratio"] == 1.2 and h["ci_low"] is None and h["ci_high"] is None
    assert "-inf" in h["ci_low_note"] and "interval is unbounded" in h["ci_low_note"]
    assert d["ci"] == [0.9, None] and "interval is unbounded" in d["ci_note"]
    assert d["latency_s"] is None and d["latency_s_note"].startswith("nan written as null")
    assert d["cv"] is None and "no finite value" in d["cv_note"]
    assert d["ok"] == 2.0 and "ok_note" not in d
    assert d["per_thread"] == {"1": None} and d["all"] == [None, 1.0] and "all_note" in d
    # sorted keys work with a number as a key; without notes only the nulls
    assert _strict(json_text(result, sort_keys=True))["per_thread"] == {"1": None}
    assert _strict(json_text(result, notes=False)) == {
        "best_fp32_peer": {"ratio": 1.2, "ci_low": None, "ci_high": None}, "latency_s": None, "ci": [0.9, None],
        "cv": None, "ok": 2.0, "per_thread": {"1": None}, "all": [None, 1.0]}


def test_what_default_makes_of_an_object_is_written_strictly_too() -> None:
    class Interval:
        pass

    d = _strict(json_text({"x": Interval()}, default=lambda _o: {"low": -math.inf, "high": 1.0}))
    assert d["x"]["low"] is None and "low_note" in d["x"]
    assert _strict(json_text({"p": Path("/a")}, default=str)) == {"p": "/a"}


def test_a_note_never_replaces_a_key_of_the_value() -> None:
    d = _strict(json_text({"x": math.nan, "x_note": "mine"}))
    assert d["x_note"] == "mine" and d["x_null_note"].startswith("nan")


# ------------------------------------------------------------------ what a run wrote, and its removal


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(folder: Path, files: object) -> None:
    (folder / MANIFEST).write_text(json.dumps({"written_by": "rooftune", "files": files}))


def test_the_manifest_lists_what_was_written_and_the_next_cleanup_removes_just_that(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for d in ("figures", "selection"):
        (out / d).mkdir(parents=True)
    (out / "figures" / "mine.svg").write_text("the user's")
    with recording_writes() as written:
        write_atomic(out / "best.json", "{}")
        write_atomic(out / "figures" / "roofline.png", b"png")
        write_atomic(out / "selection" / "load.py", "x = 1")
        write_atomic(tmp_path / "elsewhere.txt", "outside")
        (tmp_path / "linked").mkdir()
        (out / "via").symlink_to(tmp_path / "linked", target_is_directory=True)
        write_atomic(out / "via" / "x.txt", "through a link")
    # a folder, a path outside, a file reached through a link: not listed
    write_manifest(out, written | {out / "figures", Path("/etc/passwd")})
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert listed == {"best.json": _sha(b"{}"), "figures/roofline.png": _sha(b"png"), "selection/load.py": _sha(b"x = 1")}

    (out / "best.json").write_text('{"edited": "by the user"}')  # changed since: the user's now
    kept_too = out / "selection" / "load.py"
    removed = remove_written(out, keep=[kept_too])
    assert removed == ["figures/roofline.png"]
    assert (out / "best.json").exists() and kept_too.exists() and (out / "figures" / "mine.svg").exists()
    assert (tmp_path / "elsewhere.txt").exists()


def test_a_folder_goes_only_when_nothing_else_is_in_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for d in ("selection", "figures", "a/b/c"):
        (out / d).mkdir(parents=True)
    files = {"selection/load.py": b"1", "selection/selection.json": b"2", "figures/roofline.png": b"3",
             "figures/roofline.svg": b"4", "a/b/c/deep.bin": b"5"}
    for rel, data in files.items():
        (out / rel).write_bytes(data)
    (out / "selection" / "mine.py").write_text("the user's")
    _manifest(out, {rel: _sha(data) for rel, data in files.items()})
    assert sorted(remove_written(out)) == sorted(files)
    assert sorted(p.name for p in (out / "selection").iterdir()) == ["mine.py"]
    assert not (out / "figures").exists() and not (out / "a").exists()


def test_a_hostile_manifest_removes_none_of_the_users_files(tmp_path: Path) -> None:
    """Paths out of the folder, absolute paths, links out of it (to a file and to a folder), a
    link listed itself, a user's file under a wrong hash, malformed entries: all stay, and the
    summary.json beside them is not read at all."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    user = {"mydata.csv": "a,b\n1,2\n", "figures/roofline.svg": "<svg/>", "notes.txt": "mine", "best.bin": "w"}
    for rel, text in user.items():
        (out / rel).write_text(text)
    (out / "link.txt").symlink_to(victim)
    (out / "linked_dir").symlink_to(outside, target_is_directory=True)
    (out / "fifo").mkdir()
    os.mkfifo(out / "fifo" / "pipe")
    (out / "summary.json").write_text(json.dumps({"files": {"data": "mydata.csv", "fig": "figures/roofline.png",
                                                            "w": "best", "sel": "selection/load.py"}}))
    h = _sha(b"precious")
    _manifest(out, {
        "../outside/victim.txt": h, str(victim): h, "link.txt": h, "linked_dir/victim.txt": h,
        "./notes.txt": _sha(b"mine"), "figures//roofline.svg": _sha(b"<svg/>"), "figures/../notes.txt": _sha(b"mine"),
        "mydata.csv": _sha(b"not its content"), "notes.txt": "NOT-A-HASH", "fifo/pipe": _sha(b""),
        "best.bin": 12, "figures\\roofline.svg": _sha(b"<svg/>"), "": h, MANIFEST: h,
    })
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and not p.is_symlink() and p.name != "pipe"}
    assert remove_written(out) == []
    assert victim.read_text() == "precious" and (out / "link.txt").is_symlink()
    assert (out / "linked_dir").is_symlink() and (out / "fifo" / "pipe").exists()
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("manifest", [b"", b"not json", b"[1, 2]", b'{"files": ["a"]}', b'{"files": {"a": null}}',
                                      b"[" * 100_000])
def test_a_malformed_manifest_removes_nothing(tmp_path: Path, manifest: bytes) -> None:
    (tmp_path / "a").write_text("x")
    (tmp_path / MANIFEST).write_bytes(manifest)
    assert remove_written(tmp_path) == [] and (tmp_path / "a").exists()


def test_a_manifest_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    _manifest(tmp_path, {"mine.txt": _sha(b"mine")})
    (out / MANIFEST).symlink_to(tmp_path / MANIFEST)
    assert remove_written(out) == [] and (out / "mine.txt").exists()


def test_every_json_rooftune_writes_goes_through_the_strict_helper() -> None:
    """No json.dump or json.dumps in src/rooftune outside fileio.py, whose json_text writes strict
    JSON and pipe_json the lines between rooftune's own processes: so no command prints, and no
    file or store column holds, NaN or Infinity, which jq and most parsers refuse."""
    import ast

    import rooftune

    src = Path(rooftune.__file__).parent
    found = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "fileio.py" and path.parent == src:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("dump", "dumps") and \
                    isinstance(node.value, ast.Name) and node.value.id == "json":
                found.append(f"{path.relative_to(src)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "json" and \
                    {a.name for a in node.names} & {"dump", "dumps"}:
                found.append(f"{path.relative_to(src)}:{node.lineno}")
    assert found == []
