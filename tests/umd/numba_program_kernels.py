"""Kernels of Numba CUDA programs as their authors wrote them (issue #25), translated
only as docs/umd.md prescribes: dynamic shared memory (`shared.array(0, T)` sized by
the launch's fourth element) and cooperative groups (`cg.this_grid().sync()`).
Used by tests/umd/test_numba_kernels.py (both executors) and its e2e variant."""
import numpy as np

import umd
from umd import f32, i32


@umd.jit
def reverse_block(x: f32[:], out: f32[:]):
    """Each block reverses its slice through a dynamic shared array of one f32 per
    thread (the launch's fourth element is block * 4 bytes)."""
    buf = umd.shared.array(0, dtype=np.float32)
    t = umd.threadIdx.x
    i = umd.grid(1)
    if i < x.size:
        buf[t] = x[i]
    umd.syncthreads()
    j = umd.blockIdx.x * umd.blockDim.x + len(buf) - 1 - t
    if i < x.size and j < x.size:
        out[i] = buf[len(buf) - 1 - t]


@umd.jit
def aliased_views(out: i32[:]):
    """Numba's documentation example: two dynamic shared arrays are one region."""
    f32_arr = umd.shared.array(0, dtype=np.float32)
    i32_arr = umd.shared.array(0, dtype=np.int32)
    f32_arr[0] = 3.14
    umd.syncthreads()
    out[0] = i32_arr[0]
    out[1] = len(f32_arr)


@umd.jit
def static_and_dynamic(out: f32[:]):
    """A static shared array and the dynamic one do not overlap."""
    fixed = umd.shared.array(16, dtype=np.float32)
    dyn = umd.shared.array(0, dtype=np.float32)
    t = umd.threadIdx.x
    fixed[t % 16] = 1.0
    dyn[t] = 2.0 + t
    umd.syncthreads()
    out[t] = fixed[t % 16] + dyn[t]


@umd.jit
def neighbour_sums(x: f32[:], partial: f32[:], out: f32[:]):
    """Each block sums its slice into partial[block]; after the grid barrier every
    block reads every block's partial: wrong without a real barrier."""
    g = umd.cg.this_grid()
    acc = umd.shared.array(1, dtype=np.float32)
    t = umd.threadIdx.x
    if t == 0:
        acc[0] = 0.0
    umd.syncthreads()
    i = umd.grid(1)
    if i < x.size:
        umd.atomic.add(acc, 0, x[i])
    umd.syncthreads()
    if t == 0:
        partial[umd.blockIdx.x] = acc[0]
    g.sync()
    if t == 0:
        total = 0.0
        for b in range(umd.gridDim.x):
            total += partial[b]
        out[umd.blockIdx.x] = total


@umd.jit
def sequence_of_syncs(data: i32[:], rounds: i32):
    """Numba's cooperative-groups example (a row-by-row dependency), one grid sync per
    row: row r is row r - 1 shifted by one column, plus one."""
    g = umd.cg.this_grid()
    col = umd.grid(1)
    n = data.size // rounds
    for r in range(1, rounds):
        if col < n:
            prev = data[(r - 1) * n + (col + n - 1) % n]
            data[r * n + col] = prev + 1
        g.sync()


@umd.jit
def grid_group_rank(out: i32[:, :]):
    """g.thread_rank() and g.size of a 2-D launch."""
    g = umd.cg.this_grid()
    rank = g.thread_rank()
    out[rank, 0] = rank
    out[rank, 1] = g.size


@umd.jit
def no_grid_sync(out: i32[:]):
    out[umd.grid(1)] = 1


@umd.jit
def pick_divergent(x: f32[:], y: f32[:], flag: i32[:], out: f32[:]):
    """An array name bound in the branches of a per-thread condition."""
    i = umd.grid(1)
    if i < out.size:
        if flag[i] > 0:
            src = x
        else:
            src = y
        out[i] = src[i] * 2.0


@umd.jit
def pick_uniform(x: f32[:], y: f32[:], use_x: i32, out: f32[:]):
    """The same on a launch-wide condition, the length read through the name."""
    src = y
    if use_x:
        src = x
    i = umd.grid(1)
    if i < len(src):
        out[i] = src[i] + 1.0


@umd.jit
def ping_pong(a: f32[:], b: f32[:], steps: i32):
    """A 3-point smoothing, `steps` times, between two buffers swapped each step (one
    block): the result is in `a` for an even number of steps, else in `b`."""
    src, dst = a, b
    i = umd.threadIdx.x
    n = a.size
    for s in range(steps):
        if i < n:
            if 0 < i < n - 1:
                dst[i] = (src[i - 1] + src[i] + src[i + 1]) / 3.0
            else:
                dst[i] = src[i]
        umd.syncthreads()
        src, dst = dst, src


