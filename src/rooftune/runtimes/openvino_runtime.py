"""OpenVINO on the CPU plugin: the model converted with ``openvino.convert_model`` from the PyTorch
module (``source=framework``: the model as its framework hands it, what OpenVINO documents for
PyTorch users and the ``openvino-latency`` baseline; for a TensorFlow model, its frozen graph
through OpenVINO's TensorFlow frontend) or read
from the model's ONNX export (``source=onnx``: the same file ONNX Runtime runs; for a TensorFlow
model, tf2onnx's conversion). :mod:`rooftune.runtimes.sources` decides which, per framework.
The two graphs are not the same to OpenVINO's CPU plugin: some networks run faster from the ONNX
file, others the same (BENCHMARKS.md has the figures), so both are measured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.runtimes.base import Prepared, Runtime, without_option
from rooftune.runtimes.packages import missing
from rooftune.runtimes.sources import is_tensorflow, onnx_file, openvino_model
from rooftune.runtimes.telemetry import quiet_vendor_telemetry
from rooftune.runtimes.torch_runtimes import torch_inputs
from rooftune.workload.outputs import output_tensors

if TYPE_CHECKING:
    from rooftune.runconfig import RunConfig
    from rooftune.workload import Workload

# before anything here imports openvino or nncf: this module is imported with the runtimes'
# registry, in rooftune's processes and in every trial worker
quiet_vendor_telemetry()


class OpenVINO(Runtime):
    name = "openvino"
    uses_openmp = False
    precisions = ("fp32", "bf16", "int8", "default")
    frameworks = ("torch", "tensorflow")

    def available(self) -> str | None:
        return missing("openvino")

    def unsupported(self, config: RunConfig) -> str | None:
        if config.option("quantizer") == "accuracy-control" and (config.precision != "int8" or config.keep):
            return ("openvino with quantizer=accuracy-control is NNCF's int8 within the accuracy budget on your data "
                    "(precision int8 with --data; it chooses the layers it keeps itself)")
        if config.option("source") == "onnx" and missing("onnx"):
            return "openvino with source=onnx reads the ONNX export: " + str(missing("onnx"))
        if config.option("conv") == "winograd" and missing("onnxruntime"):
            # the rewrite folds batch norm into the convolutions with ONNX Runtime's basic optimizations
            return "openvino with conv=winograd rewrites the export with ONNX Runtime: " + str(missing("onnxruntime"))
        return super().unsupported(config)

    def normalize(self, config: RunConfig) -> RunConfig:
        config = super().normalize(config)
        # direct is what no option means; the rewrite is of the fp32 ONNX export, which only
        # source=onnx reads
        return config if "conv" not in config.runtime_options or _winograd(config) else without_option(config, "conv")

    def artifact_file(self, config: RunConfig, workdir: Path) -> Path:
        # bf16 runs the fp32 IR (see prepare)
        return _converted(config).artifact_path(workdir, _ir_name(config))

    def prepare(self, wl: Workload, config: RunConfig, workdir: Path,
                calibration: Sequence[Any] = (), evaluation: Mapping[str, Any] | None = None) -> Prepared:
        import openvino as ov

        path = self.artifact_file(config, workdir)
        source = _converted(config)
        core = ov.Core()
        if path.exists():
            model = core.read_model(str(path))
        else:
            if config.keep and not is_tensorflow(wl):
                from rooftune.runtimes.quantize import check_kept_modules

                check_kept_modules(wl.module, config.keep)
            onnx: Path | None = None  # the ONNX file the model is read from
            if config.option("source") == "onnx":
                from dataclasses import replace

                # ONNX Runtime's fp32 export of the same workload, made once and shared with it
                fp32 = replace(config, runtime="onnxruntime", precision="fp32", runtime_options={}, keep=())
                onnx = fp32.artifact_path(workdir, "model.onnx")
                if not onnx.exists():
                    onnx_file(wl, fp32, onnx)
                if _winograd(config):
                    import os
                    import shutil

                    from rooftune.runtimes.onnx_runtime import winograd_model
                    from rooftune.runtimes.winograd_onnx import ov_session_factory

                    threads = _stream_threads(config)
                    onnx = winograd_model(onnx, onnx.with_name(f"model-winograd-ov-t{threads}.onnx"),
                                          threads, ov_session_factory(threads))
                    # what was measured per layer, beside the IR (copied aside and renamed: the
                    # instances of a throughput configuration prepare at once)
                    part = path.with_name(f".{os.getpid()}.{path.stem}.json")
                    shutil.copy2(onnx.with_suffix(".json"), part)
                    os.replace(part, path.with_suffix(".json"))
                model = core.read_model(str(onnx))
            else:
                model = openvino_model(wl, source, fused_names=config.precision == "int8" and bool(config.keep))
            if config.precision == "int8" and config.option("quantizer") == "accuracy-control":
                from rooftune.runtimes.quantize import nncf_accuracy_control

                if not evaluation:
                    from rooftune.errors import InvalidArgument

                    raise InvalidArgument("quantizer", "accuracy-control", "allowed with the data's evaluation part to "
                                          "validate on (a study with --data), or with the IR it made beside best.json")
                model = nncf_accuracy_control(model, calibration or [wl.inputs], evaluation)
            elif config.precision == "int8":
                from rooftune.runtimes.quantize import nncf_int8

                model = nncf_int8(model, calibration or [wl.inputs], keep=config.keep, onnx=onnx)
            _save_whole(ov, model, path)
        # OpenVINO computes in bf16 on its own where the ISA has it: fp32 means fp32 (the pinned
        # peer, openvino-latency), "default" means what OpenVINO does as installed (openvino-default:
        # no property set at all), and the precision it chose is read back for the output check.
        props: dict[str, Any] = {}
        # an int8 model at its vendor's defaults (NNCF's accuracy control) runs as its users compile
        # it: no property, so the layers it reverted compute in OpenVINO's own precision, as they
        # did when NNCF validated them
        if config.precision != "default" and not (config.precision == "int8" and config.vendor_defaults):
            props["PERFORMANCE_HINT"] = config.option("hint")
            # int8 models keep fp32 between their quantized ops
            props["INFERENCE_PRECISION_HINT"] = "bf16" if config.precision == "bf16" else "f32"
        elif "hint" in config.runtime_options:  # as installed but for the hint its users give (benchmark_app's)
            props["PERFORMANCE_HINT"] = config.option("hint")
        if not config.vendor_defaults:
            props["INFERENCE_NUM_THREADS"] = config.intra_threads
            props["NUM_STREAMS"] = int(config.option("streams"))
            props["ENABLE_CPU_PINNING"] = bool(config.option("pinning"))
        compiled = core.compile_model(model, "CPU", props)
        request = compiled.create_infer_request()
        def feeds_of(xs: Sequence[Any]) -> list[Any]:
            return [x.float().numpy() if x.is_floating_point() else x.numpy() for x in xs]

        feeds = feeds_of(torch_inputs(wl, source))

        def run() -> Any:
            return request.infer(feeds)

        ports = list(compiled.outputs)

        def to_torch(out: Any) -> tuple[Any, ...]:  # every output, in the model's order
            return output_tensors([out[port] for port in ports])

        chosen = None
        if config.precision == "default":
            hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type: bf16, f32, f16
            chosen = _PRECISION_NAMES.get(getattr(hint, "get_type_name", lambda: str(hint))(), "fp32")
        def fork() -> Any:  # one infer request per concurrent call
            own = compiled.create_infer_request()
            return lambda: own.infer(feeds)

        return Prepared(run, to_torch, artifact=path, call=lambda xs: request.infer(feeds_of(xs)), precision=chosen,
                        fork=fork, slots=int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))


#: OpenVINO's element type names (``INFERENCE_PRECISION_HINT``) as rooftune names precisions.
_PRECISION_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def _save_whole(ov: Any, model: Any, path: Path) -> None:
    """``ov.save_model`` written aside and renamed into place, weights first: a process starting
    beside this one finds the model whole or not at all. The weights stay as converted:
    save_model's default would store them in fp16, and the trials reading the file would then run
    other weights than the one that converted it."""
    import os

    part = path.with_name(f".{os.getpid()}.{path.name}")
    try:
        ov.save_model(model, str(part), compress_to_fp16=False)
        os.replace(part.with_suffix(".bin"), path.with_suffix(".bin"))
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
        part.with_suffix(".bin").unlink(missing_ok=True)


def _converted(config: RunConfig) -> RunConfig:
    """The configuration whose model is converted: bf16 is the plugin's inference precision over
    the fp32 model, as OpenVINO documents it. A model converted from bf16 weights takes bf16
    inputs, which numpy cannot hand it: fed float32 arrays, mobilenet_v2 answered at cosine 0.85
    against eager fp32, under either precision hint."""
    from dataclasses import replace

    return replace(config, precision="fp32") if config.precision in ("bf16", "default") else config


def _winograd(config: RunConfig) -> bool:
    return (config.precision == "fp32" and config.option("source") == "onnx"
            and config.option("conv") == "winograd")


def _stream_threads(config: RunConfig) -> int:
    """The threads one inference runs on: the configuration's divided among its streams."""
    return max(1, config.intra_threads // max(1, int(config.option("streams"))))


def _ir_name(config: RunConfig) -> str:
    """The IR file of a configuration: one per source, as the two graphs differ, and one per
    thread count a Winograd rewrite's layers were measured at (one stream's threads: a request
    runs on one stream)."""
    if _winograd(config):
        return f"model-onnx-winograd-t{_stream_threads(config)}.xml"
    return "model-onnx.xml" if config.option("source") == "onnx" else "model.xml"
