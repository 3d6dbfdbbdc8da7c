"""What a platform fingerprint read from outside (a dataset file's ``platform`` column) may hold:
the fields of :meth:`rooftune.platform.Platform.to_dict`, each of its type and in a range some
machine has. A fingerprint is its platform's identity in a store (the performance model reads
its caches and cores), so one that no machine could have is refused rather than stored.

Fields may be missing (a fingerprint of an older rooftune has fewer); a field that no rooftune
writes is refused, as :meth:`Platform.from_dict` would refuse it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

#: Most CPUs a Linux kernel addresses (CONFIG_NR_CPUS tops out at 8192): a core, socket or CPU
#: number beyond it is no machine's.
MAX_CPUS = 8192
#: Most NUMA nodes a Linux kernel addresses (NODES_SHIFT of at most 10).
MAX_NUMA_NODES = 1 << 10
#: Largest cache believed: the largest last-level cache shipped is about 1.1 GiB (AMD EPYC with 3D
#: V-Cache); 1 TiB leaves room for decades and refuses a size in bits or a typo.
MAX_CACHE_BYTES = 1 << 40
#: Deepest cache level believed: L1 to L4 exist; sysfs numbers none beyond a handful.
MAX_CACHE_LEVEL = 8
#: Cache lines are 32 to 256 bytes on every CPU made; a page (4 KiB) is far past any.
MAX_LINE_BYTES = 4096
#: Most cache entries in one fingerprint: a level per kind (data, instruction, unified) of at most
#: MAX_CACHE_LEVEL levels.
MAX_CACHES = 3 * MAX_CACHE_LEVEL
#: cpuid's family, model and stepping (and an Arm part number) are at most 32-bit values.
MAX_CPUID = (1 << 32) - 1
#: Longest text in a fingerprint: CPU names and versions are under a hundred characters, the
#: OpenMP library's path and an environment value stay within PATH_MAX (4096).
MAX_TEXT = 4096
#: Longest CPU name: the store's column for it holds 256 characters (real ones are under 100).
MAX_CPU_MODEL = 256
#: Most entries of a list or table of names (ISA extensions, library versions, environment
#: settings): a few dozen in any fingerprint.
MAX_NAMES = 1024
#: The kinds sysfs gives a cache level (drivers/base/cacheinfo.c).
CACHE_KINDS = ("Data", "Instruction", "Unified")
#: A platform id: 16 hex digits of SHA-256 (:attr:`Platform.id`).
PLATFORM_ID = re.compile(r"[0-9a-f]{16}")


class _Refused(Exception):
    """A field's value outside what is allowed: where (``caches[0].size_bytes``), the value, and
    what is allowed, in words."""

    def __init__(self, where: str, value: object, allowed: str) -> None:
        super().__init__(f"{where} {shown(value)}: allowed {allowed}")


def shown(value: object, limit: int = 60) -> str:
    """``value``'s repr for a one-line message: at most ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int(lo: int, hi: int, optional: bool = False) -> Callable[[str, object], None]:
    def check(where: str, v: object) -> None:
        if optional and v is None:
            return
        if not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi):
            raise _Refused(where, v, f"an integer in {lo}..{hi}" + (" or null" if optional else ""))
    return check


def _text(optional: bool = False, choices: tuple[str, ...] = (), most: int = MAX_TEXT) -> Callable[[str, object], None]:
    def check(where: str, v: object) -> None:
        if optional and v is None:
            return
        if choices and v not in choices:
            raise _Refused(where, v, f"one of {', '.join(choices)}")
        if not isinstance(v, str) or len(v) > most:
            raise _Refused(where, v, f"a text of at most {most} characters" + (" or null" if optional else ""))
    return check


def _cpu_quota(where: str, v: object) -> None:
    if v is None:
        return
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= MAX_CPUS):
        raise _Refused(where, v, f"a number of CPUs in (0, {MAX_CPUS}] or null")


def _list(item: Callable[[str, object], None], most: int) -> Callable[[str, object], None]:
    def check(where: str, v: object) -> None:
        if not isinstance(v, list) or len(v) > most:
            raise _Refused(where, v, f"a list of at most {most} items")
        for i, x in enumerate(v):
            item(f"{where}[{i}]", x)
    return check


