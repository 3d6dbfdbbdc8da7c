"""RunConfig: one runtime configuration, as the search sets it, a file stores it and
``rooftune exec`` applies it.

It sits below the runtimes and the tuning, which both speak it. What a configuration may say about
a runtime (its name, its own options and what it runs without them) is declared in
:mod:`rooftune.runtime_options`, below this module and the runtimes, so that reading a
configuration imports no runtime and no framework.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text, read_json_input
from rooftune.runtime_options import RUNTIME_OPTIONS, RuntimeOptions

MEMORY_FORMATS = ("contiguous", "channels_last")
#: "default": the runtime's own choice, as it runs installed (OpenVINO computes in bf16 on a CPU
#: with native bf16); the precision it chose is read back and checked by that precision's rule.
PRECISIONS = ("fp32", "bf16", "int8", "default")
ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")
#: The OpenMP runtime a process runs torch's parallel regions on: "default", the one torch was
#: built with; "intel", Intel OpenMP (libiomp5 from the ``intel-openmp`` package, preloaded: it
#: provides the GNU OpenMP entry points too), as ``torch.backends.xeon.run_cpu`` preloads it.
OPENMP_RUNTIMES = ("default", "intel")
#: Settings added after configurations were first stored: left out of a configuration's key while
#: at their default, so that stored trials keep their identity.
_LATER_FIELDS = {"openmp": "default", "pin": False, "keep": ()}
#: The most layers a mixed int8 configuration names, and the longest name: a model's module names
#: (``layer4.1.conv2``), bounded so that a configuration file cannot carry megabytes in them.
MAX_KEPT_LAYERS = 4096
MAX_LAYER_NAME = 512
#: KMP_AFFINITY's words (Intel's grammar: ``[<modifier>,...]<type>[,<permute>][,<offset>]``), less
#: ``proclist=`` and ``explicit``, which name processors by hand and which no setting of rooftune's uses.
_KMP_MODIFIERS = ("verbose", "noverbose", "warnings", "nowarnings", "respect", "norespect",
                  "duplicates", "noduplicates", "reset", "noreset")
_KMP_GRANULARITY = ("fine", "thread", "core", "tile", "die", "socket", "package")
_KMP_TYPES = ("none", "compact", "scatter", "balanced", "disabled", "logical", "physical")
#: OpenMP's largest block time: an int of milliseconds.
_KMP_BLOCKTIME_MAX = 2**31 - 1


def _kmp_affinity(value: str) -> bool:
    tokens = value.split(",")
    modifiers = {*_KMP_MODIFIERS, *(f"granularity={g}" for g in _KMP_GRANULARITY)}
    while tokens and tokens[0] in modifiers:
        tokens.pop(0)
    if not tokens or tokens[0] not in _KMP_TYPES:
        return False
    numbers = tokens[1:]  # the permute and the offset
    return len(numbers) <= 2 and all(re.fullmatch(r"[0-9]{1,4}", n) for n in numbers)


def _kmp_blocktime(value: str) -> bool:
    if value == "infinite":
        return True
    return re.fullmatch(r"[0-9]{1,10}", value) is not None and int(value) <= _KMP_BLOCKTIME_MAX


#: jemalloc's options a configuration may set in ``MALLOC_CONF``.
_MALLOC_KEYS = "oversize_threshold|background_thread|metadata_thp|dirty_decay_ms|muzzy_decay_ms|narenas|percpu_arena|thp|retain"

#: The environment variables a configuration's ``omp`` may set, each with the values it may take
#: and how to say them: exactly those the search, the guideline and the baselines set. An OpenMP
#: runtime reads others at its start that are no tuning setting and run code (OMP_TOOL_LIBRARIES,
#: which LLVM's and Intel's OpenMP load as libraries), and a configuration file is input like any
#: other. The allocator's LD_PRELOAD comes only from ``allocator``, as a path rooftune resolves.
OMP_VARIABLES: dict[str, tuple[Callable[[str], object], str]] = {
    "OMP_PROC_BIND": (re.compile(r"close|spread|primary|master|true|false").fullmatch,
                      "close, spread, primary, master, true or false"),
    "OMP_PLACES": (re.compile(r"(threads|cores|ll_caches|numa_domains|sockets)(\([1-9][0-9]{0,4}\))?")
                   .fullmatch,
                   "threads, cores, ll_caches, numa_domains or sockets, with a count or not, e.g. cores(4)"),
    "OMP_WAIT_POLICY": (re.compile(r"ACTIVE|PASSIVE").fullmatch, "ACTIVE or PASSIVE"),
    "KMP_BLOCKTIME": (_kmp_blocktime, f"milliseconds 0..{_KMP_BLOCKTIME_MAX} or infinite"),
    "KMP_AFFINITY": (_kmp_affinity, "[granularity=fine|core|...,][verbose,...]compact|scatter|balanced|"
                                    "none|disabled|logical|physical[,permute][,offset], "
                                    "e.g. granularity=fine,compact,1,0"),
    # jemalloc's tuning options only (no profiling or file output): the launcher sets them when it
    # preloads jemalloc, and a configuration replays what a peer ran.
    "MALLOC_CONF": (re.compile(rf"({_MALLOC_KEYS}):[A-Za-z0-9_.-]+(,({_MALLOC_KEYS}):[A-Za-z0-9_.-]+)*").fullmatch,
                    f"comma-separated key:value of {_MALLOC_KEYS.replace('|', ', ')}, "
                    "e.g. oversize_threshold:1,background_thread:true"),
}

#: Where a configuration sets what it does not set through ``omp``.
_SET_ELSEWHERE = {"OMP_NUM_THREADS": "threads are set by intra_threads",
                  "MKL_NUM_THREADS": "threads are set by intra_threads",
                  "LD_PRELOAD": f"a preloaded allocator is set by allocator ({', '.join(ALLOCATORS)}), Intel OpenMP by openmp=intel"}


def check_omp(omp: object) -> None:
    """Refuse an ``omp`` mapping that sets a variable outside :data:`OMP_VARIABLES`, or a value
    outside its shape."""
    if not isinstance(omp, dict):
        raise InvalidArgument("omp", omp, f"allowed a mapping of {', '.join(OMP_VARIABLES)} to strings")
    for k, v in omp.items():
        if k not in OMP_VARIABLES:
            raise InvalidArgument("omp variable", k, f"allowed {', '.join(OMP_VARIABLES)} (the settings "
                                  "the search and the peers set)", _SET_ELSEWHERE.get(k))
        ok, shape = OMP_VARIABLES[k]
        if not isinstance(v, str) or not ok(v):
            raise InvalidArgument(f"omp {k}", v, f"allowed {shape}")


def check_keep(keep: object) -> tuple[str, ...]:
    """``keep`` as a sorted tuple of distinct layer names, or InvalidArgument naming what is wrong."""
    if isinstance(keep, str) or not isinstance(keep, (list, tuple)):
        raise InvalidArgument("keep", keep, "allowed a list of layer names (module names of the model)")
    if len(keep) > MAX_KEPT_LAYERS:
        raise InvalidArgument("keep", f"{len(keep)} layers", f"allowed at most {MAX_KEPT_LAYERS}")
    for name in keep:
        if not isinstance(name, str) or not name or len(name) > MAX_LAYER_NAME or not name.isprintable():
            raise InvalidArgument("keep", name, f"allowed layer names of 1..{MAX_LAYER_NAME} printable characters")
    if len(set(keep)) != len(keep):
        raise InvalidArgument("keep", ",".join(keep), "allowed each layer once")
    return tuple(sorted(keep))  # a set of layers: one identity whatever the order given


def runtime_options(name: object) -> RuntimeOptions:
    """The runtime ``name``'s options; an unknown name is refused with the known ones."""
    if not isinstance(name, str) or name not in RUNTIME_OPTIONS:
        raise InvalidArgument("runtime", name, f"allowed {', '.join(RUNTIME_OPTIONS)}")
    return RUNTIME_OPTIONS[name]


