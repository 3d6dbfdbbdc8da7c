"""A tuned configuration loaded into the user's own process: ``rooftune.load_tuned(path)``.

    model = rooftune.load_tuned("rooftune-out/best.json")
    y = model(x)            # torch tensors in, the model's output out, in the structure and dtypes the model returns

The file is one written by ``rooftune tune --save`` or ``rooftune optimize``. Loading does what a
trial's process did: torch's thread pools as configured, the workload's model built (a torchvision
name, or the ``module:callable`` it was tuned from, which must import here), the artifact the
study ran prepared with the configuration's runtime options (an ONNX or OpenVINO IR file found
beside the JSON: a Winograd rewrite or an int8 model as the study made it; TorchScript and
torch.compile trace or compile the model again), and the output checked as its trial's was. A
configuration whose output is wrong here is refused.

What can only be set when a process starts (the allocator's ``LD_PRELOAD``, the OpenMP variables
such as ``OMP_PROC_BIND``) is compared with this process's environment, and ``notes`` names each that
differs: start the program with ``rooftune exec --config FILE -- python my_program.py`` to have them.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rooftune.errors import InvalidArgument, RooftuneError
from rooftune.fileio import read_json_input
from rooftune.platform.processes import mark_owned
from rooftune.runtimes.base import like_output, weights_of


@dataclass(eq=False)
class TunedModel:
    """A prepared configuration: call it with the inputs' tensors (the shapes and dtypes it was
    tuned on; a model called with keywords or nested inputs is called here the same way, see
    ``example_call``); it returns the output in the structure the model returns it (a tensor, a tuple, a
    dict of tensors), each tensor of the model's dtype (inference tensors from the torch runtimes:
    ``clone()`` one to change it in place)."""

    config: Any
    #: The check its trial passed, made again here (``ok``, ``rule``, ``why``; against PyTorch eager
    #: in fp32: ``max_abs``, ``max_rel``, ``cosine``, ``top1``; int8 over its calibration set:
    #: ``inputs`` too), or None when loaded with ``check=False``.
    check: dict[str, Any] | None
    #: What in this process differs from the configuration (an environment variable a process
    #: sets at its start, torch's inter-op pool already started, instances run one at a time).
    notes: tuple[str, ...]
    #: (shape, dtype) of each input the configuration was tuned on.
    signature: tuple[tuple[tuple[int, ...], torch.dtype], ...]
    #: The inputs it was tuned and checked on.
    example_inputs: tuple[torch.Tensor, ...] = field(repr=False)
    _prepared: Any = field(repr=False)
    _workdir: Any = field(repr=False)  # the prepared artifact's folder, removed with the object
    #: The structure of the model's own output (its tensors emptied), which the runtime's output
    #: tensors are put back into.
    _template: Any = field(default=None, repr=False)
    #: How the model is called where not with its tensors in order (keywords, nesting): a call
    #: made the same way is taken apart into the tensors the configuration runs.
    _call: Any = field(default=None, repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._call is not None:
            inputs = self._call.tensors(args, kwargs)
        elif kwargs:
            raise InvalidArgument("inputs", f"keyword {next(iter(kwargs))!r}",
                                  f"the model takes {len(self.signature)} tensor(s), positionally")
        else:
            inputs = args
        self._check_inputs(inputs)
        # the torch runtimes' calls run in inference mode, and return inference tensors
        return like_output(self._template, self._prepared.output_for(tuple(x.detach() for x in inputs)))

    @property
    def example_call(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the call it was tuned and checked on:
        ``model(*args, **kwargs)``."""
        if self._call is not None:
            return self._call.call(self.example_inputs)
        return tuple(self.example_inputs), {}

    def run(self) -> Any:
        """One inference on the inputs it was tuned on, output left in the runtime's own form
        (what the harness times)."""
        return self._prepared.run()

    def close(self) -> None:
        """Remove the prepared artifact's folder now (it goes with the object otherwise)."""
        self._workdir.cleanup()

    def _check_inputs(self, inputs: Sequence[Any]) -> None:
        if len(inputs) == len(self.signature) and all(
                isinstance(x, torch.Tensor) and x.dtype == dtype and tuple(x.shape) == shape
                for x, (shape, dtype) in zip(inputs, self.signature, strict=True)):
            return
        names = self._call.names if self._call is not None else [str(i) for i in range(len(self.signature))]
        want = ", ".join(_describe(s, d) for s, d in self.signature)
        if len(inputs) != len(self.signature):
            raise InvalidArgument("inputs", f"{len(inputs)} tensor(s)", f"the configuration runs {len(self.signature)}: {want}")
        for name, x, (shape, dtype) in zip(names, inputs, self.signature, strict=True):
            if not isinstance(x, torch.Tensor):
                raise InvalidArgument(f"input {name}", type(x).__name__, f"a torch tensor ({want})")
            if tuple(x.shape) != shape or x.dtype != dtype:
                raise InvalidArgument(f"input {name}", _describe(tuple(x.shape), x.dtype),
                                      f"the configuration was tuned on {want} (its artifact has fixed shapes)",
                                      "tune the model on these shapes (--batch, or module:callable returning such inputs)")


