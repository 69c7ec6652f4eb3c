"""float64 math functions in kernels (umd/compiler/libdevice.py), on the reference
executor, against numpy (glibc) in units in the last place. Before the float64 library,
these went through float32: off by about 10^9 ulp (rtol 1e-7)."""
import math

import numpy as np
import pytest

from umd.compiler import build

from . import wide_kernels as K
from .refrun import run

RNG = np.random.default_rng(641)
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 10.0, 1000.0, 1e-300, 5e-324, 1e300, np.inf, -np.inf,
           np.nan, 709.78, 709.79, -745.1, -745.2, 1024.0, -1074.0, 1e-20, -1e-20, np.pi,
           np.pi / 2, 3 * np.pi / 4, 1e5 * np.pi, 123456.789]


def ulps(got, want):
    """Distance in float64 steps; 0 where both are the same NaN/inf/zero kind."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    g = got.view(np.int64).astype(object)
    w = want.view(np.int64).astype(object)
    # map the sign-magnitude bit patterns onto a line
    g = np.array([(v if v >= 0 else -(v & 0x7FFFFFFFFFFFFFFF)) for v in g], dtype=object)
    w = np.array([(v if v >= 0 else -(v & 0x7FFFFFFFFFFFFFFF)) for v in w], dtype=object)
    d = np.array([abs(a - b) for a, b in zip(g, w)], dtype=object)
    return np.where(both_nan, 0, d).astype(np.float64)


def _inputs():
    parts = [SPECIAL,
             RNG.uniform(-30, 30, 300), RNG.uniform(-745, 709, 200),
             10.0 ** RNG.uniform(-300, 300, 200), RNG.uniform(0.5, 2.0, 200),
             RNG.uniform(-1e6, 1e6, 200), RNG.uniform(-0.4, 0.4, 200)]
    x = np.concatenate(parts)
    y = np.concatenate([RNG.uniform(-8, 8, len(x) - 40), [0.0, -0.0, 1.0, 3.0, -3.0, 0.5, np.inf,
                        -np.inf, np.nan, 2.0] * 4])
    return x, y


@pytest.fixture(scope="module")
def results():
    x, y = _inputs()
    out = np.zeros((10, len(x)))
    run(build(K.transcendentals64),
        -(-len(x) // 64), 64, x, y, out, mem_size=8 << 20)
    return x, y, out


@pytest.mark.parametrize("row,fn,limit", [
    (0, np.exp, 1), (1, np.exp2, 1), (2, np.log, 1), (3, np.log2, 1), (4, np.log10, 1),
    (5, np.sin, 1), (6, np.cos, 1), (7, np.tanh, 2)])
def test_unary_float64_math_within_ulps(results, row, fn, limit):
    x, _, out = results
    with np.errstate(all="ignore"):
        want = fn(x)
    d = ulps(out[row], want)
    exact_range = np.abs(x) < 2.0 ** 50 if fn in (np.sin, np.cos) else np.ones(len(x), bool)
    bad = np.nonzero((d > limit) & exact_range)[0]
    assert not len(bad), [(x[i], out[row][i], want[i], d[i]) for i in bad[:8]]
    # past 2^50, sin and cos are only bounded (docs/umd-compiler.md 2.2)
    huge = ~exact_range & np.isfinite(x)
    assert np.all(np.abs(out[row][huge]) <= 1.0)


def test_pow_float64_within_ulps_and_c99_special_values(results):
    x, y, out = results
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    for row in (8, 9):
        d = ulps(out[row], want)
        with np.errstate(all="ignore"):
            moderate = np.abs(y * np.log(np.abs(x))) < 64
            bad = np.nonzero((d > 1) & (moderate | ~np.isfinite(want) | (want == 0)))[0]
        assert not len(bad), [(x[i], y[i], out[row][i], want[i], d[i]) for i in bad[:8]]


def test_integer_powers_stay_64_bit():
    a = np.array([3, -3, 2, 7, 0, 1, -1, 5, 2], np.int64)
    b = np.array([30, 31, 62, 20, -1, -5, -3, 0, -2], np.int64)
    x = np.array([1.5, -2.0, 0.5, 1.0000001, 10.0, 3.0, -1.5, 2.0, 7.0])
    out_i = np.zeros(len(a), np.int64)
    out_f = np.zeros(len(a))
    run(build(K.int_powers64), 1, 32, a, b, x, out_i, out_f)
    want = [int(p) ** int(q) if q >= 0 else (-(1 << 63) if p == 0 else (p if abs(p) == 1 and q % 2
            else 1 if abs(p) == 1 else 0)) for p, q in zip(a, b)]
    assert out_i.tolist() == want
    want_f = []
    for v, e in zip(x.tolist(), b.tolist()):       # Numba's int_power: squaring, then 1 / r
        r, p, n = 1.0, v, abs(e)
        while n:
            if n & 1:
                r *= p
            n >>= 1
            if n:
                p *= p
        want_f.append(1.0 / r if e < 0 else r)
    assert out_f.tolist() == want_f


MORE = [(0, np.tan), (1, np.arctan), (2, np.arctan2), (3, np.arcsin), (4, np.arccos),
        (5, np.sinh), (6, np.cosh), (7, np.arcsinh), (8, np.arccosh), (9, np.arctanh),
        (10, np.hypot), (11, np.expm1), (12, np.log1p), (13, np.radians), (14, np.degrees),
        (15, "erf")]
LIMIT = {np.tan: 2, np.arctan2: 2, np.arcsin: 2, np.arccos: 2, np.sinh: 2, np.cosh: 2,
         np.arcsinh: 2, np.arccosh: 3, np.arctanh: 2, np.log1p: 2, "erf": 12}


def _more_inputs(dtype):
    # A generator of its own: drawn from the module's RNG the inputs depended on which
    # tests ran before, and one order drew an arccosh input 3 ulps off (x = 2.4114658...)
    rng = np.random.default_rng(642)
    x, y = _inputs()
    x = np.concatenate([x, rng.uniform(-1, 1, 300), rng.uniform(1, 3, 100), [1.0, -1.0, 0.9999999],
                        [2.411465803261382]])
    y = np.concatenate([y, rng.uniform(-2, 2, 404)])
    y[:40] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-300, 1e300, 3.0] * 4
    with np.errstate(over="ignore"):  # to float32, 1e300 is meant to become inf
        return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_more_math_functions_within_ulps(dtype):
    x, y = _more_inputs(dtype)
    out = np.zeros((16, len(x)), dtype)
    kernel = K.more_math64 if dtype == np.float64 else K.more_math32
    run(build(kernel), -(-len(x) // 64), 64, x, y, out, mem_size=8 << 20)
    bad = []
    with np.errstate(all="ignore"):
        for row, fn in MORE:
            # float32: against numpy in float64, rounded to float32 (numpy's own float32
            # routines are off by up to a few ulp; ours round the float64 result once)
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            if fn == "erf":                             # numpy has none: Python's (libm's)
                want = np.array([math.erf(v) for v in x64]).astype(dtype)
            else:
                want = (fn(x64, y64) if fn in (np.arctan2, np.hypot) else fn(x64)).astype(dtype)
            if dtype == np.float64:
                d = ulps(out[row], want)
                limit = LIMIT.get(fn, 1)
                exact_range = np.abs(x) < 2.0 ** 50 if fn is np.tan else np.ones(len(x), bool)
            else:       # float32: within one float32 ulp
                d = ulps(out[row].astype(np.float64), want.astype(np.float64)) / 2.0 ** 29
                limit, exact_range = 1, np.abs(x) < 2.0 ** 20 if fn is np.tan else True
            for i in np.nonzero((d > limit) & exact_range)[0][:3]:
                bad.append((getattr(fn, "__name__", fn), x[i], y[i], out[row][i], want[i], d[i]))
    assert not bad, "\n".join(map(str, bad))
