"""Warp intrinsics and shared-memory atomics (tests/umd/warp_kernels.py) compiled and
run on the reference executor, against numpy models of CUDA's semantics on a
warpsize-lane wave."""
import numpy as np
import pytest

import umd
from umd import f32
from umd.compiler import KernelCompileError, build

from . import warp_kernels as K
from .refrun import run

RNG = np.random.default_rng(1414)
W = umd.warpsize


def lanes(n):
    return np.arange(n) % W


def per_warp(a, fn):
    """fn(warp's slice, lane numbers) for each warp of a 1-D launch."""
    out = []
    for w in range(0, len(a), W):
        out.append(fn(a[w:w + W]))
    return np.concatenate(out)


def test_warpsize_is_the_isa_wave():
    from vgpu import isa
    assert umd.warpsize == isa.WAVE_SIZE == 32


def test_shuffles_follow_cuda():
    n = 128                                         # 2 blocks of 64: 4 full warps
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    src = RNG.integers(0, 70, n).astype(np.int32)   # some beyond the warp
    out = np.zeros((n, 11), np.int32)
    run(build(K.shuffles), 2, 64, x, src, out)
    lane = lanes(n)
    base = np.arange(n) - lane

    def pick(j, valid):
        return np.where(valid, x[base + np.where(valid, j, 0)], x)

    np.testing.assert_array_equal(out[:, 0], x[base + src % W])
    np.testing.assert_array_equal(out[:, 1], pick(lane - 1, lane - 1 >= 0))
    np.testing.assert_array_equal(out[:, 2], pick(lane - 5, lane - 5 >= 0))
    np.testing.assert_array_equal(out[:, 3], pick(lane + 3, lane + 3 < W))
    np.testing.assert_array_equal(out[:, 4], x[base + (lane ^ 1)])
    np.testing.assert_array_equal(out[:, 5], x[base + (lane ^ 16)])
    np.testing.assert_array_equal(out[:, 6], x)
    np.testing.assert_array_equal(out[:, 7], pick(lane + src, lane + src < W))
    np.testing.assert_array_equal(out[:, 8], lane)
    assert (out[:, 9] == 32).all()
    np.testing.assert_array_equal(out[:, 10].view(np.uint32), (1 << lane.astype(np.uint64)) - 1)


def test_float_shuffles_keep_the_bits():
    n = 64
    x = RNG.standard_normal(n).astype(np.float32)
    x[3], x[9] = np.inf, -0.0
    out = np.zeros(n, np.float32)
    run(build(K.shuffle_floats), 1, 64, x, out)
    lane, base = lanes(n), np.arange(n) - lanes(n)
    want = x[base + (lane ^ 7)] + x[base] * np.float32(2)
    np.testing.assert_array_equal(out, want)


def test_64_bit_shuffles_move_both_halves():
    n = 64
    x = RNG.standard_normal(n) * 1e12
    k = RNG.integers(-(1 << 62), 1 << 62, n)
    out, kout = np.zeros(n), np.zeros(n, np.int64)
    run(build(K.shuffle_wide), 1, 64, x, k, out, kout)
    lane, base = lanes(n), np.arange(n) - lanes(n)
    np.testing.assert_array_equal(out, np.where(lane + 2 < W, x[base + np.minimum(lane + 2, W - 1)], x))
    np.testing.assert_array_equal(kout, k[base + 31 - lane])


@pytest.mark.parametrize("n, block", [(1024, 128), (1000, 96), (45, 64)])
def test_warp_reduce(n, block):
    # ragged: the guard gives 0 for threads past the end (each warp is complete)
    x = RNG.standard_normal(n).astype(np.float32)
    grid = (n + block - 1) // block
    out = np.zeros(grid * block // W, np.float32)
    run(build(K.warp_reduce), grid, block, x, out)
    pad = np.zeros(grid * block, np.float32)
    pad[:n] = x
    want = pad.reshape(-1, W).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)   # tree order vs pairwise


def test_warp_max_butterfly():
    x = RNG.integers(-(1 << 31), (1 << 31) - 1, 256).astype(np.int32)
    out = np.zeros_like(x)
    run(build(K.warp_max_butterfly), 2, 128, x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(-1, W).max(axis=1), W))


def _mask(bits):
    return int(sum(1 << k for k, b in enumerate(bits) if b))


