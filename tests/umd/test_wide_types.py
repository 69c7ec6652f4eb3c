"""float64, int64 and uint64 in kernels (tests/umd/wide_kernels.py), compiled and run on
the reference executor, checked against numpy. Tolerances: exact wherever the kernel
computes in numpy's order (IEEE binary64 is deterministic); the float64 transcendentals
are software routines (docs/umd-compiler.md 2.2), checked to 1 ulp in test_math64.py
and here to 1e-15."""
import math

import numpy as np
import pytest

import umd
from umd.compiler import KernelCompileError, build

from . import wide_kernels as K
from .refrun import run

RNG = np.random.default_rng(64)


def _blocks(n, block):
    return (n + block - 1) // block


def test_saxpy_float64_ragged():
    n = 1001
    x, y = RNG.standard_normal((2, n))
    out = np.zeros(n)
    compiled = build(K.saxpy64)
    run(compiled, _blocks(n, 64), 64, 1.0 / 3.0, x, y, out)
    np.testing.assert_array_equal(out, (1.0 / 3.0) * x + y)
    assert "v_mul_f64" in compiled.asm_text and "global_load_dwordx2" in compiled.asm_text


def test_grid_stride_float64_accumulator():
    n, threads = 1000, 96
    x, y = RNG.standard_normal((2, n))
    out = np.zeros(threads)
    run(build(K.dot_partial), 3, 32, x, y, out)
    want = []
    for t in range(threads):
        acc = 0.0
        for i in range(t, n, threads):
            acc += x[i] * y[i]
        want.append(acc)
    np.testing.assert_array_equal(out, want)


def test_int64_row_sums_past_32_bits():
    m = RNG.integers(-(1 << 50), 1 << 50, (45, 13), dtype=np.int64)
    out = np.zeros(45, np.int64)
    run(build(K.row_sums), 2, 32, m, out)
    np.testing.assert_array_equal(out, m.sum(axis=1))


def test_uint64_hash():
    n = 300
    out = np.zeros(n, np.uint64)
    seed = 0xDEADBEEFCAFEF00D
    run(build(K.splitmix64), _blocks(n, 128), 128, seed, out)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        want = z ^ (z >> np.uint64(31))
    np.testing.assert_array_equal(out, want)


def test_int64_floor_division_and_modulo():
    a = np.array([7, -7, 7, -7, 0, 1 << 40, -(1 << 40) - 3, -(1 << 63), 5, -5, 123456789012, -1],
                 np.int64)
    b = np.array([2, 2, -2, -2, 3, 3, 7, -1, 0, 0, -1000, 1 << 62], np.int64)
    q, r = np.zeros_like(a), np.zeros_like(a)
    run(build(K.floordiv_mod64), 1, 32, a, b, q, r)
    nz = b != 0
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(q[nz], np.floor_divide(a[nz], b[nz]))
        np.testing.assert_array_equal(r[nz], np.mod(a[nz], b[nz]))
    assert (q[~nz] == 0).all() and (r[~nz] == 0).all()      # Numba's x // 0 == x % 0 == 0


def test_promotion_follows_numba():
    n = 70
    x32 = RNG.standard_normal(n).astype(np.float32)
    y64 = RNG.standard_normal(n)
    n32 = RNG.integers(-(1 << 31), 1 << 31, n, dtype=np.int64).astype(np.int32)
    big = 1 << 40
    f_out, g_out = np.zeros(n), np.zeros(n)
    i_out = np.zeros(n, np.int64)
    h_out, k_out = np.zeros(n, np.float32), np.zeros(n)
    run(build(K.promotions), 3, 32, x32, y64, n32, big, f_out, i_out, g_out, h_out, k_out)
    np.testing.assert_array_equal(k_out, y64 * 0.1)
    np.testing.assert_array_equal(f_out, x32.astype(np.float64) + y64)
    np.testing.assert_array_equal(i_out, n32.astype(np.int64) + big)
    # i32 * literal is f32 here (docs/umd-compiler.md 2.2; Numba would make it f64)
    np.testing.assert_array_equal(g_out, (n32.astype(np.float32) * np.float32(0.1)) + y64)
    np.testing.assert_array_equal(h_out, x32 * np.float32(0.1))   # ...in f32 code, a float32


