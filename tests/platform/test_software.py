"""OpenMP runtime detection, torch build configuration and the kernel-relevant environment."""

from __future__ import annotations

from rooftune.platform.software import kernel_environment, openmp_runtime, parse_torch_config

MAPS_IOMP_AND_GOMP = (
    "7f1c2a000000-7f1c2a0a1000 r--p 00000000 08:01 1311 /opt/conda/lib/libgomp.so.1.0.0\n"
    "7f1c2b000000-7f1c2b1f0000 r-xp 00000000 08:01 1312 /opt/intel/oneapi/lib/libiomp5.so\n"
    "7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0 \n"
    "7ffd5e8a2000-7ffd5e8c3000 rw-p 00000000 00:00 0                          [stack]\n"
)
MAPS_GOMP = "7f1c2a000000-7f1c2a0a1000 r-xp 00000000 08:01 1311 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"

BRIEF_CONFIG = (
    "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 "
    "architecture applications\n"
    "  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)\n"
    "  - CPU capability usage: AVX512\n"
)


def test_parse_torch_config(torch_config: str) -> None:
    expected = {"onednn": "3.12.0", "mkl": "2024.2-Product", "aten_cpu_capability": "avx512"}
    assert parse_torch_config(BRIEF_CONFIG) == expected
    assert parse_torch_config(torch_config) == expected  # the full show() text


def test_parse_torch_config_aarch64_build() -> None:
    # aarch64 wheels: oneDNN under its new name, no MKL, ATen on NEON ("DEFAULT").
    config = (
        "PyTorch built with:\n  - GCC 11.2\n"
        "  - Intel(R) oneDNN v3.5.3 (Git Hash 66f0cb9eb66affd2da3bf5f8d897376f04aae6af)\n"
        "  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n  - CPU capability usage: DEFAULT\n"
    )
    assert parse_torch_config(config) == {"onednn": "3.5.3", "mkl": None, "aten_cpu_capability": "default"}


def test_parse_torch_config_empty() -> None:
    assert parse_torch_config("") == {"onednn": None, "mkl": None, "aten_cpu_capability": None}


def test_openmp_runtime_prefers_intel_when_both_are_mapped() -> None:
    assert openmp_runtime(MAPS_IOMP_AND_GOMP) == {
        "name": "intel",
        "library": "libiomp5.so",
        "path": "/opt/intel/oneapi/lib/libiomp5.so",
    }


def test_openmp_runtime_gnu_llvm_and_none() -> None:
    assert openmp_runtime(MAPS_GOMP) == {
        "name": "gnu",
        "library": "libgomp.so.1.0.0",
        "path": "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0",
    }
    llvm = "7f00-7f10 r-xp 00000000 08:01 9 /usr/lib/llvm-17/lib/libomp.so.5\n" + MAPS_GOMP
    assert openmp_runtime(llvm)["name"] == "llvm"  # type: ignore[index]
    assert openmp_runtime("7ffd5e8a2000-7ffd5e8c3000 rw-p 00000000 00:00 0   [stack]\n") is None
    assert openmp_runtime("") is None


def test_kernel_environment_picks_kernel_variables_only() -> None:
    env = {
        "HOME": "/root",
        "PATH": "/usr/bin",
        "KMP_BLOCKTIME": "1",
        "OMP_NUM_THREADS": "4",
        "LD_PRELOAD": "/usr/lib/libjemalloc.so",
        "ONEDNN_VERBOSE": "0",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MY_OMP_NUM_THREADS": "9",
        "TORCH_HOME": "/data",
    }
    picked = kernel_environment(env)
    assert picked == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "KMP_BLOCKTIME": "1",
        "LD_PRELOAD": "/usr/lib/libjemalloc.so",
        "OMP_NUM_THREADS": "4",
        "ONEDNN_VERBOSE": "0",
    }
    assert list(picked) == sorted(picked)
