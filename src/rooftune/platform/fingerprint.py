"""The Platform: what this machine is, as far as performance is concerned, and its stable id."""

from __future__ import annotations

import hashlib
import os
import platform as _pyplatform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rooftune.fileio import json_text
from rooftune.platform.cpuinfo import microarchitecture, parse_cpuinfo
from rooftune.platform.isa import apply_cap, detect_isa, isa_cap, vector_bytes
from rooftune.platform.software import kernel_environment, openmp_runtime, parse_torch_config
from rooftune.platform.sysfs import CacheLevel, cgroup_cpu_quota, numa_nodes, read_caches, usable_cores

#: Fields hashed into the platform id: those that change measured performance. Host name, time,
#: affinity order and Python's patch version do not.
ID_FIELDS = (
    "arch",
    "vendor",
    "cpu_model",
    "microarchitecture",
    "effective_isa",
    "physical_cores",
    "usable_cores",
    "sockets",
    "caches",
    "numa_nodes",
    "openmp",
    "library_versions",
    "kernel_env",
)


def identity(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint (a Platform's fields, or a stored one) that its id is hashed from:
    :data:`ID_FIELDS`, the OpenMP runtime by name and library only (not the path it loaded from)."""
    ident = {k: fields[k] for k in ID_FIELDS if k in fields}
    if isinstance(ident.get("openmp"), Mapping):
        ident["openmp"] = {"name": ident["openmp"].get("name"), "library": ident["openmp"].get("library")}
    return ident


@dataclass(frozen=True)
class Platform:
    """A machine plus the software and settings that decide which kernels run on it."""

    arch: str
    vendor: str
    cpu_model: str
    microarchitecture: str | None
    family: int | None
    model: int | None
    stepping: int | None
    isa: tuple[str, ...]
    effective_isa: tuple[str, ...]
    isa_cap: str | None
    physical_cores: int
    logical_cores: int
    sockets: int
    affinity: tuple[int, ...]
    cpu_quota: float | None
    usable_cores: int
    caches: tuple[CacheLevel, ...]
    numa_nodes: int
    openmp: dict[str, str] | None
    library_versions: dict[str, str | None] = field(default_factory=dict)
    kernel_env: dict[str, str] = field(default_factory=dict)
    hostname: str = ""

    @property
    def id(self) -> str:
        """16 hex digits of SHA-256 over :data:`ID_FIELDS`, stable across runs and hosts."""
        blob = json_text(identity(self._fields()), notes=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def vector_bytes(self) -> int:
        return vector_bytes(frozenset(self.effective_isa))

    def usable_cpus(self) -> tuple[int, ...]:
        """The CPUs threads are pinned to: one per physical core, in affinity order, usable_cores of them."""
        return self.affinity[: self.usable_cores]

    def cache(self, name: str) -> CacheLevel | None:
        """The cache level called ``name`` ('L1d', 'L2', 'L3')."""
        return next((c for c in self.caches if c.name == name), None)

    def _fields(self) -> dict[str, Any]:
        d = asdict(self)
        d["caches"] = [c.to_dict() for c in self.caches]
        d["isa"] = list(self.isa)
        d["effective_isa"] = list(self.effective_isa)
        d["affinity"] = list(self.affinity)
        return d

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields plus ``id``; :meth:`from_dict` reverses it."""
        return {"id": self.id, **self._fields()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Platform:
        d = dict(d)
        d.pop("id", None)
        d["caches"] = tuple(
            CacheLevel(
                level=c["level"],
                kind=c["kind"],
                size_bytes=c["size_bytes"],
                instances=tuple(tuple(i) for i in c["instances"]),
                line_bytes=c.get("line_bytes", 64),
            )
            for c in d["caches"]
        )
        for key in ("isa", "effective_isa", "affinity"):
            d[key] = tuple(d[key])
        return cls(**d)


def _physical_first(affinity: tuple[int, ...], root: Path) -> tuple[tuple[int, ...], int]:
    """Affinity reordered so the first CPU of each physical core comes first (SMT siblings last),
    and the number of physical cores the mask touches."""
    seen: set[str] = set()
    firsts: list[int] = []
    rest: list[int] = []
    for cpu in affinity:
        sib = root / f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            key = sib.read_text().strip()
        except OSError:
            key = str(cpu)
        (rest if key in seen else firsts).append(cpu)
        seen.add(key)
    return tuple(firsts + rest), len(firsts)


def collect(
    root: Path | str = "/",
    env: Mapping[str, str] | None = None,
    affinity: tuple[int, ...] | None = None,
    maps_text: str | None = None,
    torch_config: str | None = None,
) -> Platform:
    """Fingerprint a machine. Every argument defaults to the live process; tests pass recordings."""
    root = Path(root)
    env = dict(os.environ if env is None else env)
    info = parse_cpuinfo((root / "proc/cpuinfo").read_text())
    arch = _pyplatform.machine() if root == Path("/") else ("aarch64" if info.arm_part else "x86_64")
    isa = detect_isa(info.flags, arch)
    cap = isa_cap(env) if arch not in ("aarch64", "arm64") else None
    effective = apply_cap(isa, cap)
    if affinity is None:
        affinity = tuple(sorted(os.sched_getaffinity(0)))
    ordered, physical_in_mask = _physical_first(tuple(sorted(affinity)), root)
    quota = cgroup_cpu_quota(root)
    n_usable = usable_cores(min(info.physical_cores, physical_in_mask), len(ordered), quota)
    versions = _library_versions(torch_config)
    if maps_text is None:
        maps_text = _read_maps()
    return Platform(
        arch=arch,
        vendor=info.vendor,
        cpu_model=info.model_name,
        microarchitecture=microarchitecture(info),
        family=info.family,
        model=info.model,
        stepping=info.stepping,
        isa=tuple(sorted(isa)),
        effective_isa=tuple(sorted(effective)),
        isa_cap=cap,
        physical_cores=info.physical_cores,
        logical_cores=info.logical_cores,
        sockets=info.sockets,
        affinity=ordered,
        cpu_quota=quota,
        usable_cores=n_usable,
        caches=read_caches(root),
        numa_nodes=numa_nodes(root),
        openmp=openmp_runtime(maps_text),
        library_versions=versions,
        kernel_env=kernel_environment(env),
        hostname=_pyplatform.node(),
    )


def _read_maps() -> str:
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def _library_versions(torch_config: str | None) -> dict[str, str | None]:
    import numba
    import numpy

    import rooftune

    versions: dict[str, str | None] = {
        "python": ".".join(_pyplatform.python_version_tuple()[:2]),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "rooftune": rooftune.__version__,
    }
    try:
        import torch

        versions["torch"] = torch.__version__
        versions.update(parse_torch_config(torch_config or torch.__config__.show()))
    except ImportError:
        versions["torch"] = None
    return versions


@cache
def current_platform() -> Platform:
    """The live process's platform (computed once per process)."""
    return collect()
