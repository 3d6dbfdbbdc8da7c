"""Parsing /proc/cpuinfo and naming the microarchitecture."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CpuInfo:
    vendor: str
    model_name: str
    family: int | None
    model: int | None
    stepping: int | None
    flags: frozenset[str]
    logical_cores: int
    physical_cores: int
    sockets: int
    arm_implementer: int | None = None
    arm_part: int | None = None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse /proc/cpuinfo (x86 or ARM). Physical cores count distinct (socket, core id) pairs."""
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    procs: list[dict[str, str]] = []
    header: dict[str, str] = {}
    for block in blocks:
        d: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                d[key.strip()] = value.strip()
        if "processor" in d and d["processor"].isdigit():
            procs.append(d)
        else:
            header.update(d)  # ARM prints model/hardware lines outside the per-CPU blocks
    first = procs[0] if procs else header
    merged = {**header, **first}
    flags = frozenset((merged.get("flags") or merged.get("Features") or "").split())
    cores = {(p.get("physical id", "0"), p["core id"]) for p in procs if "core id" in p}
    sockets = {p.get("physical id", "0") for p in procs}
    implementer = _int(merged.get("CPU implementer"))
    vendor = merged.get("vendor_id") or _ARM_IMPLEMENTERS.get(implementer or -1, "ARM")
    model_name = merged.get("model name") or merged.get("Model") or merged.get("Hardware") or "unknown"
    return CpuInfo(
        vendor=vendor,
        model_name=" ".join(model_name.split()),
        family=_int(merged.get("cpu family")),
        model=_int(merged.get("model")) if "vendor_id" in merged else None,
        stepping=_int(merged.get("stepping")),
        flags=flags,
        logical_cores=max(1, len(procs)),
        physical_cores=max(1, len(cores) if cores else len(procs)),
        sockets=max(1, len(sockets)),
        arm_implementer=implementer,
        arm_part=_int(merged.get("CPU part")),
    )


_ARM_IMPLEMENTERS = {0x41: "ARM", 0x61: "Apple", 0x48: "HiSilicon", 0xC0: "Ampere", 0x51: "Qualcomm"}

# Intel family 6 model numbers (Intel SDM vol. 4, table 2-1) for the server and client parts
# commodity DL boxes use. A model missing here is reported as None, never guessed.
_INTEL_FAMILY6 = {
    0x3F: "Haswell",
    0x3C: "Haswell",
    0x4F: "Broadwell",
    0x56: "Broadwell",
    0x4E: "Skylake",
    0x5E: "Skylake",
    0x55: "Skylake-SP",  # Cascade Lake / Cooper Lake share the model: stepping decides
    0x8E: "Kaby Lake",
    0x9E: "Coffee Lake",
    0xA5: "Comet Lake",
    0x6A: "Ice Lake-SP",
    0x6C: "Ice Lake-SP",
    0x7E: "Ice Lake",
    0x8C: "Tiger Lake",
    0x8D: "Tiger Lake",
    0x97: "Alder Lake",
    0x9A: "Alder Lake",
    0xB7: "Raptor Lake",
    0xBA: "Raptor Lake",
    0xBF: "Raptor Lake",
    0xAA: "Meteor Lake",
    0x8F: "Sapphire Rapids",
    0xCF: "Emerald Rapids",
    0xAD: "Granite Rapids",
    0xAF: "Sierra Forest",
}

# AMD: family 0x17 is Zen/Zen+/Zen 2, 0x19 Zen 3/Zen 4, 0x1A Zen 5 (AMD PPR documents).
_AMD_ZEN4_MODELS = set(range(0x10, 0x20)) | set(range(0x60, 0x80)) | set(range(0xA0, 0xB0))
_AMD_ZEN2_MODELS = {0x31, 0x47, 0x60, 0x68, 0x71, 0x90, 0x98, 0xA0}

_ARM_PARTS = {
    (0x41, 0xD0C): "Neoverse N1",
    (0x41, 0xD40): "Neoverse V1",
    (0x41, 0xD49): "Neoverse N2",
    (0x41, 0xD4F): "Neoverse V2",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD08): "Cortex-A72",
    (0xC0, 0xAC3): "AmpereOne",
}


def microarchitecture(info: CpuInfo) -> str | None:
    """Name of the core microarchitecture, or None when the table does not know the part."""
    if info.vendor == "GenuineIntel" and info.family == 6 and info.model is not None:
        name = _INTEL_FAMILY6.get(info.model)
        if info.model == 0x55 and info.stepping is not None:
            if info.stepping >= 10:
                return "Cooper Lake"
            if info.stepping >= 5:
                return "Cascade Lake"
        return name
    if info.vendor == "AuthenticAMD" and info.family is not None and info.model is not None:
        if info.family == 0x17:
            return "Zen 2" if info.model in _AMD_ZEN2_MODELS else "Zen"
        if info.family == 0x19:
            return "Zen 4" if info.model in _AMD_ZEN4_MODELS else "Zen 3"
        if info.family == 0x1A:
            return "Zen 5"
        return None
    if info.arm_implementer is not None and info.arm_part is not None:
        return _ARM_PARTS.get((info.arm_implementer, info.arm_part))
    return None
