"""The GPU's ceiling microkernels, compiled at run time by Triton (as numba compiles the CPU's).

Importing this module needs Triton; :mod:`rooftune.machine.gpu` imports it only when Triton is
installed and says which ceilings are skipped otherwise.

- ``fma_kernel``: every program keeps :data:`FMA_CHAINS` independent vectors of ``BLOCK`` values and
  applies ``x = x * a + b`` to each ``iters`` times, so the multiply-adds (one FMA instruction each,
  Triton fuses them) never wait on each other; 2 FLOPs per element per chain per iteration.
- ``stream_kernel``: read (a sum), copy and triad over arrays of ``n`` fp32 values split into tiles
  of ``BLOCK``; the grid covers ``reps`` passes over the tiles, one tile per program or a persistent
  grid walking them (virtual tile ``v`` is tile ``(v + v // n_tiles) % n_tiles``, so a program
  meets other tiles on every pass and a small working set is read from L2, not from one
  multiprocessor's L1), loads bypass L1 (``.cg``), and one launch moves enough bytes to hide the
  launch.
"""

from __future__ import annotations

import triton
import triton.language as tl

FMA_CHAINS = 8
FMA_BLOCK = 1024
STREAM_ARRAYS = {"read": 1, "copy": 2, "triad": 3}


# Sizes and counts vary from launch to launch; specializing on them would compile a kernel for each.
@triton.jit(do_not_specialize=["iters"])
def fma_kernel(out_ptr, a, b, iters, BLOCK: tl.constexpr, DTYPE: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    seed = (offs + pid).to(DTYPE) * 1e-6
    x0 = seed
    x1 = seed + 1.0
    x2 = seed + 2.0
    x3 = seed + 3.0
    x4 = seed + 4.0
    x5 = seed + 5.0
    x6 = seed + 6.0
    x7 = seed + 7.0
    for _ in range(iters):
        x0 = x0 * a + b
        x1 = x1 * a + b
        x2 = x2 * a + b
        x3 = x3 * a + b
        x4 = x4 * a + b
        x5 = x5 * a + b
        x6 = x6 * a + b
        x7 = x7 * a + b
    total = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
    tl.store(out_ptr + pid * BLOCK + offs, total)


# Every tile is whole (the arrays hold tiles * BLOCK values), so the one mask is the program's own
# (a persistent grid's last round), the same for every lane: Triton keeps the loads 16 bytes wide.
# A mask against a size it may not assume a multiple of 16 made them 4 bytes wide (sixteen loads
# per thread in the PTX where four do).
@triton.jit(do_not_specialize=["n_tiles", "virtual", "per_program"])
def stream_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n_tiles, virtual, per_program, scalar,
                  KIND: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(per_program):
        v = pid + i * programs
        tile = (v + v // n_tiles) % n_tiles
        offs = tile * BLOCK + lanes
        mask = tl.broadcast_to(v < virtual, (BLOCK,))
        if KIND == 0:  # read
            acc += tl.load(x_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
        elif KIND == 1:  # copy: y = x
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, cache_modifier=".cg"), mask=mask)
        else:  # triad: x = y + scalar * z
            yv = tl.load(y_ptr + offs, mask=mask, cache_modifier=".cg")
            zv = tl.load(z_ptr + offs, mask=mask, cache_modifier=".cg")
            tl.store(x_ptr + offs, yv + scalar * zv, mask=mask)
    if KIND == 0:
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))


KIND_CODES = {"read": 0, "copy": 1, "triad": 2}
