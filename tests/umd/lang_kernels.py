"""Kernels written the way Numba CUDA's documentation and tutorials write them, for the
kernel-language rows of docs/umd.md's Numba table: negative indices, print, the math
functions Python's math module has, match_any/match_all, Python's builtins on mixed
types. `cuda.` became `umd.` and each argument got its annotation; nothing else
changed. tests/umd/test_kernel_language.py runs them against numpy."""
import math

import numpy as np

import umd
from umd import f32, f64, i32, i64, u32, u64


# -- negative indices wrap around (Numba's default) ---------------------------------------
@umd.jit
def last_items(a: f32[:], m: f32[:, :], ends: f32[:], last_col: f32[:]):
    i = umd.grid(1)
    if i == 0:
        ends[0] = a[-1]
        ends[1] = a[-2]
        ends[2] = m[-1, -1]
    if i < m.shape[0]:
        last_col[i] = m[i, -1]


@umd.jit
def reverse(a: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < a.size:
        out[i] = a[-1 - i]                  # a run-time negative index


@umd.jit
def rotate_rows(m: i32[:, :], out: i32[:, :]):
    i, j = umd.grid(2)
    if i < m.shape[0] and j < m.shape[1]:
        out[i, j] = m[i - 1, j - 3]        # row -1 is the last row, as in numpy


@umd.jit
def negative_shared_and_local(a: f32[:], out: f32[:]):
    tile = umd.shared.array(32, f32)
    loc = umd.local.array(4, f32)
    t = umd.threadIdx.x
    tile[t] = a[t]
    loc[-1] = a[t] * 2
    umd.syncthreads()
    k = t - 1
    out[t] = tile[k] + loc[3] + tile[-32]   # thread 0 reads tile[-1], the last one


@umd.jit
def halving_sum(a: f32[:], out: f32[:]):
    buf = umd.shared.array(64, f32)
    t = umd.threadIdx.x
    buf[t] = a[t]
    umd.syncthreads()
    s = 32
    while s > 0:                        # s is assigned 32, then s // 2: never negative
        if t < s:
            buf[t] += buf[t + s]
        umd.syncthreads()
        s //= 2
    if t == 0:
        out[0] = buf[0]


@umd.jit
def guarded_gather(idx: i32[:], a: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < idx.size:
        k = idx[i]
        if k < a.size:
            if 0 <= k:                  # the guard: k needs no wraparound here
                out[i] = a[k]


@umd.jit
def shifted(a: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < a.size:
        k = i
        k -= 3                          # assigned twice, the second time maybe negative
        out[i] = a[k]


# -- print -------------------------------------------------------------------------------
@umd.jit
def print_values(x: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        print("thread", i, x[i])


@umd.jit
def print_types(a: i64, b: u32, c: f64, d: u64):
    if umd.grid(1) == 0:
        print("i64", a, "u32", b, "f64", c, "u64", d, "bool", a < 0)
        print()
        print(-7, 2.5)


# -- the math functions Numba takes from Python's math module ------------------------------
@umd.jit(device=True)
def special_functions(x, y, out, i):
    out[i, 0] = math.fmod(x[i], y[i])
    out[i, 1] = math.erfc(x[i])
    out[i, 2] = math.gamma(x[i])
    out[i, 3] = math.lgamma(x[i])


@umd.jit(device=True)
def float_parts(x, y, k, out, ex, flags, i):
    out[i, 0] = math.copysign(y[i], x[i])
    out[i, 1] = umd.cbrt(x[i])
    m, e = math.frexp(x[i])
    out[i, 2] = m
    ex[i] = e
    out[i, 3] = math.ldexp(x[i], k[i])
    flags[i] = math.isnan(x[i]) + 2 * math.isinf(x[i]) + 4 * math.isfinite(x[i])


@umd.jit
def special64(x: f64[:], y: f64[:], out: f64[:, :]):
    i = umd.grid(1)
    if i < x.size:
        special_functions(x, y, out, i)


@umd.jit
def special32(x: f32[:], y: f32[:], out: f32[:, :]):
    i = umd.grid(1)
    if i < x.size:
        special_functions(x, y, out, i)


@umd.jit
def parts64(x: f64[:], y: f64[:], k: i32[:], out: f64[:, :], ex: i32[:], flags: i32[:],
            np_out: f64[:, :]):
    i = umd.grid(1)
    if i < x.size:
        float_parts(x, y, k, out, ex, flags, i)
        numpy_math(x, y, np_out, i)


@umd.jit
def parts32(x: f32[:], y: f32[:], k: i32[:], out: f32[:, :], ex: i32[:], flags: i32[:],
            np_out: f32[:, :]):
    i = umd.grid(1)
    if i < x.size:
        float_parts(x, y, k, out, ex, flags, i)
        numpy_math(x, y, np_out, i)


@umd.jit
def select_and_cbrt(p: i32[:], a: f32[:], b: i32[:], out: f32[:]):
    i = umd.grid(1)
    if i < out.size:
        out[i] = umd.selp(p[i] > 0, a[i], b[i]) + math.cbrt(f32(8.0))


# -- match_any_sync / match_all_sync -----------------------------------------------------------
@umd.jit
def match(v32: i32[:], v64: i64[:], vf: f64[:], any32: u32[:], any64: u32[:], anyf: u32[:],
          all32: u32[:, :], all64: u32[:, :]):
    i = umd.grid(1)
    if i < v32.size:                    # a ragged size: the last wave is partial
        mask = umd.activemask()
        any32[i] = umd.match_any_sync(mask, v32[i])
        any64[i] = umd.match_any_sync(mask, v64[i])
        anyf[i] = umd.match_any_sync(mask, vf[i])
        m, p = umd.match_all_sync(mask, v32[i])
        all32[i, 0] = m
        all32[i, 1] = p
        m, p = umd.match_all_sync(mask, v64[i] // 32)
        all64[i, 0] = m
        all64[i, 1] = p


# -- idioms of Numba's documentation and tutorials -------------------------------------------
@umd.jit
def histogram_floor(x: f32[:], hist: i32[:]):
    i = umd.grid(1)
    if i >= x.shape[0]:                 # the early return of the tutorials
        return
    b = math.floor(x[i] * 4)            # an integer, as in Python and Numba
    if 0 <= b < hist.shape[0]:
        umd.atomic.add(hist, b, 1)


@umd.jit
def mixed_builtins(x: f32[:], out: f32[:, :], iout: i32[:, :]):
    i = umd.blockDim.x * umd.blockIdx.x + umd.threadIdx.x
    if i < x.size:
        out[i, 0] = min(x[i], 1)
        out[i, 1] = max(x[i], 0)
        out[i, 2] = abs(x[i])
        out[i, 3] = float(i) / 2
        iout[i, 0] = int(x[i])
        iout[i, 1] = round(x[i])
        iout[i, 2] = abs(i - 40)
        iout[i, 3] = min(i, 7, 9)


@umd.jit
def double_chained(a: f32[:, :], out: f32[:, :]):
    i, j = umd.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i][j] = a[i][j] * 2         # a[i] is a row, as in Numba
        out[i][j] += 1


@umd.jit(device=True)
def row_sum(row):
    s = 0.0
    for j in range(len(row)):
        s += row[j]
    return s


@umd.jit
def row_sums(a: f32[:, :], out: f32[:], counts: i32[:, :]):
    i = umd.grid(1)
    if i < a.shape[0]:
        row = a[i]
        out[i] = row_sum(row)
        umd.atomic.add(counts[i % 2], i % 3, 1)


@umd.jit
def cube_rows(a: i32[:, :, :], out: i32[:, :]):
    i, j = umd.grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        plane = a[i]
        line = plane[j]
        out[i, j] = line[0] + line[-1] + a[i, j][line.shape[0] - 1] + plane.shape[1]


@umd.jit
def divmod_and_collatz(a: i32[:], q: i32[:], r: i32[:], steps: i32[:]):
    i = umd.grid(1)
    if i < a.size:
        q[i], r[i] = divmod(a[i], 7)
        n = abs(a[i]) + 1
        k = 0
        while True:
            if n <= 1:
                break
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            k += 1
        steps[i] = k


@umd.jit
def running_reverse(x: f32[:], out: f32[:]):
    if umd.grid(1) == 0:
        acc = 0.0
        for k in range(x.size - 1, -1, -1):
            acc = acc * 0.5 + x[k]
        out[0] = acc


# a global numpy array, frozen into the kernel as a constant (Numba's rule)
SMOOTHING = np.array([0.25, 0.5, 0.25], np.float32)


@umd.jit
def smooth(x: f32[:], out: f32[:]):
    i = umd.grid(1)
    if 1 <= i < x.size - 1:
        out[i] = SMOOTHING[0] * x[i - 1] + SMOOTHING[1] * x[i] + SMOOTHING[2] * x[i + 1]


# NumPy's ufuncs on scalars, which Numba CUDA compiles in kernels
@umd.jit(device=True)
def numpy_math(x, y, out, i):
    out[i, 0] = np.sqrt(np.abs(x[i]))
    out[i, 1] = np.exp(x[i] * 0.25)
    out[i, 2] = np.log1p(np.fabs(x[i]))
    out[i, 3] = np.arctan2(y[i], x[i])
    out[i, 4] = np.floor(x[i])
    out[i, 5] = np.power(np.fabs(x[i]), 1.5)
    out[i, 6] = np.hypot(x[i], y[i])
    out[i, 7] = np.copysign(np.trunc(y[i]), x[i])

