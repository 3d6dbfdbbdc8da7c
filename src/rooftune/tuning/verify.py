"""Is a configuration's output the model's output? Compared with the fp32 eager reference."""

from __future__ import annotations

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


def compare_outputs(out: torch.Tensor, ref: torch.Tensor, precision: str) -> dict[str, Any]:
    """Max abs error, error relative to the reference's scale, cosine similarity, top-1 agreement
    (rows of the last dimension), and whether the precision's guard passes."""
    out = out.detach().float().reshape(ref.shape) if out.numel() == ref.numel() else out.detach().float()
    if out.shape != ref.shape:
        return {"ok": False, "why": f"output shape {tuple(out.shape)} differs from the reference {tuple(ref.shape)}"}
    max_abs, rel, cos = output_error(out, ref)
    top1 = (out.reshape(-1, ref.shape[-1]).argmax(-1) == ref.reshape(-1, ref.shape[-1]).argmax(-1)).float().mean().item() if ref.dim() else 1.0
    finite = bool(torch.isfinite(out).all())
    if precision == "int8":
        ok = finite and cos >= INT8_MIN_COSINE and top1 >= INT8_MIN_TOP1
        rule = f"cosine >= {INT8_MIN_COSINE} and top-1 agreement >= {INT8_MIN_TOP1:.0%}"
    else:
        tol = BF16_TOLERANCE if precision == "bf16" else FP32_TOLERANCE
        min_cos = INT8_MIN_COSINE if precision == "bf16" else FP32_MIN_COSINE
        ok = finite and rel <= tol and cos >= min_cos
        rule = f"max error <= {tol:g} of the output's scale and cosine >= {min_cos}"
    return {"ok": ok, "max_abs": max_abs, "max_rel": rel, "cosine": cos, "top1": top1, "rule": rule,
            "why": "" if ok else f"fails {rule}: max_rel {rel:.3g}, cosine {cos:.5f}, top-1 {top1:.1%}"}


def compare_set(outputs: list[torch.Tensor], refs: list[torch.Tensor], precision: str) -> dict[str, Any]:
    """The guard over a calibration set: per-input comparisons, then the mean cosine (and the
    worst), top-1 agreement over every row of every output, and the largest relative error."""
    if len(outputs) != len(refs) or not refs:
        return {"ok": False, "why": f"{len(outputs)} outputs for {len(refs)} calibration inputs"}
    each = [compare_outputs(o, r, precision) for o, r in zip(outputs, refs, strict=True)]
    bad_shape = next((e for e in each if "cosine" not in e), None)
    if bad_shape is not None:
        return bad_shape
    rows = [r.reshape(-1, r.shape[-1]).shape[0] if r.dim() else 1 for r in refs]
    top1 = sum(e["top1"] * n for e, n in zip(each, rows, strict=True)) / sum(rows)
    cos = sum(e["cosine"] for e in each) / len(each)
    rel = max(e["max_rel"] for e in each)
    finite = all(torch.isfinite(o).all() for o in outputs)
    if precision == "int8":
        ok = bool(finite) and cos >= INT8_MIN_COSINE and top1 >= INT8_MIN_TOP1
        rule = f"mean cosine >= {INT8_MIN_COSINE} and top-1 agreement >= {INT8_MIN_TOP1:.0%} over {len(refs)} inputs"
    else:
        ok = all(e["ok"] for e in each)
        rule = each[0]["rule"] + f" on each of {len(refs)} inputs"
    why = "" if ok else f"fails {rule}: mean cosine {cos:.5f}, top-1 {top1:.1%}, max_rel {rel:.3g}"
    zeros = sum(1 for o, r in zip(outputs, refs, strict=True) if not o.any() and r.any())
    if not ok and zeros:  # what a quantizer that rounded the whole output away gives
        why += f"; {zeros} of {len(refs)} outputs are all zeros"
    return {"ok": ok, "max_abs": max(e["max_abs"] for e in each), "max_rel": rel, "cosine": cos,
            "min_cosine": min(e["cosine"] for e in each), "top1": top1, "inputs": len(refs), "rule": rule,
            "why": why}


def check_prepared(prepared: Any, precision: str, inputs: tuple[torch.Tensor, ...], reference: torch.Tensor,
                   calibration: dict[str, Any] | None = None, validate: Any = None,
                   out: torch.Tensor | None = None) -> dict[str, Any]:
    """The check a prepared configuration passes before its times count (a trial's, and
    ``rooftune.load_tuned``'s): its output on ``inputs`` against the fp32 eager ``reference``; an
    int8 model over its ``calibration`` set (``{"inputs": [...], "outputs": [...]}``, the fp32
    eager outputs) by the int8 guard; ``validate``, the caller's ``module:function(outputs,
    references)``, in place of the built-in guard. ``out``: the output on ``inputs`` when the
    caller already has it."""
    verify = compare_outputs(prepared.output() if out is None else out, reference, precision)
    if calibration is not None or validate:
        xs = calibration["inputs"] if calibration else [tuple(inputs)]
        refs = calibration["outputs"] if calibration else [reference]
        outs = [prepared.output_for(tuple(x)) for x in xs]
        verify = compare_set(outs, refs, precision) if calibration else verify
        if validate:
            verify = {**verify, **user_validation(validate, outs, refs)}
    return verify


def user_validation(spec: Any, outputs: list[Any], refs: list[Any]) -> dict[str, Any]:
    """The caller's ``module:function(outputs, references) -> bool | (bool, why)`` (or the function
    itself, in the caller's own process), in place of the built-in guard."""
    import importlib

    if callable(spec):
        fn, spec = spec, getattr(spec, "__qualname__", repr(spec))
    else:
        module, _, name = spec.partition(":")
        fn = getattr(importlib.import_module(module), name)
    answer = fn(outputs, refs)
    ok, why = (answer if isinstance(answer, tuple) else (answer, ""))
    return {"ok": bool(ok), "rule": f"validation {spec}", "why": "" if ok else (why or f"{spec} refused the outputs")}
