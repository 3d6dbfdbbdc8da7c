"""Microkernels for the ceilings, compiled at run time by numba.

The loops are written as LLVM vector IR through ``numba.extending.intrinsic`` rather than left to
the auto-vectoriser: the register width, the number of independent FMA chains and the unrolling
are then exactly what the ISA allows, as in likwid-bench's hand-written kernels, and LLVM cannot
fold lanes it proves unused (it scalarises an FMA chain whose result is read from lane 0 only).
All kernels release the GIL, so a team of Python threads runs them in parallel.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

#: Bandwidth kernels: bytes each counts per element, as likwid-bench counts them (no
#: write-allocate traffic): read = 1 load, copy = 1 load + 1 store, triad = 2 loads + 1 store.
STREAM_ARRAYS = {"read": 1, "copy": 2, "triad": 3}
#: Vectors handled per loop iteration: enough loads in flight to cover L1 latency on 2-3 load
#: ports, few enough that tiny working sets still run whole iterations. read needs more because
#: each load feeds an add chain (latency 3 x 2 ports = 6 chains at least).
STREAM_UNROLL = {"read": 8, "copy": 4, "triad": 4}
#: Array alignment; a 64-byte vector that straddles two cache lines costs two L1 accesses.
ALIGN_BYTES = 64


def aligned_empty(n: int, dtype: Any = np.float32) -> np.ndarray:
    """An uninitialised 1-D array whose data starts on a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    buf = np.empty(n + ALIGN_BYTES // itemsize, dtype=dtype)
    offset = (-buf.ctypes.data % ALIGN_BYTES) // itemsize
    return buf[offset : offset + n]


def _ir_float(dtype: Any) -> Any:
    from llvmlite import ir

    return ir.FloatType() if np.dtype(dtype) == np.float32 else ir.DoubleType()


def _fma_decl(builder: Any, vty: Any, lanes: int, dtype: Any) -> Any:
    from llvmlite import ir
    from numba.core import cgutils

    suffix = "f32" if np.dtype(dtype) == np.float32 else "f64"
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{lanes}{suffix}"
    )


