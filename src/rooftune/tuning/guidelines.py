"""Instant configurations: the guideline (after Wang et al., TACO 2020) and the baselines a user
would otherwise run, each built from this machine's fingerprint."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rooftune.runconfig import LAUNCHER_JEMALLOC_CONF, RunConfig, allocator_library, intel_openmp_library
from rooftune.tuning.result import QUANTIZING_PEERS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rooftune.costs import OpCost
    from rooftune.platform import Platform
    from rooftune.workload import OpGraph, OpNode, TensorMeta

#: Ops that carry a model's work; Wang et al. size inter-op pools from their count over the depth.
HEAVY_KINDS = ("conv", "linear", "matmul", "attention", "rnn")


def physical_usable(platform: Platform) -> int:
    """Usable cores without SMT siblings (at least 1)."""
    smt = max(1, platform.logical_cores // max(platform.physical_cores, 1))
    return max(1, platform.usable_cores // smt)


def average_width(graph: OpGraph) -> float:
    """Average operator-level parallelism: heavy ops divided by the depth of the graph (in heavy
    ops) - Wang et al.'s estimate of how many inter-op pools the graph can keep busy."""
    from rooftune.costs import cost_of

    heavy = {op.index for op in graph.ops if cost_of(op).kind in HEAVY_KINDS}
    level: dict[int, int] = {}
    for op in graph.ops:
        base = max((level.get(p, 0) for p in op.producers), default=0)
        level[op.index] = base + (1 if op.index in heavy else 0)
    depth = max(level.values(), default=0)
    return len(heavy) / depth if depth else 1.0


def conv_share(graph: OpGraph, takes: Callable[[OpNode, TensorMeta], bool],
               costs: Sequence[OpCost] | None = None) -> float:
    """The share of the graph's heavy-op FLOPs in convolutions whose op and weight ``takes``
    accepts; ``costs``, the ops' costs when the caller has them (``costs_of(graph)``)."""
    from rooftune.costs import costs_of

    total = share = 0.0
    for op, c in zip(graph.ops, costs if costs is not None else costs_of(graph), strict=True):
        if c.kind not in HEAVY_KINDS or not c.flops:
            continue
        total += c.flops
        w = op.tensor("weight") if c.kind == "conv" else None
        if w is not None and takes(op, w):
            share += c.flops
    return share / total if total else 0.0


def product_share(costs: Sequence[OpCost]) -> float:
    """The share of the heavy-op FLOPs in matrix products: linear layers, matmuls, attention."""
    heavy = [c for c in costs if c.kind in HEAVY_KINDS and c.flops]
    total = sum(c.flops or 0.0 for c in heavy)
    return sum(c.flops or 0.0 for c in heavy if c.kind in ("linear", "matmul", "attention")) / total if total else 0.0


def conv3d_share(graph: OpGraph, costs: Sequence[OpCost] | None = None) -> float:
    """The share of the graph's heavy-op FLOPs in 3-D convolutions (a 5-D weight)."""
    return conv_share(graph, lambda op, w: len(w.shape) == 5, costs)


def winograd_share(graph: OpGraph, costs: Sequence[OpCost] | None = None) -> float:
    """The share of the graph's heavy-op FLOPs in convolutions Winograd F(4x4,3x3) computes: 2-D,
    3x3, stride 1, dilation 1, one group."""

    def pair(v: Any) -> tuple[int, ...]:
        return tuple(v) if isinstance(v, (list, tuple)) else (v, v)

    def takes(op: OpNode, w: TensorMeta) -> bool:
        return (len(w.shape) == 4 and tuple(w.shape[2:]) == (3, 3) and not op.args.get("transposed", False)
                and op.args.get("groups", 1) == 1 and pair(op.args.get("stride", 1)) == (1, 1)
                and pair(op.args.get("dilation", 1)) == (1, 1))

    return conv_share(graph, takes, costs)


#: The guideline asks for Winograd (ONNX Runtime, fp32) when at least this share of the FLOPs is
#: in eligible 3x3 convolutions: each layer is then measured both ways before the model runs
#: (about a second per distinct layer shape), and only those faster by Winograd are rewritten.
#: The threshold is a cost gate (below it the per-layer measurements cost more than they can
#: win), not a measured optimum; ``benchmarks/tune_suite.py`` checks the rewrite (BENCHMARKS.md).
WINOGRAD_MIN_SHARE = 0.25
#: The share of the FLOPs in such convolutions from which the guideline runs ncnn (see guideline).
#: A heuristic fitted on a few machines: only networks nearly all 3x3 stride-1 convolutions
#: (vgg16-like) kept ncnn's lead on every one; ``benchmarks/tune_suite.py`` and
#: docs/benchmarks/history.md gives the check.
NCNN_MIN_SHARE = 0.95

