"""collect() on recorded machines, the stable platform id, and Platform serialisation."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from rooftune.platform import Platform

K = 1024
M = 1024 * 1024
SPR_ISA = (
    "amx",
    "amx_bf16",
    "amx_int8",
    "avx",
    "avx2",
    "avx512_bf16",
    "avx512_vnni",
    "avx512f",
    "avx_vnni",
    "fma",
    "sse4_1",
)
MAPS_IOMP_AND_GOMP = (
    "7f1c2a000000-7f1c2a0a1000 r--p 00000000 08:01 1311 /opt/conda/lib/libgomp.so.1.0.0\n"
    "7f1c2b000000-7f1c2b1f0000 r-xp 00000000 08:01 1312 /opt/intel/oneapi/lib/libiomp5.so\n"
)


def test_collect_intel_sapphire_rapids(fake_root, collect_on) -> None:
    p = collect_on(fake_root("intel_spr"))
    assert p.arch == "x86_64"
    assert (p.vendor, p.cpu_model) == ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+")
    assert p.microarchitecture == "Sapphire Rapids"
    assert (p.family, p.model, p.stepping) == (6, 143, 8)
    assert p.isa == SPR_ISA
    assert p.effective_isa == SPR_ISA
    assert p.isa_cap is None
    assert (p.physical_cores, p.logical_cores, p.sockets) == (4, 8, 2)
    assert p.affinity == (0, 1, 2, 3, 4, 5, 6, 7)
    assert p.cpu_quota == 1.5
    assert p.usable_cores == 1
    assert p.usable_cpus() == (0,)
    assert [c.name for c in p.caches] == ["L1d", "L2", "L3"]
    assert p.numa_nodes == 2
    assert p.openmp == {
        "name": "gnu",
        "library": "libgomp.so.1.0.0",
        "path": "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0",
    }
    assert p.vector_bytes == 64
    assert p.kernel_env == {}
    v = p.library_versions
    assert (v["onednn"], v["mkl"], v["aten_cpu_capability"]) == ("3.12.0", "2024.2-Product", "avx512")
    assert {"python", "numpy", "numba", "rooftune", "torch"} <= set(v)


def test_collect_amd_zen5_dev_machine(fake_platform: Platform) -> None:
    p = fake_platform
    assert (p.vendor, p.cpu_model, p.microarchitecture) == ("AuthenticAMD", "AMD EPYC", "Zen 5")
    assert (p.family, p.model) == (26, 2)
    assert p.cpu_quota is None
    assert (p.physical_cores, p.usable_cores, p.usable_cpus()) == (2, 2, (0, 1))
    assert "avx512f" in p.isa and "amx" not in p.isa
    l1d, l2, l3 = (p.cache(n) for n in ("L1d", "L2", "L3"))
    assert l1d is not None and l2 is not None and l3 is not None
    assert (l1d.size_bytes, l2.size_bytes, l3.size_bytes) == (48 * K, 1024 * K, 32 * M)
    assert l1d.instances == ((0,), (1,))
    assert l3.instances == ((0, 1),)
    assert l1d.capacity_for((0, 1)) == 2 * 48 * K
    assert l3.capacity_for((0, 1)) == 32 * M
    assert p.cache("L4") is None
    assert p.numa_nodes == 1
    assert p.kernel_env == {"OMP_NUM_THREADS": "2"}


def test_collect_cgroup_v1_quota_limits_usable_cores(fake_root, collect_on) -> None:
    p = collect_on(fake_root("epyc_v1_quota"))
    assert p.microarchitecture == "Zen 2"
    assert p.physical_cores == 4
    assert p.cpu_quota == 2.0
    assert p.usable_cores == 2
    assert p.usable_cpus() == (0, 1)
    assert p.vector_bytes == 32


def test_collect_arm_neoverse_n1(fake_root, collect_on) -> None:
    # An x86 ISA cap variable means nothing on ARM.
    p = collect_on(fake_root("arm_n1"), env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert p.arch == "aarch64"
    assert p.vendor == "ARM"
    assert p.microarchitecture == "Neoverse N1"
    assert p.isa == ("neon",)
    assert p.effective_isa == ("neon",)
    assert p.isa_cap is None
    assert p.vector_bytes == 16
    assert (p.physical_cores, p.usable_cores, p.cpu_quota) == (4, 4, None)


@pytest.mark.parametrize(
    ("affinity", "ordered", "usable"),
    [
        ((5, 0, 4, 1), (0, 1, 4, 5), 2),  # SMT siblings go last
        ((4, 0), (0, 4), 1),  # two threads of one core are one usable core
        ((4, 5, 2), (2, 4, 5), 3),
        ((7,), (7,), 1),
    ],
)
def test_affinity_is_ordered_physical_first(fake_root, collect_on, affinity, ordered, usable) -> None:
    p = collect_on(fake_root("intel_spr", cpu_max=None), affinity=affinity)
    assert p.cpu_quota is None
    assert p.affinity == ordered
    assert p.usable_cores == usable
    assert p.usable_cpus() == ordered[:usable]


# --------------------------------------------------------------------------- the id


def test_id_is_stable_for_the_same_inputs(fake_root, collect_on) -> None:
    root = fake_root("intel_spr")
    a, b = collect_on(root), collect_on(str(root))
    assert re.fullmatch(r"[0-9a-f]{16}", a.id)
    assert a == b
    assert a.id == b.id
    # A second recording of the same machine in another place gives the same id.
    assert collect_on(fake_root("intel_spr")).id == a.id


def test_isa_cap_changes_id_and_effective_isa(fake_root, collect_on) -> None:
    root = fake_root("intel_spr")
    base = collect_on(root)
    capped = collect_on(root, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert capped.id != base.id
    assert capped.isa_cap == "avx2"
    assert capped.isa == base.isa
    assert "avx512f" in capped.isa
    assert capped.effective_isa == ("avx", "avx2", "fma", "sse4_1")
    assert capped.vector_bytes == 32
    assert capped.kernel_env == {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_id_ignores_hostname_and_non_kernel_env(fake_root, collect_on) -> None:
    root = fake_root("amd_zen5")
    p = collect_on(root)
    assert dataclasses.replace(p, hostname="other-host.example.com").id == p.id
    assert collect_on(root, env={"HOME": "/home/u", "PATH": "/bin"}).id == p.id


def test_id_follows_kernel_env_openmp_and_library_versions(fake_root, collect_on, torch_config) -> None:
    root = fake_root("amd_zen5")
    p = collect_on(root)
    assert collect_on(root, env={"OMP_NUM_THREADS": "1"}).id != p.id
    assert collect_on(root, env={"KMP_BLOCKTIME": "0"}).id != p.id
    assert collect_on(root, maps_text=MAPS_IOMP_AND_GOMP).id != p.id
    # The same runtime loaded from another directory is the same platform.
    moved = "7f00-7f10 r-xp 00000000 08:01 9 /opt/venv/lib/libgomp.so.1.0.0\n"
    assert collect_on(root, maps_text=moved).id == p.id
    newer = torch_config.replace("v3.12.0", "v3.13.1")
    assert collect_on(root, torch_config=newer).library_versions["onednn"] == "3.13.1"
    assert collect_on(root, torch_config=newer).id != p.id


def test_id_follows_usable_cores(fake_root, collect_on) -> None:
    root = fake_root("epyc_v1_quota")
    assert collect_on(root, affinity=(0,)).id != collect_on(root).id


def test_collect_picks_openmp_runtime_from_maps(fake_root, collect_on) -> None:
    p = collect_on(fake_root("amd_zen5"), maps_text=MAPS_IOMP_AND_GOMP)
    assert p.openmp == {
        "name": "intel",
        "library": "libiomp5.so",
        "path": "/opt/intel/oneapi/lib/libiomp5.so",
    }


# --------------------------------------------------------------------------- serialisation


@pytest.mark.parametrize("builder", ["intel_spr", "amd_zen5", "epyc_v1_quota", "arm_n1"])
def test_to_dict_from_dict_round_trip(fake_root, collect_on, builder: str) -> None:
    p = collect_on(fake_root(builder), env={"OMP_NUM_THREADS": "3"}, maps_text=MAPS_IOMP_AND_GOMP)
    d = p.to_dict()
    assert d["id"] == p.id
    assert d["caches"][0]["name"] == "L1d"
    back = Platform.from_dict(json.loads(json.dumps(d)))
    assert back == p
    assert back.id == p.id
    assert back.to_dict() == d


def test_from_dict_does_not_modify_its_argument(fake_platform: Platform) -> None:
    d = fake_platform.to_dict()
    snapshot = json.dumps(d, sort_keys=True)
    Platform.from_dict(d)
    assert json.dumps(d, sort_keys=True) == snapshot
