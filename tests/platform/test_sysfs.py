"""cgroup quota, cache and NUMA readers on recorded /proc and /sys trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from rooftune.platform import CacheLevel, cgroup_cpu_quota, parse_cpu_list, read_caches, usable_cores
from rooftune.platform.sysfs import numa_nodes, parse_size

K = 1024
M = 1024 * 1024


# --------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0", (0,)),
        ("0-1\n", (0, 1)),
        ("5,1-2,2", (1, 2, 5)),  # unsorted, overlapping
        ("", ()),
    ],
)
def test_parse_cpu_list(text: str, expected: tuple[int, ...]) -> None:
    assert parse_cpu_list(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("48K", 48 * K),
        ("1024K", 1024 * K),
        ("32768K", 32 * M),
        ("32M", 32 * M),
        ("1G", 1024 * M),
        ("512", 512),
        (" 64KiB ", 64 * K),
        ("2MB", 2 * M),
        ("48k", 48 * K),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "12 T", "1.5M", "-4K"])
def test_parse_size_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="unrecognised cache size"):
        parse_size(text)


# --------------------------------------------------------------------------- cgroup quota


def test_cgroup_v2_quota_of_own_group(fake_root) -> None:
    root = fake_root("intel_spr")  # job group: "150000 100000", ancestors: "max"
    assert cgroup_cpu_quota(root) == 1.5


def test_cgroup_v2_smallest_quota_along_hierarchy_wins(fake_root) -> None:
    root = fake_root("intel_spr", cpu_max="400000 100000")
    (root / "sys/fs/cgroup/kubepods.slice/cpu.max").write_text("250000 100000\n")
    assert cgroup_cpu_quota(root) == 2.5


def test_cgroup_v2_unlimited(fake_root) -> None:
    assert cgroup_cpu_quota(fake_root("intel_spr", cpu_max=None)) is None
    assert cgroup_cpu_quota(fake_root("arm_n1")) is None


def test_cgroup_v2_container_sees_only_its_own_group(tmp_path: Path) -> None:
    # Inside a container with a private cgroup namespace the group directory named in
    # /proc/self/cgroup does not exist; the limit sits at the root of the container's view.
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/../../kubepods/pod1/abc\n")
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cpu.max").write_text("300000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 3.0


def test_cgroup_v1_unlimited_quota(fake_root) -> None:
    assert cgroup_cpu_quota(fake_root("amd_zen5")) is None  # cfs_quota_us = -1


def test_cgroup_v1_quota(fake_root) -> None:
    assert cgroup_cpu_quota(fake_root("epyc_v1_quota")) == 2.0


def test_no_cgroup_files_means_no_quota(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path) is None


@pytest.mark.parametrize(
    ("physical", "affinity", "quota", "expected"),
    [
        (4, 8, 1.5, 1),  # fractional quota rounds down
        (2, 2, None, 2),
        (4, 4, 2.0, 2),
        (4, 4, 0.5, 1),  # never below one
        (8, 3, None, 3),  # affinity mask is the limit
        (2, 16, 12.0, 2),  # physical cores are the limit
        (4, 4, 2.99, 2),
    ],
)
def test_usable_cores(physical: int, affinity: int, quota: float | None, expected: int) -> None:
    assert usable_cores(physical, affinity, quota) == expected


# --------------------------------------------------------------------------- caches and NUMA


def test_read_caches_amd_zen5(fake_root) -> None:
    caches = read_caches(fake_root("amd_zen5"))
    assert [c.name for c in caches] == ["L1d", "L2", "L3"]  # instruction cache left out
    l1d, l2, l3 = caches
    assert l1d == CacheLevel(level=1, kind="Data", size_bytes=48 * K, instances=((0,), (1,)), line_bytes=64)
    assert l2 == CacheLevel(level=2, kind="Unified", size_bytes=1024 * K, instances=((0,), (1,)))
    assert l3 == CacheLevel(level=3, kind="Unified", size_bytes=32 * M, instances=((0, 1),))
    assert l1d.capacity_for((0, 1)) == 2 * 48 * K
    assert l1d.capacity_for((1,)) == 48 * K
    assert l2.capacity_for((0, 1)) == 2 * M
    assert l3.capacity_for((0, 1)) == 32 * M
    assert l3.capacity_for((0,)) == 32 * M


def test_read_caches_smt_and_two_sockets(fake_root) -> None:
    l1d, l2, l3 = read_caches(fake_root("intel_spr"))
    assert l1d.instances == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert l3.instances == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert l3.size_bytes == 105 * M
    # SMT siblings share one L1d; two CPUs on different sockets see both L3s.
    assert l1d.capacity_for((0, 4)) == 48 * K
    assert l1d.capacity_for((0, 1)) == 2 * 48 * K
    assert l3.capacity_for((0, 1)) == 105 * M
    assert l3.capacity_for((0, 2)) == 2 * 105 * M
    assert l2.capacity_for(tuple(range(8))) == 4 * 2 * M


def test_cache_capacity_for_cpus_it_does_not_cover_counts_one_instance() -> None:
    l2 = CacheLevel(level=2, kind="Unified", size_bytes=M, instances=((0,), (1,)))
    assert l2.capacity_for((7,)) == M


def test_cache_to_dict() -> None:
    c = CacheLevel(level=1, kind="Data", size_bytes=48 * K, instances=((0, 4), (1, 5)), line_bytes=64)
    assert c.to_dict() == {
        "name": "L1d",
        "level": 1,
        "kind": "Data",
        "size_bytes": 49152,
        "instances": [[0, 4], [1, 5]],
        "line_bytes": 64,
    }
    assert CacheLevel(level=1, kind="Instruction", size_bytes=1, instances=()).name == "L1i"


def test_read_caches_skips_incomplete_entries(tmp_path: Path) -> None:
    d = tmp_path / "sys/devices/system/cpu/cpu0/cache"
    (d / "index0").mkdir(parents=True)
    (d / "index0/level").write_text("1\n")  # no type/size/shared_cpu_list
    (d / "index2").mkdir()
    for name, value in {"level": "2", "type": "Unified", "size": "2048K", "shared_cpu_list": "0"}.items():
        (d / "index2" / name).write_text(value + "\n")
    (caches,) = read_caches(tmp_path)
    assert caches == CacheLevel(level=2, kind="Unified", size_bytes=2 * M, instances=((0,),), line_bytes=64)


def test_numa_nodes(fake_root, tmp_path: Path) -> None:
    assert numa_nodes(fake_root("intel_spr")) == 2
    assert numa_nodes(fake_root("amd_zen5")) == 1
    assert numa_nodes(tmp_path / "nothing-here") == 1
