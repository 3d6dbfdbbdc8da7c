"""Features of a convolution for the performance model: the spec's fields, its output size, FLOPs,
bytes moved, arithmetic intensity, the im2col buffer, the working set against the platform's
cache sizes, and how well the shape fills the blocks vectorized kernels work in (channels in
blocks of 16 fp32 lanes, output rows in blocks of 8 and 16, Winograd's 4x4 output tiles): a layer
with 24 channels pays for 32. The channels are counted per group and in all (schema 3): a
depthwise layer has one channel per group, but oneDNN blocks its groups' channels together, so a
depthwise layer of 24 channels pays for 32 too (BENCHMARKS.md, perfmodel Run 13). Schema 3 also
says which path PyTorch's own convolution (the ``pytorch-default`` primitive) takes,
:func:`torch_onednn`: a batch-1 1x1 layer of 80 channels at 14x14 runs ATen's GEMM, one of 112
channels runs oneDNN, and the two paths differ in time. Sizes and counts enter as log2 (times are
roughly multiplicative in them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rooftune.primitives.spec import ConvSpec

#: Bumped whenever a feature is added, removed or computed differently: a saved model with another
#: schema is refused (its columns would mean something else).
FEATURE_SCHEMA_VERSION = 3

FEATURES: tuple[str, ...] = (
    "log_N", "log_C", "log_H", "log_W", "log_K", "R", "S", "stride", "padding", "dilation", "log_groups",
    "depthwise", "pointwise", "int8", "log_P", "log_Q", "log_flops", "log_bytes", "log_intensity",
    "log_im2col_bytes", "log_weight_bytes", "log_cpg", "log_kpg", "ws_over_l1", "ws_over_l2", "ws_over_l3",
    # schema 2: block fill (a share in (0, 1]) and the output's pixel count
    "cpg_fill16", "kpg_fill16", "q_fill16", "q_fill8", "tile_fill4", "log_PQ",
    # schema 3: the fill of all the channels (a grouped convolution blocks its groups' channels
    # together), and whether F.conv2d runs oneDNN (1) or ATen's im2col + GEMM (0)
    "c_fill16", "k_fill16", "torch_onednn",
)

#: The features of each schema this release reads. Each schema extends the one before, so a
#: model of an older schema predicts from the first columns of today's features.
SCHEMA_FEATURES: dict[int, tuple[str, ...]] = {1: FEATURES[:26], 2: FEATURES[:32], 3: FEATURES}

#: Cache sizes assumed when a platform has no fingerprint (a common server core).
DEFAULT_CACHES = {"L1d": 48 * 1024, "L2": 1024 * 1024, "L3": 32 * 1024 * 1024}


def cache_sizes(fingerprint: Mapping[str, Any] | None) -> dict[str, int]:
    """L1d, L2, L3 sizes (bytes) from a stored platform fingerprint (``caches`` list)."""
    sizes = dict(DEFAULT_CACHES)
    for c in (fingerprint or {}).get("caches", []) or []:
        name = c.get("name") if isinstance(c, Mapping) else None
        if name in sizes and c.get("size_bytes"):
            sizes[name] = int(c["size_bytes"])
    return sizes


def _l2(v: float) -> float:
    return math.log2(max(v, 1e-12))


def _fill(n: int, block: int) -> float:
    """The share of ``ceil(n / block)`` blocks that ``n`` fills."""
    return n / (math.ceil(n / block) * block)


def torch_onednn(spec: ConvSpec, threads: int | None = None) -> bool:
    """Whether ``F.conv2d`` on a CPU fp32 NCHW tensor runs oneDNN (ATen's ``use_mkldnn``, checked
    with ONEDNN_VERBOSE on torch 2.15): grouped convolutions, kernels larger than 3x3 both ways,
    batches above 1 and inputs of more than 20480 elements do, except that on one thread an
    unstrided, undilated 1x1 convolution of a batch below 16 never does; the rest run ATen's own
    im2col + GEMM. ``threads`` None: more than one."""
    one_thread_native = (threads == 1 and spec.R == spec.S == 1 and max(spec.stride) == 1
                         and max(spec.dilation) == 1 and spec.N < 16)
    return not one_thread_native and (spec.groups > 1 or (spec.R > 3 and spec.S > 3) or spec.N > 1
                                      or spec.N * spec.C * spec.H * spec.W > 20480)


def feature_row(spec: ConvSpec, caches: Mapping[str, int] | None = None, threads: int | None = None) -> list[float]:
    caches = caches or DEFAULT_CACHES
    elem = 1 if spec.dtype == "int8" else 4
    cpg, kpg = spec.C // spec.groups, spec.K // spec.groups
    in_b = spec.N * spec.C * spec.H * spec.W * elem
    w_b = spec.K * cpg * spec.R * spec.S * elem
    out_b = spec.N * spec.K * spec.P * spec.Q * 4
    moved = in_b + w_b + out_b
    im2col = spec.N * spec.P * spec.Q * spec.C * spec.R * spec.S * elem
    ws = moved + (im2col if spec.R * spec.S > 1 else 0)
    return [
        _l2(spec.N), _l2(spec.C), _l2(spec.H), _l2(spec.W), _l2(spec.K), float(spec.R), float(spec.S),
        float(max(spec.stride)), float(max(spec.padding)), float(max(spec.dilation)), _l2(spec.groups),
        float(spec.depthwise), float(spec.R == spec.S == 1), float(spec.dtype == "int8"), _l2(spec.P), _l2(spec.Q),
        _l2(spec.flops), _l2(moved), _l2(spec.flops / moved), _l2(im2col), _l2(w_b), _l2(cpg), _l2(kpg),
        _l2(ws / caches["L1d"]), _l2(ws / caches["L2"]), _l2(ws / caches["L3"]),
        _fill(cpg, 16), _fill(kpg, 16), _fill(spec.Q, 16), _fill(spec.Q, 8),
        _fill(spec.P, 4) * _fill(spec.Q, 4), _l2(spec.P * spec.Q), _fill(spec.C, 16), _fill(spec.K, 16),
        float(torch_onednn(spec, threads)),
    ]


def featurize(specs: Sequence[ConvSpec], caches: Mapping[str, int] | None = None,
              threads: int | None = None) -> np.ndarray:
    """One row per spec, columns :data:`FEATURES`, for a platform of these cache sizes running at
    ``threads`` threads (None: more than one)."""
    if not specs:
        return np.zeros((0, len(FEATURES)))
    return np.asarray([feature_row(s, caches, threads) for s in specs], dtype=np.float64)
