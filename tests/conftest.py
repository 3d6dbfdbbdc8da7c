"""Shared fixtures: recorded machine file trees (a fake "/") and a Platform built from one.

The trees are written into ``tmp_path`` by the builders below instead of being committed as many
tiny files. Each builder models a real machine's /proc and /sys closely enough for
:func:`rooftune.platform.collect` to fingerprint it without reading anything live.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from rooftune.platform import Platform, collect


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may run on (not the host's count, which a
    container or a cgroup can hide), at most four: each worker holds its own torch."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (the README's command runs one worker per core) each worker keeps to one
    torch thread: two workers whose OpenMP threads spin for the same two cores ran the suite's
    model fits five times slower than one worker alone."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)

#: Excerpt of ``torch.__config__.show()`` from a torch 2.x CPU build.
TORCH_CONFIG = (
    "PyTorch built with:\n"
    "  - GCC 13.3\n"
    "  - C++ Version: 202002\n"
    "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 "
    "architecture applications\n"
    "  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)\n"
    "  - OpenMP 201511 (a.k.a. OpenMP 4.5)\n"
    "  - LAPACK is enabled (usually provided by MKL)\n"
    "  - CPU capability usage: AVX512\n"
)

#: /proc/self/maps lines of a process with both Intel's and GNU's OpenMP runtimes mapped.
MAPS_IOMP_AND_GOMP = (
    "7f1c2a000000-7f1c2a0a1000 r--p 00000000 08:01 1311 /opt/conda/lib/libgomp.so.1.0.0\n"
    "7f1c2b000000-7f1c2b1f0000 r-xp 00000000 08:01 1312 /opt/intel/oneapi/lib/libiomp5.so\n"
    "7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0 \n"
    "7ffd5e8a2000-7ffd5e8c3000 rw-p 00000000 00:00 0                          [stack]\n"
)
MAPS_GOMP = (
    "7f1c2a000000-7f1c2a0a1000 r-xp 00000000 08:01 1311 "
    "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
)

_INTEL_SPR_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr "
    "sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good "
    "nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx "
    "smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt "
    "tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 "
    "cat_l2 cdp_l3 invpcid_single cdp_l2 ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow "
    "flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm "
    "rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni "
    "avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total "
    "cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi "
    "avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg "
    "tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b enqcmd fsrm md_clear "
    "serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d "
    "arch_capabilities"
)

_AMD_ZEN5_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
    "ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc "
    "cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe "
    "popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm "
    "sse4a misalignsse 3dnowprefetch osvw topoext vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 "
    "erms invpcid avx512f avx512dq adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw "
    "avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 clzero xsaveerptr arat avx512vbmi "
    "umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm "
    "avx512_vp2intersect"
)

_EPYC_ROME_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
    "ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid "
    "extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes "
    "xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse "
    "3dnowprefetch osvw topoext fsgsbase bmi1 avx2 smep bmi2 rdseed adx smap clflushopt clwb sha_ni "
    "xsaveopt xsavec xgetbv1 clzero xsaveerptr arat umip rdpid"
)

_NEOVERSE_N1_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs"
)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: content}`` under ``root`` (directories are created)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def _x86_cpuinfo(
    cpus: Iterable[tuple[int, int, int]],
    *,
    vendor: str,
    family: int,
    model: int,
    model_name: str,
    stepping: int,
    flags: str,
    cores_per_socket: int,
    siblings: int,
    cache_size: str,
) -> str:
    """/proc/cpuinfo for x86 CPUs given as (processor, physical id, core id)."""
    blocks = []
    for proc, phys, core in cpus:
        blocks.append(
            f"processor\t: {proc}\n"
            f"vendor_id\t: {vendor}\n"
            f"cpu family\t: {family}\n"
            f"model\t\t: {model}\n"
            f"model name\t: {model_name}\n"
            f"stepping\t: {stepping}\n"
            "microcode\t: 0x2b000590\n"
            "cpu MHz\t\t: 2000.000\n"
            f"cache size\t: {cache_size}\n"
            f"physical id\t: {phys}\n"
            f"siblings\t: {siblings}\n"
            f"core id\t\t: {core}\n"
            f"cpu cores\t: {cores_per_socket}\n"
            f"apicid\t\t: {proc * 2}\n"
            f"initial apicid\t: {proc * 2}\n"
            "fpu\t\t: yes\n"
            "fpu_exception\t: yes\n"
            "cpuid level\t: 32\n"
            "wp\t\t: yes\n"
            f"flags\t\t: {flags}\n"
            "bogomips\t: 4000.00\n"
            "clflush size\t: 64\n"
            "cache_alignment\t: 64\n"
            "address sizes\t: 52 bits physical, 57 bits virtual\n"
            "power management:\n"
        )
    return "\n".join(blocks) + "\n"


def _cache_files(cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> dict[str, str]:
    d = f"sys/devices/system/cpu/cpu{cpu}/cache/index{index}"
    return {
        f"{d}/level": f"{level}\n",
        f"{d}/type": f"{kind}\n",
        f"{d}/size": f"{size}\n",
        f"{d}/shared_cpu_list": f"{shared}\n",
        f"{d}/coherency_line_size": "64\n",
    }


def _topology(siblings: dict[int, str]) -> dict[str, str]:
    return {
        f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list": f"{s}\n"
        for cpu, s in siblings.items()
    }


def _numa(nodes: dict[int, str]) -> dict[str, str]:
    return {f"sys/devices/system/node/node{n}/cpulist": f"{cpus}\n" for n, cpus in nodes.items()}


def build_intel_spr(root: Path, *, cpu_max: str | None = "150000 100000") -> Path:
    """2 x Xeon Platinum 8480+ (Sapphire Rapids, family 6 model 143), trimmed to 2 cores x 2 threads
    per socket: CPUs 0-3 are the first threads of the 4 cores, 4-7 their SMT siblings. cgroup v2,
    the job's group under kubepods has ``cpu.max`` = ``cpu_max`` (None: no limit anywhere)."""
    # (processor, physical id, core id)
    cpus = [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 0, 0), (5, 0, 1), (6, 1, 0), (7, 1, 1)]
    files = {
        "proc/cpuinfo": _x86_cpuinfo(
            cpus,
            vendor="GenuineIntel",
            family=6,
            model=143,
            model_name="Intel(R) Xeon(R) Platinum 8480+",
            stepping=8,
            flags=_INTEL_SPR_FLAGS,
            cores_per_socket=2,
            siblings=4,
            cache_size="107520 KB",
        ),
        "proc/self/cgroup": "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n",
        "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
        "sys/fs/cgroup/cpu.max": "max 100000\n",
        "sys/fs/cgroup/kubepods.slice/cpu.max": "max 100000\n",
    }
    if cpu_max is not None:
        files["sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope/cpu.max"] = (
            f"{cpu_max}\n"
        )
    siblings = {0: "0,4", 1: "1,5", 2: "2,6", 3: "3,7", 4: "0,4", 5: "1,5", 6: "2,6", 7: "3,7"}
    socket_cpus = {0: "0-1,4-5", 1: "2-3,6-7"}
    for cpu, _phys, _core in cpus:
        files.update(_cache_files(cpu, 0, 1, "Data", "48K", siblings[cpu]))
        files.update(_cache_files(cpu, 1, 1, "Instruction", "32K", siblings[cpu]))
        files.update(_cache_files(cpu, 2, 2, "Unified", "2048K", siblings[cpu]))
        files.update(_cache_files(cpu, 3, 3, "Unified", "107520K", socket_cpus[_phys]))
    files.update(_topology(siblings))
    files.update(_numa(socket_cpus))
    return write_tree(root, files)


