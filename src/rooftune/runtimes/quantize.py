"""Post-training static int8 quantization with each runtime's own quantizer, calibrated on a
calibration set (inputs drawn like the workload's, see :func:`calibration_inputs`).

    PyTorch      PT2E with the x86 quantizer (torchao), lowered to oneDNN int8 kernels
    ONNX Runtime quantize_static, QDQ format, per-channel s8 weights, u8 activations (VNNI's u8 x s8)
    OpenVINO     NNCF's quantize on the converted model

Each one's package is optional: :func:`int8_missing` says what to install.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rooftune.runtimes.packages import missing

Inputs = tuple[torch.Tensor, ...]
#: Inputs in a calibration set unless the caller asks otherwise: enough for stable activation
#: ranges on these models (min-max / histogram observers), few enough to calibrate in seconds.
CALIBRATION_SIZE = 32
#: The package that quantizes for each runtime.
QUANTIZERS = {"eager": "torchao", "compile": "torchao", "onnxruntime": "onnxruntime", "openvino": "nncf"}


#: The largest calibration set accepted (a larger one only costs calibration time).
MAX_CALIBRATION_SIZE = 10_000


def check_calibration_size(n: int | None, name: str = "calibration size") -> int:
    """``n`` (None: :data:`CALIBRATION_SIZE`) when it is an integer 1..MAX_CALIBRATION_SIZE,
    else InvalidArgument naming ``name``."""
    from rooftune.errors import InvalidArgument

    n = CALIBRATION_SIZE if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CALIBRATION_SIZE:
        raise InvalidArgument(name, n, f"allowed an integer 1..{MAX_CALIBRATION_SIZE}")
    return n


def int8_missing(runtime: str) -> str | None:
    """None when ``runtime`` can run int8 here, else why not."""
    pkg = QUANTIZERS.get(runtime)
    if pkg is None:
        return f"{runtime} has no int8 path (int8 runs on {', '.join(QUANTIZERS)})"
    why = missing(pkg) or (_torchao_unusable() if pkg == "torchao" else None)
    return f"int8 on {runtime}: {why}" if why else None


@functools.cache
def _torchao_unusable() -> str | None:
    """None when torchao's PT2E quantizer loads beside this torch; else why not. pip installs the
    newest torchao beside an older torch without complaint, and one built for a newer torch
    fails at import (torchao 0.18 with torch 2.4: "module 'torch' has no attribute 'int1'")."""
    from rooftune.workload.graph import quiet_torch

    try:
        with quiet_torch():
            import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401
    except Exception as exc:  # any failure to load means no int8 through it
        from importlib.metadata import version

        return (f"torchao {version('torchao')} does not load with torch {torch.__version__} "
                f"({type(exc).__name__}: {exc}); install the torchao made for this torch")
    return None


def calibration_inputs(example: Sequence[torch.Tensor], n: int = CALIBRATION_SIZE, seed: int = 0) -> list[Inputs]:
    """``n`` input tuples shaped and distributed like ``example``: floating inputs from a normal
    with each tensor's mean and standard deviation, integer inputs (token ids) uniform over the
    range seen. Seeded: every process draws the same set."""
    g = torch.Generator().manual_seed(seed)
    out: list[Inputs] = []
    for _ in range(n):
        xs = []
        for x in example:
            if x.is_floating_point():
                std = float(x.float().std()) if x.numel() > 1 else 1.0
                xs.append((torch.randn(x.shape, generator=g) * (std or 1.0) + float(x.float().mean())).to(x.dtype))
            elif x.dtype == torch.bool:
                xs.append(torch.randint(0, 2, x.shape, generator=g).bool())
            else:
                lo, hi = int(x.min()), int(x.max())
                xs.append(torch.randint(lo, hi + 1, x.shape, generator=g, dtype=x.dtype))
        out.append(tuple(xs))
    return out


#: Ops of a quantized ONNX graph that compute or carry int8 (QDQ pairs, ONNX Runtime's fused and
#: dynamic int8 kernels).
ONNX_INT8_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "DynamicQuantizeLSTM",
                           "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"})


#: What the error of :func:`nothing_quantized` says, which the study's skip rules recognise.
NOTHING_QUANTIZED = "quantized no op of this model"


def nothing_quantized(quantizer: str, ops: Sequence[str]) -> ValueError:
    """The error of a quantizer that left every op of the model in fp32: such a configuration would
    run fp32 under the name int8, so its trial fails and says why."""
    heavy = sorted(set(ops))
    shown = ", ".join(heavy[:8]) + (f" and {len(heavy) - 8} more" if len(heavy) > 8 else "")
    return ValueError(f"int8: {quantizer} {NOTHING_QUANTIZED} (its ops: {shown}); it would run in fp32")


def pt2e_int8(module: torch.nn.Module, example: Inputs, calibration: Sequence[Inputs], *,
              lower: bool = True) -> torch.nn.Module:
    """PT2E: export, insert observers by the x86 quantizer, calibrate, convert, and (``lower``)
    lower to oneDNN int8 kernels (qconv/qlinear with fused requantization) for eager runs.
    Without ``lower`` the converted graph (quantize/dequantize around fp32 ops) is what
    ``torch.compile`` with freezing takes: inductor fuses the same patterns itself and cannot
    compile the already-lowered graph."""
    from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    with torch.no_grad():
        from rooftune.workload import eval_mode

        exported = torch.export.export(eval_mode(module), tuple(example), strict=False).module()
        _one_partition_per_call(exported)
        quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
        prepared = prepare_pt2e(exported, quantizer)
        for xs in calibration:
            prepared(*xs)
        converted = convert_pt2e(prepared)
        calls = [n.target for n in converted.graph.nodes if n.op == "call_function"]
        if not any("quantize_per_" in str(t) for t in calls):
            names = (getattr(t, "__name__", str(t)).split(".")[0] for t in calls)
            raise nothing_quantized("PyTorch's x86 quantizer (PT2E)", [n for n in names if n != "getitem"])
        return lower_pt2e_quantized_to_x86(converted, tuple(example)) if lower else converted


def _one_partition_per_call(gm: torch.fx.GraphModule) -> None:
    """Give each call of a module its own source partition.

    A non-strict export records a node's module by its qualified name only, so the quantizer
    sees the two calls of a reused module (torchvision's BasicBlock calls ``self.relu`` after
    the first convolution and after the residual add) as one partition with two outputs and
    refuses the model ("Input partition has more than one output node"). The module stack's key
    numbers the calls (``layer1.0.relu``, ``layer1.0.relu@1``); that number is carried into the
    name the partitioner groups by.
    """
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack:
            continue
        key, (fqn, cls) = list(stack.items())[-1]
        _, at, call = str(key).rpartition("@")
        if at and call.isdigit() and not str(fqn).endswith(f"@{call}"):
            stack[key] = (f"{fqn}@{call}", cls)


class _Reader:
    """onnxruntime.quantization's CalibrationDataReader over the calibration set."""

    def __init__(self, names: Sequence[str], calibration: Sequence[Inputs]) -> None:
        self._it = iter([{n: x.float().numpy() if x.is_floating_point() else x.numpy() for n, x in zip(names, xs, strict=False)}
                         for xs in calibration])

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)

    def rewind(self) -> None:  # newer onnxruntime calls it between passes
        pass


