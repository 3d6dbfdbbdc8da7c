"""Platform fingerprint: CPU, ISA, usable cores, caches, NUMA, OpenMP and library versions, and a stable id."""

from __future__ import annotations

from rooftune.platform.cpuinfo import CpuInfo, microarchitecture, parse_cpuinfo
from rooftune.platform.fingerprint import Platform, collect, current_platform
from rooftune.platform.isa import ALLOWED_CAPS, apply_cap, detect_isa, isa_cap, vector_bytes
from rooftune.platform.sysfs import CacheLevel, cgroup_cpu_quota, parse_cpu_list, read_caches, usable_cores

__all__ = [
    "ALLOWED_CAPS",
    "CacheLevel",
    "CpuInfo",
    "Platform",
    "apply_cap",
    "cgroup_cpu_quota",
    "collect",
    "current_platform",
    "detect_isa",
    "isa_cap",
    "microarchitecture",
    "parse_cpu_list",
    "parse_cpuinfo",
    "read_caches",
    "usable_cores",
    "vector_bytes",
]
