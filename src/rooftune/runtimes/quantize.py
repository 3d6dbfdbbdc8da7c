"""Post-training static int8 quantization with each runtime's own quantizer, calibrated on a
calibration set (inputs drawn like the workload's, see :func:`calibration_inputs`).

    PyTorch      PT2E with the x86 quantizer (torchao), lowered to oneDNN int8 kernels
    ONNX Runtime quantize_static, QDQ format, per-channel s8 weights, u8 activations (VNNI's u8 x s8)
    OpenVINO     NNCF's quantize on the converted model

Each one's package is optional: :func:`int8_missing` says what to install. A configuration's
kept layers (its mixed set) stay fp32, each quantizer told so by its own exclusion (see
:func:`kept_ops`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    return ValueError(f"int8: {quantizer} {NOTHING_QUANTIZED} (its ops: {_listed(ops)}); it would run in fp32")


def _listed(names: Iterable[str], shown: int = 8) -> str:
    """The distinct ``names`` sorted, the first ``shown`` of them and how many more."""
    distinct = sorted(set(names))
    return ", ".join(distinct[:shown]) + (f" and {len(distinct) - shown} more" if len(distinct) > shown else "")


# The mixed set: the layers a configuration keeps at higher precision, named as the model's
# ``named_modules`` names them, told to each quantizer by its own exclusion (PT2E's module-name
# config, ONNX Runtime's nodes_to_exclude, NNCF's ignored scope). Each graph says which module an
# op comes from in its own way:
#
#   PT2E          each node's ``nn_module_stack`` (the qualified names of the modules it runs in)
#   ONNX, dynamo  each node's ``pkg.torch.onnx.name_scopes`` metadata (``['', 'layer1',
#                 'layer1.0', 'layer1.0.conv1', 'conv2d_1']``: the modules, then the FX node);
#                 a batch norm folded into its convolution leaves the scopes of the batch norm,
#                 but the weight keeps the convolution's parameter name (``layer1.0.conv1.weight``)
#   ONNX, TorchScript  the node name (``/layer1/layer1.0/conv1/Conv``: each module's name after
#                 its last non-numeric part, see :func:`_scoped_module`)
#   OpenVINO      from PyTorch, the op's friendly name (``__module.layer1.0.conv1/aten::
#                 _convolution/Convolution``) or, for a convolution that absorbed a batch norm
#                 (friendly name ``Multiply_2780``), the ``fused_names`` the conversion kept;
#                 from ONNX, the ONNX node the op was made from (``node_conv2d_1/WithoutBiases``
#                 comes from ``node_conv2d_1``; the op computing a graph output takes the output's
#                 name)
#
# A kept name must hold at least one of the graph's layers (a convolution or matrix product, the
# layers the sensitivity analysis weighs): a name that holds none would change nothing, and is
# refused with the layers there are.

#: The ops that make a layer in each graph.
ONNX_LAYER_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM"})
OV_LAYER_OPS = frozenset({"Convolution", "GroupConvolution", "ConvolutionBackpropData",
                          "GroupConvolutionBackpropData", "MatMul"})
_PT2E_LAYER_OPS = frozenset({"linear", "matmul", "mm", "bmm", "addmm"})  # and every conv*
#: PyTorch's modules with weights that every quantizer here takes (the names a refusal lists where
#: only the module is at hand).
_TORCH_LAYERS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                 torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d, torch.nn.Linear, torch.nn.LSTM)


@dataclass(frozen=True)
class OwnedOp:
    """One op of a graph: its name there, whether it makes a layer, and the modules it comes from,
    the one that names its layer first."""

    name: str
    layer: bool
    owners: tuple[str, ...]


def _within(module: str, name: str) -> bool:
    """Whether ``module`` is the module ``name`` or one inside it."""
    return module == name or module.startswith(name + ".")


def _refused(name: str, layers: Iterable[str]) -> Exception:
    from rooftune.errors import InvalidArgument

    shown = _listed(layers)
    return InvalidArgument("keep", name, f"allowed the model's quantizable layers: {shown}" if shown
                           else "allowed the model's quantizable layers, and this graph names none")


def kept_ops(keep: Sequence[str], ops: Sequence[OwnedOp]) -> list[str]:
    """The names of the ops of ``ops`` that come from a kept module; a kept name that holds no
    layer of the graph is refused with the layers there are."""
    layers = [op.owners[0] for op in ops if op.layer and op.owners]
    for name in keep:
        if not any(_within(owner, name) for op in ops if op.layer for owner in op.owners):
            raise _refused(name, layers)
    return [op.name for op in ops if op.name and any(_within(owner, name) for owner in op.owners for name in keep)]


def check_kept_modules(module: torch.nn.Module, keep: Sequence[str]) -> None:
    """Refuse a kept name that is no module of ``module``, before anything is exported or
    calibrated, with the model's quantizable layers."""
    names = dict(module.named_modules())
    for name in keep:
        if name not in names:
            raise _refused(name, (n for n, m in names.items() if isinstance(m, _TORCH_LAYERS)))


