"""The microkernels compute what they claim (so the FLOPs and bytes they are credited with are real)."""

from __future__ import annotations

import numpy as np
import pytest

from rooftune.machine.kernels import STREAM_UNROLL, aligned_empty, fma_kernel, fma_state, stream_kernel
from rooftune.machine.team import ThreadTeam


def test_aligned_empty_is_64_byte_aligned() -> None:
    for n in (1, 17, 1000):
        assert aligned_empty(n).ctypes.data % 64 == 0


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float64", 4)])
def test_fma_kernel_matches_numpy(dtype: str, lanes: int) -> None:
    chains = 4
    state = fma_state(dtype, lanes, chains)
    expected = state[: chains * lanes].astype(np.float64)
    mul, add = float(state[chains * lanes]), float(state[(chains + 1) * lanes])
    for _ in range(3):
        expected = expected * mul + add
    fma_kernel(dtype, lanes, chains)(3, state)
    np.testing.assert_allclose(state[: chains * lanes], expected, rtol=1e-6)


def test_stream_kernels_compute_read_copy_triad() -> None:
    lanes = 8
    n = lanes * max(STREAM_UNROLL.values()) * 4
    a, b, c = aligned_empty(n), aligned_empty(n), aligned_empty(n)
    b[:] = np.arange(n, dtype=np.float32)
    c[:] = 2.0
    stream_kernel("triad", lanes)(a, b, c, np.float32(0.5), 2)
    np.testing.assert_array_equal(a, b + 1.0)
    stream_kernel("copy", lanes)(a, c, c, np.float32(0.0), 1)
    np.testing.assert_array_equal(a, c)
    total = stream_kernel("read", lanes)(c, c, c, np.float32(0.0), 3)
    assert total == pytest.approx(3 * 2.0 * n)


def test_team_runs_task_on_every_worker_and_reraises() -> None:
    with ThreadTeam((0, 0)) as team:
        assert team.run(lambda i: i * 10) == [0, 10]

        def boom(i: int) -> None:
            raise ValueError(f"worker {i}")

        with pytest.raises(ValueError, match="worker"):
            team.run(boom)
        assert team.run(lambda i: i) == [0, 1]  # still usable after an error
