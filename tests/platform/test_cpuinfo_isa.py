"""/proc/cpuinfo parsing, microarchitecture names, ISA detection and caps."""

from __future__ import annotations

import pytest

from rooftune.platform import (
    ALLOWED_CAPS,
    CpuInfo,
    apply_cap,
    detect_isa,
    isa_cap,
    microarchitecture,
    parse_cpuinfo,
    vector_bytes,
)

SPR_ISA = frozenset(
    {
        "sse4_1",
        "avx",
        "avx2",
        "fma",
        "avx_vnni",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
        "amx",
        "amx_bf16",
        "amx_int8",
    }
)


def _cpuinfo(root) -> str:
    return (root / "proc/cpuinfo").read_text()


def _x86(vendor: str, family: int, model: int, stepping: int | None = 0) -> CpuInfo:
    return CpuInfo(
        vendor=vendor,
        model_name="x",
        family=family,
        model=model,
        stepping=stepping,
        flags=frozenset(),
        logical_cores=1,
        physical_cores=1,
        sockets=1,
    )


# --------------------------------------------------------------------------- parse_cpuinfo


def test_parse_intel_two_sockets_with_smt(fake_root) -> None:
    info = parse_cpuinfo(_cpuinfo(fake_root("intel_spr")))
    assert info.vendor == "GenuineIntel"
    assert info.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert (info.family, info.model, info.stepping) == (6, 143, 8)
    assert (info.logical_cores, info.physical_cores, info.sockets) == (8, 4, 2)
    assert {"avx512f", "amx_tile", "avx_vnni", "sse4_1"} <= info.flags
    assert (info.arm_implementer, info.arm_part) == (None, None)


def test_parse_amd_zen5(fake_root) -> None:
    info = parse_cpuinfo(_cpuinfo(fake_root("amd_zen5")))
    assert info.vendor == "AuthenticAMD"
    assert info.model_name == "AMD EPYC"
    assert (info.family, info.model, info.stepping) == (26, 2, 1)
    assert (info.logical_cores, info.physical_cores, info.sockets) == (2, 2, 1)


def test_parse_arm_neoverse_n1(fake_root) -> None:
    info = parse_cpuinfo(_cpuinfo(fake_root("arm_n1")))
    assert info.vendor == "ARM"
    assert info.arm_implementer == 0x41
    assert info.arm_part == 0xD0C
    assert info.family is None and info.model is None
    assert "asimd" in info.flags
    assert (info.logical_cores, info.physical_cores, info.sockets) == (4, 4, 1)


def test_parse_old_arm_format_with_header_lines() -> None:
    # Older arm64 kernels print "Processor" and "Hardware" outside the per-CPU blocks.
    text = (
        "Processor\t: AArch64 Processor rev 1 (aarch64)\n"
        "\n"
        "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n"
        "\n"
        "processor\t: 1\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n"
        "\n"
        "Hardware\t: BCM2835\n"
    )
    info = parse_cpuinfo(text)
    assert info.model_name == "BCM2835"
    assert info.logical_cores == 2
    assert microarchitecture(info) == "Cortex-A72"


def test_model_name_whitespace_is_collapsed() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        "model name\t: Intel(R) Xeon(R) CPU  E5-2680 v4  @ 2.40GHz\n"
    )
    assert parse_cpuinfo(text).model_name == "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz"


def test_unknown_arm_implementer_is_called_arm() -> None:
    info = parse_cpuinfo("processor\t: 0\nCPU implementer\t: 0x4e\nCPU part\t: 0x004\n")
    assert info.vendor == "ARM"
    assert microarchitecture(info) is None