def _scoped_module(path: Sequence[str]) -> str:
    """The qualified module name of a TorchScript exporter's scope path: it names each module by
    its qualified name from its last non-numeric part (``layer1``, ``layer1.0``, ``conv1``;
    ``features.1``, ``conv``, ``conv.0``), so a part that extends the one before by numbers is a
    numbered child of it."""
    name = last = ""
    for part in path:
        name = name + part[len(last):] if last and part.startswith(last + ".") else f"{name}.{part}" if name else part
        last = part
    return name


def onnx_ops(graph: Any) -> list[OwnedOp]:
    """Each node of a torch.onnx export's graph with the modules it comes from (see above)."""
    import ast

    initializers = {i.name for i in graph.initializer}
    ops = []
    for node in graph.node:
        owners: list[str] = []
        for name in node.input:  # a layer's parameters: its module whatever fusion renamed the node
            if name in initializers and name.endswith((".weight", ".bias")):
                owners.append(name.rsplit(".", 1)[0])
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None)
        if scopes is not None:
            try:
                path = ast.literal_eval(scopes)
            except (ValueError, SyntaxError):
                path = []
            if isinstance(path, list):
                owners += [s for s in path[-2::-1] if isinstance(s, str) and s]
        elif node.name.startswith("/") and node.name.count("/") > 1:
            owners.append(_scoped_module(node.name.split("/")[1:-1]))
        ops.append(OwnedOp(node.name, node.op_type in ONNX_LAYER_OPS, tuple(dict.fromkeys(owners))))
    return ops


def _torch_frontend_module(name: str) -> str | None:
    """The module of an op name OpenVINO's PyTorch frontend gave (``__module.fc/aten::linear/MatMul``)."""
    scope = name.split("/", 1)[0]
    return scope.removeprefix("__module.") if scope.startswith("__module.") else None


def openvino_ops(model: Any, onnx: Path | None = None) -> list[OwnedOp]:
    """Each op of an OpenVINO model with the modules it comes from: ``onnx``, the ONNX file it was
    read from; else converted from PyTorch (see above)."""
    by_onnx: dict[str, tuple[str, ...]] | None = None
    if onnx is not None:
        import onnx as onnx_lib

        graph = onnx_lib.load(str(onnx), load_external_data=False).graph
        by_onnx = {}
        for node, op in zip(graph.node, onnx_ops(graph), strict=True):
            for name in (node.name, *node.output):
                by_onnx.setdefault(name, op.owners)
        del graph
    ops = []
    for op in model.get_ops():
        kind = op.get_type_name()
        if kind in ("Constant", "Parameter", "Result"):
            continue
        name = op.get_friendly_name()
        owners: list[str] = []
        if by_onnx is not None:
            parts = name.split("/")
            found = next((by_onnx["/".join(parts[:n])] for n in range(len(parts), 0, -1)
                          if "/".join(parts[:n]) in by_onnx), ())
            owners += found
        else:
            own = _torch_frontend_module(name)
            if own is not None:
                owners.append(own)
            rt = op.get_rt_info()
            fused = rt["fused_names_0"].astype(str).split(",") if "fused_names_0" in rt.keys() else []
            # the fused op of its own kind first: a convolution that absorbed a batch norm is the
            # convolution's layer
            for entry in sorted(fused, key=lambda e: not e.endswith("/" + kind)):
                own = _torch_frontend_module(entry)
                if own is not None:
                    owners.append(own)
        ops.append(OwnedOp(name, kind in OV_LAYER_OPS, tuple(dict.fromkeys(owners))))
    return ops