def test_casts():
    x = np.array([0.5, -0.5, 1.5, -2.5, 1e10, -1e10, 3.9999999999, -7.25, 2.0 ** 62,
                  123456.789, 0.0, -0.0], np.float64)
    a = np.array([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 7, -7, 16777217, -16777217, 3, 4, 5], np.int32)
    outs = [np.zeros(len(x), t) for t in (np.int32, np.int64, np.uint64, np.float32, np.float64,
                                          np.float64, np.float32)]
    run(build(K.casts), 1, 32, x, a, *outs)
    f_i32, f_i64, f_u64, f_f32, i_f64, u_f64, l_f32 = outs
    np.testing.assert_array_equal(f_i32, np.where(np.abs(x) < 2e9, np.trunc(x), 0).astype(np.int32))
    np.testing.assert_array_equal(f_i64, np.trunc(x).astype(np.int64))
    np.testing.assert_array_equal(f_u64, np.trunc(np.abs(x)).astype(np.uint64))
    np.testing.assert_array_equal(f_f32, x.astype(np.float32))
    np.testing.assert_array_equal(i_f64, a.astype(np.float64))
    np.testing.assert_array_equal(u_f64, a.view(np.uint32).astype(np.float64))
    np.testing.assert_array_equal(l_f32, (a.astype(np.int64) * 4398046511104).astype(np.float32))


def test_math_on_float64():
    x = np.concatenate([RNG.standard_normal(40) * 10, [0.0, -0.0, 2.5, -2.5, 1e15 + 0.5, np.nan,
                                                      np.inf, -np.inf]])
    out = np.zeros((10, len(x)))
    run(build(K.math64), 2, 32, x, out)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out[0], np.sqrt(np.abs(x)))
        np.testing.assert_array_equal(out[4], np.abs(x))
        # math.floor/ceil/trunc of a float64 are int64 (Numba): exact where they fit
        fin = np.isfinite(x)
        for k, fn in ((1, np.floor), (2, np.ceil), (3, np.trunc)):
            np.testing.assert_array_equal(out[k][fin], fn(x[fin]))
        np.testing.assert_allclose(out[5], np.exp(x / 8.0), rtol=1e-15)
        fin = np.isfinite(x) & (np.abs(x) < 100)
        np.testing.assert_allclose(out[6][fin], np.sin(x[fin]), rtol=1e-15, atol=1e-300)
        np.testing.assert_array_equal(out[7], np.where(np.isnan(x), 0.25, np.maximum(x, 0.25))
                                      - np.where(np.isnan(x), -0.25, np.minimum(x, -0.25)))
        np.testing.assert_array_equal(out[8], np.where(np.isnan(x), 1.0, -1.0))
        np.testing.assert_array_equal(out[9], x * x + x / 3.0)


def test_3d_float64_array():
    t = RNG.standard_normal((5, 6, 7))
    before = t.copy()
    run(build(K.cube_fill), (2, 2, 2), (4, 4, 4), t, 0.5)
    i, j, k = np.indices(t.shape)
    np.testing.assert_array_equal(t, 0.5 * (i * 10000 + j * 100 + k) + before)


def test_64bit_atomics():
    n = 500
    x = RNG.standard_normal(n)
    keys = RNG.integers(0, 8, n).astype(np.int32)
    fsum, isum, usum = np.zeros(8), np.zeros(8, np.int64), np.zeros(1, np.uint64)
    run(build(K.atomics64), _blocks(n, 64), 64, x, keys, fsum, isum, usum)
    np.testing.assert_allclose(fsum, np.bincount(keys, weights=x, minlength=8), rtol=1e-12,
                               atol=1e-12)                       # order of the adds
    np.testing.assert_array_equal(isum, np.bincount(keys, minlength=8) * (np.arange(8) << 40))
    assert usum[0] == n


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_64bit_min_max_exch_cas(executor):
    n = 300
    x = RNG.standard_normal(n) * 1e3
    x[7] = np.nan                                       # min/max skip a NaN (minNum), as f32's
    k = RNG.integers(-(1 << 62), 1 << 62, n, dtype=np.int64)
    u = RNG.integers(0, 1 << 64, n, dtype=np.uint64)
    fo = np.array([-np.inf, np.inf, -np.inf])
    io = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 12345, np.iinfo(np.int64).min])
    uo = np.array([0, (1 << 64) - 1], np.uint64)
    olds = np.zeros(n, np.int64)
    run(build(K.minmax_exch_cas64), _blocks(n, 64), 64, x, k, u, fo, io, uo, olds,
        engine=executor)
    fin = x[~np.isnan(x)]
    assert fo.tolist() == [fin.max(), fin.min(), fin.max()]
    assert io[0] == k.max() and io[1] == k.min() and io[3] == (k ^ 0x5555).max()
    assert uo.tolist() == [int(u.max()), int(u.min())]
    # exch: every value written once, each old value is the one written before it
    chain = sorted(olds.tolist() + [int(io[2])])
    assert chain == sorted(k.tolist() + [12345])


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_64bit_compare_and_swap_loop_counts_past_32_bits(executor):
    n = 200
    counter = np.zeros(1, np.uint64)
    run(build(K.cas_counter64), _blocks(n, 64), 64, counter, n, engine=executor)
    assert int(counter[0]) == sum(range(n)) << 32