def _describe(shape: tuple[int, ...], dtype: torch.dtype) -> str:
    return f"{'x'.join(map(str, shape)) or 'scalar'} {str(dtype).removeprefix('torch.')}"


def load_tuned(path: str | Path, *, check: bool = True, validate: str | Callable[..., Any] | None = None) -> TunedModel:
    """Load the configuration saved at ``path`` into this process, ready to call.

    The check is the one its trial passed: the output against PyTorch eager in fp32, an int8
    model by the int8 guard over the calibration set it was quantized with; ``validate``, a
    ``module:function(outputs, references)`` as given to ``rooftune tune --validate`` or the
    function itself, replaces the built-in guard (by default the one the study was given, which
    the file records); ``check=False`` skips it (the model still runs once in eager, where the
    structure of its output is read, which a call then returns). Raises :class:`InvalidArgument` for a file that is
    not a saved configuration or a runtime not installed here, and :class:`RooftuneError` when the
    output is wrong."""
    if validate is not None and not check:
        raise InvalidArgument("validate", validate, "a check; give check=True (the default) with it")
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument("path", path, "allowed a file path written by rooftune tune --save or rooftune optimize")
    if isinstance(validate, str):  # one that cannot be imported is named now, not from deep in the check
        from rooftune.tuning.arguments import validation_spec

        validation_spec(validate)
    elif validate is not None and not callable(validate):
        raise InvalidArgument("validate", validate, "allowed module:function or a function(outputs, references)")
    model = load_saved(path, check=check, validate=validate)
    if model.check is not None and not model.check["ok"]:
        why = model.check.get("why", "")
        model.close()
        raise RooftuneError(f"{path}: {model.config.describe()} gives a wrong output here ({why}); "
                            "it is not loaded (check=False loads it unchecked)")
    return model


