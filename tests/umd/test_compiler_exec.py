"""Compiled kernels run on the reference executor and checked against numpy."""
import numpy as np
import pytest

from umd.compiler import build

from . import kernels as K
from .refrun import run

RNG = np.random.default_rng(7)


def test_saxpy():
    n = 100
    x = RNG.standard_normal(n).astype(np.float32)
    y = RNG.standard_normal(n).astype(np.float32)
    want = np.float32(2.5) * x + y
    run(build(K.saxpy), (n + 63) // 64, 64, n, 2.5, x, y)
    np.testing.assert_array_equal(y, want)


def test_vector_add_with_early_return():
    n = 77
    a = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    c = np.zeros(n + 20, np.float32)
    run(build(K.vector_add), 2, 64, n, a, b, c)
    np.testing.assert_array_equal(c[:n], a + b)
    assert not c[n:].any()


def test_if_elif_else_divergence():
    n = 60
    x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0] * 12, np.float32)
    out = np.zeros(64, np.int32)
    run(build(K.classify), 1, 64, n, x, out)
    i = np.arange(n)
    want = np.where(x < -1, 1, np.where(x < 0, 2, np.where(x == 0, 3, 4 + i % 3)))
    np.testing.assert_array_equal(out[:n], want)
    assert not out[n:].any()


def _loops_want(t):
    acc = 0
    for k in range(3 * t):
        if k % 4 == 0:
            continue
        if k > 40:
            break
        acc += k
    j = w = 0
    while True:
        j += 1
        if j > t:
            break
        if j % 2 == 1:
            continue
        w += j
    return acc * 1000 + w


def test_divergent_loops_break_continue():
    out = np.zeros(64, np.int32)
    run(build(K.loops), 1, 64, 0, out)
    np.testing.assert_array_equal(out, [_loops_want(t) for t in range(64)])


def test_uniform_loop_break_continue():
    n = 12
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(40, np.float32)
    compiled = build(K.uniform_loop)
    assert "s_cmp_" in compiled.asm_text and "s_cbranch_scc0" in compiled.asm_text
    run(compiled, 1, 40, n, x, out)
    want = []
    for t in range(40):
        s = np.float32(0)
        for k in range(n):
            if k == 5:
                continue
            if k == n - 2:
                break
            s = np.float32(s + x[k] * np.float32(t))
        want.append(s)
    np.testing.assert_array_equal(out, np.array(want, np.float32))


def test_shared_reduction():
    n = 1000
    x = RNG.random(n).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(build(K.reduce_sum), (n + 63) // 64, 64, n, x, out)
    assert abs(out[0] - x.sum(dtype=np.float64)) < 1e-2


def test_atomics():
    n = 100
    x = RNG.integers(-50, 50, n).astype(np.int32)
    y = RNG.standard_normal(n).astype(np.float32)
    counters = np.zeros(4, np.int32)
    counters[2] = -1000
    fmax = np.full(1, -np.inf, np.float32)
    olds = np.full(8, -1, np.int32)
    run(build(K.atomics), 2, 64, n, x, counters, fmax, y, olds)
    assert counters[0] == n
    assert counters[1] == x.sum()
    assert counters[2] == x.max()
    assert fmax[0] == y.max()
    slots = set(int(v) % 8 for v in x)            # Python's % is the kernel's here
    assert counters[3] == len(slots)
    for slot in range(8):
        if slot in slots:
            assert x[olds[slot]] % 8 == slot
        else:
            assert olds[slot] == -1


def test_math_functions():
    n = 32
    x = np.linspace(-3, 3, n).astype(np.float32)
    y = np.linspace(0.1, 9, n).astype(np.float32)
    out = np.zeros(n * 11, np.float32)
    run(build(K.math_all), 1, 32, n, x, y, out)
    got = out.reshape(n, 11)
    d = x.astype(np.float64)
    e = y.astype(np.float64)
    want = [np.exp(d), np.log(e), np.sqrt(e), 1 / np.sqrt(e), np.sin(d), np.cos(d),
            np.tanh(d), np.abs(d), np.minimum(d, e), np.maximum(d, e), np.floor(d)]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(got[:, k], w.astype(np.float32), err_msg=str(k))


def _tiles(n: int) -> int:
    return (n + K.MATMUL_TILE - 1) // K.MATMUL_TILE


def test_tiled_matmul():
    # samples/umd_matmul.py's kernel; ragged M, N and K leave partial tiles on every edge
    m, n, k = 20, 24, 40
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    run(build(K.matmul), (_tiles(n), _tiles(m)), (K.MATMUL_TILE, K.MATMUL_TILE), m, n, k, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_softmax():
    # samples/umd_softmax.py's kernel: one workgroup per row
    rows, n = 3, 150
    x = RNG.standard_normal((rows, n)).astype(np.float32) * 4
    y = np.zeros_like(x)
    run(build(K.softmax_rows), rows, K.SOFTMAX_BLOCK, n, x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_mlp_bias_gelu():
    # samples/umd_mlp.py's step after each matmul: y = gelu(y + bias), one row per workgroup y
    m, n = 3, 70
    y = RNG.standard_normal((m, n)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    want = (y + bias).astype(np.float64)
    want = 0.5 * want * (1 + np.tanh(0.7978845608028654 * (want + 0.044715 * want ** 3)))
    run(build(K.bias_act), ((n + K.BIAS_ACT_BLOCK - 1) // K.BIAS_ACT_BLOCK, m), K.BIAS_ACT_BLOCK,
        n, y, bias, K.GELU)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_builtin_min_max_abs():
    n = 40
    x = np.linspace(-5, 5, n).astype(np.float32)
    k = np.arange(-20, 20, dtype=np.int32)
    out = np.zeros(n, np.float32)
    iout = np.zeros(n, np.int32)
    run(build(K.min_max_abs), 1, 64, n, x, k, out, iout)
    np.testing.assert_array_equal(out, np.maximum(np.maximum(np.minimum(x, 1.5), -1.5), np.abs(x) - 3))
    i = np.arange(n)
    np.testing.assert_array_equal(iout, np.maximum(np.abs(k), 7) - np.minimum(np.minimum(k, 0), i))


def test_relu_gelu():
    n = 90
    x = np.linspace(-4, 4, n).astype(np.float32)
    relu = np.zeros(n, np.float32)
    gelu = np.zeros(n, np.float32)
    run(build(K.relu_gelu), 2, 64, n, x, relu, gelu)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    d = x.astype(np.float64)
    want = 0.5 * d * (1 + np.tanh(0.7978845608 * (d + 0.044715 * d ** 3)))
    np.testing.assert_allclose(gelu, want, rtol=1e-5, atol=1e-6)


def test_short_circuit_and_or():
    n = 20
    x = np.arange(n, dtype=np.int32)          # x[i] is only read for i < n
    out = np.zeros(32, np.int32)
    run(build(K.short_circuit), 1, 32, n, x, out)
    want = [1 if (i < n and i > 5) or i == 31 else 2 for i in range(32)]
    np.testing.assert_array_equal(out, want)


def test_casts_and_integer_ops():
    out = np.zeros(32, np.float32)
    iout = np.zeros(32, np.int32)
    run(build(K.casts), 1, 32, 0, 3.75, out, iout)
    i = np.arange(32)
    f = (3 + i).astype(np.float32)
    np.testing.assert_array_equal(out, f / 2 + np.float32(-3.75) + 3 + np.float32(1.5))
    want = (i << 3) ^ ~i | (i >> 1) & 0xF0 - (i // 3) + (-i) % 5      # Python's %: floors
    np.testing.assert_array_equal(iout, want.astype(np.int32))