# --------------------------------------------------------------------------- microarchitecture


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        ("intel_spr", "Sapphire Rapids"),
        ("amd_zen5", "Zen 5"),
        ("epyc_v1_quota", "Zen 2"),
        ("arm_n1", "Neoverse N1"),
    ],
)
def test_microarchitecture_of_recorded_machines(fake_root, builder: str, expected: str) -> None:
    assert microarchitecture(parse_cpuinfo(_cpuinfo(fake_root(builder)))) == expected


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (_x86("GenuineIntel", 6, 0x55, 4), "Skylake-SP"),
        (_x86("GenuineIntel", 6, 0x55, 7), "Cascade Lake"),
        (_x86("GenuineIntel", 6, 0x55, 11), "Cooper Lake"),
        (_x86("GenuineIntel", 6, 0x55, None), "Skylake-SP"),
        (_x86("GenuineIntel", 6, 0xCF), "Emerald Rapids"),
        (_x86("GenuineIntel", 6, 0x01), None),  # unknown model: never guessed
        (_x86("GenuineIntel", 15, 0x8F), None),
        (_x86("AuthenticAMD", 0x17, 0x01), "Zen"),
        (_x86("AuthenticAMD", 0x17, 0x31), "Zen 2"),
        (_x86("AuthenticAMD", 0x19, 0x01), "Zen 3"),
        (_x86("AuthenticAMD", 0x19, 0x11), "Zen 4"),
        (_x86("AuthenticAMD", 0x1A, 0x44), "Zen 5"),
        (_x86("AuthenticAMD", 0x15, 0x01), None),
        (_x86("HygonGenuine", 0x18, 0x01), None),
    ],
)
def test_microarchitecture_table(info: CpuInfo, expected: str | None) -> None:
    assert microarchitecture(info) == expected


# --------------------------------------------------------------------------- ISA


def test_detect_isa_sapphire_rapids(fake_root) -> None:
    flags = parse_cpuinfo(_cpuinfo(fake_root("intel_spr"))).flags
    assert detect_isa(flags, "x86_64") == SPR_ISA


def test_detect_isa_zen2_has_no_avx512(fake_root) -> None:
    flags = parse_cpuinfo(_cpuinfo(fake_root("epyc_v1_quota"))).flags
    assert detect_isa(flags, "x86_64") == {"sse4_1", "avx", "avx2", "fma"}


def test_detect_isa_arm() -> None:
    assert detect_isa(frozenset({"fp", "asimd", "crc32"}), "aarch64") == {"neon"}
    assert detect_isa(frozenset({"neon", "sve", "sve2", "bf16", "i8mm"}), "arm64") == {
        "neon",
        "sve",
        "sve2",
        "bf16",
        "i8mm",
    }
    # The ARM table is not consulted on x86 and vice versa.
    assert detect_isa(frozenset({"asimd", "avx2"}), "x86_64") == {"avx2"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2"),
        ({"ONEDNN_MAX_CPU_ISA": " avx512_core_vnni "}, "avx512_core_vnni"),
        ({"DNNL_MAX_CPU_ISA": "AVX512_CORE"}, "avx512_core"),
        ({"ONEDNN_MAX_CPU_ISA": "avx10_1_512_amx"}, "avx512_core_amx"),
        ({"ATEN_CPU_CAPABILITY": "default"}, "sse41"),
        ({"MKL_ENABLE_INSTRUCTIONS": "AVX512_E1"}, "avx512_core_vnni"),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core_amx", "ATEN_CPU_CAPABILITY": "avx2"}, "avx2"),
        ({"ONEDNN_MAX_CPU_ISA": "ALL"}, None),  # unknown value: ignored, as oneDNN ignores it
        ({"ONEDNN_MAX_CPU_ISA": ""}, None),
        ({"OMP_NUM_THREADS": "4"}, None),
    ],
)
def test_isa_cap(env: dict[str, str], expected: str | None) -> None:
    assert isa_cap(env) == expected


def test_apply_cap() -> None:
    assert apply_cap(SPR_ISA, None) == SPR_ISA
    assert apply_cap(SPR_ISA, "avx512_core_amx") == SPR_ISA
    assert apply_cap(SPR_ISA, "avx2") == {"sse4_1", "avx", "avx2", "fma"}
    # avx_vnni (AVX2-VNNI) sits below avx512_core, so it survives that cap.
    assert apply_cap(SPR_ISA, "avx512_core") == {"sse4_1", "avx", "avx2", "fma", "avx_vnni", "avx512f"}
    assert apply_cap(SPR_ISA, "sse41") == {"sse4_1"}


def test_allowed_caps_are_the_levels() -> None:
    assert ALLOWED_CAPS == sorted(
        [
            "sse41",
            "avx",
            "avx2",
            "avx2_vnni",
            "avx512_core",
            "avx512_core_vnni",
            "avx512_core_bf16",
            "avx512_core_amx",
        ]
    )


def test_vector_bytes() -> None:
    assert vector_bytes(SPR_ISA) == 64
    assert vector_bytes(apply_cap(SPR_ISA, "avx2")) == 32
    assert vector_bytes(frozenset({"sse4_1"})) == 16
    assert vector_bytes(frozenset({"neon"})) == 16