def load_saved(path: str | Path, *, check: bool = True, validate: str | Callable[..., Any] | None = None,
          name: str = "path") -> TunedModel:
    """The configuration prepared and, with ``check``, its output compared (not raised on)."""
    from torch.utils._pytree import tree_map

    from rooftune.runconfig import load_config
    from rooftune.runtimes import get_runtime, output_tensors
    from rooftune.tuning._worker import load_for
    from rooftune.tuning.verify import check_prepared

    # Started by `rooftune exec` with OMP_PROC_BIND set, OpenMP has already pinned this process's
    # main thread to one core, so its affinity no longer shows the cores the threads will use.
    config = load_config(path, usable_cores=os.cpu_count(), name=name)
    saved = read_json_input(path, name, "allowed a file written by rooftune tune --save or rooftune optimize")
    w = saved.get("workload") if isinstance(saved, dict) else None
    if not w:
        raise InvalidArgument(name, str(path), "names no workload; write it with rooftune tune --save or rooftune optimize")
    if not _saved_workload(w) or not isinstance(saved.get("artifact") or "", str):
        raise InvalidArgument(name, str(path), "its workload or artifact is not as rooftune tune --save writes them")
    missing = get_runtime(config.runtime).available()
    if missing:
        raise InvalidArgument("runtime", config.runtime, missing)
    notes = environment_notes(config, path)
    if config.set_threads and torch.get_num_interop_threads() != config.inter_threads:
        try:  # settable once per process, before any inter-op work
            torch.set_num_interop_threads(config.inter_threads)
        except RuntimeError:
            notes.append(f"torch's inter-op pool already runs {torch.get_num_interop_threads()} threads in this "
                         f"process (the configuration sets {config.inter_threads}; load it before other torch work)")
    try:  # as a trial's process does
        wl, runtime = load_for(config, w, interop=False)
    except InvalidArgument:  # the workload's own (a model that does not load here)
        raise
    except ValueError as exc:  # the runtime cannot run this configuration
        raise InvalidArgument("runtime", config.runtime, str(exc)) from None
    if validate is None:  # the study's own --validate, as its trials were checked
        validate = saved.get("validate")
    running = os.environ.get("ROOFTUNE_INSTANCES")
    if config.instances > 1 and running != str(config.instances):
        notes.append(f"{running or 'one'} instance(s) run here; the configuration runs {config.instances} side by side "
                     f"(rooftune exec --config {path} -- ... starts that many copies of a program)")
    workdir = tempfile.TemporaryDirectory(prefix="rooftune-tuned-")
    mark_owned(Path(workdir.name))  # a process killed outright leaves it to the next study to remove
    try:
        target = runtime.artifact_file(config, Path(workdir.name))
        placed = _place_artifact(target, saved, path)
        if not placed:
            notes.append(f"the artifact {Path(saved['artifact']).name} was not found beside {path}: prepared again here "
                         "(a Winograd rewrite measures its layers again, an int8 model is quantized again)")
        # the calibration set (the user's data, where the study had it) is read only where it is
        # used: to quantize again, or for the check
        again = target is None or not saved.get("artifact") or not placed
        calibration = calibration_for(config, saved, wl.inputs) if check or again else []
        reference, calib = None, None
        with torch.no_grad():  # before the runtime prepares: eager's bf16 converts the module in place
            eager = wl.module(*wl.inputs)
            if check:
                reference = output_tensors(eager)
                if calibration:
                    calib = {"inputs": calibration, "outputs": [output_tensors(wl.module(*x)) for x in calibration]}
        template = tree_map(lambda v: torch.empty(0, dtype=v.dtype) if isinstance(v, torch.Tensor) else v, eager)
        with warnings.catch_warnings():  # torch.jit's deprecation notices, on every TorchScript load
            warnings.simplefilter("ignore", FutureWarning)
            prepared = runtime.prepare(wl, config, Path(workdir.name), calibration=calibration)
        result = (check_prepared(prepared, prepared.precision or config.precision, tuple(wl.inputs), reference, calib, validate)
                  if reference is not None else None)
        accepted = ((saved.get("verify") or {}).get("accuracy") or {}) if isinstance(saved.get("verify"), dict) else {}
        if result is not None and not result["ok"] and "data" in saved and accepted.get("ok") is True:
            # judged by the metric on the user's data when the study ran, which is what accepted it:
            # the random-input guard's verdict here is a note, not a refusal
            notes.append(f"the int8 guard over the data's calibration part fails here ({result.get('why', '')}); the "
                         "study accepted it by its metric on the data's evaluation part (verify.accuracy)")
            result = {**result, "ok": True}
    except BaseException:
        workdir.cleanup()
        raise
    signature = tuple((tuple(x.shape), x.dtype) for x in wl.inputs)
    return TunedModel(config, result, tuple(notes), signature, tuple(wl.inputs), prepared, workdir, template, wl.call)