@cache
def fma_kernel(dtype: str, lanes: int, chains: int) -> Any:
    """``kernel(iters, state)``: ``chains`` independent vector FMA chains of ``lanes`` lanes.

    ``state`` holds ``(chains + 2) * lanes`` values: the initial accumulators, then the multiplier
    and the addend vectors; the final accumulators are written back so no chain is dead code.
    Each iteration performs ``2 * chains * lanes`` FLOPs.
    """
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def fma_chains(typingctx: Any, iters: Any, state: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            n, arr = args
            ptr = context.make_array(signature.args[1])(context, builder, arr).data
            vty = ir.VectorType(_ir_float(dtype), lanes)
            fma = _fma_decl(builder, vty, lanes, dtype)
            vptr = builder.bitcast(ptr, vty.as_pointer())

            def at(i: int) -> Any:
                return builder.gep(vptr, [ir.Constant(ir.IntType(64), i)])

            mul = builder.load(at(chains), align=1)
            add = builder.load(at(chains + 1), align=1)
            accs = []
            for i in range(chains):
                slot = cgutils.alloca_once(builder, vty)
                builder.store(builder.load(at(i), align=1), slot)
                accs.append(slot)
            with cgutils.for_range(builder, n):
                values = [builder.load(slot) for slot in accs]
                for v, slot in zip(values, accs, strict=True):
                    builder.store(builder.call(fma, [v, mul, add]), slot)
            for i, slot in enumerate(accs):
                builder.store(builder.load(slot), at(i), align=1)
            return context.get_dummy_value()

        return types.void(types.int64, state), codegen

    @njit(nogil=True)
    def kernel(iters: int, state: np.ndarray) -> None:  # pragma: no cover - compiled
        # numba's stubs give an @intrinsic's call its definition's parameters, the typing context
        # first; a call from jitted code leaves that out
        fma_chains(iters, state)  # type: ignore[call-arg]

    return kernel


def fma_state(dtype: str, lanes: int, chains: int) -> np.ndarray:
    """Initial state for :func:`fma_kernel`: values converge to 1.0 (x -> 0.999999 x + 1e-6), so
    no lane ever reaches a denormal or infinity, which would slow the FMA units down."""
    state = aligned_empty((chains + 2) * lanes, dtype)
    state[: chains * lanes] = np.linspace(1.0, 2.0, chains * lanes)
    state[chains * lanes : (chains + 1) * lanes] = 0.999999
    state[(chains + 1) * lanes :] = 1e-6
    return state


@cache
def stream_kernel(kind: str, lanes: int) -> Any:
    """``kernel(a, b, c, s, reps) -> float`` sweeping float32 arrays ``reps`` times.

    read: sum of ``a`` (``STREAM_UNROLL`` independent accumulators); copy: ``a = b``;
    triad: ``a = b + s * c`` (STREAM's triad, likwid's ``stream``). Arrays must be 64-byte aligned
    and their length a multiple of ``lanes * STREAM_UNROLL[kind]``.
    """
    if kind not in STREAM_ARRAYS:
        raise ValueError(f"unknown stream kernel {kind!r}")
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    align = min(ALIGN_BYTES, 4 * lanes)
    unroll = STREAM_UNROLL[kind]

    @intrinsic
    def sweep(typingctx: Any, a: Any, b: Any, c: Any, s: Any, reps: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            arrays = [
                context.make_array(t)(context, builder, v)
                for t, v in zip(signature.args[:3], args[:3], strict=True)
            ]
            vty = ir.VectorType(ir.FloatType(), lanes)
            pa, pb, pc = (builder.bitcast(arr.data, vty.as_pointer()) for arr in arrays)
            i64 = ir.IntType(64)
            n_iter = builder.udiv(arrays[0].nitems, ir.Constant(i64, lanes * unroll))
            undef = ir.Constant(vty, ir.Undefined)
            splat = builder.insert_element(undef, args[3], ir.Constant(ir.IntType(32), 0))
            zeros = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            scalar = builder.shuffle_vector(splat, undef, zeros)
            fma = _fma_decl(builder, vty, lanes, np.float32)
            accs = []
            if kind == "read":
                for _ in range(unroll):
                    slot = cgutils.alloca_once(builder, vty)
                    builder.store(ir.Constant(vty, [0.0] * lanes), slot)
                    accs.append(slot)
            # The repetitions loop lives inside the IR so the accumulators stay in registers across
            # passes and the horizontal sum below runs once, not once per pass.
            with cgutils.for_range(builder, args[4]), cgutils.for_range(builder, n_iter) as loop:
                base = builder.mul(loop.index, ir.Constant(i64, unroll))
                for u in range(unroll):
                    idx = builder.add(base, ir.Constant(i64, u))
                    if kind == "read":
                        v = builder.load(builder.gep(pa, [idx]), align=align)
                        builder.store(builder.fadd(builder.load(accs[u]), v), accs[u])
                    elif kind == "copy":
                        v = builder.load(builder.gep(pb, [idx]), align=align)
                        builder.store(v, builder.gep(pa, [idx]), align=align)
                    else:
                        vb = builder.load(builder.gep(pb, [idx]), align=align)
                        vc = builder.load(builder.gep(pc, [idx]), align=align)
                        builder.store(builder.call(fma, [vc, scalar, vb]), builder.gep(pa, [idx]),
                                      align=align)
            total = ir.Constant(ir.FloatType(), 0.0)
            for slot in accs:
                v = builder.load(slot)
                for lane in range(lanes):
                    total = builder.fadd(total, builder.extract_element(v, ir.Constant(ir.IntType(32), lane)))
            return total

        return types.float32(a, b, c, types.float32, types.int64), codegen

    @njit(nogil=True)
    def kernel(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float, reps: int) -> float:  # pragma: no cover
        return sweep(a, b, c, s, reps)  # type: ignore[call-arg]  # as fma_chains: no typing context

    return kernel