def test_shared_float64_block_reduction():
    n = 300
    x = RNG.standard_normal(n)
    out = np.zeros(_blocks(n, 64))
    run(build(K.block_sum64), _blocks(n, 64), 64, x, out)
    padded = np.zeros(len(out) * 64)
    padded[:n] = x
    np.testing.assert_allclose(out, padded.reshape(-1, 64).sum(axis=1), rtol=1e-13)


def test_64bit_compares():
    a = np.array([-(1 << 63), -6, -5, 0, 7, 8, (1 << 40), (1 << 63) - 1], np.int64)
    b = np.array([0, 1, (1 << 63), (1 << 63) + 1, (1 << 64) - 1, 5, 1 << 63, 3], np.uint64)
    x = np.array([np.nan, 0.5, 0.49, -np.inf, 7.0, 8.0, 2.0 ** 40, np.inf])
    out = np.zeros((8, 8), np.int32)
    run(build(K.compare64), 1, 32, a, b, x, out)
    with np.errstate(invalid="ignore"):
        want = [a < 0, a >= -5, a != 7, b > np.uint64(1 << 63), x != x, x >= 0.5,
                a.astype(np.float64) == x, np.ones(8, bool)]
    np.testing.assert_array_equal(out, np.array(want, np.int32))


def test_64bit_bit_operations():
    n = 70
    a = RNG.integers(-(1 << 62), 1 << 62, n, dtype=np.int64)
    b = RNG.integers(0, 1 << 63, n, dtype=np.int64).view(np.uint64) * np.uint64(2) + np.uint64(1)
    out, sout = np.zeros((5, n), np.uint64), np.zeros((5, n), np.int64)
    run(build(K.bit_ops64), 3, 32, a, b, out, sout)
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, [b & np.uint64(0xF0F0F0F0F0F0F0F0), b | np.uint64(3), ~b,
                                            b << (i % np.uint64(64)), b >> (i % np.uint64(64))])
        np.testing.assert_array_equal(sout, [a >> (i % np.uint64(64)).astype(np.int64), -a,
                                             np.abs(a), np.minimum(a, 5), a * a - 3])


def test_64bit_argument_types_in_the_signature():
    compiled = build(K.promotions)
    kinds = {a.name: (a.kind, a.size, a.dtype) for a in compiled.args}
    assert kinds["big"] == ("i64", 8, "")
    assert kinds["y64"] == ("ptr", 8, "f64") and kinds["i_out"] == ("ptr", 8, "i64")
    assert kinds["big"] and compiled.args[[a.name for a in compiled.args].index("big")].offset % 8 == 0


