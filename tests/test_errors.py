"""The one-line summary of another library's error message."""

from __future__ import annotations

from rooftune.errors import one_line

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
