"""Swept values as the command line and the Python API give them, and the malformed ones refused."""

from __future__ import annotations

import pytest

from rooftune.errors import InvalidArgument
from rooftune.sweep import get_family
from rooftune.sweep.grid import MAX_VALUES, parse_values
from rooftune.sweep.plan import grid_axes, grid_points


@pytest.mark.parametrize("text,expected", [
    ("1,8,64", (1, 8, 64)),
    ("16:1024:*2", (16, 32, 64, 128, 256, 512, 1024)),
    ("3:30:*3", (3, 9, 27)),
    ("8:32:+8", (8, 16, 24, 32)),
    ("7", (7,)),
    (" 4 , 4, 2 ", (4, 2)),
    (5, (5,)),
    ([1, 2], (1, 2)),
])
def test_values(text: object, expected: tuple[int, ...]) -> None:
    assert parse_values(text, "batch") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("text,fragment", [
    ("16:1024:*0", "factor >= 2"),
    ("16:1024:*1", "factor >= 2"),
    ("8:64:+0", "step >= 1"),
    ("64:8:*2", "must not exceed its end"),
    ("a,b", "a list (1,8,64)"),
    ("", "a list (1,8,64)"),
    ("1,,2", "a list (1,8,64)"),
    ("1.5", "a list (1,8,64)"),
    ("-3", "a list (1,8,64)"),
    ("0,4", "integers >= 1; 0 is not"),
    ("1:1000:+1", f"at most {MAX_VALUES} values"),
    ([], "a list (1,8,64)"),
    (True, "a list (1,8,64)"),
])
def test_malformed_values_are_refused(text: object, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        parse_values(text, "channels")  # type: ignore[arg-type]
    assert "invalid channels" in str(e.value) and fragment in str(e.value)


def test_alias_sets_its_parameters_together_and_axes_multiply() -> None:
    conv = get_family("conv2d")
    points = grid_points(conv, grid_axes(conv, {"channels": "8,16", "batch": "1,2", "size": 8}))
    assert len(points) == 4  # channels zipped into in and out: 2 x 2, not 2 x 2 x 2
    assert {(p["in_channels"], p["out_channels"], p["batch"]) for p in points} == {
        (8, 8, 1), (8, 8, 2), (16, 16, 1), (16, 16, 2)}
    assert all(p["height"] == p["width"] == 8 and p["padding"] == 1 for p in points)  # k3: padding 1


def test_default_study_is_one_axis_at_a_time_without_repeats() -> None:
    conv = get_family("conv2d")
    points = grid_points(conv, None)
    assert len(points) == 7 + 5 + 4 - 2  # the defaults' point is on every axis: counted once
    lstm = get_family("lstm")
    assert len(grid_points(lstm, None)) == 7 + 5 + 5 - 2


@pytest.mark.parametrize("family,grid,fragment", [
    ("conv2d", {"hidden": "8"}, "invalid parameter 'hidden': conv2d takes batch"),
    ("lstm", {"foo": "1"}, "invalid parameter 'foo': lstm takes batch"),
    ("lstm", {"bidirectional": "0,2"}, "values must lie in 0..1"),
    ("conv2d", {"size": "2", "kernel": "5", "padding": "0"}, "its output is empty"),
    ("conv2d", {"channels": "6", "groups": "4"}, "groups 4 must divide"),
])
def test_bad_grids_are_refused_naming_the_point_or_parameter(family: str, grid: dict[str, str], fragment: str) -> None:
    fam = get_family(family)
    with pytest.raises(InvalidArgument) as e:
        grid_points(fam, grid_axes(fam, grid))
    assert fragment in str(e.value)
