"""Kernels written the way Numba CUDA users write them, translated mechanically:
`cuda.` became `umd.`, `@cuda.jit` became `@umd.jit`, and each kernel argument got the
annotation docs/umd-compiler.md asks for (`f32[:]` for a 1-D float32 array,
`f32[:, :]` for a 2-D one, `f32` for a float32 scalar...). The originals are the
examples of Numba's documentation and the common tutorials (vector add with
cuda.grid, the grid-stride loop, 2-D matrix add, the histogram with atomics, a 1-D
stencil with a halo in shared memory, device functions...).

tests/umd/test_numba_style.py runs them on the reference executor (no mount) and
tests/umd/test_numba_e2e.py through a mount, both against numpy.
"""
import math

import numpy as np

import umd
from umd import f32, i32, u32, float32, int32

# -- thread positioning -----------------------------------------------------------------


@umd.jit
def increment_by_one(an_array: f32[:]):
    pos = umd.grid(1)
    if pos < an_array.size:
        an_array[pos] += 1


@umd.jit
def vector_add(a: f32[:], b: f32[:], c: f32[:]):
    i = umd.grid(1)
    if i < len(c):
        c[i] = a[i] + b[i]


@umd.jit
def vector_add_cuda_names(a: f32[:], b: f32[:], c: f32[:]):
    # the CUDA spellings Numba has: threadIdx, blockIdx, blockDim
    tx = umd.threadIdx.x
    ty = umd.blockIdx.x
    bw = umd.blockDim.x
    pos = tx + ty * bw
    if pos < c.shape[0]:
        c[pos] = a[pos] + b[pos]


@umd.jit
def saxpy_grid_stride(a: f32, x: f32[:], y: f32[:], out: f32[:]):
    start = umd.grid(1)
    stride = umd.gridsize(1)
    for i in range(start, x.shape[0], stride):
        out[i] = a * x[i] + y[i]


@umd.jit
def increment_a_2D_array(an_array: f32[:, :]):
    x, y = umd.grid(2)
    if x < an_array.shape[0] and y < an_array.shape[1]:
        an_array[x, y] += 1


@umd.jit
def matrix_add(a: f32[:, :], b: f32[:, :], c: f32[:, :]):
    row, col = umd.grid(2)
    rows, cols = c.shape
    if row < rows and col < cols:
        c[row, col] = a[row, col] + b[row, col]


@umd.jit
def grid_2d_stride(out: i32[:, :]):
    # a 2-D grid-stride loop: every element written once, whatever the grid
    x0, y0 = umd.grid(2)
    sx, sy = umd.gridsize(2)
    for x in range(x0, out.shape[0], sx):
        for y in range(y0, out.shape[1], sy):
            out[x, y] = x * 1000 + y


@umd.jit
def grid_3d(out: i32[:, :, :]):
    x, y, z = umd.grid(3)
    if x < out.shape[0] and y < out.shape[1] and z < out.shape[2]:
        out[x, y, z] = x * 10000 + y * 100 + z


@umd.jit
def negative_step(n: i32, out: i32[:]):
    # range() with a step that is a kernel argument (negative here)
    i = umd.grid(1)
    step = -umd.gridsize(1)
    for k in range(n - 1 - i, -1, step):
        out[k] = k * 2


@umd.jit
def variable_step(start: i32, stop: i32, step: i32, out: i32[:]):
    # Python's range(start, stop, step) for any sign of step, one thread
    if umd.grid(1) == 0:
        count = 0
        for k in range(start, stop, step):
            out[count + 1] = k
            count += 1
        out[0] = count


@umd.jit
def zero_step(step: i32, out: i32[:]):
    for k in range(0, 10, step):
        out[k] = 1


# -- histogram with atomics (the Numba tutorial's) ---------------------------------------