@umd.jit
def ping_pong_shared(x: f32[:], out: f32[:], steps: i32):
    """The same between two shared arrays."""
    s0 = umd.shared.array(128, dtype=np.float32)
    s1 = umd.shared.array(128, dtype=np.float32)
    i = umd.threadIdx.x
    s0[i] = x[i]
    umd.syncthreads()
    src, dst = s0, s1
    for s in range(steps):
        if 0 < i < 127:
            dst[i] = (src[i - 1] + src[i] + src[i + 1]) / 3.0
        else:
            dst[i] = src[i]
        umd.syncthreads()
        src, dst = dst, src
    out[i] = src[i]


# Device arrays the program makes and the kernel names as globals (set before the
# first launch; the kernels compile then). Used in place, as Numba captures them.
GLOBAL_COEFFS = None        # float32, 1-D
GLOBAL_HITS = None          # int32, 1 element


@umd.jit
def scale_by_global(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        out[i] = x[i] * GLOBAL_COEFFS[i % len(GLOBAL_COEFFS)]
        umd.atomic.add(GLOBAL_HITS, 0, 1)


@umd.jit
def ufunc_sin(x: f32[:], r: f32[:]):
    """Numba's documentation example: a ufunc on whole arrays with its output."""
    np.sin(x, r)


@umd.jit
def ufuncs_2d(a: f32[:, :], b: f32[:, :], total: f32[:, :], hyp: f32[:, :]):
    """Binary ufuncs on 2-D arrays, one input a number; one thread per row of work."""
    if umd.grid(1) == 0:
        np.add(a, b, total)
        np.hypot(a, 2.0, hyp)


# umd.declare_device: implementations in tests/umd/linked_functions.py (the path is
# the working directory's, or next to this file), named on the declaration or the kernel.
sum_reduce = umd.declare_device("sum_reduce", "float32(float32[:], int32)",
                                link=["linked_functions.py"])
clamp_linked = umd.declare_device("clamp_linked", "float32(float32, float32, float32)")


@umd.jit(link=["linked_functions.py"])
def uses_declared(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        out[i] = clamp_linked(x[i], -0.5, 0.5) + sum_reduce(x, 4)


@umd.jit
def disjoint_views(out: i32[:]):
    """Numba's documentation example: disjoint dynamic shared arrays as slices of the
    one region (`shared.array(0, T)[1:]` starts one element in)."""
    f32_arr = umd.shared.array(0, dtype=np.float32)
    i32_arr = umd.shared.array(0, dtype=np.int32)[1:]
    f32_arr[0] = 3.14
    i32_arr[0] = 1
    umd.syncthreads()
    whole = umd.shared.array(0, dtype=np.int32)
    out[0] = i32_arr[0]
    out[1] = whole[0]
    out[2] = whole[1]
    out[3] = len(i32_arr)


@umd.jit
def slice_reads(x: f32[:], m: f32[:, :], lo: i32, hi: i32, out: f32[:]):
    """Slices of a 1-D argument with run-time bounds (Python's clamping), a negative
    constant bound and a negative index into a slice, a slice of a row, a slice of a
    slice, and an atomic through a slice; out[0:4] get the lengths."""
    s = x[lo:hi]
    tail = x[-3:]
    r = m[1][2:]
    ss = x[1:][2:6]
    i = umd.grid(1)
    if i == 0:
        out[0] = len(s)
        out[1] = tail[-1] + tail[0]
        out[2] = len(r) + r[0]
        out[3] = ss.shape[0] + ss[-1]
        umd.atomic.add(out[4:], 0, 1.0)
    if i < len(s):
        out[5 + i] = s[i]


# Numba's FFI example test_ex_from_buffer: a CPointer(float32) parameter, given
# cffi's ffi.from_buffer(array); the 0-d result array is a Ptr[f32] written as r[()].
sum_pointer = umd.declare_device("sum_reduce", "float32(CPointer(float32), int32)",
                                 link=["linked_functions.py"])
try:
    import cffi
    ffi = cffi.FFI()
except ImportError:                     # the test that uses it is skipped
    ffi = None


@umd.jit
def from_buffer_caller(result: umd.Ptr[f32], array: f32[:]):
    array_ptr = ffi.from_buffer(array)
    result[()] = sum_pointer(array_ptr, len(array))