def _table(value: Callable[[str, object], None], optional: bool = False) -> Callable[[str, object], None]:
    def check(where: str, v: object) -> None:
        if optional and v is None:
            return
        if not isinstance(v, dict) or len(v) > MAX_NAMES:
            raise _Refused(where, v, f"an object of at most {MAX_NAMES} names" + (" or null" if optional else ""))
        for k, x in v.items():
            if not isinstance(k, str) or len(k) > MAX_TEXT:
                raise _Refused(f"{where} name", k, f"a text of at most {MAX_TEXT} characters")
            value(f"{where}.{shown(k, 40)}", x)
    return check


_CPU = _int(0, MAX_CPUS - 1)
#: Each field of a cache level (:meth:`rooftune.platform.sysfs.CacheLevel.to_dict`).
_CACHE_FIELDS: dict[str, Callable[[str, object], None]] = {
    "name": _text(), "level": _int(1, MAX_CACHE_LEVEL), "kind": _text(choices=CACHE_KINDS),
    "size_bytes": _int(1, MAX_CACHE_BYTES), "instances": _list(_list(_CPU, MAX_CPUS), MAX_CPUS),
    "line_bytes": _int(1, MAX_LINE_BYTES),
}
#: Cache fields a level cannot do without (line_bytes defaults to 64; the name follows from the rest).
_CACHE_NEEDS = ("level", "kind", "size_bytes", "instances")


def _cache(where: str, v: object) -> None:
    if not isinstance(v, dict):
        raise _Refused(where, v, f"an object with the fields {', '.join(_CACHE_FIELDS)}")
    for k in _CACHE_NEEDS:
        if k not in v:
            raise _Refused(where, v, f"a cache level with {', '.join(_CACHE_NEEDS)} (it lacks {k})")
    for k, x in v.items():
        if k not in _CACHE_FIELDS:
            raise _Refused(f"{where} field {shown(k, 40)}", x, f"a cache level's fields, {', '.join(_CACHE_FIELDS)}")
        _CACHE_FIELDS[k](f"{where}.{k}", x)


def _platform_id(where: str, v: object) -> None:
    if not (isinstance(v, str) and PLATFORM_ID.fullmatch(v)):
        raise _Refused(where, v, "16 hex digits (the id rooftune derives from the fingerprint)")


_NAMES = _list(_text(), MAX_NAMES)
#: Each field of :meth:`Platform.to_dict` and what it may hold.
FIELDS: dict[str, Callable[[str, object], None]] = {
    "id": _platform_id, "arch": _text(), "vendor": _text(), "cpu_model": _text(most=MAX_CPU_MODEL), "microarchitecture": _text(optional=True),
    "family": _int(0, MAX_CPUID, optional=True), "model": _int(0, MAX_CPUID, optional=True),
    "stepping": _int(0, MAX_CPUID, optional=True), "isa": _NAMES, "effective_isa": _NAMES,
    "isa_cap": _text(optional=True), "physical_cores": _int(1, MAX_CPUS), "logical_cores": _int(1, MAX_CPUS),
    "sockets": _int(1, MAX_CPUS), "affinity": _list(_CPU, MAX_CPUS), "cpu_quota": _cpu_quota,
    "usable_cores": _int(1, MAX_CPUS), "caches": _list(_cache, MAX_CACHES), "numa_nodes": _int(1, MAX_NUMA_NODES),
    "openmp": _table(_text(), optional=True), "library_versions": _table(_text(optional=True)),
    "kernel_env": _table(_text()), "hostname": _text(),
}


def fingerprint_problem(fingerprint: object, needs: tuple[str, ...] = ()) -> str | None:
    """What makes ``fingerprint`` (a CPU platform's, as :meth:`Platform.to_dict` writes it) one
    that no machine has, in words naming the field, its value and what is allowed; None for a
    fingerprint that may be stored. ``needs``: fields it must have."""
    if not isinstance(fingerprint, dict):
        return f"{shown(fingerprint)}: allowed an object with the fields {', '.join(FIELDS)}"
    missing = [k for k in needs if k not in fingerprint]
    if missing:
        return f"lacks {', '.join(missing)} (it needs {', '.join(needs)})"
    try:
        for k, v in fingerprint.items():
            check = FIELDS.get(k)
            if check is None:
                raise _Refused(f"field {shown(k, 40)}", v, f"the fields of a fingerprint, {', '.join(FIELDS)}")
            check(k, v)
    except _Refused as refused:
        return str(refused)
    return None