@umd.jit
def histogram(x: f32[:], xmin: f32, xmax: f32, histogram_out: i32[:]):
    nbins = histogram_out.shape[0]
    bin_width = (xmax - xmin) / nbins
    start = umd.grid(1)
    stride = umd.gridsize(1)
    for i in range(start, x.shape[0], stride):
        bin_number = np.int32((x[i] - xmin) / bin_width)
        if bin_number >= 0 and bin_number < histogram_out.shape[0]:
            umd.atomic.add(histogram_out, bin_number, 1)


NBINS = 16


@umd.jit
def histogram_shared(x: f32[:], xmin: f32, xmax: f32, histogram_out: i32[:]):
    # per-block histogram in shared memory, then one atomic per bin and block
    local_hist = umd.shared.array(NBINS, int32)
    t = umd.threadIdx.x
    if t < NBINS:
        local_hist[t] = 0
    umd.syncthreads()
    bin_width = (xmax - xmin) / NBINS
    start = umd.grid(1)
    stride = umd.gridsize(1)
    for i in range(start, x.shape[0], stride):
        b = int((x[i] - xmin) / bin_width)
        if 0 <= b < NBINS:
            umd.atomic.add(local_hist, b, 1)
    umd.syncthreads()
    if t < NBINS:
        umd.atomic.add(histogram_out, t, local_hist[t])


# -- a 1-D stencil with a halo in shared memory ------------------------------------------

RADIUS = 3
STENCIL_BLOCK = 64


@umd.jit
def stencil_1d(x: f32[:], out: f32[:]):
    tile = umd.shared.array(shape=STENCIL_BLOCK + 2 * RADIUS, dtype=float32)
    n = x.shape[0]
    i = umd.grid(1)
    t = umd.threadIdx.x + RADIUS
    tile[t] = x[i] if i < n else 0.0
    if umd.threadIdx.x < RADIUS:
        left = i - RADIUS
        right = i + STENCIL_BLOCK
        tile[t - RADIUS] = x[left] if 0 <= left < n else 0.0
        tile[t + STENCIL_BLOCK] = x[right] if right < n else 0.0
    umd.syncthreads()
    if i < n:
        acc = 0.0
        for k in range(-RADIUS, RADIUS + 1):
            acc += tile[t + k]
        out[i] = acc


# -- device functions --------------------------------------------------------------------


@umd.jit(device=True)
def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


@umd.jit(device=True)
def polyval(coeffs: f32[:], n: i32, x: f32) -> f32:
    # Horner's rule over an array argument, with a loop
    acc = 0.0
    for k in range(n):
        acc = acc * x + coeffs[k]
    return acc


@umd.jit(device=True)
def first_index_above(x: f32[:], n, limit):
    # an early return from inside a loop
    for k in range(n):
        if x[k] > limit:
            return k
    return -1


@umd.jit(device=True)
def swap_sorted(a, b):
    # device functions calling device functions, returning a tuple
    return min(a, b), max(a, b)


@umd.jit(device=True)
def add_one_inplace(a: f32[:], i):
    a[i] = a[i] + 1.0


@umd.jit
def device_functions(x: f32[:], coeffs: f32[:], out: f32[:], idx: i32[:]):
    i = umd.grid(1)
    if i < x.size:
        v = clamp(x[i], -1.0, 1.0)
        lo, hi = swap_sorted(v, polyval(coeffs, coeffs.size, x[i]))
        out[i] = lo + 10.0 * hi
        idx[i] = first_index_above(x, x.size, x[i] + 0.5)
        add_one_inplace(out, i)


@umd.jit(device=True)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursive_kernel(out: i32[:]):
    out[0] = fib(5)


# -- semantics ---------------------------------------------------------------------------


@umd.jit
def int_div_mod(a: i32[:], b: i32[:], q: i32[:], r: i32[:], uq: u32[:], ur: u32[:]):
    i = umd.grid(1)
    if i < a.size:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]
        ua = u32(a[i])
        ub = u32(b[i])
        uq[i] = ua // ub
        ur[i] = ua % ub


