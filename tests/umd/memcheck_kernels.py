"""Kernels with the memory bugs memcheck finds (tests/umd/test_memcheck.py)."""
import umd
from umd import Ptr, f32


@umd.jit
def double_unguarded(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    out[i] = x[i] * 2.0                 # no `if i < x.size`: the classic bug


@umd.jit
def write_past_end(out: f32[:], extra: umd.i32):
    i = umd.grid(1)
    if i < out.size:
        out[i + extra] = 1.0


@umd.jit
def shared_overrun(out: f32[:]):
    tile = umd.shared.array(64, f32)
    t = umd.threadIdx.x
    tile[t] = out[t]                    # 256 threads, 64 elements
    umd.syncthreads()
    out[t] = tile[63 - t % 64]


@umd.jit
def touch(p: Ptr[f32]):
    p[umd.grid(1)] = 3.0
