"""Kernels for the compiler tests (they need a real source file), as plain Python
functions (what the compiler takes; ``@umd.kernel`` keeps one as ``.fn``).

The kernels the samples teach with are defined once, in the samples, and imported
from there: saxpy, the tiled matmul, the row softmax and the MLP's bias + GELU step.
A learner reads a kernel next to the code that launches it and checks its result, in
the sample they run, so that is where a kernel lives; the tests run those same
kernels on the reference executor. The kernels below the imports are the tests' own.
"""
import sys
from pathlib import Path

import umd.intrinsics as gpu
from umd.types import Ptr, f32, i32, u32

# The samples are scripts that import each other by file name (Python puts a script's
# folder on sys.path); importing them here needs that folder on sys.path too.
_SAMPLES = str(Path(__file__).resolve().parents[2] / "samples")
if _SAMPLES not in sys.path:
    sys.path.append(_SAMPLES)

import umd_matmul  # noqa: E402
import umd_mlp  # noqa: E402
import umd_saxpy  # noqa: E402
import umd_softmax  # noqa: E402

saxpy = umd_saxpy.saxpy.fn
matmul, MATMUL_TILE = umd_matmul.matmul.fn, umd_matmul.TILE                   # TILE x TILE workgroups
softmax_rows, SOFTMAX_BLOCK = umd_softmax.softmax_rows.fn, umd_softmax.BLOCK   # one workgroup per row
bias_act, BIAS_ACT_BLOCK, GELU = umd_mlp.bias_act.fn, umd_mlp.BLOCK, umd_mlp.GELU


def vector_add(n: i32, a: Ptr[f32], b: Ptr[f32], c: Ptr[f32]):
    i = gpu.block_idx.x * gpu.block_dim.x + gpu.thread_idx.x
    if i >= n:
        return
    c[i] = a[i] + b[i]


def classify(n: i32, x: Ptr[f32], out: Ptr[i32]):
    i = gpu.block_idx.x * gpu.block_dim.x + gpu.thread_idx.x
    if i < n:
        v = x[i]
        if v < -1.0:
            r = 1
        elif v < 0.0:
            r = 2
        elif v == 0.0:
            r = 3
        else:
            r = 4 + i % 3
        out[i] = r


def loops(n: i32, out: Ptr[i32]):
    # per thread t: sum over k < 3t of k, skipping multiples of 4, stopping at k > 40
    t = gpu.thread_idx.x
    acc = 0
    for k in range(3 * t):
        if k % 4 == 0:
            continue
        if k > 40:
            break
        acc += k
    j = 0
    w = 0
    while True:
        j += 1
        if j > t:
            break
        if j % 2 == 1:
            continue
        w += j
    out[t] = acc * 1000 + w


def uniform_loop(n: i32, x: Ptr[f32], out: Ptr[f32]):
    t = gpu.thread_idx.x
    s = 0.0
    for k in range(n):
        if k == 5:
            continue
        if k == n - 2:
            break
        s += x[k] * float(t)
    out[t] = s


def reduce_sum(n: i32, x: Ptr[f32], out: Ptr[f32]):
    buf = gpu.shared_array(f32, 64)
    t = gpu.thread_idx.x
    i = gpu.block_idx.x * 64 + t
    v = 0.0
    if i < n:
        v = x[i]
    buf[t] = v
    gpu.syncthreads()
    stride = 32
    while stride > 0:
        if t < stride:
            buf[t] += buf[t + stride]
        gpu.syncthreads()
        stride = stride // 2
    if t == 0:
        gpu.atomic_add(out, 0, buf[0])


def atomics(n: i32, x: Ptr[i32], counters: Ptr[i32], fmax: Ptr[f32], y: Ptr[f32],
            olds: Ptr[i32]):
    i = gpu.block_idx.x * gpu.block_dim.x + gpu.thread_idx.x
    if i < n:
        gpu.atomic_add(counters, 0, 1)
        gpu.atomic_add(counters, 1, x[i])
        gpu.atomic_max(counters, 2, x[i])
        gpu.atomic_max(fmax, 0, y[i])
        # every thread tries to claim slot x[i] % 8; exactly one wins per slot
        old = gpu.atomic_cas(olds, (x[i] % 8 + 8) % 8, -1, i)
        if old == -1:
            gpu.atomic_add(counters, 3, 1)


def math_all(n: i32, x: Ptr[f32], y: Ptr[f32], out: Ptr[f32]):
    i = gpu.thread_idx.x
    if i < n:
        v = x[i]
        w = y[i]
        out[i * 11 + 0] = gpu.math.exp(v)
        out[i * 11 + 1] = gpu.math.log(w)
        out[i * 11 + 2] = gpu.math.sqrt(w)
        out[i * 11 + 3] = gpu.math.rsqrt(w)
        out[i * 11 + 4] = gpu.math.sin(v)
        out[i * 11 + 5] = gpu.math.cos(v)
        out[i * 11 + 6] = gpu.math.tanh(v)
        out[i * 11 + 7] = gpu.math.fabs(v)
        out[i * 11 + 8] = gpu.math.fmin(v, w)
        out[i * 11 + 9] = gpu.math.fmax(v, w)
        out[i * 11 + 10] = gpu.math.floor(v)


def relu_gelu(n: i32, x: Ptr[f32], relu: Ptr[f32], gelu: Ptr[f32]):
    i = gpu.block_idx.x * gpu.block_dim.x + gpu.thread_idx.x
    if i < n:
        v = x[i]
        relu[i] = v if v > 0.0 else 0.0
        inner = 0.7978845608 * (v + 0.044715 * v * v * v)
        gelu[i] = 0.5 * v * (1.0 + gpu.math.tanh(inner))


def min_max_abs(n: i32, x: Ptr[f32], k: Ptr[i32], out: Ptr[f32], iout: Ptr[i32]):
    # Python's min, max and abs, on f32 and on i32 (umd.math.fmin/fmax: math_all)
    i = gpu.thread_idx.x
    if i < n:
        out[i] = max(min(x[i], 1.5), -1.5, abs(x[i]) - 3.0)
        iout[i] = max(abs(k[i]), 7) - min(k[i], 0, i)


def short_circuit(n: i32, x: Ptr[i32], out: Ptr[i32]):
    i = gpu.thread_idx.x
    if i < n and x[i] > 5 or i == 31:
        out[i] = 1
    else:
        out[i] = 2


def casts(n: u32, a: f32, out: Ptr[f32], iout: Ptr[i32]):
    i = gpu.thread_idx.x
    f = i32(a) + i
    out[i] = f32(f) / 2 + (-a) + 7 // 2 + 7.5 % 2.0
    iout[i] = (i << 3) ^ ~i | (i >> 1) & 0xF0 - (i // 3) + (-i) % 5
