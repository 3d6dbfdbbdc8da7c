"""ncnn (Tencent's inference library) on the CPU, the model converted by its converter pnnx: a
PyTorch model traced, a TensorFlow one from its ONNX conversion (:mod:`rooftune.runtimes.sources`).

ncnn picks a convolution kernel per layer at load: Winograd F(6x6,3x3), F(4x4,3x3) or F(2x2,3x3)
for 3x3 stride-1 layers where its rules say so, packed GEMM (im2col or 1x1) elsewhere, in its
blocked (packed) layout, where the ONNX-graph form (:mod:`rooftune.runtimes.winograd_onnx`) pays
for whole tensors of tiles in memory: it is the strong runtime for networks of 3x3 stride-1
convolutions (the guideline's NCNN_MIN_SHARE; figures in BENCHMARKS.md, the tuning suite). Its
times move with the host more than ONNX Runtime's: ncnn splits each layer's work evenly between
its threads and waits for the slowest, so when the host slows one core its threads run as fast
as one, where ONNX Runtime's pool, handing out smaller pieces, loses less
(docs/benchmarks/history.md gives both, measured alternating in one process).

``conv=winograd`` (ncnn's default) lets ncnn use its Winograd kernels, ``conv=direct`` forbids
them. ncnn runs one sample per inference (its tensors have no batch dimension): batch 1 only.
The weights are converted in fp32 (pnnx's default stores them in fp16, which is another model).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.platform.processes import run, time_left
from rooftune.runtimes.base import Prepared, Runtime
from rooftune.runtimes.packages import missing
from rooftune.runtimes.sources import is_tensorflow, tf_onnx
from rooftune.runtimes.torch_runtimes import torch_inputs
from rooftune.workload.outputs import output_tensors

if TYPE_CHECKING:
    import torch

    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload

#: The converter's time limit (a large model's trace and conversion take seconds to a minute); in
#: a trial's worker, what is left of the trial's time to prepare where that is less.
CONVERT_TIMEOUT_S = 600


class Ncnn(Runtime):
    name = "ncnn"
    # ncnn brings its own OpenMP (bundled with the wheel) and sets its threads per network; its
    # layout is its own packed one
    uses_openmp = False
    precisions = ("fp32",)
    frameworks = ("torch", "tensorflow")

    def available(self) -> str | None:
        return missing("ncnn") or missing("pnnx")

    def unsupported(self, config: RunConfig) -> str | None:
        if config.batch != 1:
            return f"ncnn runs one sample per inference (batch 1), not batch {config.batch}"
        return super().unsupported(config)

    def artifact_file(self, config: RunConfig, workdir: Path) -> Path:
        # Winograd or not is chosen at load: one converted model for both
        return config.artifact_path(workdir, "model.ncnn.param")

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[Any] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        import ncnn
        import numpy as np
        import torch

        path = self.artifact_file(config, workdir)
        if not path.exists():
            ncnn_model(wl, config, path)
        net = ncnn.Net()
        opt = net.opt
        if config.set_threads:
            opt.num_threads = config.intra_threads
        opt.use_winograd_convolution = config.option("conv") == "winograd"
        # fp32 throughout: ncnn stores and computes in fp16 or bf16 where the ISA has them
        opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
        opt.use_bf16_storage = opt.use_bf16_packed = False
        if net.load_param(str(path)) != 0 or net.load_model(str(path.with_suffix(".bin"))) != 0:
            raise RuntimeError(f"ncnn could not load {path}")
        inputs, outputs = _blobs(net.input_names()), _blobs(net.output_names())

        def mats(xs: Sequence[torch.Tensor]) -> list[tuple[np.ndarray, Any]]:
            if len(xs) != len(inputs):
                raise ValueError(f"ncnn model takes {len(inputs)} input(s), given {len(xs)}")
            # an ncnn.Mat made from an array points into the array's memory: the array is kept
            # beside it (a Mat outliving its array read freed memory, and crashed some processes)
            arrays = [np.ascontiguousarray(_unbatched(x).float().numpy()) for x in xs]
            return [(a, ncnn.Mat(a)) for a in arrays]

        def infer(ms: list[tuple[np.ndarray, Any]]) -> list[np.ndarray]:
            ex = net.create_extractor()
            for name, (_, m) in zip(inputs, ms, strict=True):
                ex.input(name, m)
            out = []
            for name in outputs:
                ret, m = ex.extract(name)
                if ret != 0:
                    raise RuntimeError(f"ncnn failed to compute output {name} (error {ret})")
                out.append(np.array(m))
            return out

        feeds = mats(torch_inputs(wl, config))

        def to_torch(out: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
            # ncnn's tensors have no batch dimension: the model's batch of one put back
            return output_tensors([torch.from_numpy(a).unsqueeze(0) for a in out])

        return Prepared(lambda: infer(feeds), to_torch, artifact=path,
                        call=lambda xs: infer(mats(torch_inputs_like(xs, config))))


def torch_inputs_like(xs: Sequence[torch.Tensor], config: RunConfig) -> tuple[torch.Tensor, ...]:
    from rooftune.runtimes.torch_runtimes import config_inputs

    return config_inputs(xs, config)


def _unbatched(x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 0 or x.shape[0] != 1:
        raise ValueError(f"ncnn takes inputs of batch 1, given shape {tuple(x.shape)}")
    return x[0]


def _blobs(names: Sequence[str]) -> list[str]:
    """pnnx's blob names (in0, in1 ... / out0, out1 ...) in the model's order."""
    def index(name: str) -> tuple[int, str]:
        m = re.search(r"(\d+)$", name)
        return (int(m.group(1)) if m else 0, name)

    return sorted(names, key=index)


_TYPES = {"torch.float32": "f32"}


def convert(module: torch.nn.Module, inputs: Sequence[torch.Tensor], path: Path) -> Path:
    """The module traced, converted by pnnx with fp32 weights (:func:`convert_file`)."""
    import torch

    _check_inputs(inputs)
    with tempfile.TemporaryDirectory(prefix=".pnnx-trace-", dir=path.parent) as tmp:
        with torch.no_grad():
            traced = torch.jit.trace(module, tuple(inputs), check_trace=False, strict=False)
        traced.save(str(Path(tmp) / "model.pt"))
        return convert_file(Path(tmp) / "model.pt", inputs, path)


def convert_file(model: Path, inputs: Sequence[torch.Tensor], path: Path) -> Path:
    """A TorchScript (.pt) or ONNX (.onnx) file converted by pnnx with fp32 weights, and ``path``
    (.param) with its .bin beside it written whole: the pair is renamed into place, weights first,
    so a process starting beside this one finds both or neither."""
    _check_inputs(inputs)
    with tempfile.TemporaryDirectory(prefix=".pnnx-", dir=path.parent) as tmp:
        work = Path(tmp)
        import pnnx

        shapes = ",".join(f"[{','.join(str(d) for d in x.shape)}]{_TYPES[str(x.dtype)]}" for x in inputs)
        param, binary = work / "model.ncnn.param", work / "model.ncnn.bin"
        cmd = [pnnx.EXEC_PATH, str(model), f"inputshape={shapes}", "device=cpu", "fp16=0",
               f"ncnnparam={param}", f"ncnnbin={binary}", f"pnnxparam={work / 'p.param'}",
               f"pnnxbin={work / 'p.bin'}", f"pnnxpy={work / 'p.py'}", f"pnnxonnx={work / 'p.onnx'}",
               f"ncnnpy={work / 'n.py'}"]
        limit = time_left(CONVERT_TIMEOUT_S)
        try:
            done = run(cmd, cwd=work, timeout_s=limit)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"pnnx did not convert the model within {limit:.0f} s") from None
        if done.returncode != 0 or not param.exists() or not binary.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"pnnx could not convert the model to ncnn (exit {done.returncode}): {tail[0]}")
        unsupported = _unsupported_layers(param)
        if unsupported:
            raise RuntimeError("pnnx left operators ncnn has no layer for: " + ", ".join(unsupported))
        part = path.with_name(f".{os.getpid()}.{path.name}")
        shutil.move(str(binary), str(part.with_suffix(".bin")))
        shutil.move(str(param), str(part))
        os.replace(part.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(part, path)
    return path


def _check_inputs(inputs: Sequence[torch.Tensor]) -> None:
    for x in inputs:
        if str(x.dtype) not in _TYPES:
            raise ValueError(f"ncnn takes float32 inputs, the model takes {x.dtype}")
        _unbatched(x)


def _unsupported_layers(param: Path) -> list[str]:
    """Layer types pnnx wrote that ncnn does not have (pnnx keeps an operator it cannot map under
    its PyTorch name, e.g. ``aten::...`` or ``pnnx.Expression`` with no ncnn counterpart), which
    ncnn would refuse at load with a message on stderr only."""
    import ncnn

    out = []
    for line in param.read_text().splitlines()[2:]:
        kind = line.split(maxsplit=1)[0] if line.strip() else ""
        if kind and ncnn.layer_to_index(kind) < 0 and kind not in out:
            out.append(kind)
    return out


def ncnn_model(wl: Workload, config: RunConfig, path: Path) -> Path:
    """The workload converted by pnnx for ncnn, ``path`` (.param) with its .bin beside it."""
    from rooftune.runtimes.torch_runtimes import torch_module

    if not is_tensorflow(wl):
        return convert(torch_module(wl, config), torch_inputs(wl, config), path)
    from rooftune.runtimes.winograd_onnx import basic_optimized

    with tempfile.TemporaryDirectory(prefix=".tf2onnx-", dir=path.parent) as tmp:
        raw = tf_onnx(wl.module, Path(tmp) / "model.onnx")
        folded = basic_optimized(raw, Path(tmp) / "model-basic.onnx")
        return convert_file(folded, torch_inputs(wl, config), path)
