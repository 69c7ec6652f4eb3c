"""The kernels of tests/umd/lang_kernels.py on both executors (the reference
kmd.hw.cu_ref and the Cython core), no mount, against numpy."""
import math

import numpy as np
import pytest

from umd.compiler import build

from . import lang_kernels as K
from .refrun import run

RNG = np.random.default_rng(1414)
ENGINES = ["reference", "cython"]


def blocks(n, b):
    return (n + b - 1) // b


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_constant_indices(engine):
    a = RNG.standard_normal(45).astype(np.float32)
    m = RNG.standard_normal((19, 7)).astype(np.float32)
    ends, col = np.zeros(3, np.float32), np.zeros(19, np.float32)
    run(build(K.last_items), 1, 32, a, m, ends, col, engine=engine)
    np.testing.assert_array_equal(ends, [a[-1], a[-2], m[-1, -1]])
    np.testing.assert_array_equal(col, m[:, -1])


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_runtime_indices(engine):
    a = RNG.standard_normal(77).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.reverse), blocks(77, 32), 32, a, out, engine=engine)
    np.testing.assert_array_equal(out, a[::-1])
    m = RNG.integers(-100, 100, (13, 11)).astype(np.int32)
    got = np.zeros_like(m)
    run(build(K.rotate_rows), (blocks(13, 8), blocks(11, 8)), (8, 8), m, got, engine=engine)
    want = np.array([[m[i - 1, j - 3] for j in range(11)] for i in range(13)], np.int32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engine", ENGINES)
def test_negative_indices_of_shared_and_local_arrays(engine):
    a = RNG.standard_normal(32).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.negative_shared_and_local), 1, 32, a, out, engine=engine)
    np.testing.assert_array_equal(out, np.roll(a, 1) + a * 2 + a[0])


def _selects(kernel):
    asm = build(kernel).asm_text
    return asm.count("v_cndmask") + asm.count("s_cselect")


def test_nonnegative_indices_are_not_tested():
    """grid(1), thread ids, upward loop counters, variables whose every assignment is
    non-negative and indices under a `>= 0` guard need no wraparound test."""
    assert _selects(K.reverse) == 1                     # only a[-1 - i]
    assert _selects(K.halving_sum) == 0
    assert _selects(K.guarded_gather) == 0
    assert _selects(K.shifted) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_variables_assigned_negative_values_wrap(engine):
    a = RNG.standard_normal(45).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.shifted), 2, 32, a, out, engine=engine)
    np.testing.assert_array_equal(out, a[np.arange(45) - 3])
    idx = RNG.integers(-60, 60, 70).astype(np.int32)
    got = np.full(70, -7.0, np.float32)
    run(build(K.guarded_gather), 3, 32, idx, a, got, engine=engine)
    ok = (idx >= 0) & (idx < 45)
    np.testing.assert_array_equal(got, np.where(ok, a[np.clip(idx, 0, 44)], -7.0))
    total = np.zeros(1, np.float32)
    x = RNG.standard_normal(64).astype(np.float32)
    run(build(K.halving_sum), 1, 64, x, total, engine=engine)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
def test_print_from_every_thread(engine):
    """2 blocks of 32 threads, each prints once: every line once, in Numba's format
    (an integer as %lld, a float32 as %f of its double); the order is unspecified."""
    x = (RNG.standard_normal(64) * 100).astype(np.float32)
    printed = {}
    run(build(K.print_values), 2, 32, x, engine=engine, printed=printed)
    want = ["thread %d %f" % (i, float(x[i])) for i in range(64)]
    assert sorted(printed["lines"]) == sorted(want) and printed["dropped"] == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_print_formats_each_type(engine):
    printed = {}
    run(build(K.print_types), 1, 32, -(1 << 40), (1 << 32) - 1, 0.1, (1 << 64) - 1,
        engine=engine, printed=printed)
    assert printed["lines"] == [f"i64 {-(1 << 40)} u32 {(1 << 32) - 1} f64 0.100000 u64 "
                                f"{(1 << 64) - 1} bool True", "", "-7 2.500000"]


