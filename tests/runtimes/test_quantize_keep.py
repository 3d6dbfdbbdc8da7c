"""The mixed int8 set: each runtime's quantizer leaves the layers a configuration keeps in fp32
(PT2E's module-name config, ONNX Runtime's nodes_to_exclude, NNCF's ignored scope) and quantizes
the others; a kept name that holds no layer of the model is refused in one line."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from rooftune.errors import InvalidArgument
from rooftune.runconfig import RunConfig
from rooftune.runtimes import get_runtime
from rooftune.runtimes.quantize import calibration_inputs, int8_missing
from rooftune.workload.models import Workload


class Tiny(nn.Module):
    """Three convolutions and a linear, each with its own input width (3, 8, 12, 16), which names
    the layer in any graph: conv1 with its batch norm and ReLU as modules of their own (exporters
    and converters fold the batch norm into it), conv2 with a functional ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 12, 3, padding=1)
        self.conv3 = nn.Conv2d(12, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(self.conv3(x).mean((2, 3)))


#: Each layer by the width of its input.
LAYERS = {3: "conv1", 8: "conv2", 12: "conv3", 16: "fc"}
ALL = ["conv1", "conv2", "conv3", "fc"]
REFUSAL = "invalid keep {!r}: allowed the model's quantizable layers: conv1, conv2, conv3, fc"


def tiny() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Tiny().eval()
    with torch.no_grad():  # batch norm statistics of a trained model, not the identity
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(1, 3, 16, 16)


def workload() -> Workload:
    model, x = tiny()
    return Workload("tiny", "callable", model, (x,))


def calibration() -> list[tuple[torch.Tensor, ...]]:
    return calibration_inputs(tiny()[1:], 4)


def skip_unless(runtime: str) -> None:
    why = int8_missing(runtime) or get_runtime(runtime).available()
    if runtime == "openvino" and not why:
        why = get_runtime("onnxruntime").available()  # the ONNX export the onnx source reads
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def fp32_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's export, as ONNX Runtime and OpenVINO's onnx source read it."""
    skip_unless("onnxruntime")
    from rooftune.runtimes.sources import export_onnx

    return export_onnx(workload(), RunConfig(runtime="onnxruntime"), tmp_path_factory.mktemp("export") / "fp32.onnx")


def refused(call: Any) -> str:
    """The message of the InvalidArgument ``call`` raises: one line."""
    with pytest.raises(InvalidArgument) as err:
        call()
    message = str(err.value)
    assert "\n" not in message
    return message


# ---- what each quantized graph keeps in fp32 ----
#
# A layer is "int8" where both its input and its weight come through a quantizer, "fp32" where
# neither does. A kept layer must not read its input rounded to 8 bits anywhere between it and the
# layers before it (the ReLU, the mean): its input is looked for up to the layer before it.

def precision(input_quantized: bool, weight_quantized: bool) -> str:
    return {(True, True): "int8", (False, False): "fp32"}.get((input_quantized, weight_quantized), "mixed")


def rounded_before(data: Any, inputs: Any, rounds: Any, layer: Any) -> bool:
    """Whether a node that ``rounds`` lies on the way up from ``data``, a layer's input (through
    each node's ``inputs``, not past a ``layer``)."""
    pending, seen = [data], set()
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if rounds(node):
            return True
        if not layer(node):
            pending += inputs(node)
    return False


def pt2e_layers(gm: torch.fx.GraphModule) -> dict[str, str]:
    """Each convolution and linear of a converted PT2E graph (quantize/dequantize around fp32 ops)."""
    def kind(n: Any) -> str:
        return getattr(n.target, "__name__", "").split(".")[0] if n.op == "call_function" else ""

    def dequantizes(n: Any) -> bool:
        return "dequantize" in kind(n)

    out = {}
    for node in gm.graph.nodes:
        if kind(node) in ("conv2d", "linear"):
            data, weight = node.args[:2]
            tensor = weight.args[0] if dequantizes(weight) else weight
            rounded = rounded_before(data, lambda n: list(n.all_input_nodes), dequantizes,
                                     lambda n: kind(n) in ("conv2d", "linear"))
            out[LAYERS[int(functools.reduce(getattr, tensor.target.split("."), gm).shape[1])]] = precision(
                rounded, dequantizes(weight))
    return out


def onnx_layers(path: Path) -> dict[str, str]:
    """Each Conv and Gemm of a quantized ONNX file (QDQ: a DequantizeLinear before each quantized
    input)."""
    import onnx

    graph = onnx.load(str(path)).graph
    inits = {i.name: i for i in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    out = {}
    for node in graph.node:
        if node.op_type in ("Conv", "Gemm"):
            weight = made_by.get(node.input[1])
            rounded = rounded_before(made_by.get(node.input[0]), lambda n: [made_by.get(i) for i in n.input],
                                     lambda n: n.op_type == "DequantizeLinear", lambda n: n.op_type in ("Conv", "Gemm"))
            out[LAYERS[inits[weight.input[0] if weight else node.input[1]].dims[1]]] = precision(rounded, weight is not None)
    return out


def openvino_layers(model: Any) -> dict[str, str]:
    """Each Convolution and MatMul of a quantized OpenVINO model: FakeQuantize before a quantized
    input; the weight decompressed from int8 where quantized, the fp32 constant itself where not."""
    def inputs(op: Any) -> list[Any]:
        return [v.get_node() for v in op.input_values() if v.get_node().get_type_name() != "Constant"]

    out = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() in ("Convolution", "MatMul"):
            weight = op.input_value(1).get_node()
            fp32_weight = weight.get_type_name() == "Constant" and weight.get_element_type().get_type_name() == "f32"
            rounded = rounded_before(op.input_value(0).get_node(), inputs, lambda n: n.get_type_name() == "FakeQuantize",
                                     lambda n: n.get_type_name() in ("Convolution", "MatMul"))
            out[LAYERS[op.input(0).get_partial_shape()[1].get_length()]] = precision(rounded, not fp32_weight)
    return out


UNIFORM = dict.fromkeys(ALL, "int8")


def mixed(*kept: str) -> dict[str, str]:
    return {name: "fp32" if name in kept else "int8" for name in ALL}


#: conv1: its batch norm folded into it by every exporter and converter, and the model's input;
#: conv2: after a quantized layer, through a functional ReLU.
KEPT = pytest.mark.parametrize("kept", ["conv1", "conv2"])


# ---- PyTorch (PT2E) ----

@KEPT
def test_pt2e_leaves_a_kept_conv_in_fp32_and_quantizes_the_others(kept: str) -> None:
    """conv1's batch norm and ReLU are other modules: the quantizer's conv-bn-relu pattern is not
    all of conv1, and the lone convolution's pattern takes it out all the same."""
    skip_unless("eager")
    from rooftune.runtimes.quantize import pt2e_int8

    model, x = tiny()
    assert pt2e_layers(pt2e_int8(model, (x,), calibration(), lower=False)) == UNIFORM
    assert pt2e_layers(pt2e_int8(model, (x,), calibration(), lower=False, keep=[kept])) == mixed(kept)


def test_pt2e_keeps_several_layers() -> None:
    skip_unless("eager")
    from rooftune.runtimes.quantize import pt2e_int8

    model, x = tiny()
    assert pt2e_layers(pt2e_int8(model, (x,), calibration(), lower=False, keep=["conv2", "fc"])) == mixed("conv2", "fc")


def test_pt2e_refuses_a_name_that_is_no_layer_and_quantizes_nothing_when_every_layer_is_kept() -> None:
    skip_unless("eager")
    from rooftune.runtimes.quantize import NOTHING_QUANTIZED, pt2e_int8

    model, x = tiny()
    for name in ("conv9", "relu"):  # no module; a module that holds no layer
        message = refused(lambda name=name: pt2e_int8(model, (x,), calibration(), keep=[name]))
        assert message == REFUSAL.format(name)
    with pytest.raises(ValueError, match=NOTHING_QUANTIZED):
        pt2e_int8(model, (x,), calibration(), keep=ALL)


# ---- ONNX Runtime ----

@KEPT
def test_onnxruntime_leaves_a_kept_conv_out_and_quantizes_the_others(kept: str, fp32_onnx: Path, tmp_path: Path) -> None:
    """The export folds conv1's batch norm into it (its node then carries the batch norm's scope):
    the node is found by its weight, conv1's parameter. conv2 reads the fp32 output of conv1's
    ReLU, not the Q/DQ pair the quantizer put on it for conv1's sake."""
    from rooftune.runtimes.quantize import ort_int8

    assert onnx_layers(ort_int8(fp32_onnx, tmp_path / "uniform.onnx", calibration())) == UNIFORM
    out = ort_int8(fp32_onnx, tmp_path / "mixed.onnx", calibration(), keep=[kept])
    assert onnx_layers(out) == mixed(kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.onnx", "uniform.onnx"]


class Branches(nn.Module):
    """conv1's ReLU read by two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.left = nn.Conv2d(8, 8, 3, padding=1)
        self.right = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        return self.left(x) + self.right(x)


def test_onnxruntime_keeps_one_of_two_layers_reading_the_same_tensor(tmp_path: Path) -> None:
    """The quantizer puts one Q/DQ pair on conv1's ReLU for both readers: the kept one reads the
    ReLU itself, the other still the pair."""
    skip_unless("onnxruntime")
    import onnx

    from rooftune.runtimes.quantize import ort_int8
    from rooftune.runtimes.sources import export_onnx

    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    wl = Workload("branches", "callable", Branches().eval(), (x,))
    fp32 = export_onnx(wl, RunConfig(runtime="onnxruntime"), tmp_path / "fp32.onnx")
    graph = onnx.load(str(ort_int8(fp32, tmp_path / "mixed.onnx", calibration_inputs((x,), 4), keep=["left"]))).graph
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    reads = {node.input[1].split(".")[0]: [made_by.get(i) for i in node.input[:2]]
             for node in graph.node if node.op_type == "Conv"}
    assert reads == {"conv1": ["DequantizeLinear", "DequantizeLinear"], "left": ["Relu", None],
                     "right": ["DequantizeLinear", "DequantizeLinear"]}


def test_onnxruntime_finds_the_layers_of_a_torchscript_export_by_node_name(tmp_path: Path) -> None:
    """The TorchScript exporter (the fallback where the dynamo one fails) names nodes by scope
    (``/0/conv1/Conv``: a numbered module by its parent's name and its number) and renames a
    convolution's weight where it folds a batch norm into it."""
    skip_unless("onnxruntime")
    import warnings

    from rooftune.runtimes.quantize import ort_int8

    model, x = tiny()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(nn.Sequential(model).eval(), (x,), str(tmp_path / "fp32.onnx"), input_names=["input0"],
                          opset_version=18, dynamo=False)
    keep = ["0.conv1", "0.fc"]
    out = ort_int8(tmp_path / "fp32.onnx", tmp_path / "mixed.onnx", calibration(), keep=keep)
    assert onnx_layers(out) == mixed("conv1", "fc")
    message = refused(lambda: ort_int8(tmp_path / "fp32.onnx", tmp_path / "x.onnx", calibration(), keep=["conv1"]))
    assert message == "invalid keep 'conv1': allowed the model's quantizable layers: 0.conv1, 0.conv2, 0.conv3, 0.fc"


def test_onnxruntime_refuses_a_name_that_is_no_layer_and_quantizes_nothing_when_every_layer_is_kept(
        fp32_onnx: Path, tmp_path: Path) -> None:
    from rooftune.runtimes.quantize import NOTHING_QUANTIZED, ort_int8

    for name in ("conv9", "relu"):
        message = refused(lambda name=name: ort_int8(fp32_onnx, tmp_path / "x.onnx", calibration(), keep=[name]))
        assert message == REFUSAL.format(name)
    with pytest.raises(ValueError, match=NOTHING_QUANTIZED):
        ort_int8(fp32_onnx, tmp_path / "x.onnx", calibration(), keep=ALL)


# ---- OpenVINO (NNCF) ----

def openvino_source(source: str, fp32_onnx: Path, keep: bool = True) -> tuple[Any, Path | None]:
    """The tiny model as OpenVINO reads it from ``source``, and the ONNX file it came from."""
    import openvino as ov

    from rooftune.runtimes.sources import openvino_model

    if source == "onnx":
        return ov.Core().read_model(str(fp32_onnx)), fp32_onnx
    return openvino_model(workload(), RunConfig(runtime="openvino", precision="int8"), fused_names=keep), None


@KEPT
@pytest.mark.parametrize("source", ["framework", "onnx"])
def test_nncf_leaves_a_kept_conv_out_and_quantizes_the_others(source: str, kept: str, fp32_onnx: Path) -> None:
    """From PyTorch, the conversion fuses conv1's batch norm into it under another name
    (``Multiply_...``); the names the fusion merged say it is conv1's convolution. From ONNX, each
    op is named after the node it was made from."""
    skip_unless("openvino")
    from rooftune.runtimes.quantize import nncf_int8

    model, onnx = openvino_source(source, fp32_onnx, keep=False)
    assert openvino_layers(nncf_int8(model, calibration())) == UNIFORM
    model, onnx = openvino_source(source, fp32_onnx)
    quantized = nncf_int8(model, calibration(), keep=[kept], onnx=onnx)
    assert openvino_layers(quantized) == mixed(kept)
    # what the conversion would have left: no op carries the names fused into it
    assert not any("fused_names_0" in op.get_rt_info().keys() for op in quantized.get_ops())


@pytest.mark.parametrize("source", ["framework", "onnx"])
def test_nncf_refuses_a_name_that_is_no_layer(source: str, fp32_onnx: Path) -> None:
    skip_unless("openvino")
    from rooftune.runtimes.quantize import nncf_int8

    model, onnx = openvino_source(source, fp32_onnx)
    for name in ("conv9", "relu"):
        message = refused(lambda name=name: nncf_int8(model, calibration(), keep=[name], onnx=onnx))
        assert message == REFUSAL.format(name)


def test_nncf_quantizes_nothing_when_a_kept_module_holds_the_whole_model() -> None:
    """NNCF also quantizes the input of the mean between conv3 and fc, an op of no layer: with
    every layer kept, that one would still be int8. Kept, the module holding them all leaves
    every op in fp32, and the configuration fails as any int8 one that quantizes nothing."""
    skip_unless("openvino")
    from rooftune.runtimes.quantize import NOTHING_QUANTIZED, nncf_int8
    from rooftune.runtimes.sources import openvino_model

    model, x = tiny()
    wrapped = Workload("wrapped", "callable", nn.Sequential(model).eval(), (x,))
    converted = openvino_model(wrapped, RunConfig(runtime="openvino", precision="int8"), fused_names=True)
    with pytest.raises(ValueError, match=NOTHING_QUANTIZED):
        nncf_int8(converted, calibration(), keep=["0"])


# ---- through the runtimes ----

@pytest.mark.parametrize(("runtime", "options"), [("onnxruntime", {}), ("openvino", {}),
                                                  ("openvino", {"source": "onnx"})])
def test_prepare_quantizes_a_mixed_configuration_without_its_kept_layers(
        tmp_path: Path, runtime: str, options: dict[str, str]) -> None:
    """A configuration's ``keep`` reaches its runtime's quantizer: the artifact it runs has the
    kept layer in fp32 and the others in int8, in its own folder beside the uniform int8 one, and
    it quantizes the fp32 export the uniform one quantizes."""
    skip_unless(runtime)
    rt = get_runtime(runtime)
    wl = workload()
    config = RunConfig(runtime=runtime, precision="int8", keep=("conv2",), runtime_options=options)
    config.validate()
    prepared = rt.prepare(wl, config, tmp_path, calibration())
    assert "-keep" in prepared.artifact.parent.name
    if runtime == "onnxruntime":
        assert onnx_layers(prepared.artifact) == mixed("conv2")
    else:
        import openvino as ov

        assert openvino_layers(ov.Core().read_model(str(prepared.artifact))) == mixed("conv2")
    (out,) = prepared.output()
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    if runtime == "onnxruntime" or options:
        exports = [p.parent.name for p in tmp_path.rglob("model.onnx") if "-fp32-" in p.parent.name]
        assert exports == ["onnxruntime-contiguous-fp32-b1"]

    message = refused(lambda: rt.prepare(wl, RunConfig(runtime=runtime, precision="int8", keep=("conv9",),
                                                       runtime_options=options), tmp_path, calibration()))
    assert message == REFUSAL.format("conv9")


def test_eager_prepare_passes_its_kept_layers_to_pt2e(tmp_path: Path) -> None:
    """The lowered graph runs, and a name that is no module is refused before any export."""
    skip_unless("eager")
    rt = get_runtime("eager")
    wl = workload()
    (out,) = rt.prepare(wl, RunConfig(precision="int8", keep=("conv2",)), tmp_path, calibration()).output()
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    message = refused(lambda: rt.prepare(wl, RunConfig(precision="int8", keep=("conv9",)), tmp_path, calibration()))
    assert message == REFUSAL.format("conv9")