def _pt2e_ops(gm: torch.fx.GraphModule) -> list[OwnedOp]:
    """Each call of an exported graph with the modules it runs in, the innermost first."""
    ops = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        owners = [str(fqn).removeprefix("L['self'].").partition("@")[0] for fqn, _ in reversed(list(stack.values())) if fqn]
        kind = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        ops.append(OwnedOp(node.name, kind.startswith("conv") or kind in _PT2E_LAYER_OPS, tuple(dict.fromkeys(owners))))
    return ops


def pt2e_int8(module: torch.nn.Module, example: Inputs, calibration: Sequence[Inputs], *,
              lower: bool = True, keep: Sequence[str] = ()) -> torch.nn.Module:
    """PT2E: export, insert observers by the x86 quantizer, calibrate, convert, and (``lower``)
    lower to oneDNN int8 kernels (qconv/qlinear with fused requantization) for eager runs.
    Without ``lower`` the converted graph (quantize/dequantize around fp32 ops) is what
    ``torch.compile`` with freezing takes: inductor fuses the same patterns itself and cannot
    compile the already-lowered graph.

    ``keep``: modules left in fp32, each given no quantization config. The quantizer applies the
    module configs before the global one, pattern by pattern down to the lone convolution or
    linear, so a kept convolution whose ReLU or batch norm is another module stays fp32 too."""
    from torchao.quantization.pt2e.lowering import lower_pt2e_quantized_to_x86
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    check_kept_modules(module, keep)
    with torch.no_grad():
        from rooftune.workload import eval_mode

        exported = torch.export.export(eval_mode(module), tuple(example), strict=False).module()
        _one_partition_per_call(exported)
        kept_ops(keep, _pt2e_ops(exported))  # a module the graph runs no layer of is refused
        quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
        for name in keep:
            quantizer.set_module_name_qconfig(name, None)
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


