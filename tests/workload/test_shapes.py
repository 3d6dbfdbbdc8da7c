"""Input-shape strings: what parses, what is refused and how the refusal reads."""

from __future__ import annotations

import pytest

from rooftune.errors import InvalidArgument, RooftuneError
from rooftune.workload.shapes import MAX_ELEMENTS, format_shape, parse_shape, with_batch

EXAMPLE = "1x3x224x224"


def test_parse_plain_shape() -> None:
    assert parse_shape("1x3x224x224") == (1, 3, 224, 224)


def test_parse_single_dimension() -> None:
    assert parse_shape("7") == (7,)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1X3", (1, 3)),
        (" 2x3 ", (2, 3)),
        ("1\u00d73", (1, 3)),  # the multiplication sign
        ("4x3x2\n", (4, 3, 2)),
    ],
)
def test_parse_accepts_lenient_spellings(text: str, expected: tuple[int, ...]) -> None:
    got = parse_shape(text)
    assert got == expected
    assert all(type(d) is int for d in got)


def test_parse_returns_a_tuple() -> None:
    assert isinstance(parse_shape("2x2"), tuple)


@pytest.mark.parametrize("text", ["", "x", "1xax3", "-1x3", "1x", "x1", "1xx3", "1.5x3", "1 x 3"])
def test_malformed_shape_is_refused_with_the_example(text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_shape(text)
    msg = str(info.value)
    assert repr(text) in msg  # names the bad value
    assert EXAMPLE in msg  # says what is allowed
    assert msg.startswith("invalid input shape ")
    assert info.value.name == "input shape"
    assert info.value.value == text


def test_a_0d_input_is_written_scalar() -> None:
    assert parse_shape("scalar") == () == parse_shape(" () ") and parse_shape(format_shape(())) == ()


def test_zero_dimension_is_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_shape("1x0x3")
    msg = str(info.value)
    assert "'1x0x3'" in msg
    assert "at least 1" in msg


def test_shape_over_max_elements_is_refused() -> None:
    # 1024 * 1024 * 1025 = MAX_ELEMENTS + 2**20
    text = "1024x1024x1025"
    with pytest.raises(InvalidArgument) as info:
        parse_shape(text)
    msg = str(info.value)
    assert repr(text) in msg
    assert str(MAX_ELEMENTS) in msg


def test_shape_at_max_elements_is_accepted() -> None:
    assert parse_shape("1024x1024x1024") == (1024, 1024, 1024)
    assert 1024**3 == MAX_ELEMENTS


def test_invalid_argument_is_a_rooftune_error_and_value_error() -> None:
    with pytest.raises(RooftuneError):
        parse_shape("nope")
    with pytest.raises(ValueError):
        parse_shape("nope")


@pytest.mark.parametrize(
    "shape,text",
    [((1, 3, 224, 224), "1x3x224x224"), ((5,), "5"), ((), "scalar")],
)
def test_format_shape(shape: tuple[int, ...], text: str) -> None:
    assert format_shape(shape) == text


def test_format_then_parse_round_trips() -> None:
    shape = (2, 3, 64, 64)
    assert parse_shape(format_shape(shape)) == shape


def test_with_batch_replaces_the_leading_dimension() -> None:
    assert with_batch((1, 3, 224, 224), 8) == (8, 3, 224, 224)
    assert with_batch((5,), 2) == (2,)
    assert with_batch((), 4) == ()