#: Where Debian/Ubuntu put the allocators (packages libjemalloc2, libtcmalloc-minimal4).
ALLOCATOR_LIBRARIES = {
    "jemalloc": ("libjemalloc.so.2",),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
}
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
#: jemalloc runs with its defaults in the search. PyTorch's launcher sets
#: :data:`LAUNCHER_JEMALLOC_CONF`, tuned for many-core servers: on small machines its background
#: purging thread and every large buffer unmapped and faulted back in per inference make inference
#: slower (BENCHMARKS.md, the tuning runs). The launcher's peer runs it as the launcher does.
JEMALLOC_CONF = ""
#: What ``torch.backends.xeon.run_cpu`` exports as MALLOC_CONF when it preloads jemalloc.
LAUNCHER_JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto"


def intel_openmp_library() -> str | None:
    """libiomp5.so of the ``intel-openmp`` package in this Python's prefix (a virtual
    environment's ``lib``), or None where it is not installed."""
    import sys

    p = Path(sys.prefix) / "lib" / "libiomp5.so"
    return str(p) if p.exists() else None


def pinned_cpus(threads: int, instance: int = 0) -> tuple[int, ...]:
    """The CPUs a pinned configuration's process is bound to: instance ``instance``'s
    ``threads`` physical cores of the ones this process may use, the first instance's first
    (what the launcher's ``numactl -C`` / ``taskset -c`` gives each of its ``--ninstances``)."""
    from rooftune.platform.sysfs import one_cpu_per_core

    cpus = one_cpu_per_core(sorted(os.sched_getaffinity(0)))
    threads = max(1, threads)
    own = cpus[instance * threads:(instance + 1) * threads]
    if len(own) < threads:
        raise ValueError(f"instance {instance} of {threads} pinned cores finds only {len(cpus)} physical cores")
    return own


