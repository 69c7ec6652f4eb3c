"""Numba-CUDA-style kernels (tests/umd/numba_kernels.py) compiled and run on the
reference executor (no mount), checked against numpy: the grid helpers, grid-stride
loops, array shapes and 2-D/3-D indexing, device functions, Python's integer // and %,
pow, atomics, local and shared arrays, tuples."""
import numpy as np
import pytest

import umd
from umd.compiler import KernelCompileError, build

from . import numba_kernels as K
from .refrun import run

RNG = np.random.default_rng(14)
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _blocks(n, block):
    return (n + block - 1) // block


# -- thread positioning -------------------------------------------------------------------
def test_grid_1d_and_size_and_len():
    n = 77                                      # ragged: 2 blocks of 64
    a = np.arange(n, dtype=np.float32)
    want = a + 1
    run(build(K.increment_by_one), 2, 64, a)
    np.testing.assert_array_equal(a, want)
    x, y = RNG.standard_normal((2, n)).astype(np.float32)
    for kern in (K.vector_add, K.vector_add_cuda_names):
        c = np.zeros(n, np.float32)
        run(build(kern), 2, 64, x, y, c)
        np.testing.assert_array_equal(c, x + y)


def test_grid_stride_loop():
    n = 1000                                    # 2 blocks of 64 threads: 8 rounds each
    x, y = RNG.standard_normal((2, n)).astype(np.float32)
    out = np.zeros(n, np.float32)
    compiled = build(K.saxpy_grid_stride)
    run(compiled, 2, 64, 1.5, x, y, out)
    np.testing.assert_array_equal(out, np.float32(1.5) * x + y)
    assert "s_trap" in compiled.asm_text        # a zero step stops the kernel


