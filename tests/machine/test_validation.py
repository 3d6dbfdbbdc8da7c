from __future__ import annotations

import pytest

from rooftune.errors import InvalidArgument
from rooftune.machine import validate_precisions, validate_threads
from rooftune.machine.plateaus import sweep_sizes


def test_threads_default_is_every_count_on_small_machines_and_geometric_on_large() -> None:
    assert validate_threads(None, 1) == (1,) and validate_threads(None, 2) == (1, 2)
    assert validate_threads(None, 3) == (1, 2, 3) and validate_threads(None, 4) == (1, 2, 4)
    assert validate_threads(None, 16) == (1, 2, 4, 8, 16) and validate_threads(None, 24) == (1, 2, 4, 8, 16, 24)
    assert validate_threads([3, 1], 4) == (1, 3)


@pytest.mark.parametrize("bad", [0, -1, 5])
def test_thread_count_outside_usable_cores_is_refused(bad: int) -> None:
    with pytest.raises(InvalidArgument, match=rf"invalid thread count {bad}: allowed 1\.\.4"):
        validate_threads([1, bad], 4)


def test_unknown_precision_is_refused_with_the_allowed_list() -> None:
    with pytest.raises(InvalidArgument, match="invalid precision 'fp16': allowed fp32, fp64, bf16, int8"):
        validate_precisions(["fp32", "fp16"])


def test_precisions_keep_canonical_order() -> None:
    assert validate_precisions(["int8", "fp32"]) == ("fp32", "int8")


def test_sweep_sizes_are_geometric_and_cover_the_range() -> None:
    sizes = sweep_sizes(128 * 1024**2, 1)
    assert sizes[0] == 4096
    assert sizes[-1] == 128 * 1024**2
    assert len(sizes) == 16
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