def test_launch_checks_64bit_dtypes():
    from types import SimpleNamespace
    import struct
    from umd.launch import pack_args
    compiled = build(K.saxpy64)

    def dev(dtype, shape):
        return SimpleNamespace(ptr=0x1000, dtype=np.dtype(dtype), shape=shape, ndim=len(shape),
                               size=int(np.prod(shape)), bo=None)

    good = dev(np.float64, (9,))
    data, _ = pack_args(compiled, (1, 1, 1), (32, 1, 1), [2.5, good, good, good])
    spec = compiled.args[0]
    assert struct.unpack_from("<d", data, spec.offset)[0] == 2.5
    with pytest.raises(TypeError, match=r"argument x expects a 1-D float64 array \(f64\[:\]\), "
                                        r"got a 1-D float32"):
        pack_args(compiled, (1, 1, 1), (32, 1, 1), [2.5, dev(np.float32, (9,)), good, good])
    with pytest.raises(TypeError, match="argument out .*float64.*int64"):
        pack_args(compiled, (1, 1, 1), (32, 1, 1), [2.5, good, good, dev(np.int64, (9,))])
    splitmix = build(K.splitmix64)
    data, _ = pack_args(splitmix, (1, 1, 1), (32, 1, 1), [(1 << 64) - 1, dev(np.uint64, (4,))])
    assert struct.unpack_from("<Q", data, 0)[0] == (1 << 64) - 1
    with pytest.raises(umd.LaunchError, match="seed"):
        pack_args(splitmix, (1, 1, 1), (32, 1, 1), [1 << 64, dev(np.uint64, (4,))])


def test_unsupported_64bit_uses_are_compile_errors():
    def lds_add(x: umd.f64[:]):
        buf = umd.shared.array(4, np.float64)
        umd.atomic.add(buf, 0, x[0])

    def cas_f64(x: umd.f64[:]):
        umd.atomic.cas(x, 0, 1.0, 2.0)

    for fn, what in ((lds_add, "shared array"), (cas_f64, "f64")):
        with pytest.raises(KernelCompileError, match=what):
            build(fn)


def test_64bit_control_flow_device_functions_and_local_arrays():
    n = 50
    x = RNG.standard_normal(n)
    x[3] = 0.0
    out, cnt = np.zeros(n), np.zeros(1, np.int64)
    run(build(K.control64), 2, 32, 5, x, out, cnt)
    want = []
    for i, v in enumerate(x):
        acc = 0.0
        for _ in range(5):
            acc += v
        for j in range(3, 5):
            acc += j
        acc += v * (i % 4)
        acc += -(0.5 + 2.0 * v) if v < 0 else 0.5 + 2.0 * v
        acc += 2 * abs(v)
        want.append(acc if v != 0.0 else -1.0)
    np.testing.assert_array_equal(out, want)
    assert cnt[0] == n


def test_float64_warp_shuffle_reduce():
    n = 200
    x = RNG.standard_normal(n)
    out = np.zeros(8)                       # 4 blocks of 64 threads: 8 warps, the last empty
    run(build(K.warp_sum64), 4, 64, x, out)
    padded = np.zeros(8 * 32)
    padded[:n] = x
    np.testing.assert_allclose(out, padded.reshape(8, 32).sum(axis=1), rtol=1e-13, atol=1e-15)


def _xoroshiro_reference(s0, s1, count):
    m = (1 << 64) - 1
    out = []
    for _ in range(count):
        out.append((s0 + s1) & m)
        s1 ^= s0
        s0 = (((s0 << 55) | (s0 >> 9)) & m) ^ s1 ^ ((s1 << 14) & m)
        s1 = ((s1 << 36) | (s1 >> 28)) & m
    return out, (s0, s1)


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_random_xoroshiro128p_as_numba_has_it(executor):
    # before umd.random there was no random-number generation in kernels at all
    n = 64
    states = umd.random.init_xoroshiro128p_states_host(n, seed=12345)
    assert states.shape == (n, 2) and states.dtype == np.uint64
    assert len({tuple(r) for r in states.tolist()}) == n                  # every row its own
    np.testing.assert_array_equal(states, umd.random.init_xoroshiro128p_states_host(n, 12345))
    start = states.copy()
    raw = np.zeros((n, 4), np.uint64)
    u32s, u64s = np.zeros((n, 8), np.float32), np.zeros((n, 8))
    n32, n64 = np.zeros(n, np.float32), np.zeros(n)
    run(build(K.draws), 1, 64, states, raw, u32s, u64s, n32, n64, engine=executor)
    for i in (0, 17, 63):
        want, _ = _xoroshiro_reference(int(start[i, 0]), int(start[i, 1]), 4 + 16 + 4)
        assert raw[i].tolist() == want[:4]
        got_u = [float(u32s[i, k]) for k in range(8)]
        assert got_u == [float(np.float32((want[4 + 2 * k] >> 40) / 2.0 ** 24)) for k in range(8)]
        assert u64s[i].tolist() == [(want[5 + 2 * k] >> 11) / 2.0 ** 53 for k in range(8)]
        _, end = _xoroshiro_reference(int(start[i, 0]), int(start[i, 1]), 24)
        assert tuple(states[i].tolist()) == end                           # the state advanced
    assert (u32s >= 0).all() and (u32s < 1).all() and (u64s >= 0).all() and (u64s < 1).all()
    assert abs(n64.mean()) < 0.5 and 0.5 < n64.std() < 1.5 and np.isfinite(n32).all()