@umd.jit
def int_div_mod_const(a: i32[:], out: i32[:, :]):
    i = umd.grid(1)
    if i < a.size:
        v = a[i]
        out[i, 0] = v // 3
        out[i, 1] = v % 3
        out[i, 2] = v // -3
        out[i, 3] = v % -3
        out[i, 4] = v // 4
        out[i, 5] = v % 4
        out[i, 6] = v // 1
        out[i, 7] = v % 1


@umd.jit
def powers(x: f32[:], y: f32[:], k: i32[:], out: f32[:, :], iout: i32[:]):
    i = umd.grid(1)
    if i < x.size:
        out[i, 0] = x[i] ** y[i]
        out[i, 1] = math.pow(x[i], y[i])
        out[i, 2] = pow(x[i], y[i])
        out[i, 3] = x[i] ** k[i]
        out[i, 4] = x[i] ** -2
        out[i, 5] = x[i] ** 0.5
        iout[i] = k[i] ** (i % 5)


@umd.jit
def pow_special(x: f32[:], y: f32[:], out: f32[:, :]):
    i = umd.grid(1)
    j = umd.grid(2)[1]
    if i < x.size and j < y.size:
        out[i, j] = math.pow(x[i], y[j])


@umd.jit
def more_math(x: f32[:], out: f32[:, :], flags: i32[:, :]):
    i = umd.grid(1)
    if i < x.size:
        v = x[i]
        out[i, 0] = math.log2(v)
        out[i, 1] = math.exp2(v)
        out[i, 2] = math.ceil(v)
        out[i, 3] = math.trunc(v)
        out[i, 4] = math.copysign(2.0, v)
        out[i, 5] = umd.math.log10(v)
        flags[i, 0] = math.isnan(v)
        flags[i, 1] = math.isinf(v)
        flags[i, 2] = math.isfinite(v)


