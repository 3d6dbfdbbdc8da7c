"""Skip rules: a configuration that an earlier trial of the study shows will fail the same way is
not run. Each rule reads a failed trial and a configuration about to run; the study records the
skipped configuration as a failed trial whose error starts with NOT_RUN (not stored: nothing was
measured; not counted by ``--trials``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rooftune.runconfig import RunConfig
from rooftune.runtimes.quantize import NOTHING_QUANTIZED
from rooftune.tuning.result import TrialResult
from rooftune.tuning.trial import CRASHED_PREFIX

#: How a skipped configuration's error begins.
NOT_RUN = "not run: "
#: How a trial whose process a signal ended reads (a negative exit status).
CRASHED = f"{CRASHED_PREFIX}-"
#: glibc's malloc aborting on a pointer it did not allocate: what a preloaded allocator and a
#: library bound to glibc's own malloc do to each other.
HEAP_ABORTS = ("free(): ", "double free", "munmap_chunk", "malloc(): ", "realloc(): ", "corrupted ")
#: A segmentation fault or bus error that printed nothing.
SILENT_FAULTS = (f"{CRASHED}11):", f"{CRASHED}7):")
#: How OpenVINO's PyTorch frontend refuses a model it has no conversion rule for some op of.
CONVERSION_FAILED = "OpConversionFailure: "


def crashed_under_preload(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial``'s process was aborted by glibc's heap checks running ``config``'s runtime
    under the same preloaded allocator, or ended by SIGSEGV or SIGBUS there with nothing on its
    stderr (a process that logged a line before the fault is left to the other rules). Such a
    crash belongs to the pair, not to the other settings: a library that binds itself to glibc's
    own malloc (as oneTBB's hwloc did before ``TBB_ENABLE_SANITIZERS``, which
    :meth:`RunConfig.environment` sets) frees what the preloaded allocator allocated. Other crashes
    (a signal with a message of its own, the out-of-memory killer's SIGKILL) are the
    configuration's own."""
    error = trial.error or ""
    same_pair = (config.allocator != "glibc" and trial.config.allocator == config.allocator
                 and trial.config.runtime == config.runtime)
    if trial.ok or not same_pair or not error.startswith(CRASHED):
        return False
    return any(sig in error for sig in HEAP_ABORTS) or error.rstrip() in SILENT_FAULTS


def frontend_refused(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial`` found that OpenVINO's PyTorch frontend cannot convert the model that
    ``config`` would convert the same way. The ops it has no rule for are the model's, whatever the
    threads, hint, allocator or precision (int8 quantizes the converted model), so the study
    converts such a model from its framework once; from the ONNX export it may still run."""
    def own_frontend(c: RunConfig) -> bool:
        return c.runtime == "openvino" and c.option("source") == "framework"

    return (not trial.ok and own_frontend(trial.config) and own_frontend(config)
            and (trial.error or "").startswith(CONVERSION_FAILED))


#: How a TensorFlow model's conversion to ONNX fails on an op tf2onnx has no conversion for
#: (rooftune.runtimes.sources).
TF2ONNX_FAILED = f"{CONVERSION_FAILED}tf2onnx "


def tf2onnx_refused(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial`` found that tf2onnx cannot convert the model and ``config`` reads its
    conversion too (ONNX Runtime, ncnn, OpenVINO from ONNX): the op is the model's, whatever the
    runtime's settings."""
    def reads_onnx(c: RunConfig) -> bool:
        return c.runtime in ("onnxruntime", "ncnn") or (c.runtime == "openvino" and c.option("source") == "onnx")

    return not trial.ok and (trial.error or "").startswith(TF2ONNX_FAILED) and reads_onnx(config)


def nothing_quantized(trial: TrialResult, config: RunConfig) -> bool:
    """Whether ``trial`` found that ``config``'s runtime quantizes no op of the model (no static
    quantizer has GRUs): another int8 configuration of that runtime, from the same source graph,
    would fail the same way, whatever its threads or allocator."""
    # the same quantizer on the same graph with the same layers left out: a mixed set, or a peer's
    # quantizer (its defaults, NNCF's accuracy control), may quantize nothing where another does
    def int8_of(c: RunConfig) -> tuple[Any, ...] | None:
        return ((c.runtime, c.option("source"), c.keep, c.option("quantizer"), c.vendor_defaults)
                if c.precision == "int8" else None)

    return (not trial.ok and int8_of(trial.config) is not None and int8_of(trial.config) == int8_of(config)
            and NOTHING_QUANTIZED in (trial.error or ""))


def not_run(config: RunConfig, done: Iterable[TrialResult]) -> TrialResult | None:
    """The failed trial that stands for ``config`` where a rule above finds an earlier trial in
    ``done`` that shows it will fail (the first rule that finds one, and its first such trial, say
    why); None where ``config`` is to run."""
    done = list(done)
    for rule, what in ((crashed_under_preload, f"{config.runtime} under the preloaded {config.allocator} crashed"),
                       (frontend_refused, "OpenVINO's PyTorch frontend could not convert the model"),
                       (tf2onnx_refused, "tf2onnx could not convert the model"),
                       (nothing_quantized, f"{config.runtime}'s int8 quantizer quantized no op of the model")):
        refused = next((x for x in done if rule(x, config)), None)
        if refused is not None:
            return TrialResult(config, False, error=f"{NOT_RUN}{what} in {refused.config.name or 'an earlier trial'} "
                                                    f"({refused.error})")
    return None


def nothing_quantized_notes(trials: Iterable[TrialResult]) -> list[str]:
    """Each runtime's quantizer that left the model in fp32, once (from the trials that ran)."""
    return list(dict.fromkeys(f"int8 not on {t.config.runtime}: {t.error.split('int8: ', 1)[-1]}" for t in trials
                              if NOTHING_QUANTIZED in (t.error or "") and not t.error.startswith(NOT_RUN)))


def data_notes(best: Any, with_data: bool, train: bool) -> list[str]:
    """What a reader must know of how the best's precision was checked: on the user's data, its
    metric and drop with their intervals; without data, that a reduced precision was checked on
    random inputs only."""
    if train or best is None or not best.ok or best.precision == "fp32":
        return []
    acc = best.verify.get("accuracy")
    if with_data and acc:
        from rooftune.workload.metrics import describe

        return [f"the best ({best.precision}) on the evaluation part of your data: {describe(acc)}"]
    return [f"the best computes in {best.precision}, checked on random inputs only (its outputs against fp32's): "
            "give --data with samples of your own to check it on your data against an accuracy budget "
            "(--metric, --max-drop)"]
