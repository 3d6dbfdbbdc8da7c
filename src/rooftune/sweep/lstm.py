"""The LSTM family: ``nn.LSTM`` (biases on, sequence first) over one seeded sequence.

FLOPs are the cost formula's (rooftune.costs.formulas.recurrent), the analytic formula per layer
l, direction and step: 2 * N * 4H * (I_l + H) for the input and hidden projections, 2 * 4H * N
for the biases and 13 * N * H for the gates (3 sigmoids, 2 tanh, the cell and hidden updates),
with I_0 the input size and I_l = H * directions above. The backward pass computes the input and
weight gradients, each a product of the forward projections' size (2 x their FLOPs, the initial
state's gradient included, as flop_counter counts an unrolled cell whose inputs take one), the bias
gradients as sums over the batch (4H * N per step) and the gates' backward counted as their
forward (13 * N * H). Compulsory bytes as for every op (inputs, weights and outputs once); the
steps depend on each other, so each reads the recurrent weights again: that traffic, from the
level that holds them, is what places a point (the forward's and the backward's alike).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rooftune.sweep.base import Case, Family

if TYPE_CHECKING:
    from rooftune.costs import OpCost

GATES = 4
#: The gates' arithmetic per hidden unit and step (rooftune.costs.formulas.RNN_POINTWISE_FLOPS).
POINTWISE = 13


class Lstm(Family):
    name = "lstm"
    description = "LSTM (nn.LSTM with biases, sequence first)"
    parameters: ClassVar[dict[str, int]] = {
        "batch": 8, "input_size": 256, "hidden": 256, "seq_len": 32, "layers": 1, "bidirectional": 0,
    }
    minimum: ClassVar[dict[str, int]] = {"bidirectional": 0}
    maximum: ClassVar[dict[str, int]] = {"bidirectional": 1}
    #: One axis at a time around the defaults: batch, hidden size and sequence length.
    default_study = (
        {"batch": (1, 2, 4, 8, 16, 32, 64)},
        {"hidden": (64, 128, 256, 512, 1024)},
        {"seq_len": (8, 16, 32, 64, 128)},
    )

    def resolve(self, params: dict[str, int]) -> dict[str, int]:
        return {**self.parameters, **params}

    def describe(self, p: dict[str, int]) -> str:
        extra = (f" {p['layers']} layers" if p["layers"] != 1 else "") + (" bidirectional" if p["bidirectional"] else "")
        return f"lstm N{p['batch']} I{p['input_size']} H{p['hidden']} T{p['seq_len']}{extra}"

    def _weights(self, p: dict[str, int]) -> int:
        d = 2 if p["bidirectional"] else 1
        h = p["hidden"]
        return sum(d * (GATES * h * (p["input_size"] if layer == 0 else h * d) + GATES * h * h + 2 * GATES * h)
                   for layer in range(p["layers"]))

    def tensor_elements(self, p: dict[str, int]) -> int:
        d = 2 if p["bidirectional"] else 1
        x = p["seq_len"] * p["batch"] * p["input_size"]
        y = p["seq_len"] * p["batch"] * d * p["hidden"]
        states = 2 * p["layers"] * d * p["batch"] * p["hidden"]
        # each layer keeps its gates for every step (what the backward pass needs)
        gates = p["layers"] * d * p["seq_len"] * p["batch"] * GATES * p["hidden"]
        return x + self._weights(p) + y + states + gates

    def build(self, p: dict[str, int], *, seed: int = 0) -> Case:
        import torch
        from torch import nn

        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        module = nn.LSTM(p["input_size"], p["hidden"], num_layers=p["layers"], bidirectional=bool(p["bidirectional"]))
        x = torch.randn(p["seq_len"], p["batch"], p["input_size"], generator=gen)
        return Case(module, (x,), lambda: module(x))

    def cost(self, case: Case, outputs: Any) -> OpCost:
        import torch

        from rooftune.costs import cost_of
        from rooftune.workload.graph import OpNode, TensorMeta

        m = case.module
        out, (h, c) = outputs
        weights = [w for w in m._flat_weights if isinstance(w, torch.Tensor)]  # type: ignore[union-attr]
        args = {"input": TensorMeta.of(case.inputs[0]), "params": [TensorMeta.of(w) for w in weights],
                "has_biases": True, "num_layers": m.num_layers, "dropout": 0.0, "train": False,
                "bidirectional": m.bidirectional, "batch_first": False}
        return cost_of(OpNode(0, "lstm", "aten.lstm", "", "LSTM", args,
                              (TensorMeta.of(out), TensorMeta.of(h), TensorMeta.of(c))))

    def backward_flops(self, p: dict[str, int]) -> int:
        d = 2 if p["bidirectional"] else 1
        n, h, t = p["batch"], p["hidden"], p["seq_len"]
        total = 0
        for layer in range(p["layers"]):
            i_l = p["input_size"] if layer == 0 else h * d
            total += d * t * (2 * (2 * n * GATES * h * (i_l + h)) + GATES * h * n + POINTWISE * n * h)
        return total

    def backward_cost(self, p: dict[str, int], forward: OpCost, itemsize: int) -> OpCost:
        from rooftune.costs import OpCost

        d = 2 if p["bidirectional"] else 1
        x = p["seq_len"] * p["batch"] * p["input_size"]
        y = p["seq_len"] * p["batch"] * d * p["hidden"]
        w = self._weights(p)
        nbytes = float(itemsize * (2 * x + 2 * w + y))
        recurrent_w = d * GATES * p["hidden"] ** 2 * itemsize
        traffic = nbytes + (p["seq_len"] - 1) * p["layers"] * recurrent_w
        return OpCost("rnn", float(self.backward_flops(p)), nbytes,
                      "lstm backward: 2x the projections, bias sums, gates as forward", traffic, float(recurrent_w))