@umd.jit
def casts_numpy(x: f32[:], out: i32[:], fout: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        out[i] = np.int32(x[i]) + np.uint32(3)
        fout[i] = np.float32(i) / 2


@umd.jit
def tuples(a: i32[:], out: i32[:, :]):
    i = umd.grid(1)
    if i < a.size:
        p = a[i]
        q = i
        p, q = q, p                      # swap
        t = (p, q, p + q)
        x, y, z = t
        n = len(t)
        out[i, 0] = x
        out[i, 1] = y
        out[i, 2] = z + n + t[1] * 0
        rows, cols = out.shape
        out[i, 3] = rows * 100 + cols + out.ndim


@umd.jit
def shape_product(m: i32[:, :, :], out: i32[:]):
    # a shape indexed with a variable
    n = 1
    for d in range(m.ndim):
        n *= m.shape[d]
    if umd.grid(1) == 0:
        out[0] = n
        out[1] = m.size


# -- atomics -----------------------------------------------------------------------------


@umd.jit
def atomics_all(x: i32[:], ux: u32[:], fx: f32[:], res: i32[:], ures: u32[:], fres: f32[:],
                old: i32[:]):
    i = umd.grid(1)
    if i < x.size:
        umd.atomic.add(res, 0, x[i])
        umd.atomic.sub(res, 1, x[i])
        umd.atomic.max(res, 2, x[i])
        umd.atomic.min(res, 3, x[i])
        umd.atomic.max(ures, 0, ux[i])
        umd.atomic.min(ures, 1, ux[i])
        umd.atomic.sub(ures, 2, ux[i])
        umd.atomic.add(fres, 0, fx[i])
        umd.atomic.sub(fres, 1, fx[i])
        umd.atomic.max(fres, 2, fx[i])
        umd.atomic.min(fres, 3, fx[i])
        umd.atomic.nanmax(fres, 4, fx[i])
        umd.atomic.nanmin(fres, 5, fx[i])
        old[i] = umd.atomic.exch(res, 4, i)


@umd.jit
def atomic_exch_f32(a: f32[:], i: i32, v: f32, old: f32[:]):
    old[0] = umd.atomic.exch(a, i, v)


@umd.jit
def atomic_cas_lock(counter: i32[:], lock: i32[:], total: i32[:]):
    # a spin lock with compare_and_swap (on lock[0]) and exch: one lane of each
    # wave at a time adds to counter[0] non-atomically
    i = umd.grid(1)
    if i < total[0]:
        done = False
        while not done:
            if umd.atomic.compare_and_swap(lock, 0, 1) == 0:
                counter[0] = counter[0] + 1
                umd.atomic.exch(lock, 0, 0)
                done = True


@umd.jit
def atomic_cas_slots(x: i32[:], slots: u32[:], won: i32[:]):
    i = umd.grid(1)
    if i < x.size:
        s = x[i] % slots.size
        if umd.atomic.cas(slots, s, 0xFFFFFFFF, u32(i)) == 0xFFFFFFFF:
            umd.atomic.add(won, 0, 1)


@umd.jit
def atomics_2d(x: i32[:], grid_out: i32[:, :], max_out: i32[:, :]):
    # Numba's tuple index for an atomic on a 2-D array
    i = umd.grid(1)
    if i < x.size:
        umd.atomic.add(grid_out, (x[i] % 4, x[i] // 4 % 4), 1)
        umd.atomic.max(max_out, (1, 2), x[i])


@umd.jit
def shared_atomic_sub(out: i32[:]):
    s = umd.shared.array(1, int32)
    if umd.threadIdx.x == 0:
        s[0] = 1000
    umd.syncthreads()
    umd.atomic.sub(s, 0, umd.threadIdx.x)
    umd.syncthreads()
    if umd.threadIdx.x == 0:
        out[umd.blockIdx.x] = s[0]


@umd.jit
def shared_atomic_min(out: i32[:]):
    s = umd.shared.array(1, int32)
    if umd.threadIdx.x == 0:
        s[0] = 1000
    umd.syncthreads()
    umd.atomic.min(s, 0, 100 - umd.threadIdx.x)
    umd.syncthreads()
    if umd.threadIdx.x == 0:
        out[umd.blockIdx.x] = s[0]


# -- local and shared arrays -------------------------------------------------------------

LOCAL_N = 8


@umd.jit
def local_sort(x: f32[:], out: f32[:]):
    # each thread insertion-sorts its LOCAL_N values in a local array
    i = umd.grid(1)
    if i * LOCAL_N < x.size:
        buf = umd.local.array(LOCAL_N, float32)
        for k in range(LOCAL_N):
            buf[k] = x[i * LOCAL_N + k]
        for k in range(1, LOCAL_N):
            v = buf[k]
            j = k - 1
            while j >= 0 and buf[j] > v:
                buf[j + 1] = buf[j]
                j -= 1
            buf[j + 1] = v
        for k in range(LOCAL_N):
            out[i * LOCAL_N + k] = buf[k]


@umd.jit
def local_2d(out: i32[:]):
    i = umd.grid(1)
    m = umd.local.array((3, 4), dtype=i32)
    for r in range(3):
        for c in range(4):
            m[r, c] = r * 10 + c + i
    acc = 0
    for r in range(m.shape[0]):
        acc += m[r, (r + i) % 4]
    out[i] = acc + m[2, 3] * 1000


@umd.jit
def shared_keywords(x: f32[:], out: f32[:]):
    a = umd.shared_array(shape=(2, 32), dtype=f32)
    b = umd.shared_array(f32, shape=32)
    c = umd.shared.array((32,), np.float32)
    t = umd.threadIdx.x
    a[0, t] = x[t]
    a[1, t] = 2.0 * x[t]
    b[t] = 3.0
    c[t] = float(t)
    umd.syncthreads()
    out[t] = a[0, 31 - t] + a[1, t] + b[t] + c[31 - t] + a.shape[1] + b.size
