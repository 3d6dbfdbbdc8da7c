"""Is a configuration's output the model's output? Compared with the fp32 eager reference by the
precision's guard (:mod:`rooftune.workload.outputs`, where the tolerances live), or by the caller's
own validation function."""

from __future__ import annotations

import math
import time
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
    "TRAIN_BF16_LOSS_TOLERANCE",
    "TRAIN_CHECK_SEED",
    "TRAIN_CHECK_STEPS",
    "TRAIN_FP32_LOSS_TOLERANCE",
    "TRAIN_FP32_TOLERANCE",
    "check_on_data",
    "check_prepared",
    "check_training",
    "compare_outputs",
    "compare_set",
    "train_reference",
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


def check_on_data(prepared: Any, precision: str, verify: dict[str, Any], evaluation: dict[str, Any]) -> dict[str, Any]:
    """A configuration on the evaluation part of the user's data (``evaluation``, written by the
    study's set-up): a reduced precision is accepted when its metric drops at most the budget below
    fp32's there, whatever the random-input guard (``verify``) said, which stays beside it as
    ``guard``; an output of another shape or not finite is refused all the same. An fp32
    configuration passed the fp32 guard against the reference: it scores fp32's metric."""
    from rooftune.workload.data import unbatch
    from rooftune.workload.metrics import describe, evaluate

    if precision == "fp32":
        return {**verify, "accuracy": {**evaluation["fp32"], "by": "the fp32 guard (outputs equal fp32 eager's)"}}
    guard = {k: verify[k] for k in ("ok", "rule", "why") if k in verify}
    if "cosine" not in verify:  # a missing output or another shape
        return {**verify, "guard": guard}
    try:
        first = unbatch([prepared.output_for(tuple(x)) for x in evaluation["batches"]], evaluation["n"])
    except NotImplementedError:
        return {**verify, "ok": False, "guard": guard, "why": "this prepared model runs only its own inputs: it "
                "cannot be judged on your data"}
    if tuple(first.shape) != tuple(evaluation["reference"].shape) or not bool(torch.isfinite(first).all()):
        return {**verify, "ok": False, "guard": guard,
                "why": f"on your data its first output is shaped {tuple(first.shape)} or not finite"}
    acc = evaluate(first, evaluation["reference"], evaluation["labels"], evaluation["metric"],
                   evaluation["max_drop"], evaluation["seed"])
    return {**verify, "ok": acc["ok"], "rule": acc["rule"], "why": "" if acc["ok"] else f"over the budget: {describe(acc)}",
            "guard": guard, "accuracy": acc}


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


#: Steps a training configuration runs from the workload's seeded weights before its times count,
#: checked against vanilla fp32 eager training over the same steps (every configuration sees the
#: same synthetic batch and target, so the steps are comparable): the losses of all of them, the
#: parameters after the first. Later steps' parameters are not compared: an untrained network's
#: first steps amplify rounding (BatchNorm divides by each batch's statistics, momentum carries
#: it on), so two correct fp32 runs that sum in another order part by tens of percent of the
#: update by the second step on mobilenet_v2.
TRAIN_CHECK_STEPS = 3
#: Seed of torch's generator before the checked steps: a model with dropout draws the same masks
#: in every configuration that draws them the same way (torch.compile draws its own: such a model
#: compiled fails the fp32 check, and is never reported).
TRAIN_CHECK_SEED = 0
#: fp32 training: the parameters after the first step equal vanilla's to this share of how far
#: vanilla moved them (the L2 norm of the difference over that of vanilla's update, all parameters
#: together): kernels that sum in another order (threads, layout, fused updates, torch.compile)
#: differ by a few percent at most; a wrong gradient or update differs by its whole size.
TRAIN_FP32_TOLERANCE = 0.1
#: fp32 training: each step's loss within this relative difference of vanilla's (the same
#: amplification moves the third step's loss by ~0.1 % on mobilenet_v2 in another layout).
TRAIN_FP32_LOSS_TOLERANCE = 1e-2
#: Reduced-precision training (bf16 autocast): each step's loss within this relative difference of
#: fp32's over the checked steps (bf16 keeps 8 bits of mantissa: ~0.4 % per rounding, a few of
#: them along the forward pass).
TRAIN_BF16_LOSS_TOLERANCE = 5e-2


def _l2(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> float:
    return math.sqrt(math.fsum(float(torch.sum((a.double() - b.double()) ** 2)) for a, b in zip(xs, ys, strict=True)))


def _steps(step: Any, n: int) -> tuple[list[float], list[torch.Tensor], float]:
    """``n`` steps from a seeded generator: their losses, the parameters after the first, and
    the first step's seconds."""
    torch.manual_seed(TRAIN_CHECK_SEED)
    t0 = time.perf_counter()
    losses = [step.step()]
    first_s = time.perf_counter() - t0
    first = step.parameters()
    losses += [step.step() for _ in range(n - 1)]
    return losses, first, first_s


def train_reference(step: Any, steps: int = TRAIN_CHECK_STEPS) -> dict[str, Any]:
    """What a training configuration is checked against: vanilla fp32 ``step``'s losses over
    ``steps`` steps from its starting weights, its parameters after the first, and how far that
    step moved them."""
    initial = step.parameters()
    losses, params, _ = _steps(step, steps)
    return {"losses": losses, "params": params, "moved": _l2(params, initial)}


def check_training(step: Any, precision: str, reference: dict[str, Any]) -> dict[str, Any]:
    """A training configuration's first steps against the vanilla fp32 reference
    (:func:`train_reference`): fp32 by its parameters and losses, bf16 by its losses;
    ``first_step_s``, the first step's seconds (what a process of the configuration spends on its
    first step wherever it runs)."""
    n = len(reference["losses"])
    losses, params, first_s = _steps(step, n)
    rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference["losses"], strict=True)]
    finite = all(math.isfinite(x) for x in losses)
    out: dict[str, Any] = {"losses": losses, "loss_diff": max(rel, default=0.0), "finite": finite,
                           "first_step_s": first_s}
    if precision == "fp32":
        out["param_diff"] = _l2(params, reference["params"]) / max(reference["moved"], 1e-30)
        rule = (f"fp32 training: parameters after one step within {TRAIN_FP32_TOLERANCE:g} of vanilla's update "
                f"(L2), each of {n} losses within {TRAIN_FP32_LOSS_TOLERANCE:g} of vanilla's (relative)")
        ok = finite and out["param_diff"] <= TRAIN_FP32_TOLERANCE and out["loss_diff"] <= TRAIN_FP32_LOSS_TOLERANCE
        why = "" if ok else (f"the parameters after one step differ from vanilla's by {out['param_diff']:.2g} of its "
                             f"update, the losses by up to {out['loss_diff']:.2g} (relative)")
    else:
        rule = f"{precision} training: each of {n} losses within {TRAIN_BF16_LOSS_TOLERANCE:g} of fp32's (relative)"
        ok = finite and out["loss_diff"] <= TRAIN_BF16_LOSS_TOLERANCE
        why = "" if ok else f"a loss differs from fp32's by {out['loss_diff']:.2g} (relative) over {n} steps"
    return {**out, "ok": bool(ok), "rule": rule, "why": why if finite else "a loss is not finite"}
