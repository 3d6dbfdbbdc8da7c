"""A model's output as tensors, and whether one output is another's: what a faster way of running a
model (a runtime configuration, a rewritten model) is checked by against the fp32 eager reference.

    output_tensors   every tensor of a model output, in order (any nesting of containers)
    like_output      tensors put back in the structure of a model's own output
    compare_outputs  the precision's guard on one output (each output tensor against its reference)
    compare_set      the guard over a calibration set
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from rooftune.primitives.check import output_error


def output_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """Every tensor of a model output, in order: a tensor, a numpy array (ONNX Runtime's), or any
    nesting of tuples, lists and dicts of them (torch's pytree order, the order an ONNX export
    gives its outputs; a dict or list subclass pytree does not know is opened too). Floating
    tensors come as float32, integer and bool ones (indices, counts, masks) keep their type; a
    Python or numpy number (a count, a score) comes as a 0-d tensor, as TorchScript, ONNX Runtime
    and OpenVINO return it. Other leaves (None, strings) carry nothing to compare and are left out."""
    # the common cases first, on every call of a tuned model: one tensor (the torch runtimes, in
    # inference mode), a flat list of arrays (ONNX Runtime, OpenVINO)
    if isinstance(out, torch.Tensor):
        return (_as_compared(out),)
    if isinstance(out, list) and out and all(type(x) is np.ndarray for x in out):
        return tuple(_as_compared(torch.from_numpy(np.ascontiguousarray(x))) for x in out)
    tensors = _tensors_of(out)
    if not tensors:
        raise TypeError(f"model output of type {type(out).__name__} has no tensor")
    return tuple(tensors)


def _as_compared(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.is_floating_point() else t


def _is_number(leaf: Any) -> bool:
    return isinstance(leaf, (bool, int, float, np.generic)) and not isinstance(leaf, (np.str_, np.bytes_, np.void))


def _leaf_tensor(leaf: Any) -> torch.Tensor | None:
    if isinstance(leaf, torch.Tensor):
        return _as_compared(leaf.detach())
    if isinstance(leaf, np.ndarray):
        return _as_compared(torch.from_numpy(np.ascontiguousarray(leaf)))
    if _is_number(leaf):
        return _as_compared(torch.as_tensor(np.asarray(leaf)))
    return None


def _tensors_of(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    tensors = []
    for leaf in tree_leaves(out):
        t = _leaf_tensor(leaf)
        if t is not None:
            tensors.append(t)
        else:
            opened = _opened(leaf)
            if opened is not None:
                tensors += _tensors_of(opened)
    return tensors


def _opened(leaf: Any) -> list[Any] | None:
    """The parts of a container pytree does not know (a dataclass, a dict or list subclass), or None."""
    import dataclasses
    from collections.abc import Mapping

    if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        return [getattr(leaf, f.name) for f in dataclasses.fields(leaf)]
    if isinstance(leaf, Mapping):
        return list(leaf.values())
    if isinstance(leaf, (list, tuple)):
        return list(leaf)
    return None


def like_output(template: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """``tensors`` (as :func:`output_tensors` gives them) put back in the structure of
    ``template``, a model's own output (its tensors may be empty ones of the same dtype): a tensor
    for a model that returns one, a dict for one that returns a dict, a dataclass as that
    dataclass; each tensor in its template's dtype, a number as a number of its type. Leaves of
    the template that are neither (None) stay as they are; when the counts differ, the tensors
    are returned as a tuple."""
    if isinstance(template, torch.Tensor) and len(tensors) == 1:
        return _like(template, tensors[0])
    left = iter(tensors)
    try:
        out = _put(template, left)
    except StopIteration:  # fewer tensors than the template holds
        return tuple(tensors)
    return tuple(tensors) if next(left, None) is not None else out


def _put(template: Any, tensors: Iterator[torch.Tensor]) -> Any:
    import dataclasses
    from collections.abc import Mapping

    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(template)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (torch.Tensor, np.ndarray)) or _is_number(leaf):
            leaves[i] = _like(leaf, next(tensors))
        elif _opened(leaf) is None:
            continue
        # (a dataclass class itself, never an instance, has no parts: _opened gave None for it)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            leaves[i] = dataclasses.replace(leaf, **{f.name: _put(getattr(leaf, f.name), tensors)
                                                     for f in dataclasses.fields(leaf) if f.init})
        elif isinstance(leaf, Mapping):
            leaves[i] = _rebuilt(leaf, {k: _put(v, tensors) for k, v in leaf.items()})
        else:
            leaves[i] = _rebuilt(leaf, [_put(v, tensors) for v in leaf])
    return tree_unflatten(leaves, spec)


def _rebuilt(leaf: Any, parts: Any) -> Any:
    try:
        return type(leaf)(parts)
    except Exception:  # a container type that cannot be built from its parts: a plain one
        return parts


def _like(leaf: Any, t: torch.Tensor) -> Any:
    if isinstance(leaf, torch.Tensor):
        return t if t.dtype == leaf.dtype else t.to(leaf.dtype)
    if isinstance(leaf, (bool, int, float)) and t.numel() == 1:
        return type(leaf)(t.item())
    return t


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


def as_outputs(out: Outputs) -> tuple[torch.Tensor, ...]:
    """Every output tensor of ``out``, in order (a lone tensor stands for a model's one output)."""
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
    (:func:`output_tensors`): each output is compared with its own reference, on
    the scale of its own, and the figures are the worst over them (the largest errors, the lowest
    cosine); top-1 agreement is the first output's, the one a classifier's logits come first in.
    An integer or bool output (indices, counts, masks) has no scale: it must agree with its
    reference on >= 99 % of its elements (``agreement``, the lowest of them). A configuration
    passes only when every output does."""
    outs, refs = as_outputs(out), as_outputs(ref)
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
    firsts = [as_outputs(r)[0] for r in refs]
    rows = [r.reshape(-1, r.shape[-1]).shape[0] if r.dim() else 1 for r in firsts]
    top1 = sum(e["top1"] * n for e, n in zip(each, rows, strict=True)) / sum(rows)
    cos = sum(e["cosine"] for e in each) / len(each)
    rel = max(e["max_rel"] for e in each)
    finite = all(torch.isfinite(t).all() for o in outputs for t in as_outputs(o))
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
                if not any(t.any() for t in as_outputs(o)) and any(t.any() for t in as_outputs(r)))
    if not ok and zeros:  # what a quantizer that rounded the whole output away gives
        why += f"; {zeros} of {len(refs)} outputs are all zeros"
    result = {"ok": ok, "max_abs": max(e["max_abs"] for e in each), "max_rel": rel, "cosine": cos,
              "min_cosine": min(e["cosine"] for e in each), "top1": top1, "inputs": len(refs), "rule": rule,
              "why": why}
    if len(as_outputs(refs[0])) > 1:
        result["outputs"] = len(as_outputs(refs[0]))
    if agreement:
        result["agreement"] = agree
    return result