def _physical_cores() -> int:
    """The physical cores this process may use (what :func:`pinned_cpus` binds from)."""
    from rooftune.platform.sysfs import one_cpu_per_core

    return max(1, len(one_cpu_per_core(sorted(os.sched_getaffinity(0)))))


def allocator_library(name: str) -> str | None:
    """Path of the allocator's shared library, or None when it is not installed."""
    for lib in ALLOCATOR_LIBRARIES.get(name, ()):
        for d in _LIB_DIRS:
            p = Path(d) / lib
            if p.exists():
                return str(p)
    return None


@dataclass(frozen=True)
class RunConfig:
    """How to run a model: runtime, threads, layout, precision, allocator, OpenMP environment.

    ``set_threads=False`` leaves thread counts to the framework (the vanilla baseline);
    ``vendor_defaults=True`` leaves a runtime's own knobs at its defaults (peer baselines).
    """

    runtime: str = "eager"
    intra_threads: int = 1
    inter_threads: int = 1
    batch: int = 1
    #: Processes running the model side by side, each with ``intra_threads`` (throughput).
    instances: int = 1
    memory_format: str = "contiguous"
    precision: str = "fp32"
    allocator: str = "glibc"
    omp: dict[str, str] = field(default_factory=dict)
    runtime_options: dict[str, Any] = field(default_factory=dict)
    set_threads: bool = True
    vendor_defaults: bool = False
    name: str = ""
    #: The OpenMP runtime (:data:`OPENMP_RUNTIMES`).
    openmp: str = "default"
    #: Bind the process to its first ``intra_threads`` physical cores (the launcher's core binding).
    pin: bool = False
    #: The layers (module names, as ``named_modules`` gives them) an int8 configuration keeps at
    #: higher precision, each runtime's quantizer told to leave them out (the mixed set); empty:
    #: every layer the quantizer takes.
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The environment is checked whenever a configuration is made (a file, the store, a trial's
        # message), not only where validate() is called: it reaches a process's start.
        check_omp(self.omp)
        # a file or a trial's message gives a list; the configuration stays hashable and frozen
        object.__setattr__(self, "keep", check_keep(self.keep))

    def option(self, key: str) -> Any:
        """The runtime option ``key``: as set, else what the runtime runs without it (None for an
        option the runtime does not have)."""
        if key in self.runtime_options:
            return self.runtime_options[key]
        return runtime_options(self.runtime).absent.get(key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], usable_cores: int | None = None) -> RunConfig:
        """Read a configuration (e.g. ``--save`` output); unknown keys and impossible values are
        refused with the allowed ones."""
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise InvalidArgument("configuration key", key, f"allowed {', '.join(sorted(known))}")
        cfg = cls(**d)
        cfg.validate(usable_cores)
        return cfg

    def validate(self, usable_cores: int | None = None) -> None:
        """Refuse a setting the registered runtime or this machine does not allow (InvalidArgument
        naming it, with the allowed values); thread counts are bounded by ``usable_cores``."""
        runtime = runtime_options(self.runtime)
        limit = usable_cores or os.cpu_count() or 1
        for key in ("intra_threads", "inter_threads"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= limit:
                raise InvalidArgument(key, v, f"allowed 1..{limit} (the usable cores of this machine)")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise InvalidArgument("batch", self.batch, "allowed an integer >= 1")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or not 1 <= self.instances <= limit:
            raise InvalidArgument("instances", self.instances, f"allowed 1..{limit} (the usable cores of this machine)")
        for key, allowed in (("memory_format", MEMORY_FORMATS), ("precision", PRECISIONS), ("allocator", ALLOCATORS)):
            if not isinstance(getattr(self, key), str) or getattr(self, key) not in allowed:
                raise InvalidArgument(key, getattr(self, key), f"allowed {', '.join(allowed)}")
        if not isinstance(self.runtime_options, dict):
            raise InvalidArgument("runtime_options", self.runtime_options, "allowed a mapping of option names to values")
        known = runtime.settable
        for k, v in self.runtime_options.items():
            if k not in known:
                names = f"allowed {', '.join(known)}" if known else "allowed none: it has no options of its own"
                raise InvalidArgument(f"{self.runtime} option", k, names)
            if isinstance(v, (list, dict)) or v not in known[k] or isinstance(v, bool) != isinstance(known[k][0], bool):
                raise InvalidArgument(f"{self.runtime} option {k}", v, f"allowed {', '.join(map(str, known[k]))}")
        if not isinstance(self.openmp, str) or self.openmp not in OPENMP_RUNTIMES:
            raise InvalidArgument("openmp", self.openmp, f"allowed {', '.join(OPENMP_RUNTIMES)}")
        if self.keep and self.precision != "int8":
            raise InvalidArgument("keep", ",".join(self.keep), "allowed only with precision int8 (the layers an int8 "
                                  "configuration keeps at higher precision)")
        if self.pin is True and self.instances * self.intra_threads > min(limit, _physical_cores()):
            raise InvalidArgument("pin", self.pin, f"allowed where instances x intra_threads ({self.instances} x "
                                  f"{self.intra_threads}) fit the {min(limit, _physical_cores())} physical cores this "
                                  f"process may use (each instance has cores of its own)")
        for key in ("set_threads", "vendor_defaults", "pin"):
            if not isinstance(getattr(self, key), bool):
                raise InvalidArgument(key, getattr(self, key), "allowed true or false")
        if not isinstance(self.name, str):
            raise InvalidArgument("name", self.name, "allowed a string")

    def key(self) -> str:
        """A short hash of everything that changes how the model runs (its identity in the store;
        the name is a label, not part of it)."""
        d = self.to_dict()
        d.pop("name", None)
        for k, default in _LATER_FIELDS.items():
            if d.get(k) == default:
                d.pop(k)
        return hashlib.sha256(json_text(d, notes=False, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def artifact_path(self, workdir: Path, filename: str) -> Path:
        """Where this configuration's prepared artifact lives: shared by configurations that
        differ only in threads or environment, since those do not change the artifact."""
        ident = f"{self.runtime}-{self.memory_format}-{self.precision}-b{self.batch}"
        if self.precision == "int8" and self.vendor_defaults:  # the quantizer at its vendor's defaults
            ident += "-vendor"
        if self.runtime_options.get("quantizer", "default") != "default":
            ident += f"-{self.runtime_options['quantizer']}"
        if self.keep:  # a mixed set is another model than the uniform int8 one
            ident += "-keep" + hashlib.sha256("\n".join(self.keep).encode()).hexdigest()[:12]
        d = workdir / ident
        d.mkdir(parents=True, exist_ok=True)
        return d / filename

    def environment(self) -> dict[str, str]:
        """Environment variables this configuration sets for a process (threads, allocator,
        OpenMP); what ``rooftune exec`` applies and what a trial's subprocess starts with."""
        env: dict[str, str] = {}
        if self.set_threads:
            env["OMP_NUM_THREADS"] = str(self.intra_threads)
            env["MKL_NUM_THREADS"] = str(self.intra_threads)
        env.update(self.omp)
        if self.runtime == "tensorflow" and "onednn" in self.runtime_options:  # read at TensorFlow's import
            env["TF_ENABLE_ONEDNN_OPTS"] = "1" if self.runtime_options["onednn"] else "0"
        preload = []
        if self.openmp == "intel":
            iomp = intel_openmp_library()
            if iomp is None:
                raise InvalidArgument("openmp", self.openmp, "its library is not installed (pip install intel-openmp)")
            preload.append(iomp)
        if self.allocator != "glibc":
            lib = allocator_library(self.allocator)
            if lib is None:
                raise InvalidArgument("allocator", self.allocator, "its library is not installed (apt-get install libjemalloc2 / libtcmalloc-minimal4)")
            preload.append(lib)
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        if self.allocator != "glibc":
            # oneTBB (OpenVINO's threading) loads its hwloc binding with RTLD_DEEPBIND: hwloc then
            # frees with glibc's free what glibc's own functions allocated with the preloaded
            # malloc, and the process aborts ("free(): invalid pointer", uxlfoundation/oneTBB#1636).
            # oneTBB's documented switch loads it without RTLD_DEEPBIND, and changes nothing else.
            env["TBB_ENABLE_SANITIZERS"] = "1"
            if self.allocator == "jemalloc" and JEMALLOC_CONF:
                env["MALLOC_CONF"] = JEMALLOC_CONF
        return env

    def describe(self, annotate: dict[str, str] | None = None) -> str:
        """One line: the runtime and every setting; ``annotate``: text after a runtime option's value
        (what the artifact that ran made of it)."""
        parts = [self.runtime]
        if self.instances > 1:
            parts.append(f"{self.instances} instances")
        if self.set_threads:
            parts.append(f"{self.intra_threads}x{self.inter_threads} threads")
        else:
            parts.append("default threads")
        if self.batch > 1:
            parts.append(f"batch {self.batch}")
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        if self.precision == "default":
            parts.append("precision as installed")
        elif self.precision != "fp32":
            parts.append(self.precision)
        if self.allocator != "glibc":
            parts.append(self.allocator)
        if self.openmp != "default":
            parts.append(f"{self.openmp} OpenMP")
        if self.pin:
            parts.append("pinned")
        if self.keep:
            parts.append(f"{len(self.keep)} layer{'s' if len(self.keep) > 1 else ''} kept at higher precision")
        parts += [f"{k}={v}" for k, v in sorted(self.omp.items())]
        parts += [f"{k}={v}{(annotate or {}).get(k, '')}" for k, v in sorted(self.runtime_options.items())]
        return ", ".join(parts)


def load_config(path: str | Path, usable_cores: int | None = None, name: str = "--config") -> RunConfig:
    """A configuration file written by ``rooftune tune --save`` (or just its ``config`` object);
    thread counts are checked against ``usable_cores`` (default: this process's usable cores).
    ``name``: what an error calls the file (the option, or a Python argument)."""
    allowed = "allowed a configuration written by rooftune tune --save FILE"
    data = read_json_input(path, name, allowed)
    if isinstance(data, dict) and "config" in data:
        data = data["config"]
    if not isinstance(data, dict):
        raise InvalidArgument(name, str(path), f"not a JSON object; {allowed}")
    if usable_cores is None:
        from rooftune.platform import current_platform

        usable_cores = current_platform().usable_cores
    return RunConfig.from_dict(data, usable_cores=usable_cores)