def ort_int8(fp32: Path, out: Path, calibration: Sequence[Inputs], keep: Sequence[str] = (),
             defaults: bool = False) -> Path:
    """quantize_static in QDQ format: per-channel symmetric s8 weights, u8 activations, min-max
    calibration, after ONNX Runtime's recommended pre-processing (shape inference, folding).

    ONNX Runtime's static quantizer has no LSTM (its QDQ operators do not cover it), so an LSTM
    stayed fp32 and an int8 LSTM network ran as fast as the fp32 one. Its dynamic quantizer does:
    each LSTM then keeps s8 weights (``DynamicQuantizeLSTM``, the activations quantized per call),
    a quarter of the bytes a batch-1 step streams. The output is checked by the int8 guard like any
    other.

    ``keep``: modules whose nodes both passes leave out (:func:`onnx_ops` says which nodes), each
    reading its inputs in fp32 (:func:`_kept_read_fp32`). ``defaults``: ``quantize_static`` as its
    documentation's example runs it, after the same pre-processing (per-tensor s8 weights and s8
    activations, QDQ, min-max): the peer onnxruntime-int8-default."""
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
    try:
        graph = onnx.load(str(source), load_external_data=False).graph
        names = [i.name for i in graph.input]
        lstm = any(n.op_type == "LSTM" for n in graph.node)  # the static pass leaves them as they are
        excluded = kept_ops(keep, onnx_ops(graph)) if keep else []
        made_by = {o: n.name for n in graph.node for o in n.output}
        reads = {n.name: [made_by.get(i) for i in n.input] for n in graph.node} if excluded else {}
        del graph  # the whole fp32 model: freed before the quantizer loads it again
        reader = _Reader(names, calibration)
        CalibrationDataReader.register(_Reader)
        # a ReLU after a quantized layer is left in the graph where a kept layer may read it (by
        # default the quantizer folds it into the u8 range of the layer's output)
        extra = {"QDQKeepRemovableActivations": True} if excluded else {}
        if defaults:
            quantize_static(str(source), str(out), reader, nodes_to_exclude=excluded, extra_options=extra)
        else:
            quantize_static(str(source), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
                            extra_options=extra)
    finally:
        pre.unlink(missing_ok=True)
    if excluded:
        _kept_read_fp32(out, reads, excluded)
    if not lstm:  # (with an LSTM, the dynamic pass below quantizes its weights)
        ops = [n.op_type for n in onnx.load(str(out), load_external_data=False).graph.node]
        if not ONNX_INT8_OPS.intersection(ops):
            raise nothing_quantized("ONNX Runtime's static quantizer", ops)
    else:
        recurrent = out.with_name(out.stem + ".lstm.onnx")
        try:
            quantize_dynamic(str(out), str(recurrent), weight_type=QuantType.QInt8, op_types_to_quantize=["LSTM"],
                             nodes_to_exclude=excluded)
            os.replace(recurrent, out)
        finally:
            recurrent.unlink(missing_ok=True)
    return out


