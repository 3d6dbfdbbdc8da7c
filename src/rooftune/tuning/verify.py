"""Is a configuration's output the model's output? Compared with the fp32 eager reference by the
precision's guard (:mod:`rooftune.workload.outputs`, where the tolerances live), or by the caller's
own validation function."""

from __future__ import annotations

from typing import Any

import torch

from rooftune.workload.outputs import (
    BF16_TOLERANCE,
    FP32_MIN_COSINE,
    FP32_TOLERANCE,
    INT8_MIN_COSINE,
    INT8_MIN_TOP1,
    Outputs,
    as_outputs,
    compare_outputs,
    compare_set,
)

__all__ = [
    "BF16_TOLERANCE",
    "FP32_MIN_COSINE",
    "FP32_TOLERANCE",
    "INT8_MIN_COSINE",
    "INT8_MIN_TOP1",
    "Outputs",
    "check_prepared",
    "compare_outputs",
    "compare_set",
    "user_validation",
]


def check_prepared(prepared: Any, precision: str, inputs: tuple[torch.Tensor, ...], reference: Outputs,
                   calibration: dict[str, Any] | None = None, validate: Any = None,
                   out: Outputs | None = None) -> dict[str, Any]:
    """The check a prepared configuration passes before its times count (a trial's, and
    ``rooftune.load_tuned``'s): its output on ``inputs`` against the fp32 eager ``reference``; an
    int8 model over its ``calibration`` set (``{"inputs": [...], "outputs": [...]}``, the fp32
    eager outputs) by the int8 guard; ``validate``, the caller's ``module:function(outputs,
    references)``, in place of the built-in guard. ``out``: the output on ``inputs`` when the
    caller already has it. Outputs and references are every output tensor of the model, in order
    (a lone tensor stands for a model's one output)."""
    verify = compare_outputs(prepared.output() if out is None else out, reference, precision)
    if calibration is not None or validate:
        xs = calibration["inputs"] if calibration else [tuple(inputs)]
        refs = calibration["outputs"] if calibration else [reference]
        outs = [prepared.output_for(tuple(x)) for x in xs]
        verify = compare_set(outs, refs, precision) if calibration else verify
        if validate and "cosine" in verify:  # a missing output or another shape is wrong whatever the caller accepts
            verify = {**verify, **user_validation(validate, [_as_given(o) for o in outs], [_as_given(r) for r in refs])}
    return verify


def _as_given(out: Outputs) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """What a validation function gets for one input: the output tensor of a model with one, else
    the tuple of its output tensors in order."""
    tensors = as_outputs(out)
    return tensors[0] if len(tensors) == 1 else tensors


def user_validation(spec: Any, outputs: list[Any], refs: list[Any]) -> dict[str, Any]:
    """The caller's ``module:function(outputs, references) -> bool | (bool, why)`` (or the function
    itself, in the caller's own process), in place of the built-in guard: a list per input of the
    configuration's and the fp32 eager outputs (a tensor, or a tuple of tensors for a model with
    several outputs)."""
    from rooftune.platform.processes import import_user_module

    if callable(spec):
        fn, spec = spec, getattr(spec, "__qualname__", repr(spec))
    else:
        module, _, name = spec.partition(":")
        fn = getattr(import_user_module(module), name)
    answer = fn(outputs, refs)
    ok, why = (answer if isinstance(answer, tuple) else (answer, ""))
    return {"ok": bool(ok), "rule": f"validation {spec}", "why": "" if ok else (why or f"{spec} refused the outputs")}
