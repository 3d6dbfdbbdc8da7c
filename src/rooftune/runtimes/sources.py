"""Where each runtime's model comes from, decided here once for every framework it reads (a
workload's ``framework``), so that ONNX Runtime, OpenVINO and ncnn run a TensorFlow model as they
run a PyTorch one:

- the ONNX file (ONNX Runtime; OpenVINO with ``source=onnx``): a PyTorch model's torch.onnx export
  (:func:`export_onnx`); a TensorFlow model's frozen graph converted
  by tf2onnx, in the trial's own process as the PyTorch export is;
- OpenVINO's own conversion (``source=framework``, its default, the model as its framework hands
  it): the PyTorch module (or a .pt2 file's program), or the TensorFlow frozen graph, which
  ``openvino.convert_model`` reads with its TensorFlow frontend;
- ncnn (:func:`rooftune.runtimes.ncnn_runtime.ncnn_model`, beside its converter): pnnx converting the traced PyTorch module, or the TensorFlow model's ONNX file after ONNX
  Runtime's basic optimizations (tf2onnx writes TensorFlow's asymmetric "same" padding as Pad
  ops, which pnnx leaves without an ncnn layer; the optimizations fold them into the
  convolutions).

An op a converter has no rule for fails the runtime's trial with one line naming the op and the
layer it sits in (the scope of its node in the frozen graph); the other runtimes are still tuned.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.fileio import atomic_path

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload

#: What OpenVINO's frontends write before the op types they have no rule for.
_OV_UNCONVERTED = re.compile(r"No conversion rule found for operations:\s*([^\n]+)")


#: ONNX opset: the newest both torch.onnx and onnxruntime 1.2x handle for every op we export.
OPSET = 18


def export_onnx(wl: Workload, config: RunConfig, path: Path) -> Path:
    """torch.onnx.export of the workload in the config's layout; the dynamo exporter first, the
    TorchScript exporter when it fails. The file appears whole or not at all (written aside, then
    renamed), so a process starting beside the exporting one never reads half of it."""
    import warnings

    import torch

    from rooftune.runtimes.torch_runtimes import torch_inputs, torch_module

    m = torch_module(wl, config)
    xs = torch_inputs(wl, config)
    names = [f"input{i}" for i in range(len(xs))]
    with atomic_path(path) as part, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(m, xs, str(part), input_names=names, opset_version=OPSET, dynamo=True,
                              external_data=False, verbose=False)
        except Exception:  # the dynamo exporter fails on some models the legacy one handles
            torch.onnx.export(m, xs, str(part), input_names=names, opset_version=OPSET, dynamo=False)
    return path


class OpConversionFailure(RuntimeError):
    """A converter has no rule for some op of the model. Named as OpenVINO's own failure, so the
    study's skip rule (:mod:`rooftune.tuning.skips`) reads both the same way: the ops are the
    model's, and every configuration converting it the same way would fail alike."""


def is_tensorflow(wl: Any) -> bool:
    from rooftune.workload.frameworks import is_tensorflow as tf_workload

    return tf_workload(wl)


def layer_of(node: str, layers: Sequence[str] = ()) -> str:
    """The layer a frozen graph's node belongs to: its scope below the model's
    (``functional_1/bessel_1/bessel_i1e/BesselI1e`` -> ``bessel_1``), as the Keras model names it
    where ``layers`` (its layer names) has it, the scope uniquified by TensorFlow (``bessel_1``)
    or not."""
    parts = node.split("/")
    scope = parts[1] if len(parts) > 2 else parts[0]
    named = [n for n in layers if scope == n or re.fullmatch(re.escape(n) + r"_\d+", scope)]
    return max(named, key=len) if named else scope


def unconverted(converter: str, nodes: Iterable[tuple[str, str]], layers: Sequence[str] = ()) -> str:
    """One line naming each op type the converter left and the layers it sits in; ``nodes``:
    (op type, node name) pairs, ``layers`` the Keras model's layer names."""
    by_op: dict[str, list[str]] = {}
    for op, name in nodes:
        found = by_op.setdefault(op, [])
        if name and layer_of(name, layers) not in found:
            found.append(layer_of(name, layers))
    ops = "; ".join(f"{op} in layer {', '.join(found) or '?'}" for op, found in by_op.items())
    return f"{converter} has no conversion for op {ops}"


