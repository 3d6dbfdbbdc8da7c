"""Loading a model by name: the torchvision zoo, the built-ins, ``package.module:callable`` or a
file saved with ``torch.export``. One function, :func:`load_workload`, decides which.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import logging
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rooftune.errors import InvalidArgument, WorkloadError, is_int, one_line
from rooftune.fileio import check_input
from rooftune.workload.builtin import BUILTINS
from rooftune.workload.calls import CallStructure, flat_module, needs_structure, positional_names, take_apart
from rooftune.workload.exported import export_imports
from rooftune.workload.keras_models import (
    from_keras_model,
    is_keras_model,
    is_keras_name,
    is_saved_model,
    load_tf_workload,
)
from rooftune.workload.shapes import (
    ExampleInputs,
    batched_like_first,
    check_elements,
    format_shape,
    with_batch,
)
from rooftune.workload.training import (
    TRAIN_BATCH,
    TRAIN_FRAMEWORKS,
    TrainSpec,
    TrainStep,
    check_batch_norm,
    check_memory,
    check_trainable,
    train_spec,
)

#: Seed of the example inputs: the same workload always gets the same numbers.
INPUT_SEED = 0
#: Seed of the untrained weights: every process that loads a workload (a tuning trial, an analysis)
#: builds the same model, so outputs can be compared across processes.
WEIGHT_SEED = 0
#: The largest batch accepted; beyond it a 2-core machine runs out of memory before time.
MAX_BATCH = 4096
#: Image sizes that differ from the family default (the sizes the models were trained at).
_IMAGE_SIZE = {"inception_v3": 299}
#: Arguments that make a zoo model return a plain tensor (no auxiliary heads).
_ZOO_KWARGS = {"inception_v3": {"aux_logits": False, "init_weights": False}, "googlenet": {"aux_logits": False, "init_weights": False}}
# Builders that would otherwise fetch pretrained weights for a part (segmentation backbones).
_FAMILY_KWARGS = {"segmentation": {"weights_backbone": None}}
_VIDEO_LARGE = ("mvit", "s3d", "swin3d")


@dataclass(frozen=True)
class Workload(ExampleInputs):
    """A model ready to run: the module in eval mode, its example inputs, and where it came from."""

    name: str
    kind: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    options: dict[str, Any] = field(default_factory=dict)
    exported: Any = None
    #: How the model itself is called, where not with its tensors in order (keywords, nesting,
    #: arguments that are not tensors): ``module`` then takes ``inputs`` in order and makes that call.
    call: CallStructure | None = None
    #: A training workload's step (optimizer, loss): analysis and tuning run a training step of
    #: the model (:class:`rooftune.workload.training.TrainStep`) instead of a forward pass.
    train: TrainSpec | None = None
    #: An exported program's: the installed modules this process imported that define the types
    #: and classes it names (:func:`export_imports`), which another process imports before it loads
    #: the file (:func:`rooftune.workload.imports.import_modules`).
    imports: tuple[str, ...] = ()

    def inputs_text(self) -> str:
        """``1x3x224x224``, or with the call's names: ``x 1x3x16x16, extra['bias'] 1x8, scale scalar``."""
        shapes = [format_shape(s) for s in self.input_shapes]
        if self.call is not None:
            shapes = [f"{n} {s}" for n, s in zip(self.call.names, shapes, strict=True)]
        return ", ".join(shapes)

    def describe(self) -> str:
        return f"{self.name} ({self.kind}; input {self.inputs_text()})"

    def __call__(self) -> Any:
        return self.module(*self.inputs)

    def train_step(self) -> TrainStep:
        """A training step of this workload (a training workload's spec, else the default one):
        the module put in training mode, its loss checked to be a scalar. A model that fails on
        its inputs is a one-line WorkloadError, as :func:`run_once` makes it."""
        try:
            return TrainStep(self.module, self.inputs, self.train, name=self.name)
        except (WorkloadError, InvalidArgument):
            raise
        except Exception as exc:
            raise WorkloadError(f"model {self.name!r} fails in training mode on input {self.inputs_text()}: "
                                f"{type(exc).__name__}: {one_line(exc, 200)}") from exc

    def check_trainable(self) -> None:
        """The checks a training workload passes before anything runs: parameters that take a
        gradient, no BatchNorm at batch 1, and a step that fits in memory (estimated)."""
        spec = self.train or TrainSpec()
        check_trainable(self.module, self.name)
        check_batch_norm(self.module, self.batch, self.name)
        check_memory(self.module, self.inputs, spec, self.name)