def build_amd_zen5(root: Path) -> Path:
    """The 2-vCPU AMD EPYC (Zen 5, family 26 model 2) VM the suite is developed on, as recorded:
    hybrid cgroup v1 with ``cpu.cfs_quota_us`` = -1 (no limit), one core per vCPU, L3 shared."""
    cpus = [(0, 0, 0), (1, 0, 1)]
    files = {
        "proc/cpuinfo": _x86_cpuinfo(
            cpus,
            vendor="AuthenticAMD",
            family=26,
            model=2,
            model_name="AMD EPYC",
            stepping=1,
            flags=_AMD_ZEN5_FLAGS,
            cores_per_socket=2,
            siblings=2,
            cache_size="1024 KB",
        ),
        "proc/self/cgroup": (
            "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n5:devices:/\n"
            "4:memory:/process_api/a1e8b15b6ff7e9e87880baca62943989\n3:cpuset:/\n2:cpuacct:/\n"
            "1:cpu:/\n0::/\n"
        ),
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        "sys/fs/cgroup/cpu/cpu.shares": "1024\n",
        "sys/fs/cgroup/cpuacct/cpuacct.usage": "123456789\n",
        "sys/fs/cgroup/unified/cgroup.controllers": "\n",
    }
    for cpu in (0, 1):
        files.update(_cache_files(cpu, 0, 1, "Data", "48K", str(cpu)))
        files.update(_cache_files(cpu, 1, 1, "Instruction", "32K", str(cpu)))
        files.update(_cache_files(cpu, 2, 2, "Unified", "1024K", str(cpu)))
        files.update(_cache_files(cpu, 3, 3, "Unified", "32768K", "0-1"))
    files.update(_topology({0: "0", 1: "1"}))
    files.update(_numa({0: "0-1"}))
    return write_tree(root, files)


