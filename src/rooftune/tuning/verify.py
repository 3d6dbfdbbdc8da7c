"""Is a configuration's output the model's output? Compared with the fp32 eager reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rooftune.primitives.check import output_error

#: fp32 runtimes reorder sums (blocked GEMMs, fused ops, Winograd, approximated exp/tanh):
#: OpenVINO in f32 on squeezenet1_0 differs from eager by 1.0e-3 of the output's scale. A different
#: function (wrong weights, a wrong layout) differs by ~1x with cosine ~0.3; 1e-2 and a cosine
#: of 0.9999 separate the two with margin.
FP32_TOLERANCE = 1e-2
FP32_MIN_COSINE = 0.9999
#: bf16 keeps 8 mantissa bits: ~0.4 % per rounding, accumulated over layers.
BF16_TOLERANCE = 5e-2
#: The int8 guard (issue: cosine similarity >= 0.99 and top-1 agreement >= 99 %).
INT8_MIN_COSINE = 0.99
INT8_MIN_TOP1 = 0.99


Outputs = torch.Tensor | Sequence[torch.Tensor]


def _tensors(out: Outputs) -> tuple[torch.Tensor, ...]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def _compare_one(out: torch.Tensor, ref: torch.Tensor) -> dict[str, Any]:
    out = out.detach().reshape(ref.shape) if out.numel() == ref.numel() else out.detach()
    if out.shape != ref.shape:
        return {"why": f"shape {tuple(out.shape)} differs from the reference {tuple(ref.shape)}"}
    if ref.numel() == 0:  # nothing to differ (no detections, an empty mask)
        return {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "top1": 1.0, "finite": True}
    if not ref.is_floating_point():
        # indices, counts, masks: equal or not, no scale to be relative to; a near tie may flip
        # an index in another precision as it flips a class, so the top-1 rule holds them
        agree = (out.double() == ref.double()).double().mean().item()
        return {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0, "top1": agree, "finite": True, "agreement": agree}
    out, ref = out.float(), ref.float()
    max_abs, rel, cos = output_error(out, ref)
    top1 = (out.reshape(-1, ref.shape[-1]).argmax(-1) == ref.reshape(-1, ref.shape[-1]).argmax(-1)).float().mean().item() if ref.dim() else 1.0
    return {"max_abs": max_abs, "max_rel": rel, "cosine": cos, "top1": top1, "finite": bool(torch.isfinite(out).all())}


def _rule(precision: str, tolerance: float | None = None,
          min_cosine: float | None = None) -> tuple[str, Callable[[dict[str, Any]], bool]]:
    def agrees(e: dict[str, Any]) -> bool:  # integer outputs, where the model has any
        return e.get("agreement", 1.0) >= INT8_MIN_TOP1

    if precision == "int8":
        return (f"cosine >= {INT8_MIN_COSINE} and top-1 agreement >= {INT8_MIN_TOP1:.0%}",
                lambda e: e["finite"] and e["cosine"] >= INT8_MIN_COSINE and e["top1"] >= INT8_MIN_TOP1 and agrees(e))
    half = precision in ("bf16", "fp16")  # 8 or 11 bits of mantissa: the same guard
    tol = tolerance if tolerance is not None else BF16_TOLERANCE if half else FP32_TOLERANCE
    min_cos = min_cosine if min_cosine is not None else INT8_MIN_COSINE if half else FP32_MIN_COSINE
    return (f"max error <= {tol:g} of the output's scale and cosine >= {min_cos}",
            lambda e: e["finite"] and e["max_rel"] <= tol and e["cosine"] >= min_cos and agrees(e))


def compare_outputs(out: Outputs, ref: Outputs, precision: str, *, tolerance: float | None = None,
                    min_cosine: float | None = None) -> dict[str, Any]:
    """Max abs error, error relative to the reference's scale, cosine similarity, top-1 agreement
    (rows of the last dimension), and whether the precision's guard passes. ``tolerance`` and
    ``min_cosine``, when given, replace an fp32 or bf16 rule's bounds (a rewritten model's own,
    :func:`rooftune.selection.rewrite.verify`).

    ``out`` and ``ref`` are a tensor or every output tensor of the model in order
    (:func:`rooftune.runtimes.output_tensors`): each output is compared with its own reference, on
    the scale of its own, and the figures are the worst over them (the largest errors, the lowest
    cosine); top-1 agreement is the first output's, the one a classifier's logits come first in.
    An integer or bool output (indices, counts, masks) has no scale: it must agree with its
    reference on >= 99 % of its elements (``agreement``, the lowest of them). A configuration
    passes only when every output does."""
    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) != len(refs):
        return {"ok": False, "why": f"{len(outs)} output tensor(s) where the model returns {len(refs)}"}
    each = [_compare_one(o, r) for o, r in zip(outs, refs, strict=True)]
    several = len(refs) > 1
    for i, e in enumerate(each):
        if "cosine" not in e:
            return {"ok": False, "why": f"output {i + 1} of {len(refs)}: {e['why']}" if several else f"output {e['why']}"}
    rule, passes = _rule(precision, tolerance, min_cosine)
    figures = {"max_abs": max(e["max_abs"] for e in each), "max_rel": max(e["max_rel"] for e in each),
               "cosine": min(e["cosine"] for e in each), "top1": each[0]["top1"],
               "finite": all(e["finite"] for e in each)}
    agreement = [e["agreement"] for e in each if "agreement" in e]
    if agreement:
        figures["agreement"] = min(agreement)
    ok = passes(figures)
    why = ""
    if not ok:
        worst = next((i for i, e in enumerate(each) if not passes({**e, "top1": figures["top1"]})), 0)
        e = each[worst]
        where = f" (output {worst + 1} of {len(refs)})" if several else ""
        if "agreement" in e:
            why = (f"fails {rule}{where}: its integer values agree on {e['agreement']:.1%} of the elements "
                   f"(>= {INT8_MIN_TOP1:.0%} asked)")
        else:
            why = f"fails {rule}{where}: max_rel {e['max_rel']:.3g}, cosine {e['cosine']:.5f}, top-1 {figures['top1']:.1%}"
    result = {"ok": ok, "max_abs": figures["max_abs"], "max_rel": figures["max_rel"], "cosine": figures["cosine"],
              "top1": figures["top1"], "rule": rule, "why": why}
    if agreement:
        result["agreement"] = figures["agreement"]
    if several:
        result["outputs"] = len(refs)
    return result


def compare_set(outputs: list[Outputs], refs: list[Outputs], precision: str) -> dict[str, Any]:
    """The guard over a calibration set: per-input comparisons, then the mean cosine (and the
    worst), top-1 agreement over every row of every input's first output, and the largest relative
    error."""
    if len(outputs) != len(refs) or not refs:
        return {"ok": False, "why": f"{len(outputs)} outputs for {len(refs)} calibration inputs"}
    each = [compare_outputs(o, r, precision) for o, r in zip(outputs, refs, strict=True)]
    bad_shape = next((e for e in each if "cosine" not in e), None)
    if bad_shape is not None:
        return bad_shape
    firsts = [_tensors(r)[0] for r in refs]
    rows = [r.reshape(-1, r.shape[-1]).shape[0] if r.dim() else 1 for r in firsts]
    top1 = sum(e["top1"] * n for e, n in zip(each, rows, strict=True)) / sum(rows)
    cos = sum(e["cosine"] for e in each) / len(each)
    rel = max(e["max_rel"] for e in each)
    finite = all(torch.isfinite(t).all() for o in outputs for t in _tensors(o))
    agreement = [e["agreement"] for e in each if "agreement" in e]  # integer outputs: their elements' agreement
    agree = sum(agreement) / len(agreement) if agreement else 1.0
    if precision == "int8":
        ok = bool(finite) and cos >= INT8_MIN_COSINE and top1 >= INT8_MIN_TOP1 and agree >= INT8_MIN_TOP1
        rule = f"mean cosine >= {INT8_MIN_COSINE} and top-1 agreement >= {INT8_MIN_TOP1:.0%} over {len(refs)} inputs"
    else:
        ok = all(e["ok"] for e in each)
        rule = each[0]["rule"] + f" on each of {len(refs)} inputs"
    why = "" if ok else f"fails {rule}: mean cosine {cos:.5f}, top-1 {top1:.1%}, max_rel {rel:.3g}" + (
        f", integer outputs agreeing on {agree:.1%} of their elements" if agreement else "")
    zeros = sum(1 for o, r in zip(outputs, refs, strict=True)
                if not any(t.any() for t in _tensors(o)) and any(t.any() for t in _tensors(r)))
    if not ok and zeros:  # what a quantizer that rounded the whole output away gives
        why += f"; {zeros} of {len(refs)} outputs are all zeros"
    result = {"ok": ok, "max_abs": max(e["max_abs"] for e in each), "max_rel": rel, "cosine": cos,
              "min_cosine": min(e["cosine"] for e in each), "top1": top1, "inputs": len(refs), "rule": rule,
              "why": why}
    if len(_tensors(refs[0])) > 1:
        result["outputs"] = len(_tensors(refs[0]))
    if agreement:
        result["agreement"] = agree
    return result


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
    tensors = _tensors(out)
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