def parse_options(items: Sequence[str]) -> dict[str, Any]:
    """``["hidden=512", "bidirectional=true"]`` -> ``{"hidden": 512, "bidirectional": True}``."""
    opts: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise InvalidArgument("model option", item, "allowed KEY=VALUE, e.g. hidden=512")
        text = raw.strip()
        lowered = text.lower()
        if lowered in ("true", "false"):
            value: Any = lowered == "true"
        else:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                value = text  # not a Python literal: the text itself
        opts[key.strip()] = value
    return opts


def zoo_names() -> dict[str, str]:
    """torchvision model name -> family ('classification', 'segmentation', 'video')."""
    import torchvision.models as tvm

    names = {n: "classification" for n in tvm.list_models(module=tvm)}
    names.update({n: "segmentation" for n in tvm.list_models(module=tvm.segmentation)})
    names.update({n: "video" for n in tvm.list_models(module=tvm.video)})
    return names


def _zoo_shape(name: str, family: str) -> tuple[int, ...]:
    if family == "video":
        side = 224 if name.startswith(_VIDEO_LARGE) else 112
        return (1, 3, 16, side, side)
    if family == "segmentation":
        return (1, 3, 520, 520)
    side = _IMAGE_SIZE.get(name, 224)
    return (1, 3, side, side)


def check_batch(batch: Any, name: str = "batch") -> int | None:
    """A batch size as every command and function takes it (None: the model's own), as an int."""
    if batch is None:
        return None
    if not is_int(batch) or not 1 <= int(batch) <= MAX_BATCH:
        raise InvalidArgument(name, batch, f"allowed an integer in 1..{MAX_BATCH}")
    return int(batch)


def _check_batch(batch: int | None) -> None:
    check_batch(batch)


def _random_inputs(shapes: Sequence[tuple[int, ...]]) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(INPUT_SEED)
    return tuple(torch.randn(check_elements(s), generator=gen) for s in shapes)