def test_print_buffer_full_drops_the_rest():
    x = np.arange(64, dtype=np.float32)
    printed = {}
    record = 4 + 2 * 8                      # the format word, i and x[i]
    run(build(K.print_values), 2, 32, x, print_bytes=10 * record, printed=printed)
    assert len(printed["lines"]) == 10 and printed["dropped"] == 54
    assert len(set(printed["lines"])) == 10


# -- math functions against Python's math module in float64 ----------------------------------
def _reference(fn, *args):
    """Python's math, with C99's results where Python raises (Numba returns C's)."""
    try:
        return fn(*args)
    except OverflowError:
        return math.copysign(math.inf, args[0])
    except ValueError:                  # poles and domain errors
        if fn is math.gamma and args[0] == 0:
            return math.copysign(math.inf, args[0])
        return math.inf if fn is math.lgamma else math.nan


def _ulps(got, want, dtype):
    """Distance in units in the last place of dtype (0 for equal values, NaN and NaN)."""
    got = np.asarray(got, dtype).astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.asarray(want, np.float64).astype(dtype).astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(got - want) / spacing
    return np.where(same, 0.0, np.nan_to_num(d, nan=np.inf, posinf=np.inf))


def _math_arguments(rng):
    x = np.concatenate([rng.uniform(-30, 30, 60), rng.uniform(0, 3, 30), rng.uniform(-3, 0, 15),
                        rng.uniform(150, 175, 6), rng.uniform(-180, -150, 6),
                        10.0 ** rng.uniform(-300, 300, 15), -10.0 ** rng.uniform(-300, 300, 8),
                        [0.0, -0.0, 1.0, 2.0, -1.0, -2.5, math.inf, -math.inf, math.nan, 5e-324,
                         1e-310, 0.5, 1.5, 2.5, 1.0000001, 1.9999999]])
    y = np.concatenate([rng.uniform(-5, 5, x.size - 8), 10.0 ** rng.uniform(-300, 300, 8)])
    return x, y, rng.integers(-1100, 1100, x.size).astype(np.int32)


# Tolerances in ulps against Python's math in float64 (rounded to float32 for the
# float32 kernels). Python's own gamma is off by up to ~20 ulp at large arguments and
# its lgamma by up to ~4e-16 absolute near lgamma's zeros at 1 and 2 (so
# lgamma passes within LGAMMA_ABS absolute too); against 120-bit
# references the routines measure fmod 0, erfc 6, gamma 10, lgamma 17 (the reflection's
# cancellation below 0), cbrt 2 ulp.
TOL64 = {"fmod": 0, "erfc": 8, "gamma": 32, "lgamma": 32, "copysign": 0, "cbrt": 2, "frexp": 0,
         "ldexp": 0}
LGAMMA_ABS = 1e-15


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_math_functions_within_ulps(engine, dtype):
    x, y, k = _math_arguments(np.random.default_rng(31))
    with np.errstate(over="ignore"):
        xs, ys = x.astype(dtype), y.astype(dtype)
    X, Y = xs.astype(np.float64), ys.astype(np.float64)
    n = x.size
    special = np.zeros((n, 4), dtype)
    parts, ex, flags = np.zeros((n, 4), dtype), np.zeros(n, np.int32), np.zeros(n, np.int32)
    wide = dtype == np.float64
    run(build(K.special64 if wide else K.special32), blocks(n, 64), 64, xs, ys, special,
        engine=engine)
    run(build(K.parts64 if wide else K.parts32), blocks(n, 64), 64, xs, ys, k, parts, ex, flags,
        np.zeros((n, 8), dtype), engine=engine)
    want = {
        "fmod": [_reference(math.fmod, a, b) for a, b in zip(X, Y)],
        "erfc": [math.erfc(a) for a in X],
        "gamma": [_reference(math.gamma, a) for a in X],
        "lgamma": [_reference(math.lgamma, a) for a in X],
        "copysign": [math.copysign(b, a) for a, b in zip(X, Y)],
        "cbrt": [math.cbrt(a) for a in X],
        "frexp": [math.frexp(a)[0] if math.isfinite(a) else a for a in X],
        "ldexp": [_reference(math.ldexp, a, int(e)) for a, e in zip(X, k)],
    }
    got = dict(zip(["fmod", "erfc", "gamma", "lgamma"], special.T))
    got.update(zip(["copysign", "cbrt", "frexp", "ldexp"], parts.T))
    for name, w in want.items():
        u = _ulps(got[name], w, dtype)
        if name == "lgamma" and wide:
            with np.errstate(invalid="ignore"):
                u = np.where(np.abs(got[name] - np.asarray(w)) <= LGAMMA_ABS, 0, u)
        tol = TOL64[name] if wide else (0 if TOL64[name] == 0 else 1)
        worst = int(np.argmax(u))
        assert u[worst] <= tol, (name, X[worst], got[name][worst], w[worst], u[worst])
    np.testing.assert_array_equal(ex, [math.frexp(a)[1] if math.isfinite(a) else 0 for a in X])
    np.testing.assert_array_equal(flags, [math.isnan(a) + 2 * math.isinf(a) + 4 * math.isfinite(a)
                                          for a in X])


