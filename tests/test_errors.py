"""The one-line summary of another library's error message."""

from __future__ import annotations

import numpy as np
import pytest

from rooftune.errors import InvalidArgument, one_line, thread_counts

OPENVINO = """Check 'false' failed at src/frontends/common_translators/src/unconverted_ops_report.cpp:151:
FrontEnd API failed with OpConversionFailure:
Model wasn't fully converted.
Summary:
-- No conversion rule found for operations: aten::_nested_tensor_from_mask, aten::to_padded_tensor
"""


def test_a_message_that_opens_with_where_the_check_sat_is_summed_up_by_its_last_line() -> None:
    assert one_line(OPENVINO) == ("No conversion rule found for operations: aten::_nested_tensor_from_mask, "
                                  "aten::to_padded_tensor")
    assert one_line(RuntimeError(OPENVINO), 40) == "No conversion rule found for operatio..."


def test_other_messages_keep_their_first_line() -> None:
    assert one_line(ValueError("shape mismatch: 3 vs 4\n  at layer conv1\n")) == "shape mismatch: 3 vs 4"
    assert one_line("\n\n  one line  \n") == "one line"
    assert one_line(KeyError()) == "" and one_line("") == ""
    assert len(one_line("x" * 500)) == 300


def test_thread_counts_take_numpy_integers_keep_their_order_and_refuse_bools_and_counts_out_of_range() -> None:
    """The one check of thread counts (the ceilings, the analysis and select use it)."""
    assert thread_counts(None, 4) == () and thread_counts([], 4) == ()
    assert thread_counts(np.int64(2), 4) == (2,) and type(thread_counts(np.int64(2), 4)[0]) is int
    assert thread_counts([3, 1, 3], 4) == (3, 1)
    with pytest.raises(InvalidArgument, match=r"invalid thread count 5: allowed 1\.\.4 \(the usable cores"):
        thread_counts([1, 5], 4)
    with pytest.raises(InvalidArgument, match=r"invalid threads 0: allowed 1\.\.4"):
        thread_counts(0, 4, each="threads")
    for bad in (True, 1.0, "2", [1, False]):
        with pytest.raises(InvalidArgument, match="allowed an integer or a list of integers"):
            thread_counts(bad, 4)
