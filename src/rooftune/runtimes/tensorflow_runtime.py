"""TensorFlow running a TensorFlow or Keras model's frozen graph (:mod:`rooftune.workload.keras_models`)
in a session configured by the run configuration:

- intra-op and inter-op threads: the session's ``intra_op_parallelism_threads`` and
  ``inter_op_parallelism_threads`` (a configuration that sets no threads leaves TensorFlow's
  defaults, one of each pool per core);
- ``onednn``: ``TF_ENABLE_ONEDNN_OPTS`` (oneDNN's kernels and graph rewrites), read when the
  process imports TensorFlow, so it is set in the trial's environment (:mod:`rooftune.runconfig`);
- ``xla``: XLA auto-clustering of the graph (``global_jit_level`` ON_1, what ``jit_compile``
  asks of a function);
- ``remapper``: Grappler's remapper, which fuses a convolution or product with its bias and
  activation (on by default);
- bf16: Grappler's ``auto_mixed_precision_onednn_bfloat16`` rewrite, TensorFlow's mixed precision
  for CPUs with native bf16 (the inputs and outputs stay fp32);
- the allocator and the OpenMP settings through the environment, as for every runtime.

Every output is checked against TensorFlow's own fp32 output of the same graph (the reference the
study makes from the workload).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rooftune.runtimes.base import Prepared, Runtime

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload


class TensorFlow(Runtime):
    """TensorFlow's own executor over the model's frozen graph."""

    name = "tensorflow"
    precisions = ("fp32", "bf16")
    frameworks = ("tensorflow",)

    def available(self) -> str | None:
        from rooftune.workload.keras_models import tensorflow_missing

        return tensorflow_missing()

    def uses_inter_threads(self, config: RunConfig) -> bool:
        return True

    def normalize(self, config: RunConfig) -> RunConfig:
        # TensorFlow's tensors keep the model's own layout: a memory format changes nothing
        return replace(super().normalize(config), memory_format="contiguous")

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        from rooftune.workload.keras_models import KerasWorkload

        if not isinstance(wl, KerasWorkload):
            raise ValueError(f"tensorflow runs TensorFlow and Keras models; {wl.name} is a PyTorch model")
        runner = wl.module
        intra, inter = (config.intra_threads, config.inter_threads) if config.set_threads else (None, None)
        session = runner.session(intra, inter, jit=bool(config.option("xla")),
                                 remapper=bool(config.option("remapper")), bf16=config.precision == "bf16")
        feed = runner.feed(wl.inputs)
        notes = []
        if config.precision == "bf16":
            notes.append("bf16: Grappler's auto_mixed_precision_onednn_bfloat16 rewrite")

        def run() -> Any:
            return runner.run(session, feed)

        def call(inputs: tuple[torch.Tensor, ...]) -> Any:
            return runner.run(session, runner.feed(inputs))

        return Prepared(run=run, to_torch=_to_torch, call=call, notes=tuple(notes))


def _to_torch(out: Any) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(o.copy()) for o in out)
