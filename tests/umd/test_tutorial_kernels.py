"""The tutorial kernels of tests/umd/tutorial_kernels.py on the reference executor,
against numpy, with ragged sizes (not multiples of the block). Tolerances: results
computed in the same order as numpy's float32 are exact; sums in another order are
within rtol 1e-5 of a float64 reference."""
import numpy as np
import pytest

from umd.compiler import build

from . import tutorial_kernels as K
from .refrun import run

RNG = np.random.default_rng(2014)


def blocks(n, b):
    return (n + b - 1) // b


def test_naive_matmul_ragged():
    A = RNG.standard_normal((19, 23)).astype(np.float32)
    B = RNG.standard_normal((23, 13)).astype(np.float32)
    C = np.zeros((19, 13), np.float32)
    run(build(K.matmul), (blocks(19, 8), blocks(13, 8)), (8, 8), A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


def test_shared_memory_matmul_of_numbas_docs():
    n = 37                                      # 3 tiles of 16, the last one ragged
    A, B = RNG.standard_normal((2, n, n)).astype(np.float32)
    C = np.zeros((n, n), np.float32)
    g = blocks(n, K.TPB)
    run(build(K.fast_matmul), (g, g), (K.TPB, K.TPB), A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1000, 128, 77])
def test_block_reductions(n):
    a = RNG.standard_normal(n).astype(np.float32)
    nb = blocks(n, K.BLOCK)
    partial = np.zeros(nb, np.float32)
    run(build(K.block_sum), nb, K.BLOCK, a, partial)
    want = [a[b * K.BLOCK:(b + 1) * K.BLOCK].astype(np.float64).sum() for b in range(nb)]
    np.testing.assert_allclose(partial, want, rtol=1e-5, atol=1e-5)
    ia = RNG.integers(-(1 << 31), (1 << 31) - 1, n).astype(np.int32)
    out = np.zeros((nb, 2), np.int32)
    run(build(K.block_min_max), nb, K.BLOCK, ia, out)
    for b in range(nb):
        part = ia[b * K.BLOCK:(b + 1) * K.BLOCK]
        assert tuple(out[b]) == (part.min(), part.max())


def test_block_scan_ragged():
    n = 300
    a = RNG.integers(-50, 50, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    run(build(K.block_scan), blocks(n, K.BLOCK), K.BLOCK, a, out)
    want = np.concatenate([np.cumsum(a[b:b + K.BLOCK]) for b in range(0, n, K.BLOCK)])
    np.testing.assert_array_equal(out, want)


def _hash(x):
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def test_monte_carlo_pi_with_an_integer_hash():
    threads, samples, seed = 200, 16, 12345
    hits = np.zeros(threads, np.int32)
    run(build(K.monte_carlo_pi), blocks(threads, 64), 64, samples, seed, hits)
    k = np.arange(threads * samples, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):
        h1 = _hash(np.uint32(seed) ^ (k * np.uint32(2)))
        h2 = _hash(h1 + np.uint32(0x9E3779B9))
    scale = np.float32(1.0 / 16777216.0)
    x = (h1 >> np.uint32(8)).astype(np.float32) * scale
    y = (h2 >> np.uint32(8)).astype(np.float32) * scale
    inside = (x * x + y * y <= np.float32(1.0)).reshape(threads, samples).sum(axis=1)
    np.testing.assert_array_equal(hits, inside)             # exact: same bits, same rounding
    assert abs(4 * hits.sum() / (threads * samples) - np.pi) < 0.1


def test_divergence_with_while_and_break():
    start = np.r_[1, 2, 3, 6, 7, 27, 97, 871, RNG.integers(1, 10000, 60)].astype(np.int32)
    steps = np.zeros_like(start)
    limit = 100

    def model(n):
        s = 0
        while n != 1:
            if s >= limit:
                return -1
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            s += 1
        return s

    run(build(K.collatz_steps), blocks(len(start), 32), 32, start, steps, limit)
    np.testing.assert_array_equal(steps, [model(int(n)) for n in start])
    assert (steps == -1).any() and (steps > 50).any()


def test_mixed_casts():
    n = 70
    x = (RNG.standard_normal(n) * 100).astype(np.float32)
    x[:6] = [0.5, 1.5, 2.5, -0.5, -2.5, -7.99]
    k = RNG.integers(-1000, 1000, n).astype(np.int32)
    u = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    of = np.zeros((n, 4), np.float32)
    oi = np.zeros((n, 5), np.int32)
    run(build(K.mixed_casts), 2, 64, x, k, u, of, oi)
    f = np.float32
    np.testing.assert_array_equal(of[:, 0], x + k.astype(f))
    np.testing.assert_array_equal(of[:, 1], k.astype(f) / f(2))
    np.testing.assert_array_equal(of[:, 2], u.astype(f) * f(0.5))
    np.testing.assert_array_equal(of[:, 3], (k * 3).astype(f) / f(7))
    np.testing.assert_array_equal(oi[:, 0], np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(oi[:, 1], k // 3)
    np.testing.assert_array_equal(oi[:, 2], (u >> 1).astype(np.int32))
    np.testing.assert_array_equal(oi[:, 3], np.rint(x).astype(np.int32))
    np.testing.assert_array_equal(oi[:, 4], k % 7)


@pytest.mark.parametrize("shape", [(37, 50), (16, 16), (5, 70)])
def test_padded_transpose(shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    out = np.zeros(shape[::-1], np.float32)
    run(build(K.transpose), (blocks(shape[1], K.TILE), blocks(shape[0], K.TILE)),
        (K.TILE, K.TILE), a, out)
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_syncthreads_votes_and_fences(executor):
    # umd.syncthreads_count/_and/_or and umd.threadfence* did not exist before
    n, block = 200, 64
    x = np.random.default_rng(5).uniform(-2.5, 2.9, n).astype(np.float32)
    x[70] = 5.0                                             # block 1 has a big one
    blocks = -(-n // block)
    out = np.zeros((blocks, 6), np.int32)
    run(build(K.block_votes), blocks, block, x, out, engine=executor)
    for b in range(blocks):
        v = np.zeros(block, np.float32)
        part = x[b * block:(b + 1) * block]
        v[:len(part)] = part
        idx = np.arange(b * block, (b + 1) * block)
        want = [int((v > 0).sum()), int((np.abs(v) < 3).all()), int((v > 2).any())] + \
               [int((idx % 3 == r).sum()) for r in range(3)]
        assert out[b].tolist() == want, (b, out[b].tolist(), want)
