"""The values a user types: ``--input`` shapes, ``-o`` model options, sweep ranges, run
configurations (``best.json``, ``--config``) and the data's spec. For any text, each parser gives a
valid value or a one-line :class:`RooftuneError`, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rooftune.errors import RooftuneError
from rooftune.runconfig import RunConfig, load_config
from rooftune.sweep.grid import MAX_VALUES, parse_values
from rooftune.workload.data import DataSpec
from rooftune.workload.models import parse_options
from rooftune.workload.shapes import MAX_ELEMENTS, parse_shape

#: Digits of any length, past Python's limit of 4,300 for int() included.
DIGITS = st.one_of(st.text("0123456789", min_size=1, max_size=30), st.integers(4000, 6000).map(lambda n: "9" * n))
SHAPE_TEXT = st.one_of(st.text(max_size=40), st.lists(st.one_of(DIGITS, st.integers(0, 10**6).map(str)),
                                                      min_size=1, max_size=6).map("x".join))
RANGE_TEXT = st.one_of(
    st.text(max_size=40),
    st.tuples(DIGITS, DIGITS, st.sampled_from("*x+-/"), DIGITS).map(lambda t: f"{t[0]}:{t[1]}:{t[2]}{t[3]}"),
    st.lists(st.one_of(DIGITS, st.integers(-5, 10**6).map(str)), min_size=1, max_size=80).map(",".join))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
                    max_leaves=20)
CONFIG_KEYS = ("runtime", "intra_threads", "inter_threads", "allocator", "openmp", "pin", "omp", "precision",
               "batch", "instances", "memory_format", "runtime_options", "name", "set_threads")


def _one_line(e: RooftuneError) -> None:
    text = str(e)
    assert text and "\n" not in text and "Traceback" not in text


@given(SHAPE_TEXT)
def test_an_input_shape_is_positive_integers_or_one_line(text: str) -> None:
    try:
        shape = parse_shape(text)
    except RooftuneError as e:
        _one_line(e)
        return
    n = 1
    for d in shape:
        assert isinstance(d, int) and d >= 1
        n *= d
    assert n <= MAX_ELEMENTS


@given(st.lists(st.one_of(st.text(max_size=30), st.tuples(st.from_regex(r"[a-z_]\w{0,8}", fullmatch=True),
                                                           st.one_of(DIGITS, st.text(max_size=20)))
                          .map("=".join)), max_size=5))
def test_model_options_are_a_dict_or_one_line(items: list[str]) -> None:
    try:
        opts = parse_options(items)
    except RooftuneError as e:
        _one_line(e)
        return
    assert isinstance(opts, dict) and all(k.isidentifier() for k in opts)


@given(RANGE_TEXT)
def test_a_sweep_range_is_a_bounded_list_of_integers_or_one_line(text: str) -> None:
    try:
        values = parse_values(text, "--values")
    except RooftuneError as e:
        _one_line(e)
        return
    assert 1 <= len(values) <= MAX_VALUES and all(isinstance(v, int) and v >= 1 for v in values)


@given(st.dictionaries(st.sampled_from(CONFIG_KEYS) | st.text(max_size=10), JSON, max_size=8))
def test_a_run_configuration_from_any_json_object_is_valid_or_one_line(data: dict) -> None:
    try:
        config = RunConfig.from_dict(data, usable_cores=2)
    except RooftuneError as e:
        _one_line(e)
        return
    assert isinstance(config, RunConfig)
    assert RunConfig.from_dict(config.to_dict(), usable_cores=2) == config  # what it writes, it reads back


@given(st.one_of(st.binary(max_size=200), JSON.map(lambda v: json.dumps(v).encode()),
                 st.integers(1, 60_000).map(lambda n: b"[" * n + b"]" * n)))
def test_a_config_file_of_any_bytes_is_a_configuration_or_one_line(tmp_path_factory, content: bytes) -> None:
    path: Path = tmp_path_factory.mktemp("cfg") / "best.json"
    path.write_bytes(content)
    try:
        load_config(path, usable_cores=2)
    except RooftuneError as e:
        _one_line(e)


@given(st.text(max_size=60), st.one_of(st.none(), st.text(max_size=20)), st.one_of(st.floats(), st.integers()),
       st.one_of(st.none(), st.text(max_size=20)))
def test_the_data_spec_is_valid_or_one_line(data: str, metric: str | None, max_drop: float,
                                            transform: str | None) -> None:
    try:
        DataSpec(data, metric=metric, max_drop=max_drop, transform=transform)
    except RooftuneError as e:
        _one_line(e)
