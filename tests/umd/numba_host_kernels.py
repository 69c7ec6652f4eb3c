"""Kernels and functions of tests/umd/test_numba_host.py and test_numba_host_e2e.py:
Numba's host-side helpers (forall, reduce, vectorize, guvectorize, device functions
called from Python), written as Numba's documentation writes them."""
import math

import umd
from umd import f32, f64, i32


@umd.jit
def add_forall(x: f32[:], y: f32[:], out: f32[:]):
    i = umd.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


@umd.jit
def fill_index(out: i32[:]):
    i = umd.grid(1)
    if i < out.size:
        out[i] = i


@umd.jit(device=True)
def clamp(v, lo, hi):
    """Called by kernels and, as Python, by the host."""
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


@umd.jit(device=True)
def inverse(v):
    return 1.0 / v                  # on the host a ZeroDivisionError for 0, as Python's


@umd.jit
def clamp_kernel(x: f32[:], out: f32[:], lo: f32, hi: f32):
    i = umd.grid(1)
    if i < x.size:
        out[i] = clamp(x[i], lo, hi)


@umd.reduce
def sum_reduce(a, b):
    return a + b


max_reduce = umd.reduce(lambda a, b: max(a, b))


@umd.vectorize(['float32(float32, float32)', 'float64(float64, float64)'], target='cuda')
def rel_diff(x, y):
    return 2 * (x - y) / (x + y)


@umd.vectorize
def scaled_sum(x: f32, y: f32) -> f32:
    return x + 2 * y


@umd.vectorize(['float64(float64)'], target='cuda')
def gaussian(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@umd.guvectorize(['void(float32[:], float32[:], float32[:])'], '(n),(n)->()', target='cuda')
def dot(x, y, r):
    s = 0.0
    for i in range(len(x)):
        s += x[i] * y[i]
    r[0] = s


@umd.guvectorize([(f64[:, :], f64[:, :], f64[:, :])], '(m,n),(n,p)->(m,p)', target='cuda')
def matmul(a, b, c):
    m, n = a.shape
    p = b.shape[1]
    for i in range(m):
        for j in range(p):
            s = 0.0
            for k in range(n):
                s += a[i, k] * b[k, j]
            c[i, j] = s


@umd.guvectorize(['void(float32[:], float32, float32[:])'], '(n),()->(n)', target='cuda')
def shift(x, by, out):
    for i in range(len(x)):
        out[i] = x[i] + by