def build_epyc_v1_quota(root: Path) -> Path:
    """A 4-core AMD EPYC 7R32 (Zen 2) VM in a Docker container on cgroup v1 with a 2-CPU limit
    (``--cpus 2``: quota 200000 us per 100000 us period), the v1 controllers co-mounted."""
    cpus = [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 0, 3)]
    group = "docker/5f2c0e9d1a7b"
    files = {
        "proc/cpuinfo": _x86_cpuinfo(
            cpus,
            vendor="AuthenticAMD",
            family=23,
            model=49,
            model_name="AMD EPYC 7R32",
            stepping=0,
            flags=_EPYC_ROME_FLAGS,
            cores_per_socket=4,
            siblings=4,
            cache_size="512 KB",
        ),
        "proc/self/cgroup": (
            f"11:memory:/{group}\n4:cpu,cpuacct:/{group}\n3:cpuset:/{group}\n1:name=systemd:/{group}\n"
        ),
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        f"sys/fs/cgroup/cpu,cpuacct/{group}/cpu.cfs_quota_us": "200000\n",
        f"sys/fs/cgroup/cpu,cpuacct/{group}/cpu.cfs_period_us": "100000\n",
    }
    for cpu in range(4):
        files.update(_cache_files(cpu, 0, 1, "Data", "32K", str(cpu)))
        files.update(_cache_files(cpu, 1, 1, "Instruction", "32K", str(cpu)))
        files.update(_cache_files(cpu, 2, 2, "Unified", "512K", str(cpu)))
        files.update(_cache_files(cpu, 3, 3, "Unified", "16384K", "0-3"))
    files.update(_topology({c: str(c) for c in range(4)}))
    files.update(_numa({0: "0-3"}))
    return write_tree(root, files)