def _kept_read_fp32(path: Path, reads: dict[str, list[str | None]], kept: Sequence[str]) -> None:
    """Let the kept nodes of the quantized model at ``path`` read their inputs in fp32.

    The QDQ quantizer quantizes a quantized layer's output for every node that reads it, so a
    kept layer after a quantized one would still read its input rounded to 8 bits (through the
    ReLU or pooling between them too): the error the mixed set keeps it to avoid, as a layer's
    sensitivity is measured with its input and weights in int8. From each kept node up to the
    layers before it, each node reads the tensor its Q/DQ pair was made from instead, and the
    pairs no node reads any more go. ``reads``: for each node, the node that made each of its
    inputs before quantization; a tensor now made by another node (a ReLU folded into the
    quantization by an ONNX Runtime without QDQKeepRemovableActivations) is refused."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    made_by = {o: n for n in graph.node for o in n.output}
    pending = [n for n in graph.node if n.name in set(kept)]
    seen = {n.name for n in pending}
    while pending:
        node = pending.pop()
        for i, name in enumerate(node.input):
            dq = made_by.get(name)
            q = made_by.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is not None and q.op_type == "QuantizeLinear":  # (a weight's DQ reads an initializer)
                name = q.input[0]
                maker = made_by[name].name if name in made_by else None
                if node.name in reads and i < len(reads[node.name]) and maker != reads[node.name][i]:
                    from onnxruntime import __version__

                    raise RuntimeError(f"int8: ONNX Runtime {__version__}'s quantizer folded an op before node "
                                       f"{node.name} into its input's quantization; a mixed set needs onnxruntime>=1.19")
                node.input[i] = name
            before = made_by.get(name)
            if (before is not None and before.name not in seen and before.op_type not in ONNX_LAYER_OPS
                    and before.op_type not in ("QuantizeLinear", "DequantizeLinear")):
                seen.add(before.name)
                pending.append(before)
    # the pairs nothing reads any more, and their scales and zero points
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for n in graph.node for i in n.input} | outputs
        unread = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                  and not any(o in read for o in n.output)]
        if not unread:
            break
        freed = {i for n in unread for i in n.input}
        for n in unread:
            graph.node.remove(n)
        read = {i for n in graph.node for i in n.input} | outputs
        for init in [t for t in graph.initializer if t.name in freed and t.name not in read]:
            graph.initializer.remove(init)
    onnx.save(model, str(path))


def nncf_int8(model: Any, calibration: Sequence[Inputs], keep: Sequence[str] = (), onnx: Path | None = None) -> Any:
    """NNCF post-training quantization of an OpenVINO model (its default: mixed-precision-free
    int8 on convolutions and matmuls, fast bias correction).

    ``keep``: modules whose ops NNCF's ignored scope leaves out, found by :func:`openvino_ops`
    (``onnx``: the ONNX file the model was read from; else the model was converted from PyTorch,
    with the fused names :func:`rooftune.runtimes.sources.openvino_model` keeps for this, which
    the quantized model drops as the conversion would have)."""
    from rooftune.runtimes.telemetry import quiet_vendor_telemetry

    quiet_vendor_telemetry()
    import nncf

    ignored = nncf.IgnoredScope(names=kept_ops(keep, openvino_ops(model, onnx))) if keep else None
    data = [[x.float().numpy() if x.is_floating_point() else x.numpy() for x in xs] for xs in calibration]
    quantized = nncf.quantize(model, nncf.Dataset(data), subset_size=len(data), ignored_scope=ignored)
    if keep and onnx is None:
        from openvino._offline_transformations import apply_fused_names_cleanup

        apply_fused_names_cleanup(quantized)
    return _quantized_by(quantized, "NNCF")


def nncf_accuracy_control(model: Any, calibration: Sequence[Inputs], evaluation: dict[str, Any]) -> Any:
    """NNCF's ``quantize_with_accuracy_control`` as its users run it: calibrated on the calibration
    part, validated on the evaluation part (``evaluation``: its batches, the fp32 model's outputs,
    the labels, the metric and the budget, as a study writes them) with the same metric and the
    same absolute budget, NNCF reverting the layers its own ranking finds most harmful to the
    original precision until the drop is within it; its other parameters at their defaults.

    NNCF asks the validation function for the metric on subsets of the items it draws, so each
    item carries its batch's index, which finds that batch's reference outputs and labels."""
    from rooftune.runtimes.telemetry import quiet_vendor_telemetry

    quiet_vendor_telemetry()
    import nncf

    from rooftune.workload.metrics import score

    def arrays(xs: Inputs) -> list[Any]:
        return [x.float().numpy() if x.is_floating_point() else x.numpy() for x in xs]

    batch = int(evaluation["batches"][0][0].shape[0])
    n, ref, labels, metric = evaluation["n"], evaluation["reference"], evaluation["labels"], evaluation["metric"]

    def validate(compiled: Any, items: Any) -> tuple[float, None]:  # (the metric, no per-item values)
        outs, rows = [], []
        for i, xs in items:
            real = min(batch, n - i * batch)  # the last batch is filled up with repeats at its end
            outs.append(torch.from_numpy(compiled(arrays(xs))[0])[:real])
            rows.append(torch.arange(i * batch, i * batch + real))
        at = torch.cat(rows)
        return score(torch.cat(outs), ref[at], None if labels is None else labels[at], metric), None

    calibrate = nncf.Dataset([arrays(xs) for xs in calibration])
    validation = nncf.Dataset(list(enumerate(evaluation["batches"])), lambda item: arrays(item[1]))
    quantized = nncf.quantize_with_accuracy_control(
        model, calibrate, validation, validate, max_drop=float(evaluation["max_drop"]),
        drop_type=nncf.DropType.ABSOLUTE, subset_size=len(calibration))
    return _quantized_by(quantized, "NNCF's accuracy control")


def _quantized_by(model: Any, quantizer: str) -> Any:
    """``model`` where ``quantizer`` left a quantized op in it (an OpenVINO model's FakeQuantize or
    FakeConvert), else :func:`nothing_quantized`'s error."""
    ops = [op.get_type_name() for op in model.get_ops()]
    if not {"FakeQuantize", "FakeConvert"}.intersection(ops):
        raise nothing_quantized(quantizer, [t for t in ops if t not in ("Parameter", "Constant", "Result")])
    return model
