"""The runtimes by name: a new runtime is one module with a :class:`~rooftune.runtimes.base.Runtime`
subclass, its options declared in :mod:`rooftune.runtime_options`, plus one line in
:data:`RUNTIMES`."""

from __future__ import annotations

from collections.abc import Sequence

from rooftune.errors import InvalidArgument
from rooftune.runtimes.base import Runtime
from rooftune.runtimes.ncnn_runtime import Ncnn
from rooftune.runtimes.onnx_runtime import OnnxRuntime
from rooftune.runtimes.openvino_runtime import OpenVINO
from rooftune.runtimes.tensorflow_runtime import TensorFlow
from rooftune.runtimes.torch_runtimes import Compile, Eager, TorchScript

RUNTIMES: dict[str, type[Runtime]] = {
    "eager": Eager,
    "torchscript": TorchScript,
    "compile": Compile,
    "onnxruntime": OnnxRuntime,
    "openvino": OpenVINO,
    "ncnn": Ncnn,
    "tensorflow": TensorFlow,
}


def get_runtime(name: str) -> Runtime:
    if name not in RUNTIMES:
        raise InvalidArgument("runtime", name, f"allowed {', '.join(RUNTIMES)}")
    return RUNTIMES[name]()


def available_runtimes() -> tuple[dict[str, Runtime], dict[str, str]]:
    """The runtimes usable here, and for each missing one the reason."""
    ok: dict[str, Runtime] = {}
    notes: dict[str, str] = {}
    for name in RUNTIMES:
        rt = get_runtime(name)
        why = rt.available()
        if why is None:
            ok[name] = rt
        else:
            notes[name] = why
    return ok, notes


def chosen_runtimes(names: Sequence[str] | None = None) -> tuple[dict[str, Runtime], dict[str, str]]:
    """:func:`available_runtimes` restricted to ``names`` (all when None); an unknown or missing
    name raises InvalidArgument with the allowed ones or the reason."""
    ok, notes = available_runtimes()
    if not names:
        return ok, notes
    for r in names:
        if r not in RUNTIMES:
            raise InvalidArgument("runtime", r, f"allowed {', '.join(RUNTIMES)}")
        if r not in ok:
            raise InvalidArgument("runtime", r, notes[r])
    return {k: v for k, v in ok.items() if k in names}, notes
