"""ISA features that change kernels, and the caps that frameworks honour."""

from __future__ import annotations

from collections.abc import Mapping

#: The features that select different kernels in oneDNN, MKL, ATen and the ceiling microkernels.
#: Keys are rooftune's names; values the /proc/cpuinfo flags that imply them.
X86_FEATURES: dict[str, tuple[str, ...]] = {
    "sse4_1": ("sse4_1",),
    "avx": ("avx",),
    "avx2": ("avx2",),
    "fma": ("fma",),
    "avx512f": ("avx512f",),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
    "amx": ("amx_tile",),
    "amx_bf16": ("amx_bf16",),
    "amx_int8": ("amx_int8",),
    "avx_vnni": ("avx_vnni",),
}
ARM_FEATURES: dict[str, tuple[str, ...]] = {
    "neon": ("asimd", "neon"),
    "sve": ("sve",),
    "sve2": ("sve2",),
    "bf16": ("bf16",),
    "i8mm": ("i8mm",),
}

# ISA levels in increasing order; a cap at level L removes every feature introduced above it.
_X86_LEVELS: list[tuple[str, frozenset[str]]] = [
    ("sse41", frozenset({"sse4_1"})),
    ("avx", frozenset({"avx"})),
    ("avx2", frozenset({"avx2", "fma"})),
    ("avx2_vnni", frozenset({"avx_vnni"})),
    ("avx512_core", frozenset({"avx512f"})),
    ("avx512_core_vnni", frozenset({"avx512_vnni"})),
    ("avx512_core_bf16", frozenset({"avx512_bf16"})),
    ("avx512_core_amx", frozenset({"amx", "amx_bf16", "amx_int8"})),
]
_LEVEL_INDEX = {name: i for i, (name, _) in enumerate(_X86_LEVELS)}

# What each environment variable's values mean, mapped onto the levels above.
_CAP_VARIABLES: dict[str, dict[str, str]] = {
    # oneDNN (docs: "CPU ISA hints"); DNNL_MAX_CPU_ISA is its older spelling.
    "ONEDNN_MAX_CPU_ISA": {
        "sse41": "sse41",
        "avx": "avx",
        "avx2": "avx2",
        "avx2_vnni": "avx2_vnni",
        "avx2_vnni_2": "avx2_vnni",
        "avx512_core": "avx512_core",
        "avx512_core_vnni": "avx512_core_vnni",
        "avx512_core_bf16": "avx512_core_bf16",
        "avx10_1_512": "avx512_core_bf16",
        "avx512_core_fp16": "avx512_core_bf16",
        "avx512_core_amx": "avx512_core_amx",
        "avx10_1_512_amx": "avx512_core_amx",
    },
    # ATen's dispatch: default (no vector extensions beyond SSE), avx2, avx512.
    "ATEN_CPU_CAPABILITY": {"default": "sse41", "avx2": "avx2", "avx512": "avx512_core_bf16"},
    # MKL: AVX2, AVX512, AVX512_E1 (VNNI), AVX512_E4/E5 (AMX/BF16)...
    "MKL_ENABLE_INSTRUCTIONS": {
        "sse4_2": "sse41",
        "avx": "avx",
        "avx2": "avx2",
        "avx512": "avx512_core",
        "avx512_e1": "avx512_core_vnni",
        "avx512_e2": "avx512_core_vnni",
        "avx512_e3": "avx512_core_bf16",
        "avx512_e4": "avx512_core_amx",
        "avx512_e5": "avx512_core_amx",
    },
}
_CAP_VARIABLES["DNNL_MAX_CPU_ISA"] = _CAP_VARIABLES["ONEDNN_MAX_CPU_ISA"]

ALLOWED_CAPS = sorted(_LEVEL_INDEX)


def detect_isa(flags: frozenset[str], arch: str) -> frozenset[str]:
    """The kernel-relevant features present in ``flags``."""
    table = ARM_FEATURES if arch in ("aarch64", "arm64") else X86_FEATURES
    return frozenset(name for name, sources in table.items() if any(f in flags for f in sources))


def isa_cap(env: Mapping[str, str]) -> str | None:
    """The most restrictive ISA level any cap variable in ``env`` asks for (None when uncapped).

    An unknown value is ignored, as the libraries themselves ignore it.
    """
    levels = []
    for var, table in _CAP_VARIABLES.items():
        value = env.get(var)
        if value:
            level = table.get(value.strip().lower())
            if level is not None:
                levels.append(_LEVEL_INDEX[level])
    return _X86_LEVELS[min(levels)][0] if levels else None


def apply_cap(isa: frozenset[str], cap: str | None) -> frozenset[str]:
    """Remove every feature above ``cap`` (an x86 level name) from ``isa``."""
    if cap is None:
        return isa
    removed: set[str] = set()
    for _, features in _X86_LEVELS[_LEVEL_INDEX[cap] + 1 :]:
        removed |= features
    return isa - removed


def vector_bytes(isa: frozenset[str]) -> int:
    """Widest SIMD register the ceiling kernels may use under ``isa``."""
    if "avx512f" in isa:
        return 64
    if "avx" in isa:
        return 32
    return 16  # SSE and NEON
