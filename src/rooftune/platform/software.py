"""The software that changes kernels: OpenMP runtime, torch/oneDNN/MKL versions, environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

# Shared-object names of the OpenMP runtimes a PyTorch process may load, in the order they are
# reported when several are mapped (Intel's wins: it is the one that was preloaded on purpose).
_OPENMP_LIBRARIES = (
    ("libiomp5", "intel"),
    ("libomp.so", "llvm"),
    ("libgomp", "gnu"),
)

#: Variables read by OpenMP runtimes, MKL, oneDNN, ATen and the loader that change which kernel
#: runs or how many threads it gets.
KERNEL_ENV_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "ONEDNN_", "DNNL_")
KERNEL_ENV_NAMES = ("ATEN_CPU_CAPABILITY", "LD_PRELOAD", "MALLOC_CONF", "TORCH_NUM_THREADS")
#: Variables that match the prefixes but change no kernel: scikit-learn sets both on import (a
#: duplicate-runtime check and fork handling of Intel's OpenMP), which must not change the platform.
KERNEL_ENV_IGNORED = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")


def openmp_runtime(maps_text: str) -> dict[str, str] | None:
    """The OpenMP runtime mapped into a process, from its /proc/PID/maps. Where several copies are
    mapped (scikit-learn and others vendor their own libgomp), torch's own is the one reported: it
    runs the kernels, and the answer must not depend on what was imported first."""
    paths = {line.split()[-1] for line in maps_text.splitlines() if "/" in line}
    for marker, name in _OPENMP_LIBRARIES:
        for p in sorted(paths, key=lambda q: ("/torch/" not in q, q)):
            if marker in Path(p).name:
                return {"name": name, "library": Path(p).name, "path": p}
    return None


def parse_torch_config(config: str) -> dict[str, str | None]:
    """oneDNN and MKL versions and the ATen CPU capability from ``torch.__config__.show()``."""
    onednn = re.search(r"(?:MKL-DNN|oneDNN)\s+v?([\d.]+)", config)
    mkl = re.search(r"Math Kernel Library Version\s+([\w.\-]+)", config)
    cap = re.search(r"CPU capability usage:\s*(\S+)", config)
    return {
        "onednn": onednn.group(1) if onednn else None,
        "mkl": mkl.group(1) if mkl else None,
        "aten_cpu_capability": cap.group(1).lower() if cap else None,
    }


def kernel_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The subset of ``env`` that changes kernels or threading, sorted by name."""
    picked = {
        k: v
        for k, v in env.items()
        if (k.startswith(KERNEL_ENV_PREFIXES) or k in KERNEL_ENV_NAMES) and k not in KERNEL_ENV_IGNORED
    }
    return dict(sorted(picked.items()))
