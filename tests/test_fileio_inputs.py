"""The files a user gives rooftune to read: whatever is at the path (another encoding, a
directory, a FIFO, a device, a huge or unreadable file, JSON nested too deep), a one-line error
naming the file and what is allowed, never a traceback or a wait for ever."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rooftune.errors import InvalidArgument
from rooftune.fileio import MAX_DOCUMENT_BYTES, check_input, read_input, read_json_input, read_text_input
from rooftune.runconfig import RunConfig


def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """A path of each kind a reader must refuse, and a fragment of its refusal."""
    cases = {}
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    cases["latin1"] = (latin1, "not UTF-8 text (byte 0xe9 at offset 13)")
    utf16 = tmp_path / "utf16.json"
    utf16.write_text("{}", encoding="utf-16")
    cases["utf16"] = (utf16, "not UTF-8 text (byte 0xff at offset 0)")
    cases["directory"] = (tmp_path, "a directory, not a file")
    cases["missing"] = (tmp_path / "missing.json", "no such file")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases["fifo"] = (fifo, "not a regular file (a FIFO, a device or a socket)")
    cases["device"] = (Path("/dev/zero"), "not a regular file")
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: no disk space taken
    cases["huge"] = (huge, f"larger than {MAX_DOCUMENT_BYTES} bytes")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases["deep"] = (deep, "nested deeper than 64 levels")
    deep_enough = tmp_path / "deep_enough.json"
    deep_enough.write_text("[" * 500 + "]" * 500)  # within what Python's parser takes, past what rooftune reads
    cases["deep_enough"] = (deep_enough, "nested deeper than 64 levels")
    cases["not_json"] = (tmp_path / "a-file", "not JSON (Expecting value at line 1 column 1)")
    (tmp_path / "a-file").write_text("x")
    if os.geteuid() != 0:  # root reads any file
        unreadable = tmp_path / "unreadable.json"
        unreadable.write_text("{}")
        unreadable.chmod(0)
        cases["unreadable"] = (unreadable, "cannot read it (Permission denied)")
    return cases


def test_each_bad_file_is_one_line_naming_it_and_what_is_allowed(tmp_path: Path) -> None:
    for kind, (path, why) in bad_files(tmp_path).items():
        with pytest.raises(InvalidArgument) as e:
            read_json_input(path, "--config", "allowed a configuration")
        message = str(e.value)
        assert message.startswith(f"invalid --config {str(path)!r}: {why}"), (kind, message)
        assert message.endswith("; allowed a configuration") and "\n" not in message, kind


def test_a_good_file_reads_and_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"name": "caf\u00e9"}).encode())
    assert read_json_input(path, "--config", "x") == {"name": "caf\u00e9"}
    assert read_text_input(path, "--config", "x") == '{"name": "caf\\u00e9"}'
    assert read_input(path, "--config", "x", max_bytes=path.stat().st_size) == path.read_bytes()
    with pytest.raises(InvalidArgument, match="larger than 3 bytes"):
        read_input(path, "--config", "x", max_bytes=3)
    check_input(path, "model", "x")
    with pytest.raises(InvalidArgument, match="a directory, not a file"):
        check_input(tmp_path, "model", "x")
    with pytest.raises(InvalidArgument, match="give a file name"):
        read_input("", "--config", "x")
    with pytest.raises(InvalidArgument, match="not a file name"):
        read_input("a\0b", "--config", "x")


def saved_configuration(tmp_path: Path) -> Path:
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict(),
                                "workload": {"model": "tests.analysis.tiny_models:small_cnn"}}))
    return path


def readers() -> dict[str, Callable[[Path], object]]:
    """Each public reader of a JSON file the user gives."""
    from rooftune.runconfig import load_config
    from rooftune.selection import load_selected
    from rooftune.tuning.deploy import load_tuned

    return {"load_config": lambda p: load_config(p, usable_cores=1), "load_tuned": load_tuned,
            "load_selected": load_selected}


@pytest.mark.parametrize("reader", ["load_config", "load_tuned", "load_selected"])
def test_every_reader_of_a_users_file_refuses_a_bad_one_in_one_line(tmp_path: Path, reader: str) -> None:
    read = readers()[reader]
    for kind, (path, why) in bad_files(tmp_path).items():
        with pytest.raises(InvalidArgument) as e:
            read(path)
        assert why in str(e.value) and "\n" not in str(e.value), (kind, str(e.value))


def test_a_dataset_file_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    from rooftune.profiling import read_profiles
    from rooftune.profiling.dataset import MAX_DATASET_BYTES

    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("platform_id\ncaf\xe9\n".encode("latin-1"))
    (tmp_path / "adir.csv").mkdir()
    os.mkfifo(tmp_path / "fifo.csv")
    with open(tmp_path / "huge.parquet", "wb") as f:
        f.truncate(MAX_DATASET_BYTES + 1)
    cases = {"latin1.csv": "cannot be read as csv (UnicodeDecodeError)", "adir.csv": "a directory, not a file",
             "fifo.csv": "not a regular file", "missing.csv": "no such file",
             "huge.parquet": f"larger than {MAX_DATASET_BYTES} bytes"}
    for name, why in cases.items():
        with pytest.raises(InvalidArgument) as e:
            read_profiles(tmp_path / name)
        assert why in str(e.value) and "\n" not in str(e.value), (name, str(e.value))


def test_a_saved_configuration_whose_workload_is_not_one_is_refused(tmp_path: Path) -> None:
    from rooftune.tuning.deploy import load_tuned

    for workload in ("resnet18", {"model": 5}, {"model": "resnet18", "options": [1]}, {"model": "resnet18", "train": 1}):
        path = tmp_path / "best.json"
        path.write_text(json.dumps({"config": RunConfig(intra_threads=1).to_dict(), "workload": workload}))
        with pytest.raises(InvalidArgument, match="its workload or artifact is not as rooftune tune --save writes"):
            load_tuned(path)


def test_a_selection_file_of_another_shape_is_refused(tmp_path: Path) -> None:
    from rooftune.selection import load_selected

    path = tmp_path / "selection.json"
    for doc in ({}, {"model": "resnet18", "batch": 1, "selection": {"strategy": "x", "layers": [{"layer": "c"}]},
                     "verification": {"fallbacks": []}}, [1, 2]):
        path.write_text(json.dumps(doc))
        with pytest.raises(InvalidArgument, match="invalid selection file .*: not a selection"):
            load_selected(path)


def test_a_keras_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    from rooftune.workload import load_workload

    fifo = tmp_path / "model.keras"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgument, match="not a regular file"):
        load_workload(str(fifo))


def test_an_exported_program_that_is_a_fifo_or_a_directory_is_refused(tmp_path: Path) -> None:
    from rooftune.workload import load_workload

    fifo = tmp_path / "model.pt2"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgument, match="model.pt2': not a regular file"):
        load_workload(str(fifo))
    (tmp_path / "folder.pt2").mkdir()
    with pytest.raises(InvalidArgument, match="folder.pt2': a directory, not a file"):
        load_workload(str(tmp_path / "folder.pt2"))
