"""Layer configurations to profile: every convolution of torchvision models at chosen batch sizes,
and space-filling samples (Sobol) over the ranges those models span."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import torch

from rooftune.errors import InvalidArgument
from rooftune.primitives.spec import ConvSpec, layer_spec


@dataclass(frozen=True)
class Layer:
    """A convolution of a model: where it is, and its spec."""

    model: str
    name: str
    spec: ConvSpec


def model_layers(model: str, batch: int = 1, dtype: str = "fp32") -> list[Layer]:
    """The 2-D convolutions of ``model`` (as `rooftune analyze` names models), in execution order,
    read with forward hooks on one run at ``batch``."""
    from rooftune.workload import load_workload

    wl = load_workload(model, batch=batch, check=False)
    found: list[Layer] = []
    hooks = []
    names = {m: n for n, m in wl.module.named_modules()}

    def hook(mod: torch.nn.Conv2d, args: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        spec = layer_spec(mod, tuple(args[0].shape), dtype)
        if spec is not None:
            found.append(Layer(model, names.get(mod, "?"), spec))

    for m in wl.module.modules():
        if isinstance(m, torch.nn.Conv2d):
            hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            wl.module(*wl.inputs)
    finally:
        for h in hooks:
            h.remove()
    return found


#: Ranges of the sampled specs: those of the torchvision CNNs at 224x224 input.
SAMPLE_RANGES = {"C": (3, 1024), "K": (8, 1024), "HW": (7, 112)}
_KERNELS = ((1, 1), (3, 3), (3, 3), (5, 5), (7, 7), (1, 7), (7, 1))
#: FLOPs per sample of the largest sampled spec: the largest convolution of the torchvision CNNs at
#: 224x224 (vgg16's 3.7 GFLOP). Wide channels at a large spatial size (up to 118 GFLOP in the
#: unbounded ranges) occur in no real network and would take minutes per primitive.
MAX_SAMPLE_FLOPS = 4e9
#: Most sampled specs one campaign may ask for: at ~15 primitives a spec, a few seconds each,
#: 100 000 specs would take months; more is a typo.
MAX_SAMPLE = 100_000


def sample_specs(n: int, batches: Sequence[int] = (1,), seed: int = 0, dtype: str = "fp32") -> list[ConvSpec]:
    """``n`` specs from a scrambled Sobol sequence (torch.quasirandom) over channels (log scale),
    spatial size (log scale), kernel, stride, depthwise or not and batch; impossible
    combinations are repaired (a kernel larger than the padded input is shrunk)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SAMPLE:
        raise InvalidArgument("sample", n, f"allowed an integer in 0..{MAX_SAMPLE}")
    if n == 0:
        return []
    engine = torch.quasirandom.SobolEngine(dimension=7, scramble=True, seed=seed)
    pts = engine.draw(n).tolist()

    def log_range(u: float, lo: int, hi: int) -> int:
        return int(round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))))

    out = []
    for u in pts:
        c = log_range(u[0], *SAMPLE_RANGES["C"])
        k = log_range(u[1], *SAMPLE_RANGES["K"])
        hw = log_range(u[2], *SAMPLE_RANGES["HW"])
        r, s = _KERNELS[min(int(u[3] * len(_KERNELS)), len(_KERNELS) - 1)]
        stride = 2 if u[4] > 0.75 else 1
        depthwise = u[5] > 0.85 and (r, s) == (3, 3)
        batch = batches[min(int(u[6] * len(batches)), len(batches) - 1)]
        if depthwise:
            k = c
        r, s = min(r, hw), min(s, hw)
        pad = (r // 2, s // 2)
        spec = ConvSpec(batch, c, hw, hw, k, r, s, stride=stride, padding=pad, groups=c if depthwise else 1, dtype=dtype)
        while spec.flops > MAX_SAMPLE_FLOPS * batch and min(spec.C, spec.K) > 8:
            scale = math.sqrt(spec.flops / (MAX_SAMPLE_FLOPS * batch))
            c, k = max(8, int(spec.C / scale)), max(8, int(spec.K / scale))
            spec = replace(spec, C=c, K=c if depthwise else k, groups=c if depthwise else 1)
        out.append(spec)
    return out


def dedupe(specs: Iterable[ConvSpec]) -> list[ConvSpec]:
    seen: dict[str, ConvSpec] = {}
    for s in specs:
        seen.setdefault(s.key(), s)
    return list(seen.values())


def with_batch(spec: ConvSpec, batch: int) -> ConvSpec:
    return replace(spec, N=batch)
