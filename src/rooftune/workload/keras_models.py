"""TensorFlow and Keras models as workloads: Keras applications by name (``keras:ResNet50``), a
SavedModel directory, a ``.keras`` file, ``module:callable`` returning a ``keras.Model``, or a
``keras.Model`` object.

Whatever the source, the model becomes one frozen graph (its concrete function with the variables
folded into constants, ``convert_variables_to_constants_v2``) run by a TensorFlow session: the same
graph is what the analysis times op by op and what the ``tensorflow`` runtime runs, so the op
times, the end-to-end time and the reference output all come from one program. Its inputs and
outputs are torch tensors in TensorFlow's layout (NHWC), so the tuning's reference files and output
checks treat it as any other workload. TensorFlow is imported only here, when such a model is
loaded.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rooftune.errors import InvalidArgument, WorkloadError, one_line
from rooftune.fileio import check_input
from rooftune.workload.shapes import ExampleInputs, check_elements, format_shape, with_batch

#: The prefix that names a Keras application.
PREFIX = "keras:"
#: Seed of the example inputs and of the untrained weights, as for the PyTorch models
#: (rooftune.workload.models): every process builds the same weights and inputs.
SEED = 0
#: Keras applications by name -> their standard input side (the size they were trained at).
KERAS_APPLICATIONS: dict[str, int] = {
    "ResNet50": 224, "ResNet101": 224, "ResNet152": 224, "ResNet50V2": 224, "ResNet101V2": 224,
    "MobileNet": 224, "MobileNetV2": 224, "MobileNetV3Small": 224, "MobileNetV3Large": 224,
    "InceptionV3": 299, "InceptionResNetV2": 299, "Xception": 299,
    "VGG16": 224, "VGG19": 224, "DenseNet121": 224, "DenseNet169": 224, "DenseNet201": 224,
    "EfficientNetB0": 224, "EfficientNetV2B0": 224, "NASNetMobile": 224, "ConvNeXtTiny": 224,
}
# TensorFlow's C++ notes (oneDNN, CPU features, each traced step's profiler session) go to stderr;
# rooftune reports what matters itself. Set here, before a user's module can import TensorFlow
# (module:callable); a level the user set stays.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
#: What to install where TensorFlow is missing (the project's ``tf`` extra).
INSTALL = "pip install 'rooftune[tf]' (tensorflow-cpu and tf2onnx)"


def tensorflow_missing() -> str | None:
    """None when TensorFlow can be imported here, else what to install."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return f"TensorFlow is not installed: {INSTALL}"
    return None


def _tf() -> Any:
    why = tensorflow_missing()
    if why:
        raise WorkloadError(why)
    # torch's compiler stack (torch.export, torch.compile) loads Triton, which brings its own LLVM:
    # loaded after TensorFlow's, it crashes the process at its import; loaded before, both run.
    # So it is loaded first, whichever framework the process runs next; where TensorFlow is in
    # already (a user's module imported Keras), it is left out: the TensorFlow path never needs it.
    import importlib

    if "tensorflow" not in sys.modules:
        importlib.import_module("torch._dynamo")
        with _quiet_stderr():  # its start-up notes are written before its log level is read
            import tensorflow as tf
    import tensorflow as tf

    return tf


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null inside (C++ libraries write there directly); an
    exception still propagates with its message."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def is_keras_model(obj: Any) -> bool:
    """Whether ``obj`` is a Keras model (or layer), told without importing TensorFlow."""
    return any(c.__module__.split(".")[0] in ("keras", "tf_keras") for c in type(obj).__mro__) and hasattr(obj, "inputs")


def is_keras_name(model: str) -> bool:
    return model.startswith(PREFIX)


def is_saved_model(path: Path) -> bool:
    return path.is_dir() and (path / "saved_model.pb").is_file()


