"""Reading the kernel's view of the machine: cgroup CPU quota, caches, NUMA nodes.

Every reader takes ``root`` (normally "/") so that tests replay recorded file trees.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(set(cpus)))


# --------------------------------------------------------------------------- cgroup CPU quota


def _cgroup_paths(root: Path) -> tuple[str | None, dict[str, str]]:
    """(v2 path, {v1 controller: path}) from /proc/self/cgroup."""
    text = _read(root / "proc/self/cgroup") or ""
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        for c in controllers.split(","):
            if c:
                v1[c] = path
    return v2, v1


def _ancestors(base: Path, path: str) -> list[Path]:
    """``base/path`` and each parent up to ``base``; the group itself may be missing in a container,
    whose view of the hierarchy starts at its own group."""
    rel = [p for p in path.strip("/").split("/") if p]
    dirs = [base.joinpath(*rel[:i]) for i in range(len(rel), -1, -1)]
    return [d for d in dirs if d.is_dir()]


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """CPUs the container may use (quota / period, the smallest along the hierarchy), None if unlimited.

    cgroup v2: ``cpu.max`` holds "QUOTA PERIOD" or "max PERIOD". cgroup v1: ``cpu.cfs_quota_us``
    (-1 = unlimited) and ``cpu.cfs_period_us``.
    """
    v2, v1 = _cgroup_paths(root)
    quotas: list[float] = []
    cg = root / "sys/fs/cgroup"
    if v2 is not None:
        for d in _ancestors(cg, v2):
            text = _read(d / "cpu.max")
            if text:
                q, _, period = text.partition(" ")
                if q != "max" and period:
                    quotas.append(int(q) / int(period))
    path = v1.get("cpu")
    if path is not None:
        for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
            base = cg / mount
            if not base.is_dir():
                continue
            for d in _ancestors(base, path):
                q_text, p_text = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                if q_text and p_text and int(q_text) > 0:
                    quotas.append(int(q_text) / int(p_text))
            break
    return min(quotas) if quotas else None


def usable_cores(physical: int, affinity: int, quota: float | None) -> int:
    """The smallest of physical cores, CPUs in the affinity mask and the cgroup quota.

    A fractional quota is rounded down (1.5 CPUs cannot keep two threads busy), but never below 1.
    """
    candidates = [physical, affinity]
    if quota is not None:
        candidates.append(max(1, math.floor(quota + 1e-9)))
    return max(1, min(candidates))


# --------------------------------------------------------------------------- caches


@dataclass(frozen=True)
class CacheLevel:
    """One cache level as sysfs describes it.

    ``instances`` lists the CPUs behind each physical instance, so the capacity available to a
    set of CPUs is ``size_bytes`` times the number of instances they touch.
    """

    level: int
    kind: str  # "Data", "Instruction" or "Unified"
    size_bytes: int
    instances: tuple[tuple[int, ...], ...]
    line_bytes: int = 64

    @property
    def name(self) -> str:
        suffix = {"Data": "d", "Instruction": "i"}.get(self.kind, "")
        return f"L{self.level}{suffix}"

    def capacity_for(self, cpus: tuple[int, ...]) -> int:
        """Bytes of this level available to a team running on ``cpus``."""
        touched = sum(1 for inst in self.instances if set(inst) & set(cpus))
        return self.size_bytes * max(1, touched)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "level": self.level,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "instances": [list(i) for i in self.instances],
            "line_bytes": self.line_bytes,
        }


def parse_size(text: str) -> int:
    """sysfs sizes: '48K', '1024K', '32M', or plain bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"unrecognised cache size {text!r}")
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]
    return int(m.group(1)) * scale


def read_caches(root: Path = Path("/")) -> tuple[CacheLevel, ...]:
    """Every data/unified cache level of the machine from /sys/devices/system/cpu/cpu*/cache."""
    found: dict[tuple[int, str], dict[str, object]] = {}
    base = root / "sys/devices/system/cpu"
    for cache_dir in sorted(base.glob("cpu[0-9]*/cache/index[0-9]*")):
        level, kind, size = (_read(cache_dir / f) for f in ("level", "type", "size"))
        shared = _read(cache_dir / "shared_cpu_list")
        if not (level and kind and size and shared) or kind == "Instruction":
            continue
        key = (int(level), kind)
        entry = found.setdefault(
            key, {"size": parse_size(size), "instances": set(), "line": _read(cache_dir / "coherency_line_size")}
        )
        entry["instances"].add(parse_cpu_list(shared))  # type: ignore[attr-defined]
    levels = []
    for (lvl, kind), e in sorted(found.items()):
        line = e["line"]
        levels.append(
            CacheLevel(
                level=lvl,
                kind=kind,
                size_bytes=int(e["size"]),  # type: ignore[call-overload]
                instances=tuple(sorted(e["instances"])),  # type: ignore[call-overload]
                line_bytes=int(line) if isinstance(line, str) and line.isdigit() else 64,
            )
        )
    return tuple(levels)


def numa_nodes(root: Path = Path("/")) -> int:
    nodes = list((root / "sys/devices/system/node").glob("node[0-9]*"))
    return max(1, len(nodes))


def one_cpu_per_core(cpus: tuple[int, ...] | list[int], root: str | Path = "/") -> tuple[int, ...]:
    """``cpus`` (sorted) with the SMT siblings of a core left out: the first CPU of each
    (package, core) pair, as the launcher binds an instance to physical cores. Where sysfs has no
    topology, every CPU counts as a core of its own."""
    seen: set[tuple[str, str]] = set()
    out = []
    for cpu in sorted(cpus):
        topo = Path(root) / f"sys/devices/system/cpu/cpu{cpu}/topology"
        key = (_read(topo / "physical_package_id") or "?", _read(topo / "core_id") or f"cpu{cpu}")
        if key not in seen:
            seen.add(key)
            out.append(cpu)
    return tuple(out)


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, None where the kernel does not say."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