def test_random_monte_carlo_pi():
    threads, per_thread = 256, 40
    states = umd.random.init_xoroshiro128p_states_host(threads, seed=7)
    hits = np.zeros(1, np.int32)
    run(build(K.pi_darts), 4, 64, states, per_thread, hits, engine="cython")
    pi = 4.0 * hits[0] / (threads * per_thread)
    assert abs(pi - math.pi) < 0.06, pi           # 10,240 darts: sigma ~0.016


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_bitwise_and_wrapping_atomics(executor):
    # umd.atomic.and_/or_/xor/inc/dec were "not supported" compile errors before
    flags = np.array([0, 0xFFFFFFFF, 0, 0], np.uint32)
    masks = np.zeros(2, np.int64)
    counters = np.array([0, 500, 0], np.uint32)
    wide = np.array([0xFF], np.uint64)
    olds = np.zeros(96, np.uint32)
    run(build(K.bit_atomics), 3, 32, flags, masks, counters, wide, olds, engine=executor)
    x = 0
    for i in range(96):
        x ^= i
    assert flags.tolist() == [0xFFFFFFFF, 0, x, 0xFFFFFFFF]
    even = odd = 0
    for i in range(96):
        (even, odd) = (even | (1 << (i % 64)), odd) if i % 2 == 0 else (even, odd | (1 << (i % 64)))
    assert masks.view(np.uint64).tolist() == [even, odd]
    assert sorted(olds.tolist()) == sorted([k % 10 for k in range(96)])    # inc wraps past 9
    assert counters[0] == 96 % 10 and counters[1] == 500 - 96
    w = 0xFF
    for i in range(96):
        w ^= i << 40
    assert int(wide[0]) == w
    assert counters[2] == 96 and flags[3] == 0xFFFFFFFF


@pytest.mark.parametrize("executor", ["reference", "cython"])
def test_constant_arrays(executor):
    # umd.const.array_like was "not provided" before
    n = 70
    x = RNG.standard_normal(n).astype(np.float32)
    out, lut_out = np.zeros(n, np.float32), np.zeros(n, np.int64)
    compiled = build(K.smooth_const)
    assert set(compiled.consts) == {"__const_0", "__const_1"}
    run(compiled, 3, 32, x, out, lut_out, engine=executor)
    want = np.zeros(n, np.float32)
    for i in range(n):
        acc = np.float32(0)
        for k in range(5):
            acc = np.float32(acc + K.GAUSS5[k] * x[min(max(i + k - 2, 0), n - 1)])
        want[i] = acc
    np.testing.assert_array_equal(out, want)
    assert lut_out.tolist() == [int(K.LUT[i % 3, i % 4]) + 5 for i in range(n)]


def test_constant_arrays_are_read_only_and_numpy_only():
    lut = np.zeros(4, np.float32)

    def writes(x: umd.f32[:]):
        c = umd.const.array_like(lut)
        c[0] = x[0]

    def not_numpy(x: umd.f32[:]):
        c = umd.const.array_like(x)
        x[0] = c[0]

    for fn, what in ((writes, "read-only"), (not_numpy, "numpy array defined outside")):
        with pytest.raises(KernelCompileError, match=what):
            build(fn)


def test_constant_array_content_is_part_of_the_cache_key():
    from umd.compiler import cache
    key = cache.cache_key(K.smooth_const.fn, {}, 1, K.smooth_const.env)
    saved = K.GAUSS5[0]
    try:
        K.GAUSS5[0] = 0.5                       # a new filter: a new kernel, not the cached one
        assert cache.cache_key(K.smooth_const.fn, {}, 1, K.smooth_const.env) != key
    finally:
        K.GAUSS5[0] = saved
    assert cache.cache_key(K.smooth_const.fn, {}, 1, K.smooth_const.env) == key
