"""ONNX Runtime on its CPU provider: a PyTorch model exported through torch.onnx, a TensorFlow one
converted by tf2onnx (:mod:`rooftune.runtimes.sources`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rooftune.runtimes.base import Prepared, Runtime, without_option
from rooftune.runtimes.packages import missing
from rooftune.runtimes.sources import OPSET, export_onnx, is_tensorflow, onnx_file  # noqa: F401 (what other modules import from here)
from rooftune.runtimes.torch_runtimes import torch_inputs
from rooftune.workload.outputs import output_tensors

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload

def winograd(config: RunConfig) -> bool:
    return config.precision == "fp32" and config.option("conv") == "winograd"


def model_path(config: RunConfig, workdir: Path) -> Path:
    """The ONNX file a configuration runs: the export, or its Winograd rewrite for the threads the
    layers were measured with."""
    if winograd(config):
        return config.artifact_path(workdir, f"model-winograd-t{config.intra_threads}.onnx")
    return config.artifact_path(workdir, "model.onnx")


def winograd_model(src: Path, dst: Path, threads: int, session: Callable[[bytes], Any] | None = None) -> Path:
    """``src`` with the 3x3 convolutions that run faster by Winograd F(4x4,3x3) on this machine,
    measured with ``session`` (builds a runtime's session from ONNX bytes; ONNX Runtime's by
    default) at ``threads`` intra-op threads, rewritten so; what was measured per layer is written
    beside it (``dst`` with ``.json``). Both are written aside and renamed, the JSON first, under
    a lock: processes preparing the same configuration at once (the instances of a throughput
    configuration) measure the layers once, not side by side, and run one file."""
    import fcntl
    import os

    import onnx

    import rooftune.runtimes.winograd_onnx as winograd_onnx
    from rooftune.fileio import json_text

    with open(dst.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if dst.exists():  # made by the process that held the lock before this one
            return dst
        part = dst.with_name(f".{os.getpid()}.{dst.name}")
        part_json = part.with_suffix(".json")
        basic = dst.with_name(f".{os.getpid()}.basic.{dst.name}")
        try:
            model = onnx.load(str(winograd_onnx.basic_optimized(src, basic)))
            cands = winograd_onnx.candidates(model)
            make = session or winograd_onnx.ort_session_factory(threads)
            choices = winograd_onnx.choose(cands, make)
            rewritten = winograd_onnx.rewrite(model, [c.candidate.node for c in choices if c.chosen], cands)
            network = None
            if any(c.chosen for c in choices):
                # the layers were chosen one at a time: the network with them is kept only where
                # it is faster as a whole, with its whole interval
                ratio, ci = winograd_onnx.network_speedup(model, rewritten, make)
                network = {"speedup": round(ratio, 4), "ci": [round(ci[0], 4), round(ci[1], 4)],
                           "layers": sum(c.chosen for c in choices), "kept": ci[0] > 1.0}
                if not network["kept"]:
                    rewritten = model
                    choices = [replace(c, chosen=False) for c in choices]
            onnx.save(rewritten, str(part))
            part_json.write_text(json_text({
                "threads": threads, "min_speedup": winograd_onnx.MIN_SPEEDUP,
                "layers": [c.to_dict() for c in choices], "network": network}, indent=1))
            os.replace(part_json, dst.with_suffix(".json"))
            os.replace(part, dst)
        finally:
            for f in (part, part_json, basic):
                f.unlink(missing_ok=True)
    return dst


class OnnxRuntime(Runtime):
    name = "onnxruntime"
    uses_openmp = False
    precisions = ("fp32", "int8")
    frameworks = ("torch", "tensorflow")

    def uses_inter_threads(self, config: RunConfig) -> bool:
        return config.option("execution_mode") == "parallel"

    def normalize(self, config: RunConfig) -> RunConfig:
        config = super().normalize(config)
        # direct is what no option means; the int8 model is quantized from the direct export:
        # Winograd is an fp32 rewrite
        return config if "conv" not in config.runtime_options or winograd(config) else without_option(config, "conv")

    def available(self) -> str | None:
        return missing("onnxruntime") or missing("onnx")

    def artifact_file(self, config: RunConfig, workdir: Path) -> Path:
        return model_path(config, workdir)

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[tuple[torch.Tensor, ...]] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        import onnxruntime as ort

        path = model_path(config, workdir)
        if not path.exists():
            if winograd(config):
                direct = config.artifact_path(workdir, "model.onnx")
                if not direct.exists():
                    onnx_file(wl, config, direct)
                winograd_model(direct, path, config.intra_threads)
            elif config.precision == "int8":
                from dataclasses import replace

                from rooftune.runtimes.quantize import check_kept_modules, ort_int8

                if config.keep and not is_tensorflow(wl):
                    check_kept_modules(wl.module, config.keep)
                # the fp32 export every int8 configuration quantizes, mixed or not
                exported = replace(config, precision="fp32", keep=())
                fp32 = exported.artifact_path(workdir, "model.onnx")
                if not fp32.exists():
                    onnx_file(wl, exported, fp32)
                import os

                part = path.with_name(f".{os.getpid()}.{path.name}")
                try:
                    os.replace(ort_int8(fp32, part, calibration or [wl.inputs], keep=config.keep,
                                        defaults=config.vendor_defaults), path)
                finally:
                    part.unlink(missing_ok=True)
            else:
                onnx_file(wl, config, path)
        so = ort.SessionOptions()
        if not config.vendor_defaults:  # the onnxruntime-default baseline keeps ORT's own choices
            so.intra_op_num_threads = config.intra_threads
            so.inter_op_num_threads = config.inter_threads
            mode = config.option("execution_mode")
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if mode == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
            level = config.option("graph_optimization")
            so.graph_optimization_level = {
                "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            }[level]
            so.add_session_config_entry("session.intra_op.allow_spinning", "1" if config.option("spinning") else "0")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]

        def feeds_of(xs: Sequence[torch.Tensor]) -> dict[str, Any]:
            return {n: x.float().numpy() if x.is_floating_point() else x.numpy() for n, x in zip(names, xs, strict=False)}

        feeds = feeds_of(torch_inputs(wl, config))

        def run() -> Any:
            return sess.run(None, feeds)

        return Prepared(run, output_tensors, artifact=path,
                        call=lambda xs: sess.run(None, feeds_of(xs)))
