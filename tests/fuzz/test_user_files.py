"""The files a user gives to be read (rooftune.fileio.read_json_input, and the saved configuration
read by load_config through it): whatever bytes a file holds, a value or a
one-line InvalidArgument naming the file; and what is printed of a user's name
(rooftune.cli.printing.visible): no character a terminal would act on."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rooftune.cli.printing import visible
from rooftune.errors import InvalidArgument
from rooftune.fileio import read_json_input
from rooftune.runconfig import load_config

_FOLDER = Path(tempfile.mkdtemp(prefix="rooftune-fuzz-files-"))
_FILE = _FOLDER / "best.json"

#: JSON texts near a configuration's (its keys, nested values), and bytes of any kind.
_KEYS = st.sampled_from(["config", "runtime", "intra_threads", "omp", "OMP_PROC_BIND", "instances", "pin", "x"])
_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
                       max_leaves=12)
_CONTENTS = (st.binary(max_size=64) | _VALUES.map(lambda v: json.dumps(v).encode())
             | st.integers(0, 200).map(lambda n: b"[" * n + b"]" * n)
             | st.text(max_size=16).map(lambda t: t.encode("utf-8", "surrogatepass")))


def _one_line(exc: InvalidArgument) -> None:
    message = str(exc)
    assert "\n" not in message and str(_FILE) in message, message


@given(_CONTENTS)
def test_any_file_reads_as_json_or_is_refused_in_one_line(content: bytes) -> None:
    _FILE.write_bytes(content)
    try:
        read_json_input(_FILE, "--config", "allowed a configuration")
    except InvalidArgument as exc:
        _one_line(exc)


@given(_CONTENTS)
def test_any_file_loads_as_a_configuration_or_is_refused_in_one_line(content: bytes) -> None:
    _FILE.write_bytes(content)
    try:
        load_config(_FILE, usable_cores=4)
    except InvalidArgument as exc:
        assert "\n" not in str(exc), str(exc)


@given(st.text())
def test_a_name_is_printed_without_a_character_a_terminal_acts_on(name: str) -> None:
    shown = visible(name)
    assert shown.replace("\n", "").isprintable()
    assert visible(shown) == shown
    if name.replace("\n", "").isprintable():
        assert shown == name