def _saved_workload(w: Any) -> bool:
    """Whether a saved workload has the fields of those a study saves, of their types (a file
    edited by hand is refused in one line, not by a KeyError deep in the loading)."""
    kinds = {"model": (str,), "inputs": (list, type(None)), "options": (dict, type(None)),
             "train": (dict, type(None)), "imports": (list, type(None))}
    return (isinstance(w, dict) and isinstance(w.get("model"), str)
            and all(isinstance(w.get(k), t) for k, t in kinds.items() if k in w))


def _place_artifact(target: Path | None, saved: dict[str, Any], path: str | Path) -> bool:
    """Copy the artifact the study ran (ONNX or OpenVINO IR: a Winograd rewrite is the one
    measured then, not measured again; an int8 model the one quantized then) to where the runtime
    loads it from; an OpenVINO IR or an ncnn model with its weights. It is looked for beside the configuration file
    first (a folder copied elsewhere), then where the file says. False when the file names one and
    it is in neither place: the runtime then prepares the artifact again."""
    if target is None or not saved.get("artifact"):
        return True
    stored = Path(saved["artifact"])
    for art in (Path(path).parent / stored.name, stored):
        weights = weights_of(art)
        whole = weights is None or weights.is_file()
        if art.is_file() and art.name.endswith(target.name) and whole:  # the file this configuration runs
            from rooftune.fileio import copy_atomic

            if weights is not None:
                copy_atomic(weights, target.with_suffix(".bin"))
            copy_atomic(art, target)
            return True
    return False


def calibration_for(config: Any, saved: dict[str, Any], inputs: Any) -> list[Any]:
    """The calibration set an int8 trial quantized with: the calibration part of the user's data
    where the file records the data (read and split again as the study did), else seeded inputs
    drawn like the workload's, of the size the file records; empty for other precisions."""
    if config.precision != "int8":
        return []
    from rooftune.runtimes.quantize import calibration_inputs, check_calibration_size

    if "data" in saved:
        from rooftune.workload.data import DataSpec, batches, load_samples, split

        fields = ("data", "metric", "max_drop", "transform", "calibration", "seed")
        d = saved["data"]
        if not isinstance(d, dict) or "data" not in d:
            raise InvalidArgument("data", str(d)[:80], "allowed the data record rooftune tune --save writes (its "
                                  f"fields: {', '.join(fields)})")
        spec = DataSpec(**{k: d[k] for k in fields if k in d})
        return batches(split(load_samples(spec, inputs), spec).calibration.inputs, config.batch)

    return calibration_inputs(inputs, check_calibration_size(saved.get("calibration"), "calibration"))


def environment_notes(config: Any, path: str | Path) -> list[str]:
    """Each variable the configuration sets at a process's start that this process does not have
    (the thread counts aside: the loader sets torch's pool itself)."""
    try:
        env = config.environment()
    except InvalidArgument as exc:  # its allocator is not installed here
        return [f"{exc}: this process runs on glibc's malloc"]
    notes = []
    for key, value in env.items():
        if key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            continue
        if key == "TBB_ENABLE_SANITIZERS" and config.runtime != "openvino":  # only oneTBB reads it
            continue
        have = os.environ.get(key)
        # LD_PRELOAD: each library the configuration preloads (Intel OpenMP and an allocator are two)
        # among those this process has, in any order
        present = (set(value.split(":")) <= set((have or "").replace(" ", ":").split(":")) if key == "LD_PRELOAD"
                   else have == value)
        if not present:
            notes.append(f"{key}={value} is not set in this process ({'unset' if have is None else repr(have)}); "
                         f"start it with rooftune exec --config {path} -- ...")
    return notes
