"""Each family's FLOPs against an independent count: torch.utils.flop_counter for the convolution
(forward and backward), and for the LSTM the products flop_counter sees in an unrolled LSTMCell,
the rest being the analytic formula's bias and gate terms.

flop_counter counts a grouped convolution's weight gradient ``groups`` times over (it counts the
transposed product over every input channel, not C/groups): there the backward is 2x the forward,
as the arithmetic is, and the test states the counter's figure beside it."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from rooftune.sweep import get_family
from rooftune.sweep.lstm import GATES, POINTWISE


def _counted(fn: object) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()  # type: ignore[operator]
    return int(counter.get_total_flops())


@pytest.mark.parametrize("params", [
    {"batch": 2, "in_channels": 4, "out_channels": 6, "height": 9, "width": 7, "kernel": 3},
    {"batch": 1, "in_channels": 8, "out_channels": 8, "height": 10, "width": 10, "kernel": 5, "stride": 2},
    {"batch": 3, "in_channels": 6, "out_channels": 9, "height": 8, "width": 8, "kernel": 3, "dilation": 2,
     "groups": 3, "padding": 0},
    {"batch": 2, "in_channels": 4, "out_channels": 4, "height": 6, "width": 6, "kernel": 1, "groups": 4},
])
def test_conv2d_flops_equal_flop_counter_forward_and_backward(params: dict[str, int]) -> None:
    conv = get_family("conv2d")
    p = conv.resolve(params)
    case = conv.build(p)
    x = case.inputs[0].requires_grad_(True)
    fwd_counted = _counted(lambda: case.module(x))
    y = case.module(x)
    bwd_counted = _counted(lambda: y.backward(torch.ones_like(y)))
    fwd = conv.cost(case, y)
    assert fwd.flops == fwd_counted
    bwd = conv.backward_cost(p, fwd, 4).flops
    assert bwd == 2 * fwd_counted
    assert bwd_counted == (2 * fwd_counted if p["groups"] == 1 else (1 + p["groups"]) * fwd_counted)
    # compulsory bytes: input, weight, bias and output once each
    assert fwd.bytes == 4 * (x.numel() + case.module.weight.numel() + case.module.bias.numel() + y.numel())


@pytest.mark.parametrize("batch,input_size,hidden,steps", [(2, 5, 4, 3), (1, 8, 16, 6)])
def test_lstm_flops_are_the_formula_with_products_as_flop_counter_counts(
        batch: int, input_size: int, hidden: int, steps: int) -> None:
    lstm = get_family("lstm")
    p = lstm.resolve({"batch": batch, "input_size": input_size, "hidden": hidden, "seq_len": steps})
    case = lstm.build(p)
    m = case.module
    cell = torch.nn.LSTMCell(input_size, hidden)
    with torch.no_grad():
        cell.weight_ih.copy_(m.weight_ih_l0)
        cell.weight_hh.copy_(m.weight_hh_l0)
        cell.bias_ih.copy_(m.bias_ih_l0)
        cell.bias_hh.copy_(m.bias_hh_l0)
    x = case.inputs[0].requires_grad_(True)
    h0 = torch.zeros(batch, hidden, requires_grad=True)

    def unrolled() -> torch.Tensor:
        h, c = h0, h0
        outs = []
        for t in range(steps):
            h, c = cell(x[t], (h, c))
            outs.append(h)
        return torch.stack(outs)

    products = _counted(unrolled)
    out = unrolled()
    products_bwd = _counted(lambda: out.backward(torch.ones_like(out)))
    with torch.no_grad():
        reference = m(x)
    assert torch.allclose(reference[0], unrolled(), atol=1e-5)  # the same computation
    fwd = lstm.cost(case, reference)
    others = steps * (2 * GATES * hidden * batch + POINTWISE * batch * hidden)
    assert fwd.flops == products + others
    assert products == steps * 2 * batch * GATES * hidden * (input_size + hidden)
    bwd = lstm.backward_cost(p, fwd, 4)
    assert bwd.flops == products_bwd + steps * (GATES * hidden * batch + POINTWISE * batch * hidden)
    assert products_bwd == 2 * products
    # every step after the first reads the recurrent weights again
    assert fwd.traffic == fwd.bytes + (steps - 1) * 4 * GATES * hidden * hidden


def test_lstm_layers_and_directions_follow_the_cost_formula() -> None:
    lstm = get_family("lstm")
    p = lstm.resolve({"batch": 2, "input_size": 3, "hidden": 4, "seq_len": 5, "layers": 2, "bidirectional": 1})
    case = lstm.build(p)
    with torch.no_grad():
        out = case.forward()
    flops = lstm.cost(case, out).flops
    d, h, n, t = 2, 4, 2, 5
    expected = sum(d * t * (2 * n * GATES * h * (i + h) + 2 * GATES * h * n + POINTWISE * n * h) for i in (3, h * d))
    assert flops == expected