def ort_int8(fp32: Path, out: Path, calibration: Sequence[Inputs]) -> Path:
    """quantize_static in QDQ format: per-channel symmetric s8 weights, u8 activations, min-max
    calibration, after ONNX Runtime's recommended pre-processing (shape inference, folding).

    ONNX Runtime's static quantizer has no LSTM (its QDQ operators do not cover it), so an LSTM
    stayed fp32 and an int8 LSTM network ran as fast as the fp32 one. Its dynamic quantizer does:
    each LSTM then keeps s8 weights (``DynamicQuantizeLSTM``, the activations quantized per call),
    a quarter of the bytes a batch-1 step streams. The output is checked by the int8 guard like any
    other."""
    import os

    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out.with_name(out.stem + ".pre.onnx")
    try:
        quant_pre_process(str(fp32), str(pre), skip_symbolic_shape=True)
        source = pre
    except Exception:  # pre-processing is an optimisation; quantize the exported model as it is
        source = fp32
    graph = onnx.load(str(source), load_external_data=False).graph
    names = [i.name for i in graph.input]
    lstm = any(n.op_type == "LSTM" for n in graph.node)  # the static pass leaves them as they are
    del graph  # the whole fp32 model: freed before the quantizer loads it again
    reader = _Reader(names, calibration)
    CalibrationDataReader.register(_Reader)
    quantize_static(str(source), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    pre.unlink(missing_ok=True)
    if not lstm:  # (with an LSTM, the dynamic pass below quantizes its weights)
        ops = [n.op_type for n in onnx.load(str(out), load_external_data=False).graph.node]
        if not ONNX_INT8_OPS.intersection(ops):
            raise nothing_quantized("ONNX Runtime's static quantizer", ops)
    else:
        recurrent = out.with_name(out.stem + ".lstm.onnx")
        try:
            quantize_dynamic(str(out), str(recurrent), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"])
            os.replace(recurrent, out)
        finally:
            recurrent.unlink(missing_ok=True)
    return out


def nncf_int8(model: Any, calibration: Sequence[Inputs]) -> Any:
    """NNCF post-training quantization of an OpenVINO model (its default: mixed-precision-free
    int8 on convolutions and matmuls, fast bias correction)."""
    from rooftune.runtimes.telemetry import quiet_vendor_telemetry

    quiet_vendor_telemetry()
    import nncf

    data = [[x.float().numpy() if x.is_floating_point() else x.numpy() for x in xs] for xs in calibration]
    quantized = nncf.quantize(model, nncf.Dataset(data), subset_size=len(data))
    ops = [op.get_type_name() for op in quantized.get_ops()]
    if not {"FakeQuantize", "FakeConvert"}.intersection(ops):
        raise nothing_quantized("NNCF", [t for t in ops if t not in ("Parameter", "Constant", "Result")])
    return quantized
