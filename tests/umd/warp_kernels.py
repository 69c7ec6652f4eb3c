"""Warp-level kernels written as Numba CUDA users write them (`cuda.` -> `umd.`): the
shuffles, votes, lane ids and bit functions of docs/umd-compiler.md 3.9, and shared-
memory atomics of every kind. tests/umd/test_warp.py runs them on the reference
executor, tests/umd/test_numba_e2e.py through a mount."""
import umd
from umd import f32, f64, float32, i32, i64, int32, u32

FULL = 0xFFFFFFFF


@umd.jit
def shuffles(x: i32[:], src: i32[:], out: i32[:, :]):
    i = umd.grid(1)
    v = x[i]
    out[i, 0] = umd.shfl_sync(FULL, v, src[i])             # any lane number, mod warpsize
    out[i, 1] = umd.shfl_up_sync(FULL, v, 1)
    out[i, 2] = umd.shfl_up_sync(FULL, v, 5)
    out[i, 3] = umd.shfl_down_sync(FULL, v, 3)
    out[i, 4] = umd.shfl_xor_sync(FULL, v, 1)
    out[i, 5] = umd.shfl_xor_sync(FULL, v, 16)
    out[i, 6] = umd.shfl_xor_sync(FULL, v, 33)              # outside the warp: own value
    out[i, 7] = umd.shfl_down_sync(FULL, v, src[i])         # a per-lane delta
    out[i, 8] = umd.laneid
    out[i, 9] = umd.warpsize
    out[i, 10] = umd.lanemask_lt()


@umd.jit
def shuffle_floats(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    out[i] = umd.shfl_xor_sync(FULL, x[i], 7) + umd.shfl_sync(FULL, x[i] * 2.0, 0)


@umd.jit
def shuffle_wide(x: f64[:], k: i64[:], out: f64[:], kout: i64[:]):
    i = umd.grid(1)
    out[i] = umd.shfl_down_sync(FULL, x[i], 2)
    kout[i] = umd.shfl_sync(FULL, k[i], 31 - umd.laneid)


@umd.jit
def warp_reduce(x: f32[:], out: f32[:]):
    # the tutorial warp reduction: a tree of shfl_down_sync, lane 0 adds the warp's sum
    i = umd.grid(1)
    v = x[i] if i < x.size else float32(0.0)
    offset = umd.warpsize // 2
    while offset > 0:
        v += umd.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if umd.laneid == 0:
        out[i // umd.warpsize] = v


@umd.jit
def warp_max_butterfly(x: i32[:], out: i32[:]):
    # every lane ends with the warp's maximum (xor butterfly)
    i = umd.grid(1)
    v = x[i]
    mask = 16
    while mask >= 1:
        v = max(v, umd.shfl_xor_sync(FULL, v, mask))
        mask >>= 1
    out[i] = v


@umd.jit
def votes(x: i32[:], out: u32[:, :]):
    i = umd.grid(1)
    pred = x[i] > 0
    b = umd.ballot_sync(FULL, pred)
    out[i, 0] = b
    out[i, 1] = umd.any_sync(FULL, pred)
    out[i, 2] = umd.all_sync(FULL, pred)
    out[i, 3] = umd.popc(b)
    out[i, 4] = umd.ffs(b)
    out[i, 5] = umd.activemask()
    if i % 3 == 0:                                          # a third of the lanes
        out[i, 6] = umd.activemask()
        out[i, 7] = umd.ballot_sync(FULL, pred)
        out[i, 8] = umd.all_sync(0x0000FFFF, pred)
        out[i, 9] = umd.any_sync(0xFFFF0000, pred)
    out[i, 10] = umd.clz(x[i])
    out[i, 11] = umd.brev(x[i])
    out[i, 12] = umd.ffs(x[i])
    out[i, 13] = umd.popc(x[i])
    umd.syncwarp()
    umd.syncwarp(FULL)


@umd.jit
def warp_aggregated_count(x: i32[:], counter: i32[:], slots: i32[:]):
    # one atomic per warp: the leader adds the warp's count, each lane takes its slot
    i = umd.grid(1)
    if i < x.size and x[i] % 2 == 0:
        active = umd.activemask()
        leader = umd.ffs(active) - 1
        rank = umd.popc(active & ((1 << umd.laneid) - 1))
        base = 0
        if umd.laneid == leader:
            base = umd.atomic.add(counter, 0, umd.popc(active))
        base = umd.shfl_sync(active, base, leader)
        slots[base + rank] = x[i]


@umd.jit
def shared_atomics_all(x: i32[:], fx: f32[:], out: i32[:], fout: f32[:], olds: i32[:]):
    s = umd.shared.array(8, int32)
    fs = umd.shared.array(2, float32)
    first = umd.shared.array(1, int32)
    t = umd.threadIdx.x
    i = umd.grid(1)
    if t == 0:
        s[0] = 1 << 30
        s[1] = -(1 << 30)
        s[2] = 0
        s[3] = 0
        s[4] = 1000
        first[0] = 0
        fs[0] = 1e30
        fs[1] = -1e30
    umd.syncthreads()
    umd.atomic.min(s, 0, x[i])
    umd.atomic.max(s, 1, x[i])
    olds[i] = umd.atomic.exch(s, 2, i + 1)                  # a chain: every value once
    umd.atomic.sub(s, 4, x[i])
    umd.atomic.min(fs, 0, fx[i])
    umd.atomic.max(fs, 1, fx[i])
    while True:                                             # a lock-free increment by CAS
        old = s[3]
        if umd.atomic.cas(s, 3, old, old + 1) == old:
            break
    umd.atomic.compare_and_swap(first, 0, t + 1)           # the first thread wins
    umd.syncthreads()
    if t == 0:
        for k in range(5):
            out[umd.blockIdx.x * 6 + k] = s[k]
        out[umd.blockIdx.x * 6 + 5] = first[0]
        fout[umd.blockIdx.x * 2] = fs[0]
        fout[umd.blockIdx.x * 2 + 1] = fs[1]