def test_grid_2d_shape_and_indexing():
    rows, cols = 19, 37
    a = RNG.standard_normal((rows, cols)).astype(np.float32)
    want = a + 1
    run(build(K.increment_a_2D_array), (_blocks(rows, 8), _blocks(cols, 8)), (8, 8), a)
    np.testing.assert_array_equal(a, want)
    b = RNG.standard_normal((rows, cols)).astype(np.float32)
    c = np.zeros((rows, cols), np.float32)
    run(build(K.matrix_add), (_blocks(rows, 8), _blocks(cols, 8)), (8, 8), a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_grid_2d_stride_and_3d():
    out = np.full((23, 45), -1, np.int32)
    run(build(K.grid_2d_stride), (2, 3), (4, 8), out)          # far fewer threads than elements
    r, c = np.indices(out.shape)
    np.testing.assert_array_equal(out, r * 1000 + c)
    out3 = np.zeros((5, 6, 7), np.int32)
    run(build(K.grid_3d), (2, 2, 2), (4, 4, 4), out3)
    x, y, z = np.indices(out3.shape)
    np.testing.assert_array_equal(out3, x * 10000 + y * 100 + z)


def test_range_with_a_negative_variable_step():
    n = 300
    out = np.full(n, -1, np.int32)
    run(build(K.negative_step), 2, 32, n, out)
    np.testing.assert_array_equal(out, np.arange(n) * 2)


@pytest.mark.parametrize("start, stop, step", [
    (0, 10, 3), (10, 0, -3), (5, 5, 1), (5, 4, 1), (4, 5, -1), (-7, 7, 7), (3, -20, -4),
    (0, 1, 1000), (I32_MIN, I32_MIN + 10, 3), (I32_MAX - 5, I32_MAX - 10, -2)])
def test_range_step_of_either_sign_is_python_range(start, stop, step):
    out = np.zeros(32, np.int32)
    run(build(K.variable_step), 1, 32, start, stop, step, out)
    want = list(range(start, stop, step))
    assert out[0] == len(want) and list(out[1:1 + len(want)]) == want


# -- semantics: // and %, pow, math ----------------------------------------------------------
def _floordiv(a, b):
    if b == 0:
        return 0, 0                 # Numba (NumPy error model): x // 0 == x % 0 == 0
    q, r = a // b, a % b            # Python floors
    q = (q + (1 << 31)) % (1 << 32) - (1 << 31)       # INT_MIN // -1 wraps like every i32 op
    return q, r


def test_integer_floordiv_and_mod_are_pythons():
    pairs = [(-8, 3), (8, -3), (-8, -3), (8, 3), (-9, 3), (7, 0), (-7, 0), (0, 0), (0, -5),
             (I32_MIN, -1), (I32_MIN, 1), (I32_MIN, 7), (I32_MAX, -2), (-1, I32_MIN), (5, I32_MIN),
             (-1, 2), (1, -2), (123456, -1000)]
    pairs += [(int(a), int(b)) for a, b in RNG.integers(-1000, 1000, (30, 2))]
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    n = len(pairs)
    q, r = np.zeros(n, np.int32), np.zeros(n, np.int32)
    uq, ur = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    run(build(K.int_div_mod), 1, 64, a, b, q, r, uq, ur)
    assert (q[0], r[0]) == (-3, 1)                     # the example
    for k, (x, y) in enumerate(pairs):
        assert (q[k], r[k]) == _floordiv(x, y), (x, y)
        ux, uy = x & 0xFFFFFFFF, y & 0xFFFFFFFF
        assert (uq[k], ur[k]) == ((ux // uy, ux % uy) if uy else (0, 0)), (x, y)


def test_integer_floordiv_and_mod_by_constants():
    a = np.array(list(range(-20, 21)) + [I32_MIN, I32_MAX, I32_MIN + 1], np.int32)
    out = np.zeros((a.size, 8), np.int32)
    run(build(K.int_div_mod_const), 1, 64, a, out)
    for k, v in enumerate(a.tolist()):
        assert list(out[k]) == [v // 3, v % 3, v // -3, v % -3, v // 4, v % 4, v, 0], v


def _ulps(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


def test_pow_with_variable_exponents():
    n = 64
    x = RNG.uniform(0.1, 10, n).astype(np.float32)
    y = RNG.uniform(-4, 4, n).astype(np.float32)
    k = RNG.integers(-3, 6, n).astype(np.int32)
    out = np.zeros((n, 6), np.float32)
    iout = np.zeros(n, np.int32)
    run(build(K.powers), 1, 64, x, y, k, out, iout)
    d = x.astype(np.float64)
    want = np.power(d, y.astype(np.float64))
    for col in (0, 1, 2):                       # x ** y, math.pow, pow: the same powf
        assert _ulps(out[:, col], want).max() <= 4, col
    np.testing.assert_allclose(out[:, 3], np.power(d, k), rtol=1e-6)       # float ** int: squaring
    np.testing.assert_allclose(out[:, 4], 1 / (d * d), rtol=1e-6)
    assert _ulps(out[:, 5], np.sqrt(d)).max() <= 4
    np.testing.assert_array_equal(iout, [int(k[i]) ** (i % 5) for i in range(n)])


def test_pow_special_cases_are_c99s():
    vals = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 1e-40, 1e30]
    x = np.array(vals, np.float32)
    y = np.array(vals + [0.25, 7.0, -7.0, 2.5, 1e10, -1e10], np.float32)
    out = np.zeros((x.size, y.size), np.float32)
    run(build(K.pow_special), (1, 1), (16, 32), x, y, out)
    with np.errstate(all="ignore"):
        want = np.power(x[:, None], y[None, :])            # C's powf
    assert np.array_equal(np.isnan(out), np.isnan(want))
    fin = np.isfinite(want) & (want != 0)
    same = ~fin & ~np.isnan(want)
    np.testing.assert_array_equal(out[same], want[same])    # zeros (with sign) and infinities
    np.testing.assert_array_equal(np.signbit(out[same]), np.signbit(want[same]))
    assert _ulps(out[fin], want[fin]).max() <= 4


def test_more_math_functions():
    x = np.array([0.3, 1.0, 2.5, -2.5, 7.0, 1e-3, 100.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    out = np.zeros((x.size, 6), np.float32)
    flags = np.zeros((x.size, 3), np.int32)
    run(build(K.more_math), 1, 32, x, out, flags)
    d = x.astype(np.float64)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out[:, 0], np.log2(d), rtol=1e-7)
        np.testing.assert_allclose(out[:, 1], np.exp2(d), rtol=1e-7)
        np.testing.assert_allclose(out[:, 5], np.log10(d), rtol=3e-7)
    fin = np.isfinite(x)
    np.testing.assert_array_equal(out[fin, 2], np.ceil(x[fin]))          # Python's math.ceil: an int
    np.testing.assert_array_equal(out[fin, 3], np.trunc(x[fin]))
    np.testing.assert_array_equal(out[:, 4], np.copysign(np.float32(2), x))
    np.testing.assert_array_equal(flags, np.stack([np.isnan(x), np.isinf(x), np.isfinite(x)], 1))


def test_numpy_scalar_casts():
    x = np.array([1.7, -2.2, 3.9, 0.0], np.float32)
    out = np.zeros(4, np.int32)
    fout = np.zeros(4, np.float32)
    run(build(K.casts_numpy), 1, 32, x, out, fout)
    np.testing.assert_array_equal(out, x.astype(np.int32) + 3)
    np.testing.assert_array_equal(fout, np.arange(4, dtype=np.float32) / 2)


def test_tuples_unpacking_and_swap():
    n = 20
    a = RNG.integers(-50, 50, n).astype(np.int32)
    out = np.zeros((n, 4), np.int32)
    run(build(K.tuples), 1, 32, a, out)
    i = np.arange(n)
    np.testing.assert_array_equal(out[:, 0], i)
    np.testing.assert_array_equal(out[:, 1], a)
    np.testing.assert_array_equal(out[:, 2], i + a + 3)
    np.testing.assert_array_equal(out[:, 3], n * 100 + 4 + 2)


def test_shape_indexed_with_a_variable():
    out = np.zeros(2, np.int32)
    run(build(K.shape_product), 1, 32, np.zeros((3, 5, 7), np.int32), out)
    assert out.tolist() == [105, 105]


# -- the Numba tutorial's kernels ----------------------------------------------------------------
def _hist_want(x, xmin, xmax, nbins):
    f32 = np.float32
    bw = f32(f32(f32(xmax) - f32(xmin)) / f32(nbins))
    b = ((x - f32(xmin)).astype(f32) / bw).astype(f32).astype(np.int64)
    b = b[(b >= 0) & (b < nbins)]
    return np.bincount(b, minlength=nbins)


@pytest.mark.parametrize("kern", ["histogram", "histogram_shared"])
def test_histogram_with_atomics(kern):
    x = RNG.normal(0, 1, 3000).astype(np.float32)
    hist = np.zeros(K.NBINS, np.int32)
    run(build(getattr(K, kern)), 3, 64, x, -2.0, 2.0, hist)
    np.testing.assert_array_equal(hist, _hist_want(x, -2.0, 2.0, K.NBINS))


def test_stencil_with_halo():
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run(build(K.stencil_1d), _blocks(n, K.STENCIL_BLOCK), K.STENCIL_BLOCK, x, out)
    pad = np.concatenate([np.zeros(K.RADIUS), x, np.zeros(K.RADIUS)]).astype(np.float64)
    want = sum(pad[k:k + n] for k in range(2 * K.RADIUS + 1))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


# -- device functions ------------------------------------------------------------------------
def test_device_functions_inline():
    n = 50
    x = RNG.uniform(-2, 2, n).astype(np.float32)
    coeffs = np.array([0.5, -1.0, 2.0], np.float32)
    out = np.zeros(n, np.float32)
    idx = np.zeros(n, np.int32)
    run(build(K.device_functions), 1, 64, x, coeffs, out, idx)
    f = np.float32
    for i in range(n):
        v = min(max(x[i], f(-1)), f(1))
        p = f(0)
        for c in coeffs:
            p = f(f(p * x[i]) + c)
        lo, hi = min(v, p), max(v, p)
        assert out[i] == f(f(lo + f(f(10) * hi)) + f(1)), i
        above = np.flatnonzero(x > f(x[i] + f(0.5)))
        assert idx[i] == (above[0] if above.size else -1), i


def test_device_function_option_and_host_call():
    assert isinstance(K.clamp, umd.DeviceFunction)
    # called from the host, a device function runs as Python (issue 25; it was a TypeError)
    assert K.clamp(1.0, 0.0, 2.0) == 1.0 and K.clamp(3.0, 0.0, 2.0) == 2.0
    with pytest.raises(TypeError, match="device function"):
        K.clamp[1, 32]
    with pytest.raises(TypeError, match="unknown option.*optimise"):
        umd.jit(optimise=1)
    with pytest.raises(TypeError, match="device="):
        umd.jit(device="yes")


def test_recursive_device_function_is_an_error():
    with pytest.raises(KernelCompileError, match="recursive"):
        build(K.recursive_kernel)


# -- atomics -------------------------------------------------------------------------------------
def test_atomics_min_max_sub_exch():
    n = 100
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    ux = RNG.integers(1, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    fx = RNG.standard_normal(n).astype(np.float32)
    fx[7] = np.nan
    res = np.array([0, 0, I32_MIN, I32_MAX, -1], np.int32)
    ures = np.array([0, 0xFFFFFFFF, 0], np.uint32)
    fres = np.array([0, 0, -np.inf, np.inf, np.nan, np.nan], np.float32)
    old = np.zeros(n, np.int32)
    run(build(K.atomics_all), 2, 64, x, ux, fx, res, ures, fres, old)
    assert res[0] == x.sum() and res[1] == -x.sum()
    assert res[2] == x.max() and res[3] == x.min()
    assert sorted(old.tolist() + [res[4]]) == [-1] + list(range(n))
    assert ures[0] == ux.max() and ures[1] == ux.min()
    assert ures[2] == (-int(ux.astype(np.int64).sum())) & 0xFFFFFFFF
    good = fx[~np.isnan(fx)]
    acc_add = acc_sub = np.float32(0)
    for v in fx:                                # atomics apply in lane order here
        acc_add, acc_sub = np.float32(acc_add + v), np.float32(acc_sub - v)
    np.testing.assert_array_equal(fres[:2], [acc_add, acc_sub])    # NaN: both NaN
    assert fres[2] == good.max() and fres[3] == good.min()       # a NaN value is ignored
    assert fres[4] == good.max() and fres[5] == good.min()       # nanmax/nanmin: NaN in memory too


def test_atomic_exch_f32():
    a = np.array([1.5, 2.5], np.float32)
    old = np.zeros(1, np.float32)
    run(build(K.atomic_exch_f32), 1, 1, a, 1, -7.25, old)
    assert old[0] == 2.5 and a[1] == -7.25


def test_compare_and_swap_spin_lock():
    counter = np.zeros(1, np.int32)
    lock = np.zeros(1, np.int32)
    total = np.array([100], np.int32)
    run(build(K.atomic_cas_lock), 1, 128, counter, lock, total)
    assert counter[0] == 100 and lock[0] == 0


def test_cas_claims_each_slot_once():
    x = RNG.integers(0, 1000, 90).astype(np.int32)
    slots = np.full(13, 0xFFFFFFFF, np.uint32)
    won = np.zeros(1, np.int32)
    run(build(K.atomic_cas_slots), 2, 64, x, slots, won)
    used = set((x % 13).tolist())
    assert won[0] == len(used)
    for s in range(13):
        assert (x[slots[s]] % 13 == s) if s in used else slots[s] == 0xFFFFFFFF


def test_atomics_with_tuple_index_on_2d_arrays():
    x = RNG.integers(0, 1000, 100).astype(np.int32)
    g = np.zeros((4, 4), np.int32)
    m = np.full((3, 3), -1, np.int32)
    run(build(K.atomics_2d), 2, 64, x, g, m)
    want = np.zeros((4, 4), np.int64)
    np.add.at(want, (x % 4, x // 4 % 4), 1)
    np.testing.assert_array_equal(g, want)
    assert m[1, 2] == x.max() and (np.delete(m.ravel(), 5) == -1).all()


def test_shared_atomic_sub_and_min():
    out = np.zeros(2, np.int32)
    run(build(K.shared_atomic_sub), 2, 64, out)
    np.testing.assert_array_equal(out, [1000 - sum(range(64))] * 2)
    run(build(K.shared_atomic_min), 2, 64, out)     # was a compile error: no LDS min
    np.testing.assert_array_equal(out, [100 - 63] * 2)


# -- local and shared arrays -----------------------------------------------------------------------
def test_local_array_insertion_sort():
    x = RNG.standard_normal(8 * 40).astype(np.float32)
    out = np.zeros_like(x)
    run(build(K.local_sort), 1, 64, x, out)
    np.testing.assert_array_equal(out, np.sort(x.reshape(-1, 8), axis=1).ravel())


def test_local_2d_array():
    out = np.zeros(32, np.int32)
    run(build(K.local_2d), 1, 32, out)
    i = np.arange(32)
    want = sum(r * 10 + (r + i) % 4 + i for r in range(3)) + (23 + i) * 1000
    np.testing.assert_array_equal(out, want)


def test_shared_array_keyword_forms():
    x = RNG.standard_normal(32).astype(np.float32)
    out = np.zeros(32, np.float32)
    run(build(K.shared_keywords), 1, 32, x, out)
    t = np.arange(32)
    f = np.float32
    want = ((((x[31 - t] + f(2) * x) + f(3)) + (31 - t).astype(f)) + f(32)) + f(32)
    np.testing.assert_array_equal(out, want.astype(f))