class TFRunner:
    """The frozen graph in a TensorFlow session: ``runner(*tensors)`` feeds torch tensors and returns
    every output as a torch tensor. Sessions are made per thread setting (intra, inter) and kept."""

    def __init__(self, graph_def: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.graph_def = graph_def
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        self._graph: Any = None
        self._sessions: dict[tuple[Any, ...], Any] = {}
        #: The thread setting plain calls use (None: TensorFlow's defaults).
        self.threads: tuple[int, int] | None = None
        #: The Keras model's layer names, nested ones included (none for a SavedModel): the graph's
        #: node scopes carry them, uniquified (``bessel_1``), and a converter's failure names them.
        self.layers: tuple[str, ...] = ()

    @property
    def graph(self) -> Any:
        if self._graph is None:
            tf = _tf()
            g = tf.Graph()
            with g.as_default():
                tf.compat.v1.import_graph_def(self.graph_def, name="")
            self._graph = g
        return self._graph

    def session(self, intra: int | None = None, inter: int | None = None, **options: Any) -> Any:
        """A session of the graph: ``intra``/``inter`` threads (None: TensorFlow's default);
        ``options``: ``jit`` (XLA auto-clustering), ``remapper`` False (Grappler's fusions off),
        ``bf16`` (Grappler's oneDNN bf16 mixed-precision rewrite)."""
        key = (intra, inter, tuple(sorted(options.items())))
        if key not in self._sessions:
            tf = _tf()
            from tensorflow.core.protobuf import rewriter_config_pb2

            config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra or 0,
                                              inter_op_parallelism_threads=inter or 0)
            rewrites = config.graph_options.rewrite_options
            if options.get("jit"):
                config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
            if options.get("remapper") is False:
                rewrites.remapping = rewriter_config_pb2.RewriterConfig.OFF
            if options.get("bf16"):
                rewrites.auto_mixed_precision_onednn_bfloat16 = rewriter_config_pb2.RewriterConfig.ON
            self._sessions[key] = tf.compat.v1.Session(graph=self.graph, config=config)
        return self._sessions[key]

    def feed(self, xs: Sequence[torch.Tensor]) -> dict[str, Any]:
        return {n: x.detach().cpu().numpy() for n, x in zip(self.input_names, xs, strict=True)}

    def run(self, session: Any, feed: dict[str, Any], **kwargs: Any) -> list[Any]:
        return session.run(self.output_names, feed, **kwargs)

    def __call__(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        intra, inter = self.threads or (None, None)
        out = self.run(self.session(intra, inter), self.feed(xs))
        return tuple(torch.from_numpy(o.copy()) for o in out)

    def eval(self) -> TFRunner:  # what a torch module's callers ask of the model; a graph is inference only
        return self


@dataclass(frozen=True)
class KerasWorkload(ExampleInputs):
    """A TensorFlow model ready to run: the frozen graph's runner, its inputs (torch tensors in the
    model's own layout), and where it came from. Read as :class:`rooftune.workload.Workload` is."""

    name: str
    kind: str
    module: TFRunner
    inputs: tuple[torch.Tensor, ...]
    options: dict[str, Any] = field(default_factory=dict)
    exported: Any = None
    call: Any = None
    framework: str = "tensorflow"
    #: A .keras file's: the installed modules of its layers' classes, which another process
    #: imports before it loads the file (a package's layers are registered when it is imported).
    imports: tuple[str, ...] = ()

    def inputs_text(self) -> str:
        return ", ".join(format_shape(s) for s in self.input_shapes)

    def describe(self) -> str:
        return f"{self.name} ({self.kind}; input {self.inputs_text()})"

    def __call__(self) -> tuple[torch.Tensor, ...]:
        return self.module(*self.inputs)


def _shapes(specs: Sequence[Any], given: Sequence[tuple[int, ...]] | None, batch: int | None,
            model: str) -> list[tuple[int, ...]]:
    """Concrete input shapes: the user's (checked against the model's), else the model's own with
    the batch for its unknown first dimension."""
    if given:
        if len(given) != len(specs):
            raise InvalidArgument("number of --input shapes", len(given), f"this model takes {len(specs)} input(s)")
        out = []
        for s, spec in zip(given, specs, strict=True):
            s = with_batch(s, batch) if batch is not None and s else tuple(s)
            dims = list(spec.shape)
            if len(dims) != len(s) or any(d is not None and d != v for d, v in zip(dims, s, strict=True)):
                raise InvalidArgument("input shape", format_shape(s), f"this model takes {_spec_text(dims)}")
            out.append(check_elements(s, "input shape"))
        return out
    out = []
    for spec in specs:
        dims = list(spec.shape)
        if dims and dims[0] is None:
            dims[0] = batch or 1
        elif dims and batch is not None:
            raise InvalidArgument("batch", batch, f"model {model!r} has a fixed batch of {dims[0]}")
        if any(d is None for d in dims):
            raise WorkloadError(f"model {model!r} takes inputs of {_spec_text(list(spec.shape))}: give their shapes, "
                                "e.g. --input 1x224x224x3")
        out.append(check_elements(tuple(int(d) for d in dims), "input shape"))
    return out


def _spec_text(dims: Sequence[Any]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def _random(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any]) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(SEED)
    out = []
    for s, dt in zip(shapes, dtypes, strict=True):
        if dt.is_floating:
            out.append(torch.randn(s, generator=gen))
        else:
            out.append(torch.randint(0, 2, s, generator=gen, dtype=getattr(torch, dt.name, torch.int64)))
    return tuple(out)


def _freeze(fn: Any, model: str) -> tuple[Any, list[str], list[str]]:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    try:
        frozen = convert_variables_to_constants_v2(fn)
    except Exception as exc:  # an op that has no graph form, a resource that cannot be frozen
        raise WorkloadError(f"model {model!r}: its graph cannot be frozen: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    return frozen.graph.as_graph_def(), [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]


def from_keras_model(keras_model: Any, name: str, kind: str, batch: int | None = None,
                     inputs: Sequence[tuple[int, ...]] | None = None, options: dict[str, Any] | None = None,
                     check: bool = True) -> KerasWorkload:
    """The workload of a ``keras.Model``: its call traced at the concrete input shapes (inference
    mode) and frozen."""
    tf = _tf()
    specs = list(getattr(keras_model, "inputs", None) or [])
    if not specs:
        raise WorkloadError(f"model {name!r}: a Keras model without defined inputs (build it with an Input first)")
    shapes = _shapes(specs, inputs, batch, name)
    dtypes = [tf.as_dtype(getattr(s, "dtype", "float32")) for s in specs]
    signature = [tf.TensorSpec(s, d) for s, d in zip(shapes, dtypes, strict=True)]

    def call(*xs: Any) -> Any:
        out = keras_model(list(xs) if len(xs) > 1 else xs[0], training=False)
        return out if isinstance(out, (list, tuple, dict)) else [out]

    try:
        fn = tf.function(call).get_concrete_function(*signature)
    except Exception as exc:
        raise WorkloadError(f"model {name!r} fails on input {', '.join(map(format_shape, shapes))}: "
                            f"{type(exc).__name__}: {one_line(exc, 200)}") from exc
    gd, ins, outs = _freeze(fn, name)
    runner = TFRunner(gd, ins, outs)
    runner.layers = tuple(_layer_names(keras_model))
    return _workload(name, kind, runner, _random(shapes, dtypes), options or {}, check)


def _layer_names(model: Any) -> list[str]:
    return [layer.name for layer in _layers(model)]


def _workload(name: str, kind: str, runner: TFRunner, xs: tuple[torch.Tensor, ...], options: dict[str, Any],
              check: bool) -> KerasWorkload:
    wl = KerasWorkload(name, kind, runner, xs, dict(options))
    if check:
        try:
            wl()
        except Exception as exc:
            raise WorkloadError(f"model {name!r} fails on input {wl.inputs_text()}: {type(exc).__name__}: "
                                f"{one_line(exc, 200)}") from exc
    return wl


def _application(model: str, options: dict[str, Any], batch: int | None,
                 inputs: Sequence[tuple[int, ...]] | None, check: bool) -> KerasWorkload:
    app = model[len(PREFIX):]
    if app not in KERAS_APPLICATIONS:
        import difflib

        close = difflib.get_close_matches(app, list(KERAS_APPLICATIONS), n=3, cutoff=0.6)
        raise InvalidArgument("model", model, f"allowed {', '.join(PREFIX + n for n in KERAS_APPLICATIONS)}",
                              f"did you mean {', '.join(PREFIX + c for c in close)}?" if close else None)
    tf = _tf()
    import keras

    builder = getattr(keras.applications, app)
    side = KERAS_APPLICATIONS[app]
    if inputs:  # the user's image size (NHWC): the application is built for it
        if len(inputs) != 1 or len(inputs[0]) != 4:
            raise InvalidArgument("input shape", "x".join(map(str, inputs[0])) if inputs else inputs,
                                  f"{model} takes one NHWC image batch, e.g. 1x{side}x{side}x3")
        shape = tuple(inputs[0][1:])
    else:
        shape = (side, side, 3)
    keras.utils.set_random_seed(SEED)  # the same untrained weights in every process
    try:
        # logits, as torchvision's models return them (the option given wins)
        built = builder(weights=None, input_shape=shape, **{"classifier_activation": None, **options})
    except (TypeError, ValueError) as exc:
        raise WorkloadError(f"model {model!r}: bad option or input: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    _live_batch_norm(built, (CALIBRATION_BATCH, *shape))
    del tf
    return from_keras_model(built, model, "keras application", batch, inputs, options, check)


#: Images in the seeded random batch whose statistics an untrained application's batch norms take.
CALIBRATION_BATCH = 2


def _live_batch_norm(model: Any, shape: tuple[int, ...]) -> None:
    """Set every batch norm's moving mean and variance to its batch's statistics on one seeded
    random batch (one forward pass in training mode, momentum 0). Untrained, a Keras application
    normalizes by mean 0 and variance 1, so its signal vanishes or blows up with depth (docs/tensorflow.md
    gives keras:MobileNetV2's) and an output check compares
    constants; with its own statistics each layer passes on a live signal,
    as a trained network's does, which the output check and the runtimes' times both need."""
    import keras
    import numpy as np

    norms = [layer for layer in _layers(model) if isinstance(layer, keras.layers.BatchNormalization)]
    if not norms:
        return
    x = np.random.default_rng(SEED).random(shape, dtype=np.float32)
    kept = [n.momentum for n in norms]
    try:
        for n in norms:
            n.momentum = 0.0
        model(x, training=True)
    finally:
        for n, m in zip(norms, kept, strict=True):
            n.momentum = m


def _layers(model: Any) -> list[Any]:
    """Every layer of ``model``, those of nested models included."""
    out = []
    for layer in getattr(model, "layers", None) or []:
        out.append(layer)
        out += _layers(layer)
    return out


def _keras_file(model: str, path: Path, batch: int | None, inputs: Sequence[tuple[int, ...]] | None,
                options: dict[str, Any], check: bool) -> KerasWorkload:
    """A ``.keras`` file, loaded in Keras's safe mode: a Lambda layer (Python code inside the file)
    is refused, not run."""
    check_input(path, "model", "allowed a .keras file saved by keras.Model.save")  # a FIFO would hang the loader
    _tf()
    import keras

    if options:
        raise InvalidArgument("model option", next(iter(options)), "a .keras file takes no options")
    try:
        loaded = keras.models.load_model(str(path), compile=False, safe_mode=True)
    except Exception as exc:  # safe mode refusing code, an unknown custom layer, a damaged file
        import re

        # Keras names the class it lacks deep inside a long message
        unknown = re.search(r"Could not locate class '([^']+)'", str(exc))
        if unknown:
            raise WorkloadError(f"model {model!r}: cannot load the .keras file: its class {unknown.group(1)!r} is not "
                                "registered here; the package that defines it registers it when imported: give the "
                                "model as module:callable, from a module that imports it") from exc
        raise WorkloadError(f"model {model!r}: cannot load the .keras file: {type(exc).__name__}: "
                            f"{one_line(exc, 200)}") from exc
    from rooftune.workload.imports import installed_modules

    wl = from_keras_model(loaded, path.name, "keras file", batch, inputs, options, check)
    return replace(wl, imports=installed_modules(type(x).__module__ for x in (loaded, *_layers(loaded))))


def _saved_model(model: str, path: Path, batch: int | None, inputs: Sequence[tuple[int, ...]] | None,
                 options: dict[str, Any], check: bool) -> KerasWorkload:
    """A SavedModel directory, run through its ``serving_default`` signature."""
    tf = _tf()
    if options:
        raise InvalidArgument("model option", next(iter(options)), "a SavedModel takes no options")
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise WorkloadError(f"model {model!r}: not a loadable SavedModel: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    sigs = dict(getattr(loaded, "signatures", {}) or {})
    if "serving_default" not in sigs:
        raise WorkloadError(f"model {model!r}: the SavedModel has no serving signature (serving_default); "
                            f"its signatures: {', '.join(sigs) or 'none'}")
    sig = sigs["serving_default"]
    specs = [s for s in tf.nest.flatten(sig.structured_input_signature) if isinstance(s, tf.TensorSpec)]
    names = sorted(sig.structured_input_signature[1]) if sig.structured_input_signature[1] else []
    shapes = _shapes(specs, inputs, batch, model)
    concrete = tf.function(lambda *xs: sig(**dict(zip(names, xs, strict=True)))).get_concrete_function(
        *[tf.TensorSpec(s, spec.dtype) for s, spec in zip(shapes, specs, strict=True)])
    gd, ins, outs = _freeze(concrete, model)
    return _workload(path.name, "tensorflow savedmodel", TFRunner(gd, ins, outs),
                     _random(shapes, [s.dtype for s in specs]), options, check)


def load_tf_workload(model: str, batch: int | None, inputs: Sequence[tuple[int, ...]] | None,
                     options: dict[str, Any], check: bool) -> KerasWorkload:
    """``keras:Name``, a SavedModel directory or a ``.keras`` file as a workload."""
    path = Path(model)
    if is_keras_name(model):
        return _application(model, options, batch, inputs, check)
    if path.is_dir():
        if not is_saved_model(path):
            raise InvalidArgument("model", model, "a directory without saved_model.pb; a SavedModel directory")
        return _saved_model(model, path, batch, inputs, options, check)
    return _keras_file(model, path, batch, inputs, options, check)


def save_keras_file(keras_model: Any, folder: Path, example_inputs: Any = None) -> Path:
    """A Keras model object saved as a ``.keras`` file in ``folder`` (named by the model and a hash
    of its weights, so the same model saved again is the same file), for processes that load it by
    path: tuning trials, a saved configuration. It is loaded back in safe mode like any .keras file."""
    import hashlib

    if example_inputs is not None:
        raise InvalidArgument("example_inputs", type(example_inputs).__name__,
                              "a Keras model's inputs are its own: give their shapes (inputs=[...]) where they are open")
    _tf()
    h = hashlib.sha256(str(getattr(keras_model, "name", "")).encode())
    try:
        for w in keras_model.get_weights():
            h.update(str(w.shape).encode())
            h.update(w.tobytes())
    except Exception as exc:
        raise InvalidArgument("model", type(keras_model).__name__, f"a built Keras model ({one_line(exc, 120)})") from None
    folder.mkdir(parents=True, exist_ok=True)
    stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(getattr(keras_model, "name", "model")))
    path = folder / f"{stem}-{h.hexdigest()[:16]}.keras"
    if not path.exists():
        part = path.with_name(f".{path.stem}.part.keras")
        try:
            keras_model.save(str(part))
        except Exception as exc:
            part.unlink(missing_ok=True)
            raise WorkloadError(f"model {stem!r} cannot be saved as a .keras file: {type(exc).__name__}: "
                                f"{one_line(exc, 200)}") from exc
        part.replace(path)
    return path
