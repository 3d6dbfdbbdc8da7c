"""The refusals of :func:`rooftune.tuning.tune`'s arguments, and the precisions a study searches:
every check runs before anything is measured, and says what is allowed."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rooftune.bench import Policy
from rooftune.errors import InvalidArgument, as_names, is_int, is_real

if TYPE_CHECKING:
    from rooftune.platform import Platform

OBJECTIVES = ("latency", "throughput")
#: The runtimes a training study runs: PyTorch's own (the graph runtimes run inference only, and
#: TorchScript's freezing makes the weights constants).
TRAIN_RUNTIMES = ("eager", "compile")


def native_bf16(platform: Platform) -> bool:
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX-BF16, as the ISA in effect says)."""
    return bool(set(platform.effective_isa) & {"avx512_bf16", "amx_bf16"})


#: Runtimes whose as-installed default computes in bf16 on a CPU with native bf16: OpenVINO's CPU
#: plugin sets INFERENCE_PRECISION_HINT to bf16 there (its documentation, "Inference Precision").
PICK_BF16_BY_DEFAULT = ("openvino",)


def default_precisions(platform: Platform, available: dict[str, Any]) -> tuple[str, ...]:
    """What a study searches when the caller names no precision: fp32, and bf16 where the CPU has
    it natively and a peer installed here computes in it by default, so that the answer is never
    slower than what the user would have got from that peer as shipped. int8 is never a default:
    it needs a calibration set."""
    if native_bf16(platform) and any(n in available for n in PICK_BF16_BY_DEFAULT):
        return ("fp32", "bf16")
    return ("fp32",)


#: ISA extensions that run int8 dot products natively (VNNI's u8 x s8, AMX's tiles): where none is
#: in effect, int8 kernels emulate them and rarely beat bf16 or fp32.
INT8_ISA = ("avx512_vnni", "avx_vnni", "amx_int8")


def native_int8(platform: Platform) -> bool:
    """Whether the CPU runs int8 dot products natively (AVX512-VNNI, AVX-VNNI or AMX-INT8)."""
    return bool(set(platform.effective_isa) & set(INT8_ISA))


def data_precisions(platform: Platform, available: dict[str, Any]) -> tuple[str, ...]:
    """What a study with the user's data searches when the caller names no precision: fp32, and bf16
    and int8 where the CPU runs each natively, every reduced-precision configuration accepted only
    within the accuracy budget measured on that data."""
    from rooftune.runtimes.quantize import int8_missing

    out = ["fp32"]
    if native_bf16(platform):
        out.append("bf16")
    if native_int8(platform) and any(int8_missing(n) is None for n in available):
        out.append("int8")
    return tuple(out)


def precisions_for(*, fp32: bool = False, bf16: bool = False, int8: bool = False,
                   runtimes: Sequence[str] | None = None) -> tuple[str, ...] | None:
    """The ``precisions`` a study searches from the command line's switches: ``fp32`` alone keeps
    to fp32 (refused beside ``bf16`` or ``int8``); ``bf16`` and ``int8`` add to the default
    (:func:`default_precisions`); None where no switch is set (the default)."""
    if fp32 and (bf16 or int8):
        raise InvalidArgument("--fp32", "with " + " and ".join(f for f, on in (("--bf16", bf16), ("--int8", int8)) if on),
                              "allowed alone: it keeps the search to fp32, which --bf16 and --int8 widen")
    if fp32:
        return ("fp32",)
    if not (bf16 or int8):
        return None
    from rooftune.platform import current_platform
    from rooftune.runtimes import chosen_runtimes

    base = default_precisions(current_platform(), chosen_runtimes(runtimes)[0])
    return tuple(dict.fromkeys((*base, *(("bf16",) if bf16 else ()), *(("int8",) if int8 else ()))))


def check_precisions(precisions: Sequence[str], calibration_size: int | None, platform: Platform) -> int:
    """Refuse an unknown precision, bf16 on a CPU without native bf16, and an impossible
    calibration size; returns the calibration size to use."""
    from rooftune.runtimes.quantize import check_calibration_size

    for p in precisions:
        if p not in ("fp32", "bf16", "int8"):
            raise InvalidArgument("precision", p, "allowed fp32, bf16, int8")
    if "bf16" in precisions and not native_bf16(platform):
        raise InvalidArgument("precision", "bf16", "this CPU has no native bf16 (avx512_bf16 or amx_bf16)")
    if calibration_size is not None and "int8" not in precisions:
        raise InvalidArgument("--calibration", calibration_size, "allowed only with --int8 (the int8 calibration set)")
    return check_calibration_size(calibration_size)


def validation_spec(validate: str | Callable[..., Any] | None) -> str | None:
    """``module:function`` for the trial processes, from a string or an importable function."""
    if validate is None:
        return None
    if callable(validate):
        mod, name = getattr(validate, "__module__", ""), getattr(validate, "__qualname__", "")
        if not mod or mod == "__main__" or "<" in name:
            raise InvalidArgument("validate", repr(validate), "allowed a function importable by name (module:function)")
        return f"{mod}:{name}"
    mod, sep, name = str(validate).partition(":")
    if not sep or not mod or not name:
        raise InvalidArgument("--validate", validate, "allowed module:function")
    from rooftune.platform.processes import import_user_module

    # the current directory is importable, as for a module:callable model (and in the trials)
    try:
        module = import_user_module(mod)
    except Exception as exc:  # an import runs the user's code: any failure is theirs
        why = f"No module named {exc.name!r}" if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
        raise InvalidArgument("--validate", validate, f"cannot import {mod!r} ({why.splitlines()[0][:200]})") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise InvalidArgument("--validate", validate, f"module {mod!r} has no function {name!r}")
    if not callable(fn):
        raise InvalidArgument("--validate", validate, "not a function")
    return str(validate)


