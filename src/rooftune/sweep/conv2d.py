"""The 2-D convolution family: ``nn.Conv2d`` (with bias) on one seeded input.

FLOPs are the cost formula's (rooftune.costs.formulas.conv, equal to torch.utils.flop_counter's:
2 * N * K * P * Q * C/groups * R * S, the bias not counted); the backward pass computes the input
and the weight gradients, each a product of the forward's size, so it counts twice the forward's
FLOPs (as flop_counter counts convolution_backward without groups; with groups it counts the
weight gradient over every input channel, ``groups`` times what is computed). Compulsory bytes: the forward reads the input,
weights and bias and writes the output; the backward reads the input, weights and the output's
gradient and writes the input's and the weights' gradients.

The forward pass may also run on rooftune's convolution primitives (rooftune.primitives), each in
its own layout; int8 runs on the quantized primitives (fp32 in and out, quantization counted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rooftune.errors import InvalidArgument
from rooftune.sweep.base import Case, Family

if TYPE_CHECKING:
    from rooftune.costs import OpCost
    from rooftune.primitives import ConvSpec

#: ``padding`` left unset: ``dilation * (kernel - 1) // 2`` (the output keeps the input's size at
#: stride 1 for odd kernels, as the convolutions of the usual networks do).
AUTO_PADDING = -1
#: The int8 primitives tried in this order for an int8 point: the first that runs the spec is it.
INT8_PRIMITIVES = ("int8-x86", "int8-onednn", "int8-fbgemm")


class Conv2d(Family):
    name = "conv2d"
    description = "2-D convolution (nn.Conv2d with bias)"
    parameters: ClassVar[dict[str, int]] = {
        "batch": 4, "in_channels": 64, "out_channels": 64, "height": 28, "width": 28, "kernel": 3,
        "stride": 1, "padding": AUTO_PADDING, "dilation": 1, "groups": 1,
    }
    minimum: ClassVar[dict[str, int]] = {"padding": 0}
    aliases: ClassVar[dict[str, tuple[str, ...]]] = {"channels": ("in_channels", "out_channels"),
                                                     "size": ("height", "width")}
    #: One axis at a time around the defaults: batch, channels and kernel, the paper's axes.
    default_study = (
        {"batch": (1, 2, 4, 8, 16, 32, 64)},
        {"in_channels": (16, 32, 64, 128, 256), "out_channels": (16, 32, 64, 128, 256)},
        {"kernel": (1, 3, 5, 7)},
    )
    layouts = ("NCHW", "NHWC")
    has_algorithms = True

    def resolve(self, params: dict[str, int]) -> dict[str, int]:
        p = {**self.parameters, **params}
        if p["padding"] == AUTO_PADDING:
            p["padding"] = p["dilation"] * (p["kernel"] - 1) // 2
        if p["in_channels"] % p["groups"] or p["out_channels"] % p["groups"]:
            raise InvalidArgument("point", self.describe(p), f"groups {p['groups']} must divide in_channels "
                                  f"{p['in_channels']} and out_channels {p['out_channels']}")
        p_out, q_out = self._output(p)
        if p_out < 1 or q_out < 1:
            raise InvalidArgument("point", self.describe(p), f"its output is empty ({p_out}x{q_out}): the kernel "
                                  f"({p['kernel']}, dilation {p['dilation']}) is larger than the padded input; "
                                  "use a larger size or more padding")
        return p

    @staticmethod
    def _output(p: dict[str, int]) -> tuple[int, int]:
        span = p["dilation"] * (p["kernel"] - 1) + 1
        return ((p["height"] + 2 * p["padding"] - span) // p["stride"] + 1,
                (p["width"] + 2 * p["padding"] - span) // p["stride"] + 1)

    def describe(self, p: dict[str, int]) -> str:
        pad = p["padding"] if p["padding"] != AUTO_PADDING else "auto"
        extra = "".join(f" {k} {p[k]}" for k in ("stride", "dilation", "groups") if p[k] != 1)
        return (f"conv2d N{p['batch']} C{p['in_channels']}->K{p['out_channels']} {p['height']}x{p['width']} "
                f"k{p['kernel']} pad {pad}{extra}")

    def tensor_elements(self, p: dict[str, int]) -> int:
        p_out, q_out = self._output(p)
        weights = p["out_channels"] * (p["in_channels"] // p["groups"]) * p["kernel"] ** 2 + p["out_channels"]
        return (p["batch"] * p["in_channels"] * p["height"] * p["width"] + weights
                + p["batch"] * p["out_channels"] * max(p_out, 0) * max(q_out, 0))

    def build(self, p: dict[str, int], *, seed: int = 0) -> Case:
        import torch
        from torch import nn

        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        module = nn.Conv2d(p["in_channels"], p["out_channels"], p["kernel"], stride=p["stride"],
                           padding=p["padding"], dilation=p["dilation"], groups=p["groups"], bias=True)
        x = torch.randn(p["batch"], p["in_channels"], p["height"], p["width"], generator=gen)
        return Case(module, (x,), lambda: module(x))

    def cost(self, case: Case, outputs: Any) -> OpCost:
        from rooftune.costs import cost_of
        from rooftune.workload.graph import OpNode, TensorMeta

        weight, bias = case.module.get_parameter("weight"), case.module.get_parameter("bias")
        args = {"input": TensorMeta.of(case.inputs[0]), "weight": TensorMeta.of(weight), "bias": TensorMeta.of(bias)}
        return cost_of(OpNode(0, "conv2d", "aten.conv2d", "", "Conv2d", args, (TensorMeta.of(outputs),)))

    def backward_cost(self, p: dict[str, int], forward: OpCost, itemsize: int) -> OpCost:
        from rooftune.costs import OpCost

        p_out, q_out = self._output(p)
        x = p["batch"] * p["in_channels"] * p["height"] * p["width"]
        w = p["out_channels"] * (p["in_channels"] // p["groups"]) * p["kernel"] ** 2
        y = p["batch"] * p["out_channels"] * p_out * q_out
        # reads x, w and dy; writes dx and dw (the bias's gradient, a sum of dy, is counted as dy's read)
        return OpCost("conv", 2.0 * float(forward.flops or 0.0), float(itemsize * (2 * x + 2 * w + y)),
                      "conv backward: input and weight gradients, 2x the forward")

    def spec(self, p: dict[str, int], dtype: str = "fp32") -> ConvSpec:
        from rooftune.primitives import ConvSpec

        return ConvSpec(p["batch"], p["in_channels"], p["height"], p["width"], p["out_channels"], p["kernel"],
                        p["kernel"], stride=p["stride"], padding=p["padding"], dilation=p["dilation"],
                        groups=p["groups"], dtype=dtype)

    def algorithms(self, p: dict[str, int], precision: str) -> dict[str, str | None]:
        from rooftune.primitives import PRIMITIVES, get_primitive

        if precision not in ("fp32", "int8"):
            return {}
        spec = self.spec(p, precision)
        out: dict[str, str | None] = {}
        for name in PRIMITIVES:
            if name == "pytorch-default":  # F.conv2d: the framework's default itself
                continue
            prim = get_primitive(name)
            if prim.precision != precision:
                continue
            ok = prim.supports(spec)
            out[name] = None if ok is True else str(ok)
        return out

    def int8_reason(self, p: dict[str, int]) -> str | None:
        algos = self.algorithms(p, "int8")
        if any(algos.get(n, "absent") is None for n in INT8_PRIMITIVES):
            return None
        return "no int8 primitive runs this point: " + "; ".join(f"{n}: {algos.get(n) or 'absent'}" for n in INT8_PRIMITIVES)

    def int8_algorithm(self, p: dict[str, int]) -> str:
        algos = self.algorithms(p, "int8")
        return next(n for n in INT8_PRIMITIVES if algos.get(n, "absent") is None)

    def with_algorithm(self, case: Case, p: dict[str, int], algorithm: str, layout: str) -> Case:
        from rooftune.primitives import get_primitive
        from rooftune.primitives.base import to_layout

        prim = get_primitive(algorithm)
        weight, bias = case.module.get_parameter("weight"), case.module.get_parameter("bias")
        kernel = prim.prepare(self.spec(p, prim.precision), weight.detach(), bias.detach())
        x = to_layout(case.inputs[0], prim.in_layout)
        run = kernel.run
        return Case(case.module, (x,), lambda: run(x))

    def primitive_layout(self, algorithm: str) -> str:
        from rooftune.primitives import get_primitive

        return get_primitive(algorithm).in_layout