def build_arm_neoverse_n1(root: Path) -> Path:
    """A 4-vCPU AWS Graviton2 (Neoverse N1) instance: ARM cpuinfo, cgroup v2 with no limit."""
    blocks = [
        f"processor\t: {i}\n"
        "BogoMIPS\t: 243.75\n"
        f"Features\t: {_NEOVERSE_N1_FEATURES}\n"
        "CPU implementer\t: 0x41\n"
        "CPU architecture: 8\n"
        "CPU variant\t: 0x3\n"
        "CPU part\t: 0xd0c\n"
        "CPU revision\t: 1\n"
        for i in range(4)
    ]
    files = {
        "proc/cpuinfo": "\n".join(blocks) + "\n",
        "proc/self/cgroup": "0::/\n",
        "sys/fs/cgroup/cpu.max": "max 100000\n",
    }
    for cpu in range(4):
        files.update(_cache_files(cpu, 0, 1, "Data", "64K", str(cpu)))
        files.update(_cache_files(cpu, 1, 1, "Instruction", "64K", str(cpu)))
        files.update(_cache_files(cpu, 2, 2, "Unified", "1024K", str(cpu)))
        files.update(_cache_files(cpu, 3, 3, "Unified", "32768K", "0-3"))
    files.update(_topology({c: str(c) for c in range(4)}))
    files.update(_numa({0: "0-3"}))
    return write_tree(root, files)


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "intel_spr": build_intel_spr,
    "amd_zen5": build_amd_zen5,
    "epyc_v1_quota": build_epyc_v1_quota,
    "arm_n1": build_arm_neoverse_n1,
}


@pytest.fixture
def fake_root(tmp_path: Path) -> Callable[..., Path]:
    """``fake_root(name, **options)``: a fresh recorded tree (see BUILDERS) under tmp_path."""
    counter = iter(range(1_000_000))

    def make(name: str, **options: object) -> Path:
        root = tmp_path / f"root-{name}-{next(counter)}"
        root.mkdir()
        return BUILDERS[name](root, **options)  # type: ignore[call-arg]

    return make


@pytest.fixture
def torch_config() -> str:
    return TORCH_CONFIG


def collect_fake(root: Path | str, **overrides: object) -> Platform:
    """collect() on a recorded tree with nothing live: empty env, affinity = all CPUs, GNU OpenMP."""
    n_cpus = len(list((Path(root) / "sys/devices/system/cpu").glob("cpu[0-9]*")))
    kwargs: dict[str, object] = {
        "env": {},
        "affinity": tuple(range(n_cpus)),
        "maps_text": MAPS_GOMP,
        "torch_config": TORCH_CONFIG,
    }
    kwargs.update(overrides)
    return collect(root=root, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def collect_on() -> Callable[..., Platform]:
    """``collect_on(root, **overrides)``: see :func:`collect_fake`."""
    return collect_fake


@pytest.fixture
def fake_platform(fake_root: Callable[..., Path]) -> Platform:
    """The development machine (AMD Zen 5, 2 cores) fingerprinted from its recording."""
    return collect_fake(fake_root("amd_zen5"), env={"OMP_NUM_THREADS": "2"})


def make_ceilings(platform: Platform, *, quick: bool = False) -> Any:
    """Ceilings with round numbers for ``platform`` (threads 1..usable), without measuring."""
    from rooftune.machine import Ceilings

    threads = tuple(range(1, platform.usable_cores + 1))
    per_thread = {
        "fp32": {t: 100e9 * t for t in threads},
        "fp64": {t: 50e9 * t for t in threads},
        "gemm_fp32": {t: 80e9 * t for t in threads},
    }
    return Ceilings(
        platform=platform,
        threads=threads,
        peak_flops={k: v[max(threads)] for k, v in per_thread.items()},
        peak_flops_per_thread=per_thread,
        bandwidth={"L1": 1000e9, "L2": 400e9, "L3": 200e9, "DRAM": 50e9},
        bandwidth_by_kernel={},
        plateaus={},
        sweep={},
        capacity_bytes={"L1": 64 * 1024, "L2": 1024**2, "L3": 32 * 1024**2},
        dispatch_overhead_s=2e-6,
        quick=quick,
        measured_at=0.0,
        duration_s=0.0,
        skipped={"gemm_bf16": "not measured in tests", "gemm_int8": "not measured in tests"},
    )


@pytest.fixture
def ceilings_db(tmp_path: Path) -> Path:
    """A store holding made-up ceilings of this machine, so analyses run without measuring."""
    from rooftune.platform import current_platform
    from rooftune.store import Store

    platform = current_platform()
    path = tmp_path / "ceilings.db"
    c = make_ceilings(platform)
    with Store(path) as s:
        s.save_ceilings(platform, c.to_dict(), quick=False, threads=c.threads)
    return path