def check_train_arguments(*, runtimes: Sequence[str] | None, precisions: Sequence[str] | None,
                          validate: Any, calibration_size: int | None) -> None:
    """Refuse, for a training study, what only means something for inference: a runtime that does
    not train, int8 (post-training quantization) and its calibration set, a validation of outputs
    (the model itself: :func:`check_train_model`)."""
    for name in as_names(runtimes, "runtimes") or ():
        if name not in TRAIN_RUNTIMES:
            raise InvalidArgument("runtime", name, f"{' or '.join(TRAIN_RUNTIMES)} with --train (a training step runs in "
                                  "PyTorch; the other runtimes run inference only)")
    if precisions is not None and "int8" in (as_names(precisions, "precisions") or ()):
        raise InvalidArgument("precision", "int8", "fp32 or bf16 with --train (int8 is post-training quantization, "
                              "for inference)")
    if calibration_size is not None:
        raise InvalidArgument("--calibration", calibration_size, "allowed only without --train (the int8 calibration set)")
    if validate is not None:
        raise InvalidArgument("--validate", validate if isinstance(validate, str) else repr(validate),
                              "allowed only without --train (a training configuration is checked by its parameters "
                              "and losses against vanilla training)")


def check_train_model(model: object) -> None:
    """Refuse an ``nn.Module`` object for a training study: its processes build the model they
    train themselves, from a name."""
    if not isinstance(model, str):
        raise InvalidArgument("model", "an nn.Module", "a model name or module:callable with --train (every trial's "
                              "process builds the model it trains)")


def check_arguments(*, objective: str, budget_s: float, compare_pairs: int, trials: int | None,
                    guidelines_only: bool, precisions: Sequence[str] | None, runtimes: Sequence[str] | None,
                    trial_policy: Any, compare_policy: Any, save: Any
                    ) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """Refuse what a study cannot run, before anything is measured (``save``'s folder included,
    rather than after the whole budget); returns ``precisions`` and ``runtimes`` as tuples of names
    (None: the default)."""
    if objective not in OBJECTIVES:
        raise InvalidArgument("objective", objective, f"allowed {', '.join(OBJECTIVES)}")
    if not (is_real(budget_s) and math.isfinite(budget_s) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    if not is_int(compare_pairs) or compare_pairs < 1:
        raise InvalidArgument("compare pairs", compare_pairs, "allowed an integer >= 1")
    if trials is not None and (not is_int(trials) or trials < 0):
        raise InvalidArgument("trials", trials, "allowed an integer >= 0")
    if guidelines_only and trials:
        raise InvalidArgument("trials", trials, "allowed only without guidelines-only (no search runs)")
    names = None
    if precisions is not None:
        names = as_names(precisions, "precisions") or ()
        if not names:
            raise InvalidArgument("precisions", names, "allowed at least one of fp32, bf16, int8")
    chosen = as_names(runtimes, "runtimes")
    if chosen is not None and not chosen:
        raise InvalidArgument("runtimes", chosen, "allowed at least one runtime, or None for every installed one")
    for name, policy in (("trial_policy", trial_policy), ("compare_policy", compare_policy)):
        if not isinstance(policy, Policy):
            raise InvalidArgument(name, policy, "allowed a rooftune.bench.Policy")
    if save is not None:
        from rooftune.paths import output_file

        output_file(save, "save", parents=True)
    return names, chosen


#: What each serving scenario measures with (MLPerf's names; rooftune.bench.serving): one request
#: at a time is the latency objective, as is a server's search (its candidates are the fastest
#: configurations per call); everything queued at once is the throughput objective.
SCENARIO_OBJECTIVES = {"single-stream": "latency", "server": "latency", "offline": "throughput"}


def check_scenario(scenario: str | None, objective: str | None, slo_p99_ms: float | None, slo_p90_ms: float | None,
                   training: bool) -> tuple[str | None, str | None]:
    """``scenario`` and the objective it implies, refused where it cannot run: an unknown one, a
    server without one latency target (or with two), a target without a server, a target that is
    not a positive number of milliseconds, an objective the scenario does not measure, a training
    step. Returns (scenario, objective); the objective None where neither was given."""
    given = [(name, v) for name, v in (("--slo-p99", slo_p99_ms), ("--slo-p90", slo_p90_ms)) if v is not None]
    for name, v in given:
        if not is_real(v) or not math.isfinite(v) or v <= 0:
            raise InvalidArgument(name, v, "allowed a number of milliseconds > 0")
    if scenario is None:
        if given:
            raise InvalidArgument(given[0][0], given[0][1], "allowed only with --scenario server")
        return None, objective
    if not isinstance(scenario, str) or scenario not in SCENARIO_OBJECTIVES:
        raise InvalidArgument("--scenario", scenario, f"allowed {', '.join(SCENARIO_OBJECTIVES)}")
    if training:
        raise InvalidArgument("--scenario", scenario, "allowed only without --train (a scenario serves inferences)")
    if scenario == "server" and not given:
        raise InvalidArgument("--scenario", scenario, "needs a latency target: --slo-p99 MS or --slo-p90 MS")
    if len(given) > 1:
        raise InvalidArgument("--slo-p90", slo_p90_ms, "allowed only without --slo-p99 (one latency target)")
    if scenario != "server" and given:
        raise InvalidArgument(given[0][0], given[0][1], "allowed only with --scenario server")
    implied = SCENARIO_OBJECTIVES[scenario]
    if objective is not None and objective != implied:
        raise InvalidArgument("--objective", objective, f"allowed {implied} with --scenario {scenario} (or leave it out)")
    return scenario, implied