#: Batch the throughput guideline runs when the user fixes none: large enough to fill the GEMMs'
#: blocking on CNNs at 224x224, small enough to stay within the last-level cache's reach per layer.
THROUGHPUT_BATCH = 8
#: How a TensorFlow model's graph is captured (rooftune.workload.tf_graph): its guideline is
#: TensorFlow's pools (see _tf_guideline).
TF_CAPTURE = "tensorflow step stats"
#: Fewest intra-op threads an inter-op pool is given (else one pool takes every core).
MIN_INTRA = 4
#: Cores per instance for throughput (Intel's multi-instance guidance: 4 cores per instance).
CORES_PER_INSTANCE = 4


def guideline(platform: Platform, graph: OpGraph, available: dict[str, Any], *, objective: str = "latency",
              batch: int | None = None) -> tuple[RunConfig, list[str]]:
    """The guideline configuration and the reasons for each choice."""
    cores = physical_usable(platform)
    width = average_width(graph)
    instances = 1
    if objective == "throughput":
        instances = max(1, cores // CORES_PER_INSTANCE) if cores > CORES_PER_INSTANCE else cores
        cores = max(1, cores // instances)
    # Wang et al.'s inter-op pools, only where each pool keeps MIN_INTRA threads: pools of one or
    # two threads each leave every operator too few cores and run the network slower than one pool.
    pools = max(1, min(cores // MIN_INTRA, round(width))) if graph.capture in (
        "torch.export", TF_CAPTURE) else 1
    intra = max(1, cores // pools)
    if graph.capture == TF_CAPTURE:
        return _tf_guideline(platform, available, objective, batch, width=width, pools=pools, intra=intra,
                             cores=cores, instances=instances)
    from rooftune.costs import costs_of

    costs = costs_of(graph)
    convolutional = any(c.kind == "conv" for c in costs)
    why = [f"{physical_usable(platform)} usable physical cores (SMT siblings left idle)"]
    if objective == "throughput":
        why.append(f"throughput: {instances} instance(s) of {cores} core(s), batch {batch or THROUGHPUT_BATCH}")
    why.append(f"average width {width:.2f} heavy ops per level -> {pools} inter-op pool(s) x {intra} intra-op threads")
    # The runtime follows from where the FLOPs are (each rule is a heuristic fitted on a few
    # machines; benchmarks/tune_suite.py checks the guideline against the baselines, BENCHMARKS.md):
    # - graph runtimes fold batch norm and fuse elementwise ops, a large share of a model's time at
    #   batch 1: ONNX Runtime first, OpenVINO next;
    # - 3-D convolutions: ONNX Runtime's CPU provider has blocked (NCHWc) kernels for 2-D
    #   convolutions only and runs 3-D ones as im2col + GEMM, OpenVINO has direct 3-D kernels;
    # - matrix products (transformers, convnext's MLPs): OpenVINO reading the ONNX export;
    # - 3x3 stride-1 convolutions carrying nearly all the FLOPs: ncnn's Winograd kernels
    #   (F(6x6,3x3) and smaller). ncnn splits each layer evenly between its threads and waits for
    #   the slowest, so its lead shrinks where the host slows one core
    #   (docs/benchmarks/history.md); below NCNN_MIN_SHARE the guideline keeps the graph runtime
    #   and measures ncnn as a seed beside it (runtime_seeds), above it the other way round. ncnn
    #   runs batch 1 only.
    share3d = conv3d_share(graph, costs)
    products = product_share(costs)
    wino = winograd_share(graph, costs)
    ov = available.get("openvino")
    nc = available.get("ncnn")
    hint = "LATENCY" if objective == "latency" else "THROUGHPUT"
    batch = batch or (THROUGHPUT_BATCH if objective == "throughput" else 1)
    if share3d > 0.5 and "openvino" in available:
        runtime, options = "openvino", {"hint": hint, "streams": 1}
        why.append(f"OpenVINO: 3-D convolutions carry {share3d:.0%} of the FLOPs (direct 3-D kernels; "
                   "ONNX Runtime runs them as im2col + GEMM)")
    elif products > 0.5 and ov is not None and ov.unsupported(
            RunConfig(runtime="openvino", runtime_options={"source": "onnx"})) is None:
        runtime, options = "openvino", {"hint": hint, "streams": 1, "source": "onnx"}
        why.append(f"OpenVINO reading the ONNX export: matrix products carry {products:.0%} of the FLOPs "
                   "(more than half: OpenVINO's kernels for them; ONNX Runtime's default is measured among the baselines)")
    elif wino >= NCNN_MIN_SHARE and nc is not None and nc.unsupported(RunConfig(runtime="ncnn", batch=batch)) is None:
        runtime, options = "ncnn", {"conv": "winograd"}
        pools, intra = 1, cores  # one network, its threads over every core: ncnn has no inter-op pools
        why.append(f"ncnn with its Winograd kernels: {wino:.0%} of the FLOPs are in 3x3 stride-1 convolutions "
                   f"(at least {NCNN_MIN_SHARE:.0%}; the graph runtime's guideline is measured beside it)")
    elif "onnxruntime" in available:
        runtime, options = "onnxruntime", {"execution_mode": "parallel" if pools > 1 else "sequential",
                                           "graph_optimization": "all", "spinning": True}
        why.append("ONNX Runtime with all graph optimizations (folds batch norm, fuses activations)")
        if wino >= WINOGRAD_MIN_SHARE:
            options["conv"] = "winograd"
            why.append(f"Winograd F(4x4,3x3) on each 3x3 convolution it measures faster on ({wino:.0%} of the "
                       "FLOPs are in eligible ones)")
    elif "openvino" in available:
        runtime, options = "openvino", {"hint": hint, "streams": 1}
        why.append("OpenVINO (folds and fuses, NHWC kernels)")
    else:
        runtime, options = "torchscript", {}
        why.append("TorchScript frozen (folds batch norm)")
    layout = "contiguous"
    omp: dict[str, str] = {}
    if runtime in ("eager", "torchscript", "compile"):
        # OpenMP pool: threads bound one per core; NHWC for convolutions (oneDNN's native layout).
        omp = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
        layout = "channels_last" if convolutional else "contiguous"
        why.append("OpenMP threads bound one per core" + (", channels_last for the convolutions" if convolutional else ""))
    # Allocator: glibc. Graph runtimes plan their buffers in their own arenas, and a preloaded
    # allocator can as well slow a runtime as speed it: it is a measured choice, not a rule, so
    # the search tries jemalloc and tcmalloc.
    allocator = "glibc"
    cfg = RunConfig(runtime=runtime, intra_threads=intra, inter_threads=pools, memory_format=layout,
                    allocator=allocator, omp=omp, runtime_options=options, name="guideline",
                    batch=batch, instances=instances)
    return cfg, why


def _tf_guideline(platform: Platform, available: dict[str, Any], objective: str, batch: int | None, *,
                  width: float, pools: int, intra: int, cores: int, instances: int) -> tuple[RunConfig, list[str]]:
    """A TensorFlow model's guideline: Wang et al.'s pools for TensorFlow's two thread pools, run by
    OpenVINO converting the TensorFlow graph itself where it is installed (it folds batch norm and
    fuses the activations TensorFlow's executor runs one by one; TF Run 3 in BENCHMARKS.md measures
    it against the searched best on five Keras applications), else by TensorFlow. Where OpenVINO
    runs it, TensorFlow with the same pools is measured beside it (:func:`framework_seeds`)."""
    why = [f"{physical_usable(platform)} usable physical cores (SMT siblings left idle)"]
    batch = batch or (THROUGHPUT_BATCH if objective == "throughput" else 1)
    if objective == "throughput":
        why.append(f"throughput: {instances} instance(s) of {cores} core(s), batch {batch}")
    why.append(f"average width {width:.2f} heavy ops per level -> {pools} inter-op thread(s) x {intra} "
               "intra-op threads (TensorFlow's two pools)")
    tf = RunConfig(runtime="tensorflow", intra_threads=intra, inter_threads=pools, name="guideline", batch=batch,
                   instances=instances)
    ov = available.get("openvino")
    cfg = replace(tf, runtime="openvino", inter_threads=1,
                  runtime_options={"hint": "LATENCY" if objective == "latency" else "THROUGHPUT", "streams": 1})
    if ov is None or ov.unsupported(cfg) is not None:
        return tf, why
    why.append(f"OpenVINO converting the TensorFlow graph itself, {intra} thread(s) in one stream (folds batch "
               "norm, fuses activations); TensorFlow with these pools is measured beside it")
    return cfg, why


def framework_seeds(platform: Platform, graph: OpGraph, guide: RunConfig, *, objective: str = "latency",
                    batch: int | None = None) -> list[RunConfig]:
    """TensorFlow with the guideline's pools, where a TensorFlow model's guideline runs on another
    runtime: Wang et al.'s guideline as the paper measured it, on the model's own framework."""
    if graph.capture != TF_CAPTURE or guide.runtime == "tensorflow":
        return []
    tf, _ = guideline(platform, graph, {}, objective=objective, batch=batch)
    return [replace(tf, name="guideline (tensorflow)")]


def train_guideline(platform: Platform, graph: OpGraph, batch: int) -> tuple[RunConfig, list[str]]:
    """The guideline of a training step: PyTorch eager (the graph runtimes do not train), one
    process with a thread per physical core (a step's ops depend on each other through the
    backward pass, so inter-op pools would idle), threads bound one per core, channels_last for a
    convolutional network (oneDNN's native layout, in the backward convolutions too), and the
    fused optimizer (one kernel per parameter group reads each parameter, gradient and state once)."""
    from rooftune.costs import costs_of

    cores = physical_usable(platform)
    convolutional = any(c.kind == "conv" for c in costs_of(graph))
    why = [f"{cores} usable physical cores (SMT siblings left idle), one process, one inter-op pool: a training "
           "step's backward ops wait on each other",
           "OpenMP threads bound one per core" + (", channels_last for the convolutions" if convolutional else ""),
           "the fused optimizer: the update reads each parameter, gradient and state buffer once"]
    cfg = RunConfig(runtime="eager", intra_threads=cores, inter_threads=1,
                    memory_format="channels_last" if convolutional else "contiguous",
                    omp={"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}, runtime_options={"optimizer": "fused"},
                    name="guideline", batch=batch)
    return cfg, why


def runtime_seeds(platform: Platform, graph: OpGraph, available: dict[str, Any], guide: RunConfig, *,
                  objective: str = "latency", batch: int | None = None) -> list[RunConfig]:
    """The guideline's other runtime, evaluated before the search: where the guideline is ncnn,
    the configuration the guideline would be without it (a model ncnn's converter cannot take
    still has the graph runtime's answer measured at once); elsewhere, for a convolutional model
    at batch 1, the guideline's cores on ncnn with its Winograd kernels, a choice a short search
    could otherwise miss."""
    from rooftune.costs import costs_of

    nc = available.get("ncnn")
    if nc is None:
        return []
    if guide.runtime == "ncnn":
        other, _ = guideline(platform, graph, {k: v for k, v in available.items() if k != "ncnn"},
                             objective=objective, batch=batch)
        return [replace(other, name=f"guideline ({other.runtime})")]
    cores = max(1, physical_usable(platform) // max(1, guide.instances))
    cfg = nc.normalize(replace(guide, runtime="ncnn", intra_threads=cores, inter_threads=1, omp={},
                               memory_format="contiguous", runtime_options={"conv": "winograd"},
                               name="guideline (ncnn)"))
    convolutional = any(c.kind == "conv" for c in costs_of(graph))
    return [cfg] if convolutional and nc.unsupported(cfg) is None else []


#: Runtimes whose own quantizer the reduced-precision seeds use, in the guideline's order of
#: preference (a heuristic from the tuning suite's int8 runs in BENCHMARKS.md, where both ran
#: faster than PyTorch's PT2E paths); either quantizer can fail the output guard on a model where
#: the other passes, so both are tried.
SEED_RUNTIMES = ("onnxruntime", "openvino")


def precision_seeds(guide: RunConfig, available: dict[str, Any], precisions: Any) -> list[RunConfig]:
    """The guideline's threads and layout in every reduced precision the study allows, on each
    graph runtime that runs it: evaluated before the search, so a short budget measures int8
    (or bf16) at least once per runtime instead of leaving it to the sampler's luck."""
    seeds = []
    for precision in precisions:
        if precision == "fp32":
            continue
        for name in SEED_RUNTIMES:
            rt = available.get(name)
            if rt is None:
                continue
            options = dict(guide.runtime_options) if name == guide.runtime else {}
            cfg = replace(guide, runtime=name, precision=precision, runtime_options=options,
                          name=f"guideline {precision}" + ("" if name == guide.runtime else f" ({name})"))
            if rt.unsupported(cfg) is None:
                seeds.append(rt.normalize(cfg))
    return seeds


def train_precision_seeds(guide: RunConfig, precisions: Any) -> list[RunConfig]:
    """A training study's reduced-precision seeds: the guideline (PyTorch eager) in each reduced
    precision allowed, as autocast (the graph runtimes' quantizers do not train)."""
    return [replace(guide, precision=p, name=f"guideline {p}") for p in precisions if p != "fp32"]


def source_seeds(guide: RunConfig, available: dict[str, Any], objective: str = "latency") -> list[RunConfig]:
    """The guideline's threads on OpenVINO reading the ONNX export (fp32), evaluated before the
    search: the OpenVINO baseline converts the PyTorch module, and OpenVINO's CPU plugin can run
    the same network read from its ONNX file faster (see the OpenVINO runtime), a choice a short
    search could otherwise miss. Where the guideline asks for Winograd, so does the seed (OpenVINO
    measures which layers take it; a model none of whose layers takes it runs its direct graph).
    No seed where OpenVINO cannot read ONNX here (the onnx package missing)."""
    ov = available.get("openvino")
    if ov is None or (guide.runtime == "openvino" and guide.runtime_options.get("source") == "onnx"):
        return []  # no OpenVINO, or the guideline is this configuration already
    options = dict(guide.runtime_options) if guide.runtime == "openvino" else {
        "hint": "LATENCY" if objective == "latency" else "THROUGHPUT", "streams": 1}
    if guide.runtime_options.get("conv") == "winograd":
        options["conv"] = "winograd"
    cfg = replace(guide, runtime="openvino", inter_threads=1, omp={}, memory_format="contiguous",
                  runtime_options={**options, "source": "onnx"}, name="guideline (openvino from onnx)")
    return [ov.normalize(cfg)] if ov.unsupported(cfg) is None else []


def tf_baselines(platform: Platform) -> list[RunConfig]:
    """A TensorFlow model's peers as their users run it:

    - ``tensorflow-vanilla``: TensorFlow's defaults (no thread setting: each pool one thread per
      logical core, oneDNN on, as installed);
    - ``tensorflow-recommended``: TensorFlow's performance guide ("Optimizing for CPU",
      tensorflow.org's Performance Guide): intra_op_parallelism_threads = physical cores,
      inter_op_parallelism_threads = sockets;
    - ``intel-recommended-tf``: Intel's "Maximize TensorFlow Performance on CPU: Considerations and
      Recommendations for Inference Workloads": intra = cores per socket, inter = sockets,
      OMP_NUM_THREADS = cores per socket, KMP_BLOCKTIME = 1, KMP_AFFINITY =
      granularity=fine,verbose,compact,1,0 (the KMP settings where Intel OpenMP is there to read
      them), the process bound to its cores (numactl in the article)."""
    cores = physical_usable(platform)
    sockets = 1  # one NUMA node's worth of cores is what a single process is pinned to
    built_with_iomp = (platform.openmp or {}).get("library", "").startswith(("libiomp", "libomp"))
    iomp = "default" if built_with_iomp or not intel_openmp_library() else "intel"
    intel_omp = built_with_iomp or iomp == "intel"
    kmp = {"KMP_AFFINITY": "granularity=fine,verbose,compact,1,0", "KMP_BLOCKTIME": "1"} if intel_omp else {}
    return [
        RunConfig(runtime="tensorflow", set_threads=False, name="tensorflow-vanilla"),
        RunConfig(runtime="tensorflow", intra_threads=cores, inter_threads=sockets, name="tensorflow-recommended"),
        RunConfig(runtime="tensorflow", intra_threads=cores, inter_threads=sockets, omp=kmp, openmp=iomp, pin=True,
                  name="intel-recommended-tf"),
    ]


def baselines(platform: Platform, available: dict[str, Any], framework: str = "torch") -> list[RunConfig]:
    """The peers as their users run them: vanilla, pytorch-launcher, intel-recommended,
    onnxruntime-default, openvino-default (as installed, in the precision it picks) and
    openvino-latency (pinned to f32); the last three only when installed. A TensorFlow model's:
    :func:`tf_baselines`, then the same three vendor defaults (ONNX Runtime on tf2onnx's
    conversion, OpenVINO converting the TensorFlow graph: rooftune.runtimes.sources)."""
    if framework == "tensorflow":
        return tf_baselines(platform) + vendor_baselines(available)
    cores = physical_usable(platform)
    sockets = 1  # one NUMA node's worth of cores is what a single process is pinned to
    # Intel OpenMP: the one torch was built with, or the intel-openmp package's, preloaded
    built_with_iomp = (platform.openmp or {}).get("library", "").startswith(("libiomp", "libomp"))
    iomp = "default" if built_with_iomp or not intel_openmp_library() else "intel"
    intel_omp = built_with_iomp or iomp == "intel"
    out = [RunConfig(runtime="eager", set_threads=False, name="vanilla")]
    # torch.backends.xeon.run_cpu (its docstring's table): OMP_NUM_THREADS = cores per instance,
    # Intel OpenMP preloaded where found (its default) with KMP_AFFINITY=granularity=fine,compact,1,0
    # and KMP_BLOCKTIME=1, tcmalloc preloaded when found (else jemalloc), the instance bound to its
    # physical cores (numactl -C, or taskset -c without numactl).
    launcher_alloc = "tcmalloc" if allocator_library("tcmalloc") else "jemalloc" if allocator_library("jemalloc") else "glibc"
    kmp = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"} if intel_omp else {}
    if launcher_alloc == "jemalloc":  # the launcher's own jemalloc settings come with it
        kmp["MALLOC_CONF"] = LAUNCHER_JEMALLOC_CONF
    out.append(RunConfig(runtime="eager", intra_threads=cores, inter_threads=1, allocator=launcher_alloc, omp=kmp,
                         openmp=iomp, pin=True, name="pytorch-launcher"))
    # Intel's guide ("Maximize TensorFlow/PyTorch performance on CPUs", Intel's published settings):
    # intra = physical cores, inter = sockets, OMP_NUM_THREADS = physical cores, Intel OpenMP with
    # KMP_BLOCKTIME 0 for CNNs and KMP_AFFINITY compact, the process bound to one node (numactl).
    kmp_intel = {"KMP_AFFINITY": "granularity=fine,verbose,compact,1,0", "KMP_BLOCKTIME": "0"} if intel_omp else {}
    out.append(RunConfig(runtime="eager", intra_threads=cores, inter_threads=sockets, omp=kmp_intel, openmp=iomp,
                         pin=True, name="intel-recommended"))
    return out + vendor_baselines(available)


def vendor_baselines(available: dict[str, Any]) -> list[RunConfig]:
    """ONNX Runtime's and OpenVINO's defaults, for whichever framework's model they run:
    onnxruntime-default, openvino-default (as installed, in the precision it picks) and
    openvino-latency (pinned to f32), each only when installed."""
    out = []
    if "onnxruntime" in available:
        out.append(RunConfig(runtime="onnxruntime", set_threads=False, vendor_defaults=True, name="onnxruntime-default"))
    if "openvino" in available:
        # OpenVINO as installed: no property set, so it computes in whatever precision it picks
        # (bf16 on a CPU with native bf16); and pinned to f32 with its latency hint, the fp32 peer
        out.append(RunConfig(runtime="openvino", set_threads=False, vendor_defaults=True, precision="default",
                             name="openvino-default"))
        out.append(RunConfig(runtime="openvino", set_threads=False, vendor_defaults=True,
                             runtime_options={"hint": "LATENCY"}, name="openvino-latency"))
    return out


def data_baselines(available: dict[str, Any]) -> list[RunConfig]:
    """The peers that quantize with the user's data, as their users run them (a study with
    ``--data`` and int8): ONNX Runtime's ``quantize_static`` with its defaults after its
    recommended pre-processing (onnxruntime-int8-default; its documentation's example), and NNCF's
    ``quantize_with_accuracy_control`` with the study's metric and budget on the same calibration
    and evaluation parts (nncf-accuracy-control; OpenVINO's documented path to an int8 model
    within an accuracy budget), each on its runtime as installed and only where it can run int8."""
    ort, nncf = QUANTIZING_PEERS
    out = []
    for name, cfg in (("onnxruntime", RunConfig(runtime="onnxruntime", precision="int8", set_threads=False,
                                                vendor_defaults=True, name=ort)),
                      ("openvino", RunConfig(runtime="openvino", precision="int8", set_threads=False,
                                             vendor_defaults=True, runtime_options={"quantizer": "accuracy-control"},
                                             name=nncf))):
        rt = available.get(name)
        if rt is not None and rt.unsupported(cfg) is None:
            out.append(cfg)
    return out