@pytest.mark.parametrize("engine", ENGINES)
def test_selp_and_cbrt(engine):
    p = np.array([1, 0, -3, 7, 0], np.int32)
    a = np.array([1.5, 2.5, 3.5, 4.5, 5.5], np.float32)
    b = np.array([10, 20, 30, 40, 50], np.int32)
    out = np.zeros(5, np.float32)
    run(build(K.select_and_cbrt), 1, 32, p, a, b, out, engine=engine)
    np.testing.assert_array_equal(out, np.where(p > 0, a, b.astype(np.float32)) + 2)


def _waves(n):
    """(first thread, active-lane mask) of each 32-lane wave of a 1-D launch over n."""
    for w in range(0, n, 32):
        yield w, (1 << min(32, n - w)) - 1


@pytest.mark.parametrize("engine", ENGINES)
def test_match_any_and_all(engine):
    n = 77                                      # two full waves and one of 13 lanes
    rng = np.random.default_rng(7)
    v32 = rng.integers(-2, 2, n).astype(np.int32)
    v64 = (rng.integers(0, 3, n) << 40).astype(np.int64)     # differ in the high word only
    v64[64:] = (np.arange(64, n) // 32) * 32 + 5             # one value on the last wave
    vf = rng.choice([0.0, -0.0, 1.5, np.nan], n)             # bits: -0.0 is not 0.0
    outs = [np.zeros(n, np.uint32) for _ in range(3)] + [np.zeros((n, 2), np.uint32) for _ in range(2)]
    run(build(K.match), 3, 32, v32, v64, vf, *outs, engine=engine)
    any32, any64, anyf, all32, all64 = outs
    bits = vf.view(np.uint64)
    for w, live in _waves(n):
        lanes = range(w, min(w + 32, n))
        for vals, got in ((v32, any32), (v64, any64), (bits, anyf)):
            for i in lanes:
                want = sum(1 << (j - w) for j in lanes if vals[j] == vals[i])
                assert got[i] == want, (i, got[i], want)
        for vals, got in ((v32, all32), (v64 // 32, all64)):
            same = all(vals[j] == vals[w] for j in lanes)
            for i in lanes:
                assert tuple(got[i]) == ((live, 1) if same else (0, 0)), (i, tuple(got[i]))
    assert all64[64:, 1].all() and not all64[:64, 1].any()


# -- idioms of Numba's documentation and tutorials ---------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_histogram_with_math_floor_index(engine):
    x = RNG.uniform(-1, 3, 100).astype(np.float32)
    hist = np.zeros(8, np.int32)
    run(build(K.histogram_floor), 4, 32, x, hist, engine=engine)
    b = np.floor(x * np.float32(4)).astype(int)
    np.testing.assert_array_equal(hist, np.bincount(b[(b >= 0) & (b < 8)], minlength=8))


@pytest.mark.parametrize("engine", ENGINES)
def test_builtins_on_mixed_types(engine):
    x = RNG.uniform(-3, 3, 77).astype(np.float32)
    x[:4] = [2.5, -2.5, 0.5, 1.5]                       # round() halves to even, as Python's
    out, iout = np.zeros((77, 4), np.float32), np.zeros((77, 4), np.int32)
    run(build(K.mixed_builtins), 3, 32, x, out, iout, engine=engine)
    i = np.arange(77)
    np.testing.assert_array_equal(out, np.stack([np.minimum(x, 1), np.maximum(x, 0), abs(x),
                                                 i / 2], 1).astype(np.float32))
    np.testing.assert_array_equal(iout, np.stack([x.astype(np.int32), [round(float(v)) for v in x],
                                                  abs(i - 40), np.minimum(i, 7)], 1))


@pytest.mark.parametrize("engine", ENGINES)
def test_row_views(engine):
    a = RNG.standard_normal((19, 23)).astype(np.float32)
    out = np.zeros_like(a)
    run(build(K.double_chained), (3, 3), (8, 8), a, out, engine=engine)
    np.testing.assert_array_equal(out, a * 2 + 1)
    sums, counts = np.zeros(19, np.float32), np.zeros((2, 3), np.int32)
    run(build(K.row_sums), 1, 32, a, sums, counts, engine=engine)
    np.testing.assert_allclose(sums, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    want = np.zeros((2, 3), np.int32)
    for r in range(19):
        want[r % 2, r % 3] += 1
    np.testing.assert_array_equal(counts, want)
    c = RNG.integers(-9, 9, (5, 6, 7)).astype(np.int32)
    got = np.zeros((5, 6), np.int32)
    run(build(K.cube_rows), (1, 1), (8, 8), c, got, engine=engine)
    np.testing.assert_array_equal(got, c[:, :, 0] + 2 * c[:, :, -1] + 7)


@pytest.mark.parametrize("engine", ENGINES)
def test_divmod_while_true_and_reverse_range(engine):
    a = RNG.integers(-50, 50, 70).astype(np.int32)
    q, r, steps = (np.zeros_like(a) for _ in range(3))
    run(build(K.divmod_and_collatz), 3, 32, a, q, r, steps, engine=engine)
    np.testing.assert_array_equal(q, a // 7)
    np.testing.assert_array_equal(r, a % 7)

    def collatz(n):
        k = 0
        while n > 1:
            n, k = (n // 2 if n % 2 == 0 else 3 * n + 1), k + 1
        return k
    np.testing.assert_array_equal(steps, [collatz(abs(int(v)) + 1) for v in a])
    x = RNG.standard_normal(50).astype(np.float32)
    out = np.zeros(1, np.float32)
    run(build(K.running_reverse), 1, 32, x, out, engine=engine)
    acc = np.float32(0)
    for v in x[::-1]:
        acc = np.float32(acc * np.float32(0.5) + v)
    assert out[0] == acc


@pytest.mark.parametrize("engine", ENGINES)
def test_global_numpy_array_is_a_constant(engine):
    x = RNG.standard_normal(70).astype(np.float32)
    out = np.zeros_like(x)
    compiled = build(K.smooth)
    assert [a.name for a in compiled.args if a.name.startswith("__const")] == ["__const_0"]
    run(compiled, 3, 32, x, out, engine=engine)
    c = K.SMOOTHING
    want = np.zeros_like(x)
    want[1:-1] = c[0] * x[:-2] + c[1] * x[1:-1] + c[2] * x[2:]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_ufuncs_on_scalars(engine, dtype):
    """np.sqrt, np.floor... in a kernel, as Numba CUDA compiles them; against numpy in the
    same dtype: floor, trunc and copysign exact, the others within rtol 4e-6 (float32:
    a few ulp) or 1e-15 (float64: 1-2 ulp)."""
    x, y = (RNG.uniform(-20, 20, 77).astype(dtype) for _ in range(2))
    out = np.zeros((77, 8), dtype)
    k, unused = np.zeros(77, np.int32), np.zeros((77, 4), dtype)
    run(build(K.parts32 if dtype == np.float32 else K.parts64), 3, 32, x, y, k, unused, k.copy(),
        k.copy(), out, engine=engine)
    with np.errstate(all="ignore"):
        want = np.stack([np.sqrt(np.abs(x)), np.exp(x * dtype(0.25)), np.log1p(np.fabs(x)),
                         np.arctan2(y, x), np.floor(x), np.power(np.fabs(x), dtype(1.5)),
                         np.hypot(x, y), np.copysign(np.trunc(y), x)], 1)
    rtol = 4e-6 if dtype == np.float32 else 1e-15
    for c in range(8):
        if c in (4, 7):
            np.testing.assert_array_equal(out[:, c], want[:, c])
        else:
            np.testing.assert_allclose(out[:, c], want[:, c], rtol=rtol, err_msg=str(c))