def test_votes_ballot_any_all_and_bit_functions():
    n = 96
    x = RNG.integers(-5, 5, n).astype(np.int32)
    x[32:64] = np.abs(x[32:64]) + 1                 # warp 1: all positive
    x[64:96] = -np.abs(x[64:96])                    # warp 2: none
    out = np.zeros((n, 14), np.uint32)
    run(build(K.votes), 1, 96, x, out)
    for w in range(3):
        sl = slice(w * W, (w + 1) * W)
        pred = x[sl] > 0
        b = _mask(pred)
        assert (out[sl, 0] == b).all() and (out[sl, 5] == 0xFFFFFFFF).all()
        assert (out[sl, 1] == int(pred.any())).all() and (out[sl, 2] == int(pred.all())).all()
        assert (out[sl, 3] == bin(b).count("1")).all()
        assert (out[sl, 4] == ((b & -b).bit_length() if b else 0)).all()
        idx = np.arange(w * W, (w + 1) * W)
        sub = idx % 3 == 0                          # the lanes inside the `if`
        on = _mask(sub)
        assert (out[idx[sub], 6] == on).all()
        assert (out[idx[sub], 7] == b & on).all()
        lo, hi = on & 0xFFFF, on & 0xFFFF0000
        assert (out[idx[sub], 8] == int(b & lo == lo)).all()
        assert (out[idx[sub], 9] == int(b & hi != 0)).all()
        assert (out[idx[~sub], 6:10] == 0).all()
    u = x.view(np.uint32).astype(np.int64)
    np.testing.assert_array_equal(out[:, 10], [32 - int(v).bit_length() for v in u])
    np.testing.assert_array_equal(out[:, 11], [int(f"{int(v):032b}"[::-1], 2) for v in u])
    np.testing.assert_array_equal(out[:, 12], [(int(v) & -int(v)).bit_length() for v in u])
    np.testing.assert_array_equal(out[:, 13], [bin(int(v)).count("1") for v in u])


def test_warp_aggregated_atomic():
    n = 300
    x = RNG.integers(0, 1000, n).astype(np.int32)
    counter = np.zeros(1, np.int32)
    slots = np.full(n, -1, np.int32)
    run(build(K.warp_aggregated_count), 5, 64, x, counter, slots)
    even = x[x % 2 == 0]
    assert counter[0] == len(even)
    np.testing.assert_array_equal(np.sort(slots[:len(even)]), np.sort(even))
    # each warp's lanes are consecutive, in lane order
    assert (slots[len(even):] == -1).all()


def test_shared_atomics_of_every_kind():
    blocks, block = 3, 96
    n = blocks * block
    x = RNG.integers(-10000, 10000, n).astype(np.int32)
    fx = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(blocks * 6, np.int32)
    fout = np.zeros(blocks * 2, np.float32)
    olds = np.zeros(n, np.int32)
    run(build(K.shared_atomics_all), blocks, block, x, fx, out, fout, olds)
    for b in range(blocks):
        xs, fs = x[b * block:(b + 1) * block], fx[b * block:(b + 1) * block]
        mn, mx, last, count, rest, first = out[b * 6:(b + 1) * 6]
        assert (mn, mx, count, first) == (xs.min(), xs.max(), block, 1)
        assert rest == 1000 - xs.sum()
        # exchange: the old values and the last one are 0 and every i + 1, once each
        chain = np.append(olds[b * block:(b + 1) * block], last)
        np.testing.assert_array_equal(np.sort(chain), np.r_[0, np.arange(b * block, (b + 1) * block) + 1])
        assert (fout[2 * b], fout[2 * b + 1]) == (fs.min(), fs.max())


def test_warp_intrinsic_arguments_are_checked():
    @umd.jit
    def bad(x: f32[:]):
        x[0] = umd.shfl_sync(0xFFFFFFFF, x[0])

    with pytest.raises(KernelCompileError, match=r"takes 3 argument"):
        build(bad)

    @umd.jit
    def bad_popc(x: f32[:]):
        x[0] = umd.popc(x[0])

    with pytest.raises(KernelCompileError, match="needs an integer"):
        build(bad_popc)


def test_warp_intrinsics_outside_a_kernel():
    with pytest.raises(RuntimeError, match="only meaningful inside"):
        umd.shfl_sync(0xFFFFFFFF, 1, 0)
    with pytest.raises(RuntimeError, match="only meaningful inside"):
        int(umd.laneid)
