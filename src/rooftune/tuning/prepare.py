"""A tuning study's set-up, which :meth:`rooftune.tuning.study.Study.prepare` runs before its
phases: the model exported where it is an ``nn.Module`` and loaded as every trial's process
loads it, its op graph captured, the user's data read and split, the study's folder with the
reference outputs, the search space, the key the trials are stored under, and the store opened.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.errors import InvalidArgument
from rooftune.platform.processes import owned_tempdir
from rooftune.runconfig import RunConfig, allocator_library
from rooftune.tuning.guidelines import TF_CAPTURE, winograd_share
from rooftune.tuning.result import study_key
from rooftune.tuning.setup import Setup
from rooftune.tuning.space import search_space

if TYPE_CHECKING:
    from rooftune.store import Store
    from rooftune.tuning.trial_store import TrialStore


class StudySetUp:
    """The set-up of :class:`rooftune.tuning.study.Study`, which this class is a part of: its
    methods set the study's workload, graph, notes, folder, space, key and store."""

    def prepare(self) -> None:
        """The study's set-up (see the module's docstring), before its first phase; what it made is
        removed by :meth:`~rooftune.tuning.study.Study.close` whether or not it finished."""
        model, example_inputs, example_kwargs = self.given
        self._load(model, example_inputs, example_kwargs, self.spec.inputs, self.spec.options, self.runtime_notes)
        self.split = self._split_data()
        self.sensitivity = self._sensitivity()
        self._set_up(self.store_given)

    def _load(self, model: str | Any, example_inputs: Sequence[Any] | None, example_kwargs: dict[str, Any] | None,
              inputs: list[tuple[int, ...]] | None, options: dict[str, Any] | None,
              notes_by_rt: dict[str, str]) -> None:
        """The workload as every trial's process loads it (an ``nn.Module`` exported to a .pt2 file
        first), its op graph, and the notes a reader needs about what runs it."""
        from rooftune.workload import capture, load_workload

        if not isinstance(model, str):
            from rooftune.store import modules_dir
            from rooftune.workload.exported import export_module_file
            from rooftune.workload.keras_models import is_keras_model, save_keras_file
            from rooftune.workload.models import module_takes_no_shapes

            module_takes_no_shapes(inputs if not is_keras_model(model) else None, options)
            folder = Path(self.save).resolve().parent if self.save is not None else modules_dir()
            model = str(save_keras_file(model, folder, example_inputs or example_kwargs) if is_keras_model(model)
                        else export_module_file(model, example_inputs, example_kwargs, folder))
        elif example_inputs is not None or example_kwargs is not None:
            raise InvalidArgument("example_inputs", type(example_inputs if example_inputs is not None else example_kwargs).__name__,
                                  "allowed only with an nn.Module (a model name comes with its own inputs: --input)")
        self.model: str = model
        self.wl = load_workload(model, batch=self.batch, inputs=inputs, options=options, train=self.train)
        if self.train is None and self.batch is None and self.wl.batch != 1:
            # the model's own example inputs set the batch (a callable's, a .pt2's): every
            # configuration runs it, not only the baselines (a .pt2 exported at batch 2 runs no other)
            self.batch = self.wl.batch
        # inputs as Python integers: the trials' processes read them from JSON
        self.workload = {"model": model, "inputs": [list(s) for s in inputs] if inputs else None,
                         "options": options or {}}
        if getattr(self.wl, "imports", ()):  # what a trial's process imports before it loads the model's file
            self.workload["imports"] = list(self.wl.imports)
        # the runtimes that run this framework's models (a TensorFlow model: TensorFlow's own)
        from rooftune.runtimes import RUNTIMES

        self.framework: str = getattr(self.wl, "framework", "torch")
        own = {n for n, rt in RUNTIMES.items() if self.framework in rt.frameworks}
        if not own & set(self.available):
            raise InvalidArgument("runtime", ",".join(self.available) or "none",
                                  f"a {self.framework} model runs on {', '.join(sorted(own))}")
        self.available = {n: rt for n, rt in self.available.items() if n in own}
        notes_by_rt = {n: why for n, why in notes_by_rt.items() if n in own}
        if self.train is not None:
            self.workload["train"] = self.train.as_dict()
        self.notes = [f"{k}: {v}" for k, v in notes_by_rt.items()]
        if "openvino" in self.available:
            self.notes.append("openvino-default runs OpenVINO as installed (it picks its own precision, verified by that "
                              "precision's guard); openvino-latency keeps its defaults except the precision, pinned to f32")
        if not allocator_library("jemalloc") and not allocator_library("tcmalloc"):
            self.notes.append("no jemalloc or tcmalloc installed (apt-get install libjemalloc2 libtcmalloc-minimal4): "
                              "allocator not tuned")
        self.step("capture and reference output", 0, 1)
        self.graph = capture(self.wl)
        if self.train is not None:
            # after the capture, which exports the forward pass in eval mode: a step trains the module
            self.wl.train_step()  # a loss that is not a scalar is refused before any trial runs
        elif self.graph.capture not in ("torch.export", TF_CAPTURE):
            self.notes.append(f"{self.graph.capture_note.split(';', 1)[0]}: the graph runtimes (TorchScript, ONNX Runtime, "
                              "OpenVINO, ncnn) run the model as traced on its example input, which fixes any data-dependent "
                              "branch to the one that input takes, and every configuration was verified on that input alone: "
                              "check the best on inputs of your own (rooftune.load_tuned(best.json) against the model), or "
                              "restrict the study to --runtime eager,compile")

    def _split_data(self) -> Any:
        """The user's data read and split into its calibration and evaluation parts (None without
        data); without data, the note that a reduced precision was checked on random inputs only."""
        from rooftune.workload.data import load_samples, split

        if self.data is None:
            return None
        reduced = sorted(set(self.precisions) - {"fp32"})
        self.step("read the data", 0, 1)
        parts = split(load_samples(self.data, self.wl.inputs), self.data)
        self.notes.append(f"data: {parts.describe()}; {', '.join(reduced) or 'no reduced precision'} accepted "
                          f"within a drop of {self.data.max_drop:g} of the metric against fp32")
        return parts

    def _sensitivity(self) -> Any:
        """With the user's data and int8 searched on a PyTorch model of quantizable layers: each
        layer's drop alone in int8 on the evaluation part, beside its time and roofline position
        where the study was given the model's analysis at its batch, and the mixed set that the
        int8 seeds keep at higher precision (:func:`rooftune.analysis.sensitivity.layer_sensitivity`)."""
        from torch import nn

        from rooftune.analysis.sensitivity import QUANTIZABLE, layer_sensitivity

        module = getattr(self.wl, "module", None)
        if self.split is None or "int8" not in self.precisions or not isinstance(module, nn.Module):
            return None
        if not any(isinstance(m, QUANTIZABLE) for m in module.modules()):
            self.notes.append("sensitivity per layer: the model as loaded has no convolution or linear module to "
                              "rank (an exported program's graph keeps no modules); int8 is tried uniformly")
            return None
        self.step("sensitivity per layer", 0, 1)
        analysis = self.analysis if getattr(self.analysis, "batch", None) == self.wl.batch else None
        try:
            s = layer_sensitivity(module, self.split, self.data, analysis)
        except (RuntimeError, ValueError, TypeError) as exc:  # the simulation's, not the study's: int8 runs uniform
            self.notes.append(f"sensitivity per layer failed ({type(exc).__name__}: {exc}); int8 is tried uniformly")
            return None
        if not s.layers:
            return None
        if s.keep and s.quantized():
            self.notes.append(f"mixed int8: {len(s.keep)} of {len(s.layers)} layers kept at higher precision "
                              f"({', '.join(s.keep[:4])}{' and more' if len(s.keep) > 4 else ''}; simulated drop "
                              f"{s.mixed_drop:.2f} against {s.uniform_drop:.2f} all in int8), tried beside uniform int8")
        return s

    def _set_up(self, store: str | os.PathLike[str] | Store | None) -> None:
        """The study's folder (the reference outputs, the prepared artifacts), the search space, the
        key its trials are stored under, and the store; the folder goes again if any of it fails."""
        from rooftune.runtimes import get_runtime
        from rooftune.store import open_store

        # marked with this process, and those of dead studies removed (a study killed outright)
        self.workdir = owned_tempdir("rooftune-tune-")
        try:  # until close() removes it
            self.setup = Setup(self.workload, self.workdir, int8="int8" in self.precisions,
                               calibration_size=self.calibration_size, validate=self.validate_spec,
                               data=self.split, data_spec=self.data)
            self.setup.files(self.wl.batch)
            if "int8" in self.precisions:
                without = sorted(rn for rn, rt in self.available.items()
                                 if rt.unsupported(RunConfig(runtime=rn, precision="int8")))
                for rn in without:
                    self.notes.append(f"int8 not on {rn}: "
                                      f"{get_runtime(rn).unsupported(RunConfig(runtime=rn, precision='int8'))}")
            # a training study's throughput searches the batch unless one is given (TRAIN_BATCHES)
            space_batch = self.batch if self.train is None or self.batch or self.objective == "throughput" \
                else self.wl.batch
            self.space = search_space(self.platform, self.available, self.precisions, objective=self.objective,
                                      batch=space_batch, winograd=winograd_share(self.graph) > 0,
                                      train=self.train is not None)
            if not self.space["runtime"]:
                raise InvalidArgument("precision", ",".join(self.precisions), "no installed runtime runs it")
            self.key = study_key(self.model, self.objective, self.wl.batch, self.platform.id,
                                 {**self.space, "inputs": self.workload["inputs"], "options": self.workload["options"],
                                  "calibration": self.calibration_size if self.setup.int8 else 0,
                                  "validate": self.validate_spec,
                                  # trials judged on other data, or by another budget, are never resumed
                                  **({"data": self.setup.data_key()} if self.split is not None else {}),
                                  # a training study's trials are never an inference study's
                                  **({"train": self.workload["train"]} if self.train is not None else {}),
                                  # a study of a model of several outputs checks every one of them since
                                  # this count entered the key: trials stored before, which checked the
                                  # first alone, are not resumed as checked
                                  **({"outputs": self.setup.outputs} if self.setup.outputs > 1 else {})})
            # a store given is the caller's to close; one opened here is closed by close()
            self.store: TrialStore = open_store(store)
            self.own_store = self.store is not store
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