def nodes_of(graph_def: Any, ops: Sequence[str]) -> list[tuple[str, str]]:
    """The (op type, node name) pairs of ``graph_def`` whose op type is in ``ops`` (an op with no
    node keeps its name alone)."""
    found = [(n.op, n.name) for n in graph_def.node if n.op in ops]
    return found + [(op, "") for op in ops if not any(f[0] == op for f in found)]


def onnx_file(wl: Workload, config: RunConfig, path: Path) -> Path:
    """The workload's ONNX file at ``path``, written whole or not at all."""
    if is_tensorflow(wl):
        return tf_onnx(wl.module, path)
    return export_onnx(wl, config, path)


def tf_onnx(runner: Any, path: Path) -> Path:
    """A TensorFlow runner's frozen graph (:class:`rooftune.workload.keras_models.TFRunner`)
    converted by tf2onnx at the opset the PyTorch export writes, with the graph's own input and
    output names, written aside and renamed into place. A node tf2onnx has no conversion for
    (it keeps it under its TensorFlow op type, which ONNX does not define) fails with its layer."""
    import logging

    from rooftune.runtimes.packages import missing

    why = missing("tf2onnx")
    if why:  # the tf extra brings it with TensorFlow
        raise RuntimeError(f"a TensorFlow model reaches ONNX through tf2onnx, which {why.removeprefix('tf2onnx ')}")
    import onnx
    import tf2onnx

    logging.getLogger("tf2onnx").setLevel(logging.CRITICAL)  # what it cannot convert is raised below
    model, _ = tf2onnx.convert.from_graph_def(runner.graph_def, input_names=list(runner.input_names),
                                              output_names=list(runner.output_names), opset=OPSET)
    left = [(n.op_type, n.name) for n in model.graph.node
            if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type)]
    if left:
        raise OpConversionFailure(unconverted("tf2onnx", left, runner.layers))
    with atomic_path(path) as part:
        onnx.save(model, str(part))
    return path


def openvino_model(wl: Workload, config: RunConfig, fused_names: bool = False) -> Any:
    """``openvino.convert_model`` of the model as its framework hands it (``config``: the
    configuration whose model is converted, for a PyTorch module's layout and precision).
    ``fused_names``: each op keeps the names of the ops its fusions merged into it (see
    :func:`_fused_names_kept`)."""
    import warnings

    import openvino as ov
    import torch

    if is_tensorflow(wl):
        graph_def = wl.module.graph_def
        try:
            return ov.convert_model(graph_def)
        except Exception as exc:
            found = _OV_UNCONVERTED.search(str(exc))
            if not found:
                raise
            ops = [o.strip() for o in found.group(1).split(",") if o.strip()]
            raise OpConversionFailure(unconverted("OpenVINO's TensorFlow frontend", nodes_of(graph_def, ops),
                                                  wl.module.layers)) from None
    from rooftune.runtimes.torch_runtimes import torch_inputs, torch_module

    # a .pt2 file's program is converted as exported: its module is a GraphModule, which the
    # frontend's tracing refuses ("Couldn't get TorchScript module by tracing")
    exported = wl.exported if config.precision != "int8" else None
    kept = _fused_names_kept() if fused_names else contextlib.nullcontext()
    with warnings.catch_warnings(), torch.no_grad(), kept:
        warnings.simplefilter("ignore")
        return ov.convert_model(exported if exported is not None else torch_module(wl, config),
                                example_input=torch_inputs(wl, config))


@contextlib.contextmanager
def _fused_names_kept() -> Iterator[None]:
    """``openvino.convert_model`` with each op's ``fused_names`` left in its runtime info.

    The conversion fuses a batch norm into the convolution before it, and the fused convolution
    takes the name of the batch norm's multiply (``Multiply_2780``): only its ``fused_names``
    (``__module.layer1.0.conv1/aten::_convolution/Convolution,...``) still say which module it
    is, for the layers a mixed int8 set leaves out. The conversion's last step drops them; it is
    skipped here, and the quantized model drops them instead (:func:`rooftune.runtimes.quantize.
    nncf_int8`). Where this OpenVINO has no such step, the names stay as it gives them."""
    import importlib

    try:
        steps: Any = importlib.import_module("openvino.tools.ovc.moc_frontend.offline_transformations")
    except ImportError:
        steps = None
    cleanup = getattr(steps, "apply_fused_names_cleanup", None)
    if cleanup is None:
        yield
        return
    steps.apply_fused_names_cleanup = lambda model: None
    try:
        yield
    finally:
        steps.apply_fused_names_cleanup = cleanup