def _reshape_inputs(
    given: tuple[torch.Tensor, ...], shapes: Sequence[tuple[int, ...]] | None, batch: int | None
) -> tuple[torch.Tensor, ...]:
    """Inputs from the user's shapes, else the model's own examples; --batch sets dim 0 of each."""
    if shapes:
        base = [tuple(s) for s in shapes]
        if len(base) != len(given) and given:
            raise InvalidArgument(
                "number of --input shapes", len(base), f"this model takes {len(given)} input(s)"
            )
        if batch is not None:
            base = [check_elements(with_batch(s, batch), "input shape with --batch") if batched else s
                    for s, batched in zip(base, batched_like_first(base), strict=True)]
        dtypes = [x.dtype for x in given] or [torch.float32] * len(base)
        gen = torch.Generator().manual_seed(INPUT_SEED)
        out = []
        for s, dt in zip(base, dtypes, strict=False):
            if dt.is_floating_point:
                out.append(torch.randn(s, generator=gen, dtype=dt))
            else:
                out.append(torch.randint(0, 2, s, generator=gen, dtype=dt))
        return tuple(out)
    if batch is None:
        return given
    out = []
    for x, batched in zip(given, batched_like_first([tuple(x.shape) for x in given]), strict=True):
        reps = [1] * x.dim()
        if not batched:
            out.append(x)
            continue
        check_elements(with_batch(tuple(x.shape), batch), "input shape with --batch")
        reps[0] = -(-batch // x.shape[0])
        out.append(x.repeat(*reps)[:batch].contiguous())
    return tuple(out)


def _load_callable(spec: str, options: dict[str, Any]) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """The module and its example call's positional and keyword arguments (empty when it gave none)."""
    mod_name, _, attr = spec.partition(":")
    allowed = ("allowed package.module:callable returning an nn.Module, (module, example inputs) or "
               "(module, args, kwargs)")
    if not mod_name or not attr:
        raise InvalidArgument("model", spec, allowed)
    # Like `uvicorn module:app`, the current directory is importable, so `rooftune analyze
    # mymodels:build` works from the project folder without installing it.
    from rooftune.platform.processes import import_user_module

    try:
        mod = import_user_module(mod_name)
    except Exception as exc:  # an import runs arbitrary code: any failure is the user's module
        raise WorkloadError(f"model {spec!r}: cannot import {mod_name!r}: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"model {spec!r}: module {mod_name!r} has no attribute {attr!r}; {allowed}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise WorkloadError(f"model {spec!r}: {attr!r} is not callable; {allowed}")
    try:
        result = obj(**options)
    except Exception as exc:
        raise WorkloadError(f"model {spec!r}: calling {attr}() failed: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    if is_keras_model(result):  # a Keras model: its inputs say its shapes (rooftune.workload.keras_models)
        return result, (), {}
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    if isinstance(result, tuple) and len(result) in (2, 3) and isinstance(result[0], nn.Module):
        if len(result) == 3:  # (module, args, kwargs)
            result, raw, kwargs = result
            if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
                raise WorkloadError(f"model {spec!r}: the third item, the keyword arguments, must be a dict by name; "
                                    f"got {type(kwargs).__name__}")
            args = tuple(raw) if isinstance(raw, (tuple, list)) else (raw,)
        else:  # (module, inputs): a tensor, the positional arguments, or a dict of keyword arguments
            # (a dict whose keys forward does not take is its one positional argument)
            result, raw = result
            if isinstance(raw, dict) and all(isinstance(k, str) for k in raw) and _takes_keywords(result, raw):
                kwargs = dict(raw)
            else:
                args = tuple(raw) if isinstance(raw, (tuple, list)) else (raw,)
        if (args or kwargs) and not any(isinstance(x, torch.Tensor) for x in torch.utils._pytree.tree_leaves((args, kwargs))):
            raise WorkloadError(f"model {spec!r}: its example inputs hold no tensor ({[type(x).__name__ for x in args]}"
                                f"{', ' + str(sorted(kwargs)) if kwargs else ''}); {allowed}")
    if not isinstance(result, nn.Module):
        raise WorkloadError(f"model {spec!r}: {attr}() returned {type(result).__name__}, not an nn.Module; {allowed}")
    return result, args, kwargs


def _takes_keywords(module: nn.Module, names: Any) -> bool:
    """Whether ``module(**{name: ...})`` names forward's parameters (else a dict example is the one
    positional argument of a forward that takes a dict: ``forward(self, batch)``)."""
    import inspect

    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return set(names) <= {n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}


def _structured(spec: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[nn.Module, tuple[torch.Tensor, ...], CallStructure | None]:
    """The module and its input tensors in order: the model itself where it takes its tensors in
    order, else the model called as its example was (:mod:`rooftune.workload.calls`)."""
    try:
        return take_apart(module, args, kwargs)
    except ValueError as exc:
        raise WorkloadError(f"model {spec!r} is called with keywords or nested inputs, and {exc}") from None


def check_shapes(inputs: Any) -> list[tuple[int, ...]] | None:
    """The user's input shapes as tuples: a list of shapes, each of integers >= 1."""
    if inputs is None:
        return None
    how = "allowed a list of shapes, each a tuple of integers >= 1 (() for a scalar), e.g. [(1, 3, 224, 224)]"
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise InvalidArgument("inputs", inputs, how)
    out = []
    for shape in inputs:
        if (isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence)  # () is a scalar's
                or not all(is_int(d) and int(d) >= 1 for d in shape)):
            raise InvalidArgument("input shape", shape, how)
        out.append(tuple(int(d) for d in shape))
    return out


def module_takes_no_shapes(inputs: Any, options: Any) -> None:
    """A module object comes with its example inputs: input shapes and model options, which
    describe a named model, are refused beside it."""
    if inputs or options:
        raise InvalidArgument("inputs" if inputs else "options", inputs or options,
                              "allowed only with a model name (a module comes with example_inputs)")


def load_workload(
    model: str,
    *,
    batch: int | None = None,
    inputs: Sequence[tuple[int, ...]] | None = None,
    options: dict[str, Any] | None = None,
    check: bool = True,
    train: bool | TrainSpec | None = None,
) -> Workload:
    """Resolve ``model`` to a :class:`Workload` and (``check``) run it once on its inputs.

    ``model`` is a torchvision name (``resnet50``), a built-in (``lstm``, ``gru``,
    ``transformer-encoder``), ``package.module:callable`` or a ``.pt2`` file saved by torch.export.
    ``train`` (True or a TrainSpec) makes it a training workload: its batch defaults to
    ``TRAIN_BATCH`` where neither ``batch`` nor ``inputs`` give one, and (``check``) it is refused
    where a step cannot train it (no trainable parameters, BatchNorm at batch 1, a step estimated
    not to fit in memory).
    """
    if not isinstance(model, str):
        raise InvalidArgument("model", f"a {type(model).__name__}", "allowed a torchvision name, a built-in, "
                              "module:callable or a .pt2 file; a module object with its inputs goes to "
                              "rooftune.analyze(module, example_inputs=(...)) or rooftune.optimize(module, "
                              "example_inputs=(...)), which tunes it as a .pt2 file")
    _check_batch(batch)
    inputs = check_shapes(inputs)
    spec = train_spec(train)
    if spec is not None and (is_keras_name(model) or model.endswith(".keras") or is_saved_model(Path(model))):
        raise InvalidArgument("train", model, TRAIN_FRAMEWORKS)
    if spec is not None and batch is None and not inputs:
        batch = TRAIN_BATCH
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        wl = _load(model, batch, inputs, dict(options or {}), check and spec is None)
    if spec is None:
        return wl
    if not isinstance(wl, Workload):  # a module:callable that returned a Keras model
        raise InvalidArgument("train", model, TRAIN_FRAMEWORKS)
    if wl.exported is not None:
        raise InvalidArgument("model", model, "a model a training step can change: a torchvision name, a built-in or "
                              "module:callable (an exported program runs the mode it was exported in)")
    wl = replace(wl, train=spec)
    if check:  # the memory estimate before the first real run: a batch that cannot fit is refused, not run
        wl.check_trainable()
        run_once(wl)
    return wl


def _load(
    model: str, batch: int | None, inputs: Sequence[tuple[int, ...]] | None, options: dict[str, Any], check: bool
) -> Workload:
    model = model.strip()
    if not model:
        raise InvalidArgument("model", model, "allowed a torchvision name, a built-in, module:callable or a .pt2 file")
    path = Path(model)
    if is_keras_name(model) or model.endswith(".keras") or is_saved_model(path):
        return load_tf_workload(model, batch, inputs, options, check)
    if model.endswith(".pt2") or (path.suffix and path.is_file()):
        wl = _load_exported(model, path, batch, inputs, options)
    elif ":" in model:
        module, args, kwargs = _load_callable(model, options)
        if is_keras_model(module):
            return from_keras_model(module, model, "keras callable", batch, inputs, options, check)
        if not args and not kwargs and not inputs:
            raise WorkloadError(
                f"model {model!r} returned a module without example inputs; give their shapes, e.g. --input 1x3x224x224"
            )
        module, examples, call = _structured(model, module.eval(), args, kwargs)
        wl = Workload(model, "callable", module, _reshape_inputs(examples, inputs, batch), options, call=call)
    elif model in BUILTINS:
        b = BUILTINS[model]
        opts = b.options(options)
        shape = b.input_shape(opts, batch or 1)
        check_elements(shape, f"{model} input (batch x seq_len x width)")
        try:
            module = b.build(opts).eval()
        except (RuntimeError, MemoryError) as exc:
            raise WorkloadError(f"model {model!r} cannot be built with {opts}: {one_line(exc, 200)}") from exc
        wl = Workload(model, "builtin", module, _reshape_inputs(_random_inputs([shape]), inputs, batch), opts)
    else:
        zoo = zoo_names()
        if model not in zoo:
            known = sorted(set(zoo) | set(BUILTINS))
            close = difflib.get_close_matches(model, known, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "see `rooftune models` for the list"
            raise InvalidArgument(
                "model", model, "allowed a torchvision model name, lstm, gru, transformer-encoder, keras:NAME, module:callable, a .pt2 "
                "or .keras file or a SavedModel directory", hint
            )
        import torchvision.models as tvm

        kwargs = {**_FAMILY_KWARGS.get(zoo[model], {}), **_ZOO_KWARGS.get(model, {}), **options}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = tvm.get_model(model, weights=None, **kwargs)
        except (TypeError, ValueError, RuntimeError, MemoryError) as exc:  # a builder refusing or failing on an option
            unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
            if isinstance(exc, TypeError) and unknown:
                raise WorkloadError(f"model {model!r}: no option {unknown.group(1)!r}; allowed "
                                    f"{', '.join(_zoo_option_names(model)) or 'none'}") from exc
            raise WorkloadError(f"model {model!r}: bad option: {type(exc).__name__}: {one_line(exc, 200)}") from exc
        if type(module).__name__ in _DROPS_UNKNOWN_OPTIONS:  # its class takes **kwargs and drops what it does not know
            allowed = _zoo_option_names(model, module) + list(_DROPS_UNKNOWN_OPTIONS[type(module).__name__])
            dropped = [k for k in options if k not in allowed]
            if dropped:
                raise WorkloadError(f"model {model!r}: no option {dropped[0]!r}; allowed {', '.join(allowed)}")
        shape = with_batch(_zoo_shape(model, zoo[model]), batch or 1)
        wl = Workload(model, f"torchvision {zoo[model]}", module.eval(), _reshape_inputs(_random_inputs([shape]), inputs, batch), options)
    if check:
        run_once(wl)
    return wl


#: torchvision classes whose constructor takes ``**kwargs`` and drops the keywords it does not
#: know (an option mistyped for them would build the default model without a word), with the
#: options their builders take out of those keywords first (``_mobilenet_v3_conf``'s).
_DROPS_UNKNOWN_OPTIONS: dict[str, tuple[str, ...]] = {
    "MobileNetV3": ("width_mult", "reduced_tail", "dilated"),
    "ConvNeXt": (),
}


def _zoo_option_names(model: str, module: nn.Module | None = None) -> list[str]:
    """The options a torchvision model takes (``-o KEY=VALUE``): its builder's and its class's
    keyword parameters that have defaults (those without, such as ResNet's block and layers, its
    builder sets). ``module``: the model built with no option (built here when not given)."""
    import inspect

    import torchvision.models as tvm

    if module is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = tvm.get_model(model, weights=None, **{**_FAMILY_KWARGS.get(zoo_names()[model], {}),
                                                           **_ZOO_KWARGS.get(model, {})})
    params = [*inspect.signature(tvm.get_model_builder(model)).parameters.values(),
              *inspect.signature(type(module).__init__).parameters.values()]
    names = [p.name for p in params if p.default is not inspect.Parameter.empty
             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("weights", "progress")]
    return list(dict.fromkeys(names))




def eval_mode(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` in eval mode. An exported program's module (a ``.pt2`` file's) refuses
    ``eval()``: its graph runs the mode it was exported in whatever its flag says, so the flag is
    set directly (TorchScript's freezing asks for it)."""
    try:
        return module.eval()
    except NotImplementedError:  # torch.export's GraphModule: "Calling eval() is not supported yet"
        for m in module.modules():
            m.training = False
        return module


def _load_exported(
    model: str, path: Path, batch: int | None, inputs: Sequence[tuple[int, ...]] | None, options: dict[str, Any]
) -> Workload:
    check_input(path, "model", "allowed a .pt2 file saved with torch.export.save")  # a FIFO would hang the loader
    if options:
        raise InvalidArgument("model option", next(iter(options)), "an exported program takes no options")
    try:
        # torch logs the cause of a failed load (its traceback) and then raises a generic error
        with _logged_errors("torch.export") as causes:
            ep = torch.export.load(str(path))
    except Exception as exc:
        import zipfile

        if causes and zipfile.is_zipfile(path):  # an export archive whose program names what is not here
            hint = ("; the package that defines the type registers it when imported: give the model as "
                    "module:callable, from a module that imports it" if "is not registered" in causes[-1] else "")
            raise WorkloadError(f"model {model!r}: its torch.export program does not load here: {causes[-1]}{hint}") from exc
        raise WorkloadError(f"model {model!r}: not a torch.export file: {type(exc).__name__}: {one_line(exc, 200)}") from exc
    imports = export_imports(ep)
    args, kwargs = ep.example_inputs or ((), {})
    if not args and not kwargs and not inputs:
        raise WorkloadError(f"model {model!r} carries no example inputs; give their shapes, e.g. --input 1x3x224x224")
    if not needs_structure(args, kwargs):
        return Workload(path.name, "torch.export", ep.module(), _reshape_inputs(tuple(args), inputs, batch), {},
                        exported=ep, imports=imports)
    # a program exported with keyword or nested tensor inputs: its module called as exported,
    # exported again taking its tensors in order (what the runtimes and the analysis read)
    unflat = ep.module()
    try:
        call = CallStructure.of(args, kwargs, positional_names(unflat))
    except ValueError as exc:
        raise WorkloadError(f"model {model!r} was exported with keywords or nested inputs, and {exc}") from None
    fixed = [f"{name} = {value!r}"[:60] for name, value in call.constants()]
    if fixed:  # its program takes them as inputs, and does not export again around them
        raise WorkloadError(f"model {model!r} was exported with arguments that are not tensors ({'; '.join(fixed)}); "
                            "export it with tensor inputs only, those values fixed inside the model")
    caller = flat_module(unflat, call)
    xs = _reshape_inputs(call.tensors(args, kwargs), inputs, batch)
    run_once(Workload(path.name, "torch.export", caller, xs, call=call))  # the program's own shapes, as a plain one's
    try:
        flat = torch.export.export(caller, xs)
    except Exception as exc:
        raise WorkloadError(f"model {model!r}: its program, called with its tensors in order, does not export again: "
                            f"{type(exc).__name__}: {one_line(exc, 200)}") from exc
    # the program exported again takes the tensors in order: its module is a plain graph module (it
    # copies and moves to a device as one), its layers named as the program's
    return Workload(path.name, "torch.export", flat.module(), xs, {}, exported=flat, call=call, imports=imports)


@contextlib.contextmanager
def _logged_errors(name: str) -> Iterator[list[str]]:
    """What the logger ``name`` logs meanwhile is not printed; the exceptions it logs are kept,
    one line each (``ExcType: message``), in the list it yields."""
    caught: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                caught.append(f"{type(exc).__name__}: {one_line(exc, 200)}")

    logger = logging.getLogger(name)
    saved = logger.level, logger.propagate, logger.handlers[:]
    logger.handlers, logger.propagate = [Keep()], False
    logger.setLevel(logging.WARNING)
    try:
        yield caught
    finally:
        logger.setLevel(saved[0])
        logger.propagate, logger.handlers = saved[1], saved[2]


def run_once(wl: Workload) -> Any:
    """Run the workload once; a failure, or an output that holds no tensor to check a faster
    variant against, becomes a one-line WorkloadError naming the inputs."""
    from rooftune.workload.outputs import output_tensors

    try:
        with torch.no_grad():
            out = wl()
    except Exception as exc:
        raise WorkloadError(
            f"model {wl.name!r} fails on input {wl.inputs_text()}: {type(exc).__name__}: {one_line(exc, 200)}"
        ) from exc
    try:
        output_tensors(out)
    except TypeError:
        raise WorkloadError(f"model {wl.name!r} returns a {type(out).__name__} that holds no tensor; return a tensor, "
                            "or a tuple, list, dict or dataclass of tensors") from None
    return out
