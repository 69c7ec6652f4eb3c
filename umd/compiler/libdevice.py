"""Library functions of the kernel language, written in the kernel language itself.

The frontend inlines them like device functions where a kernel needs them (the
atomics the vISA lacks, as compare-and-swap loops, are here too):
`x ** y` and `math.pow` with a float exponent (powf), a float to an integer power
that is not a constant (fpowi), an integer to an integer power (ipow). They are not
part of the language (kernels call `**`, `pow`, `math.pow`).

powf computes |x|^y = 2^(y * log2|x|) with the product in extended precision:
|x| = m * 2^e with m in [sqrt(1/2), sqrt(2)), log2(m) is one v_log2_f32 (|log2 m| <= 1/2,
so its rounding error is at most 2^-25), y * e and y * log2(m) are split into exact
high and low parts with v_fma_f32, and the result is exp2 of the fraction scaled by
2^n. Its error grows with |y| (about |y| * 2^-25 * ln 2 relative, plus 2 ulp): within
4 ulp of C's powf for |y| <= 8, against about |y * log2 x| * 2^-24 for the naive
exp2(y * log2 x). Special values follow C99 (Annex F), as Numba's math.pow does:
pow(x, +-0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1, a negative finite x to a
non-integer power is NaN, an odd integer power keeps the sign of x (zeros and
infinities included).
"""
import decimal
import math
import struct
from decimal import Decimal as _D
from fractions import Fraction as _Fraction

import umd.intrinsics as gpu
from umd.types import f32, f64, i32, i64, u32, u64

SQRT2 = 1.4142135623730951
TWO24 = 16777216.0                # every float at least this large is an even integer
SMALLEST_NORMAL = 1.1754943508222875e-38
INF = math.inf


def powf(x: f32, y: f32) -> f32:
    ax = abs(x)
    ay = abs(y)
    yint = gpu.math.floor(y) == y                   # +-inf count as (even) integers
    yodd = yint & (ay < TWO24) & ((i32(y) & 1) == 1)
    # |x| = m * 2^e, m in [sqrt(1/2), sqrt(2)); subnormals scaled by 2^24 first
    sub = ax < SMALLEST_NORMAL
    sx = ax * TWO24 if sub else ax
    bits = gpu._bits(sx)
    e = i32(bits >> 23) - 127 - (24 if sub else 0)
    m = gpu._from_bits((bits & 0x007FFFFF) | 0x3F800000)
    big = m > SQRT2
    m = m * 0.5 if big else m
    e = e + big
    lm = gpu.math.log2(m)
    fe = f32(e)
    # t = y * e + y * log2(m), as s + lo
    p = y * fe
    pl = gpu.fma(y, fe, -p)
    q = y * lm
    ql = gpu.fma(y, lm, -q)
    s = p + q
    bb = s - p
    lo = ((p - (s - bb)) + (q - bb)) + (pl + ql)
    n = gpu._rint(s)
    f = (s - n) + lo
    ni = i32(max(min(n, 254.0), -252.0))
    n1 = ni >> 1
    n2 = ni - n1
    r = gpu.math.exp2(f) * gpu._from_bits(u32(n1 + 127) << 23) * gpu._from_bits(u32(n2 + 127) << 23)
    # zeros, infinities, NaN, and results that overflow or underflow (|t| >= 256): exact
    # through the plain formula
    plain = gpu.math.exp2(y * gpu.math.log2(ax))
    r = r if (ax > 0.0) & (ax < INF) & (ay < 1099511627776.0) & (abs(s) < 256.0) else plain
    negative = (gpu._bits(x) >> 31) == 1
    r = -r if negative & yodd else r
    r = math.nan if (x < 0.0) & (x > -INF) & (not yint) else r
    r = 1.0 if (y == 0.0) | (x == 1.0) | ((x == -1.0) & (ay == INF)) else r
    return r


def _squarings(x, e):
    # x^e for an unsigned e by repeated squaring (Numba's int_power), x's type
    r = x * 0 + 1
    v = x
    while e != 0:
        if (e & 1) != 0:
            r = r * v
        e = e >> 1
        if e != 0:
            v = v * v
    return r


def fpowi(x: f32, b: i32) -> f32:
    # Numba's int_power for a float base: squaring, 1 / r for a negative exponent,
    # math.pow beyond 2^16
    e = u32(-b) if b < 0 else u32(b)
    if e > 65536:
        return powf(x, f32(b))
    r = _squarings(x, e)
    return 1.0 / r if b < 0 else r


def _ipow_negative(a, b, lowest):
    # Numba's int_power (NumPy error model) for a negative exponent: 0 ** b is the
    # type's lowest value, 1 ** b is 1, (-1) ** b is +-1, any other integer gives 0
    r = a * 0
    r = a * 0 + (1 if (b & 1) == 0 else -1) if a == -1 else r
    r = a * 0 + 1 if a == 1 else r
    return a * 0 + lowest if a == 0 else r


def ipow(a: i32, b: i32) -> i32:
    if b < 0:
        return _ipow_negative(a, b, -2147483648)
    return _squarings(a, u32(b))


# -- float64 ---------------------------------------------------------------------------
# The vISA's float64 instructions are the ones GCN has (add, mul, fma, div, sqrt, floor,
# rndne...; docs/isa.md 4.8): like ROCm's device library, the float64 math functions are
# software, built from those. Each reduces its argument exactly (with fma), then
# evaluates a Taylor polynomial whose truncation error is below 2^-57. Measured against
# numpy (glibc) on the ranges of tests/umd/test_math64.py: exp, exp2, log, log2, log10,
# sin, cos and pow within 1 ulp, tanh within 2 (pow: for |y log x| < 64; its error
# grows as |y log x| 2^-58 beyond). sin and cos reduce by pi/2 in three parts, exact for
# |x| < 2^50; past that the result is in [-1, 1] but not accurate (glibc and CUDA reduce
# any argument exactly, with 1,200 bits of 2/pi: Payne-Hanek).


# The series stop once a term is below 10^-90, under the 80 digits the constants are
# computed to (a Decimal never underflows to 0 at these exponents: stopping at 0
# would run until 10^-999999, some seconds at every import).
_SERIES_END = _D(10) ** -90


def _atan_series(x: _D) -> _D:
    """atan(x) for |x| <= 1/2, to 80 digits (the caller's context)."""
    total, term, k = _D(0), x, 0
    while abs(term) > _SERIES_END:
        total += term / (2 * k + 1) if k % 2 == 0 else -term / (2 * k + 1)
        term *= x * x
        k += 1
    return total


def _pi() -> _D:
    # Machin: pi = 16 atan(1/5) - 4 atan(1/239)
    return 16 * _atan_series(1 / _D(5)) - 4 * _atan_series(1 / _D(239))


def _parts(d: _D, n: int = 2) -> list[float]:
    """d as n doubles whose sum is d to 53 * n bits."""
    out = []
    for _ in range(n):
        out.append(float(d))
        d -= _D(out[-1])
    return out


def _chop(x: float, bits: int) -> float:
    """x with all but its top `bits` significant bits cleared (so that x * k is exact
    for every integer |k| < 2^(53 - bits))."""
    u = struct.unpack("<Q", struct.pack("<d", x))[0] & ~((1 << (52 - bits + 1)) - 1)
    return struct.unpack("<d", struct.pack("<Q", u))[0]


with decimal.localcontext(decimal.Context(prec=80)):
    _LN2 = _D(2).ln()
    LN2, LN2_LO = _parts(_LN2)
    LN2_H42 = _chop(LN2, 42)                        # e * LN2_H42 exact for every exponent e
    LN2_L42 = float(_LN2 - _D(LN2_H42))
    INV_LN2, INV_LN2_LO = _parts(1 / _LN2)
    LOG10_2_H42 = _chop(float(_LN2 / _D(10).ln()), 42)
    LOG10_2_L42 = float(_LN2 / _D(10).ln() - _D(LOG10_2_H42))
    INV_LN10, INV_LN10_LO = _parts(1 / _D(10).ln())
    _PI = _pi()
    PIO2_1, PIO2_2, PIO2_3 = _parts(_PI / 2, 3)
    TWO_OVER_PI = float(2 / _PI)
    SQRT2_64 = float(_D(2).sqrt())
    PI_HI, PI_LO = _parts(_PI)
    LOG_PI = float(_PI.ln())
    TWO_OVER_SQRTPI = float(2 / _PI.sqrt())
    INV_SQRTPI = float(1 / _PI.sqrt())
    # atan's breakpoints c = 1/4, 1/2, 1, 2, 4 (exact, so that a - c and a c are exact):
    # atan(c) as hi + lo
    ATAN_Q, ATAN_QL = _parts(_atan_series(_D("0.25")))
    ATAN_H, ATAN_HL = _parts(_atan_series(_D("0.5")))
    ATAN_1, ATAN_1L = _parts(_PI / 4)
    ATAN_2, ATAN_2L = _parts(_PI / 2 - _atan_series(_D("0.5")))
    ATAN_4, ATAN_4L = _parts(_PI / 2 - _atan_series(_D("0.25")))
MIN_NORMAL64 = 2.2250738585072014e-308
TWO54 = 18014398509481984.0
TWO53 = 9007199254740992.0
INV_FACT = [float(_Fraction(1, math.factorial(n))) for n in range(24)]
# exp: 1/n! for n = 2..18; sin: (-1)^k/(2k+1)! for k = 1..9; cos: (-1)^k/(2k)! for k = 2..10
E2, E3, E4, E5, E6, E7, E8, E9, E10, E11, E12, E13, E14, E15, E16, E17, E18 = INV_FACT[2:19]
S3, S5, S7, S9, S11, S13, S15, S17, S19 = [(-1) ** k * INV_FACT[2 * k + 1] for k in range(1, 10)]
C4, C6, C8, C10, C12, C14, C16, C18, C20 = [(-1) ** k * INV_FACT[2 * k] for k in range(2, 11)]
# log: log(1 + f) = 2s + s R(s^2), s = f / (2 + f), R(z) = sum 2 z^k / (2k + 1)
L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12 = [float(_Fraction(2, 2 * k + 1)) for k in range(1, 13)]
# atan(t) = t + t z A(z), z = t^2, |t| <= 0.163: A(z) = sum (-1)^k z^(k-1) / (2k + 1)
A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12 = [float(_Fraction((-1) ** k, 2 * k + 1))
                                                     for k in range(1, 13)]
# where atan switches breakpoint (0, 1/4, 1/2, 1, 2, 4, infinity): tan of the mid-angles
ATAN_MID = [math.tan((math.atan(c) + math.atan(d)) / 2)
            for c, d in ((0, 0.25), (0.25, 0.5), (0.5, 1), (1, 2), (2, 4))] + [
    math.tan((math.atan(4) + math.pi / 2) / 2)]
ATAN_M1, ATAN_M2, ATAN_M3, ATAN_M4, ATAN_M5, ATAN_M6 = ATAN_MID
NAN = math.nan


def _expm1_taylor(r: f64) -> f64:
    # e^r - 1 for |r| <= ln 2 (the first term left out is below 2^-60 of the sum)
    q = E17 + r * E18
    q = E16 + r * q
    q = E15 + r * q
    q = E14 + r * q
    q = E13 + r * q
    q = E12 + r * q
    q = E11 + r * q
    q = E10 + r * q
    q = E9 + r * q
    q = E8 + r * q
    q = E7 + r * q
    q = E6 + r * q
    q = E5 + r * q
    q = E4 + r * q
    q = E3 + r * q
    q = E2 + r * q
    return r + r * r * q


def _scale2(p: f64, k: f64) -> f64:
    # p * 2^k for an integer k in [-1076, 1024], in two exact steps so that neither
    # factor overflows and an underflowing result is rounded once
    ki = i64(k)
    n1 = ki >> 1
    n2 = ki - n1
    return p * gpu._from_bits64(u64(n1 + 1023) << 52) * gpu._from_bits64(u64(n2 + 1023) << 52)


def _exp_reduced(hi: f64, lo: f64) -> f64:
    # e^(hi + lo), |lo| tiny against |hi|; hi clamped so that 2^k stays in range
    big = (hi > 710.0) | (hi < -746.0)
    h = max(min(hi, 710.0), -746.0)
    k = gpu._rint(h * INV_LN2)
    r = gpu.fma(-k, LN2, h)
    r = gpu.fma(-k, LN2_LO, r)
    r = r + (0.0 if big else lo)
    return _scale2(1.0 + _expm1_taylor(r), k)


def exp64(x: f64) -> f64:
    r = _exp_reduced(x, 0.0)
    return x if x != x else r


def exp2_64(x: f64) -> f64:
    xc = max(min(x, 1025.0), -1076.0)
    k = gpu._rint(xc)
    f = xc - k                                      # exact, |f| <= 1/2
    hi = f * LN2
    lo = gpu.fma(f, LN2, -hi) + f * LN2_LO
    r = _scale2(1.0 + _expm1_taylor(hi + lo), k)
    return x if x != x else r


def _log_split(x: f64):
    # x = m * 2^e, m in [sqrt(1/2), sqrt(2)): (e as f64, f = m - 1 exactly)
    sub = x < MIN_NORMAL64
    sx = x * TWO54 if sub else x
    bits = gpu._bits64(sx)
    e = i64(bits >> 52) - 1023 - (54 if sub else 0)
    m = gpu._from_bits64((bits & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)
    big = m > SQRT2_64
    m = m * 0.5 if big else m
    e = e + (1 if big else 0)
    return f64(e), m - 1.0


def _log_r(z: f64) -> f64:
    q = L11 + z * L12
    q = L10 + z * q
    q = L9 + z * q
    q = L8 + z * q
    q = L7 + z * q
    q = L6 + z * q
    q = L5 + z * q
    q = L4 + z * q
    q = L3 + z * q
    q = L2 + z * q
    q = L1 + z * q
    return z * q


def _log1p_small(f: f64) -> f64:
    # log(1 + f) for |f| <= sqrt(2) - 1
    s = f / (2.0 + f)
    hfsq = 0.5 * f * f
    return f - (hfsq - s * (hfsq + _log_r(s * s)))


def _log_special(x: f64, r: f64) -> f64:
    r = -math.inf if x == 0.0 else r
    r = x if x == math.inf else r
    return NAN if (x < 0.0) | (x != x) else r


def log64(x: f64) -> f64:
    fe, f = _log_split(x)
    s = f / (2.0 + f)
    hfsq = 0.5 * f * f
    r = fe * LN2_H42 + (f - (hfsq - (s * (hfsq + _log_r(s * s)) + fe * LN2_L42)))
    return _log_special(x, r)


def log2_64(x: f64) -> f64:
    fe, f = _log_split(x)
    lm = _log1p_small(f)
    hi = lm * INV_LN2
    lo = gpu.fma(lm, INV_LN2, -hi) + lm * INV_LN2_LO
    return _log_special(x, fe + (hi + lo))


def log10_64(x: f64) -> f64:
    fe, f = _log_split(x)
    lm = _log1p_small(f)
    hi = lm * INV_LN10
    lo = gpu.fma(lm, INV_LN10, -hi) + lm * INV_LN10_LO
    return _log_special(x, fe * LOG10_2_H42 + (fe * LOG10_2_L42 + hi + lo))


def _sin_taylor(r: f64) -> f64:
    z = r * r
    q = S17 + z * S19
    q = S15 + z * q
    q = S13 + z * q
    q = S11 + z * q
    q = S9 + z * q
    q = S7 + z * q
    q = S5 + z * q
    q = S3 + z * q
    return r + r * z * q


def _cos_taylor(r: f64) -> f64:
    z = r * r
    q = C18 + z * C20
    q = C16 + z * q
    q = C14 + z * q
    q = C12 + z * q
    q = C10 + z * q
    q = C8 + z * q
    q = C6 + z * q
    q = C4 + z * q
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + z * z * q)


def _reduce_pio2(x: f64):
    # x = k pi/2 + r, |r| <= pi/4: (r, k mod 4)
    r = x
    n = 0
    while True:
        k = gpu._rint(r * TWO_OVER_PI)
        r = gpu.fma(-k, PIO2_1, r)
        r = gpu.fma(-k, PIO2_2, r)
        r = gpu.fma(-k, PIO2_3, r)
        n = (n + i32(k - 4.0 * gpu.math.floor(k * 0.25))) & 3
        # once below 2^50 one round leaves |r| <= pi/4; a larger x takes a round per
        # ~52 bits of its exponent (and its result is then only bounded, not exact)
        if not (abs(r) > 0.7854):
            break
    return r, n


def _sincos(x: f64, shift: i32) -> f64:
    # sin(x) (shift 0) or cos(x) (shift 1): the quadrant (k + shift) mod 4 picks
    # +-sin(r) or +-cos(r)
    r, n = _reduce_pio2(x)
    n = (n + shift) & 3
    v = _cos_taylor(r) if (n & 1) == 1 else _sin_taylor(r)
    return -v if n >= 2 else v


def sin64(x: f64) -> f64:
    r = _sincos(x, 0)
    return x if abs(x) < 1.4901161193847656e-08 else r   # sin x = x below 2^-26 (keeps -0.0)


def cos64(x: f64) -> f64:
    return _sincos(x, 1)


def tanh64(x: f64) -> f64:
    ax = abs(x)
    # tanh |x| = (e^(2|x|) - 1) / (e^(2|x|) + 1), with e^y - 1 = 2^k (e^r - 1) + (2^k - 1):
    # no cancellation at any size
    y = 2.0 * min(ax, 22.0)
    k = gpu._rint(y * INV_LN2)
    r = gpu.fma(-k, LN2, y)
    r = gpu.fma(-k, LN2_LO, r)
    s = _scale2(1.0, k)
    em = s * _expm1_taylor(r) + (s - 1.0)
    t = em / (em + 2.0)
    t = 1.0 if ax > 22.0 else t
    t = -t if x < 0.0 else t
    return x if (ax < 3.725290298461914e-09) | (x != x) else t


def pow64(x: f64, y: f64) -> f64:
    ax = abs(x)
    ay = abs(y)
    yint = gpu.math.floor(y) == y                   # +-inf count as (even) integers
    yodd = yint & (ay < TWO53) & ((i64(y) & 1) == 1)
    # log|x| as L + Ll to about 2^-58 relative: s = f / (2 + f) as s + sl
    fe, f = _log_split(ax)
    s = f / (2.0 + f)
    sl = gpu.fma(-s, f, f - 2.0 * s) / (2.0 + f)
    a = fe * LN2_H42                                # exact
    b = 2.0 * s                                     # exact
    L = a + b
    bb = L - a
    Ll = ((a - (L - bb)) + (b - bb)) + (2.0 * sl + s * _log_r(s * s) + fe * LN2_L42)
    t = L + Ll
    Ll = Ll - (t - L)
    L = t
    # y log|x| as p + pl, then e^(p + pl)
    p = y * L
    pl = gpu.fma(y, L, -p) + y * Ll
    r = _exp_reduced(p, pl)
    r = (math.inf if y < 0.0 else 0.0) if ax == 0.0 else r
    r = (math.inf if y > 0.0 else 0.0) if ax == math.inf else r
    negative = (gpu._bits64(x) >> 63) == 1
    r = -r if negative & yodd else r
    r = NAN if (x < 0.0) & (x > -math.inf) & (not yint) else r
    r = NAN if (x != x) | (y != y) else r
    r = 1.0 if (y == 0.0) | (x == 1.0) | ((x == -1.0) & (ay == math.inf)) else r
    return r


def fpowi64(x: f64, b: i64) -> f64:
    # fpowi on float64 and int64
    e = u64(-b) if b < 0 else u64(b)
    if e > 65536:
        return pow64(x, f64(b))
    r = _squarings(x, e)
    return 1.0 / r if b < 0 else r


def ipow64(a: i64, b: i64) -> i64:
    # ipow on int64 (uint64 shares it: the product's low 64 bits are the same)
    if b < 0:
        return _ipow_negative(a, b, -9223372036854775807 - 1)
    return _squarings(a, u64(b))


def tan64(x: f64) -> f64:
    r, n = _reduce_pio2(x)
    s = _sin_taylor(r)
    c = _cos_taylor(r)
    t = -c / s if (n & 1) == 1 else s / c
    return x if abs(x) < 1.4901161193847656e-08 else t


def _atan_taylor(t: f64) -> f64:
    z = t * t
    q = A11 + z * A12
    q = A10 + z * q
    q = A9 + z * q
    q = A8 + z * q
    q = A7 + z * q
    q = A6 + z * q
    q = A5 + z * q
    q = A4 + z * q
    q = A3 + z * q
    q = A2 + z * q
    q = A1 + z * q
    return t + t * z * q


def atan64(x: f64) -> f64:
    # atan|x| = atan(c) + atan(t), t = (|x| - c) / (1 + |x| c), with the breakpoint c
    # nearest to |x| in angle, so |t| <= 0.163 (past 8.1: pi/2 + atan(-1/|x|))
    a = abs(x)
    c = f64(0.0)                        # (a bare 0.0 would make them float32 variables)
    hi = f64(0.0)
    lo = f64(0.0)
    if a > ATAN_M1:
        c, hi, lo = 0.25, ATAN_Q, ATAN_QL
    if a > ATAN_M2:
        c, hi, lo = 0.5, ATAN_H, ATAN_HL
    if a > ATAN_M3:
        c, hi, lo = 1.0, ATAN_1, ATAN_1L
    if a > ATAN_M4:
        c, hi, lo = 2.0, ATAN_2, ATAN_2L
    if a > ATAN_M5:
        c, hi, lo = 4.0, ATAN_4, ATAN_4L
    t = (a - c) / (1.0 + a * c)
    if a > ATAN_M6:
        t = -1.0 / a
        hi, lo = PIO2_1, PIO2_2
    r = hi + (lo + _atan_taylor(t))
    r = -r if x < 0.0 else r
    return x if (a < 1.4901161193847656e-08) | (x != x) else r


def atan2_64(y: f64, x: f64) -> f64:
    # C99 (Annex F): the quadrant from the signs (of zeros too), infinities by table
    ay = abs(y)
    ax = abs(x)
    xneg = (gpu._bits64(x) >> 63) == 1
    a = atan64(ay / ax)
    a = PIO2_1 if (ay == math.inf) | (ax == 0.0) else a
    a = 0.0 if (ay == 0.0) | ((ax == math.inf) & (ay < math.inf)) else a
    a = PIO2_1 * 0.5 if (ay == math.inf) & (ax == math.inf) else a
    r = (PI_HI - (a - PI_LO)) if xneg else a
    r = -r if (gpu._bits64(y) >> 63) == 1 else r
    return NAN if (x != x) | (y != y) else r


def asin64(x: f64) -> f64:
    return atan2_64(x, gpu.math.sqrt((1.0 - x) * (1.0 + x)))


def acos64(x: f64) -> f64:
    return atan2_64(gpu.math.sqrt((1.0 - x) * (1.0 + x)), x)


def expm1_64(x: f64) -> f64:
    # e^x - 1 = 2^k (e^r - 1) + (2^k - 1): no cancellation near 0
    y = max(min(x, 710.0), -746.0)
    # below ln 2 the series alone (2^k (e^r - 1) + (2^k - 1) would cancel for k = 1)
    k = 0.0 if abs(y) < LN2 else gpu._rint(y * INV_LN2)
    r = gpu.fma(-k, LN2, y)
    r = gpu.fma(-k, LN2_LO, r)
    s = _scale2(1.0, k)
    er = _expm1_taylor(r)
    em = s * er + (s - 1.0)
    em = _scale2(1.0 + er, k) - 1.0 if k > 56.0 else em     # 2^k overflows near the top
    return x if x != x else em


def log1p64(x: f64) -> f64:
    # log(u) x / (u - 1), u = 1 + x rounded: the quotient corrects u's rounding error
    u = 1.0 + x
    r = log64(u) * (x / (u - 1.0))
    r = x if u == 1.0 else r
    return x if x == math.inf else r


def sinh64(x: f64) -> f64:
    a = abs(x)
    em = expm1_64(min(a, 709.0))
    r = 0.5 * (em + em / (em + 1.0))
    w = exp64(0.5 * a)                  # past 709: e^a / 2 = (w / 2) w, without overflow
    r = (0.5 * w) * w if a > 709.0 else r
    r = -r if x < 0.0 else r
    return x if (a < 1.4901161193847656e-08) | (x != x) else r


def cosh64(x: f64) -> f64:
    a = abs(x)
    em = expm1_64(min(a, 709.0))
    e = em + 1.0
    # 1 + em^2 / 2e near 0 (no cancellation); (e + 1/e) / 2 further out (em^2 overflows)
    r = 1.0 + (em * em) / (2.0 * e) if a < 1.0 else 0.5 * e + 0.5 / e
    w = exp64(0.5 * a)
    r = (0.5 * w) * w if a > 709.0 else r
    return x * x if x != x else r


def asinh64(x: f64) -> f64:
    a = abs(x)
    big = a > 268435456.0               # 2^28: sqrt(1 + a^2) = a to double precision
    small = log1p64(a + a * a / (1.0 + gpu.math.sqrt(1.0 + a * a)))
    r = log64(a) + LN2 if big else small
    r = -r if x < 0.0 else r
    return x if (a < 1.4901161193847656e-08) | (x != x) else r


def acosh64(x: f64) -> f64:
    t = x - 1.0
    r = log1p64(t + gpu.math.sqrt(2.0 * t + t * t))
    r = log64(x) + LN2 if x > 268435456.0 else r
    return NAN if x < 1.0 else r


def atanh64(x: f64) -> f64:
    a = abs(x)
    t = a + a
    r = 0.5 * log1p64(t + t * a / (1.0 - a) if a < 0.5 else t / (1.0 - a))
    r = -r if x < 0.0 else r
    return x if (a < 1.4901161193847656e-08) | (x != x) else r


def hypot64(x: f64, y: f64) -> f64:
    # scaled by the exponent of the larger so that neither square over- or underflows
    hi = max(abs(x), abs(y))
    lo = min(abs(x), abs(y))
    e = f64(i64(gpu._bits64(hi) >> 52) - 1023)
    e = max(min(e, 1000.0), -1000.0)
    h = hi * _scale2(1.0, -e)
    l = lo * _scale2(1.0, -e)
    r = gpu.math.sqrt(gpu.fma(h, h, l * l)) * _scale2(1.0, e)
    r = hi if lo == 0.0 else r
    r = NAN if (x != x) | (y != y) else r
    return math.inf if (abs(x) == math.inf) | (abs(y) == math.inf) else r


def erf64(x: f64) -> f64:
    # |x| < 2: 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (2n+1)!! (every term positive: no
    # cancellation), e^(-x^2) with x^2 split exactly; 2 <= |x| < 6: 1 - erfc(|x|), erfc
    # by its continued fraction (60 terms reach 2^-53 from 2 up); past 6 erf is 1
    a = abs(x)
    hi = a * a
    lo = gpu.fma(a, a, -hi)
    e = exp64(-hi) * (1.0 - lo)
    r = f64(1.0)
    if a < 2.0:
        s = f64(0.0)
        t = a
        n = 0
        while (t > s * 1e-17) & (n < 60):
            s = s + t
            t = t * (2.0 * hi) / f64(2 * n + 3)
            n = n + 1
        r = TWO_OVER_SQRTPI * e * s
    elif a < 6.0:
        f = a
        k = 60
        while k > 0:
            f = a + (0.5 * f64(k)) / f
            k = k - 1
        r = 1.0 - INV_SQRTPI * e / f
    r = -r if x < 0.0 else r
    return x if x != x else r



# -- fmod, erfc, gamma, lgamma, cbrt, frexp, ldexp (Python's math module, Numba's) -----------
def _ilogb64(x: f64) -> i64:
    # the exponent e of a finite x > 0, x in [2^e, 2^(e+1)) (subnormals too)
    sub = x < MIN_NORMAL64
    bits = gpu._bits64(x * TWO54 if sub else x)
    return i64(bits >> 52) - 1023 - (54 if sub else 0)


def fmod64(x: f64, y: f64) -> f64:
    # C's fmod, exact: |x| minus the largest multiple of |y| below it, by long division
    # (each step subtracts |y| 2^k with r/2 < |y| 2^k <= r: exact by Sterbenz); the
    # sign of x
    r = abs(x)
    ay = abs(y)
    if (ay == 0.0) | (r == math.inf) | (x != x) | (y != y):
        return NAN
    ey = _ilogb64(ay)
    while r >= ay:
        t = ldexp64(ay, i32(_ilogb64(r) - ey))
        t = t * 0.5 if t > r else t
        r = r - t
    return gpu.math.copysign(r, x)


def _erfc_cf(a: f64, terms: i32) -> f64:
    # erfc(a), a >= 1, by Laplace's continued fraction, e^(-a^2) with a^2 split exactly
    hi = a * a
    lo = gpu.fma(a, a, -hi)
    f = a
    k = terms
    while k > 0:
        f = a + (0.5 * f64(k)) / f
        k = k - 1
    return INV_SQRTPI * (exp64(-hi) * (1.0 - lo)) / f


def erfc64(x: f64) -> f64:
    # |x| < 1: 1 - erf(x) (erf(x) <= 0.85: at most 3 bits cancel); 1 <= |x| < 2: the
    # continued fraction with 200 terms, from 2 on 60 (both reach 2^-53); negative x:
    # 2 - erfc(-x); past 27 e^(-x^2) underflows
    a = abs(x)
    r = 1.0 - erf64(x)
    if a >= 1.0:
        c = f64(0.0)
        if a < 27.3:
            c = _erfc_cf(a, 200 if a < 2.0 else 60)
        r = c if x > 0.0 else 2.0 - c
    return x if x != x else r


# Stirling's series: log gamma(x) = (x - 1/2) log x - x + log sqrt(2 pi) + S(x), for
# x >= 10 S(x) = sum B_2k / (2k (2k - 1) x^(2k - 1)), eight terms (the next is below 2^-60)
ST1, ST2, ST3, ST4, ST5, ST6, ST7, ST8 = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188,
                                          -691 / 360360, 1 / 156, -3617 / 122400)
SQRT_2PI = math.sqrt(2.0 * math.pi)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
EULER_GAMMA = 0.5772156649015329
# lgamma(1 + z) = -log1p(z) + z (1 - euler_gamma) + sum_k>=2 (-1)^k (zeta(k) - 1) z^k / k
# (Abramowitz and Stegun 6.1.33), |z| <= 1/2: ZM[k - 2] = (-1)^k (zeta(k) - 1) / k
_ZETA_MINUS_1 = [math.pi ** 2 / 6 - 1, 0.2020569031595942854, math.pi ** 4 / 90 - 1,
                 0.0369277551433699263] + [
    math.fsum(n ** -float(k) for n in range(2, 4000)) + 4000.0 ** (1 - k) / (k - 1)
    for k in range(6, 40)]
ZM = [(-1) ** k * _ZETA_MINUS_1[k - 2] / k for k in range(2, 40)]
(ZM2, ZM3, ZM4, ZM5, ZM6, ZM7, ZM8, ZM9, ZM10, ZM11, ZM12, ZM13, ZM14, ZM15, ZM16, ZM17, ZM18,
 ZM19, ZM20, ZM21, ZM22, ZM23, ZM24, ZM25, ZM26, ZM27, ZM28, ZM29, ZM30, ZM31, ZM32, ZM33, ZM34,
 ZM35, ZM36, ZM37, ZM38, ZM39) = ZM


def _stirling(x: f64) -> f64:
    r = 1.0 / x
    r2 = r * r
    q = ST7 + r2 * ST8
    q = ST6 + r2 * q
    q = ST5 + r2 * q
    q = ST4 + r2 * q
    q = ST3 + r2 * q
    q = ST2 + r2 * q
    return r * (ST1 + r2 * q)


def _sinpi(x: f64) -> f64:
    # sin(pi x), exact argument reduction: x - rint(x) is exact
    n = gpu._rint(x)
    r = sin64(PI_HI * (x - n))
    return -r if gpu._rint(n * 0.5) != n * 0.5 else r


def _gamma_big(x: f64, lo: f64) -> f64:
    # gamma(x + lo), 10 <= x < 171.625, lo tiny: sqrt(2 pi) x^(x - 1/2) e^(-x) e^S(x),
    # the power in four quarters (each pow's |y log x| stays below 110, where pow64 is
    # within 1 ulp; the products cannot overflow before the result does), lo through
    # gamma'/gamma = psi(x) ~ log x - 1/(2x)
    h = pow64(x, (x - 0.5) * 0.25)
    c = exp64(_stirling(x) + lo * (log64(x) - 0.5 / x))
    return SQRT_2PI * ((((h * h) * exp64(-x)) * h) * h) * c


def gamma64(x: f64) -> f64:
    # C's tgamma. z = x (x >= 1/2), x + 1 (0 < x < 1/2: gamma(x) = gamma(x + 1) / x) or
    # 1 - x (x < 0: the reflection pi / (sin(pi x) gamma(1 - x))); gamma(z) is Stirling's
    # form at z + n >= 10 (n integer, z + n carried as a two-sum) divided by z (z + 1)
    # ... (z + n - 1). Poles: +-inf at zero, NaN at the negative integers and -inf;
    # overflow past 171.62. Below -160 the reflection takes gamma(x + 20) and divides
    # by x (x + 1) ... (x + 19), so that gamma(1 - x) stays finite down to the underflow.
    shift = 20.0 if x < -160.0 else 0.0
    a = 1.0 if x < 0.5 else 0.0
    b = x if x > 0.0 else -(x + shift)
    z = min(a + b, 200.0)                           # z + zl = a + b exactly (two-sum)
    bb = z - a
    zl = (a - (z - bb)) + (b - bb)
    n = max(gpu.math.ceil(10.0 - z), 0.0)
    zn = z + n
    bb = zn - z
    lo = (z - (zn - bb)) + (n - bb) + zl
    g = _gamma_big(zn, lo) if zn < 171.625 else math.inf
    j = 0.0
    while j < n:
        g = g / (z + j)
        j = j + 1.0
    s = _sinpi(x)
    r = g
    if x < 0.5:
        r = g / x if x > 0.0 else PI_HI / (s * g)
    j = 0.0
    while j < shift:
        r = r / (x + j)
        j = j + 1.0
    r = gpu.math.copysign(math.inf, x) if x == 0.0 else r
    r = NAN if (x < 0.0) & (x == gpu._rint(x)) else r        # a negative integer, or -inf
    return x if x != x else r


def _lgamma_2p(z: f64) -> f64:
    # lgamma(2 + z) = lgamma(1 + z) + log(1 + z), |z| <= 1/2: Abramowitz and Stegun
    # 6.1.33 without its -log1p(z) (38 terms: below 2^-60)
    q = ZM38 + z * ZM39
    q = ZM37 + z * q
    q = ZM36 + z * q
    q = ZM35 + z * q
    q = ZM34 + z * q
    q = ZM33 + z * q
    q = ZM32 + z * q
    q = ZM31 + z * q
    q = ZM30 + z * q
    q = ZM29 + z * q
    q = ZM28 + z * q
    q = ZM27 + z * q
    q = ZM26 + z * q
    q = ZM25 + z * q
    q = ZM24 + z * q
    q = ZM23 + z * q
    q = ZM22 + z * q
    q = ZM21 + z * q
    q = ZM20 + z * q
    q = ZM19 + z * q
    q = ZM18 + z * q
    q = ZM17 + z * q
    q = ZM16 + z * q
    q = ZM15 + z * q
    q = ZM14 + z * q
    q = ZM13 + z * q
    q = ZM12 + z * q
    q = ZM11 + z * q
    q = ZM10 + z * q
    q = ZM9 + z * q
    q = ZM8 + z * q
    q = ZM7 + z * q
    q = ZM6 + z * q
    q = ZM5 + z * q
    q = ZM4 + z * q
    q = ZM3 + z * q
    q = ZM2 + z * q
    return z * (1.0 - EULER_GAMMA) + z * z * q




def lgamma64(x: f64) -> f64:
    # C's lgamma: log|gamma(x)|; +inf at the poles and at +-inf. For z > 0 (z = x, or
    # 1 - x by the reflection log(pi / |sin(pi x)|) - lgamma(1 - x)): below 10, z moved
    # by whole steps into [1/2, 5/2) (lgamma(z) = lgamma(z - k) + log((z - 1) ... (z - k)),
    # exact subtractions) and the series around 1 and 2, where lgamma crosses zero;
    # from 10 Stirling's series
    z = x if x > 0.0 else 1.0 - x
    zs = z
    p = f64(1.0)
    while (zs >= 2.5) & (zs < 10.0):
        zs = zs - 1.0
        p = p * zs
    w = zs - 1.0 if zs < 1.5 else zs - 2.0
    w = zs if zs < 0.5 else w
    s = _lgamma_2p(max(min(w, 0.5), -0.5))          # lgamma(1 + w) = that - log1p(w)
    s = s - log1p64(w) if zs < 1.5 else s
    s = s - log64(zs) if zs < 0.5 else s
    s = s + log64(p)
    big = (z - 0.5) * (log64(z) - 1.0) + ((LOG_SQRT_2PI - 0.5) + _stirling(z))
    r = s if z < 10.0 else big
    r = (LOG_PI - log64(abs(_sinpi(x)))) - r if x <= 0.0 else r
    r = math.inf if (x <= 0.0) & (x == gpu._rint(x)) else r  # 0, a negative integer, -inf
    r = math.inf if x == math.inf else r
    return x if x != x else r


def cbrt64(x: f64) -> f64:
    # |x|^(1/3) by pow, then one Newton step on y^3 = |x| (the residual with fma:
    # y^3 - a = y (y^2) - a, y^2 split exactly); the sign of x; 0, inf, NaN as they are
    a = abs(x)
    sub = a < MIN_NORMAL64
    s = a * TWO54 if sub else a                     # 2^54: its cube root is 2^18 exactly
    y = pow64(s, 0.3333333333333333)
    yy = y * y
    yyl = gpu.fma(y, y, -yy)
    res = gpu.fma(y, yy, -s) + y * yyl
    y = y - res / (3.0 * yy)
    y = y * 3.814697265625e-06 if sub else y        # 2^-18
    r = gpu.math.copysign(y, x)
    return x if (a == 0.0) | (a == math.inf) | (x != x) else r


def frexp64(x: f64):
    # (m, e): x = m 2^e, |m| in [1/2, 1); (x, 0) for 0, inf and NaN, as C's frexp
    ok = (x == x) & (abs(x) != math.inf) & (x != 0.0)
    e = _ilogb64(abs(x)) + 1 if ok else i64(0)
    m = _scale2(x, f64(-e)) if ok else x
    return m, i32(e)


def ldexp64(x: f64, e: i32) -> f64:
    # x 2^e rounded once: x = m 2^ex exactly (frexp), then m 2^(ex + e) in one _scale2
    # (the exponent clamped where the result is surely inf or 0)
    m, ex = frexp64(x)
    k = max(min(i64(ex) + i64(e), 1025), -1080)
    r = _scale2(m, f64(k))
    return x if (x == 0.0) | (abs(x) == math.inf) | (x != x) else r


# -- atomics by compare-and-swap (umd.atomic.and_/or_/xor/inc/dec, Numba's) -----------------
# Each returns the old value; the loop retries while another lane or wave changed the
# element between the read and the swap. The element type is the array's (the frontend
# converts the value to it).

def atomic_update(ary, idx, v, op):
    # op (a constant where the frontend calls it): 0 and, 1 or, 2 xor, 3 CUDA's atomicInc
    # (old >= v wraps to 0, else old + 1), 4 atomicDec (0 or above v becomes v, else old - 1)
    old = ary[idx]
    while True:
        new = old & v
        if op == 1:
            new = old | v
        elif op == 2:
            new = old ^ v
        elif op == 3:
            new = old * 0 if old >= v else old + 1
        elif op == 4:
            new = v if (old == 0) | (old > v) else old - 1
        seen = gpu.atomic.cas(ary, idx, old, new)
        if seen == old:
            return old
        old = seen


def block_count(pred):
    # umd.syncthreads_count(pred): a barrier that also counts the block's threads whose
    # predicate holds (an LDS counter of its own; the last barrier keeps a later call's
    # reset from racing this call's reads)
    cnt = gpu.shared.array(1, i32)
    if (gpu.thread_idx.x | gpu.thread_idx.y | gpu.thread_idx.z) == 0:
        cnt[0] = 0
    gpu.syncthreads()
    if pred:
        gpu.atomic.add(cnt, 0, 1)
    gpu.syncthreads()
    n = cnt[0]
    gpu.syncthreads()
    return n


def print_reserve(buf, nbytes):
    # a print() record's first word in the print buffer (compiler/prints.py has the
    # layout), or -1 when it does not fit: then the drop is counted instead
    off = gpu.atomic.add(buf, 0, nbytes)
    if off + nbytes > buf[2]:
        gpu.atomic.add(buf, 1, 1)
        return -1
    return i32(off >> 2) + 4


def match_any(mask, value):
    # CUDA's __match_any_sync: the lanes of mask running this call whose value has this
    # lane's bits. One round per distinct value: the lowest lane left broadcasts its
    # value, the lanes holding it take the ballot as their result
    todo = gpu.ballot_sync(mask, True)
    res = u32(0)
    while todo != 0:
        v = gpu.shfl_sync(0xFFFFFFFF, value, gpu.ffs(todo) - 1)
        same = gpu.ballot_sync(mask, value == v)
        if value == v:
            res = same
        todo = todo & ~same
    return res


def match_all(mask, value):
    # CUDA's __match_all_sync: (mask, True) when every lane of mask running this call
    # has the lowest one's value, else (0, False)
    live = gpu.ballot_sync(mask, True)
    v = gpu.shfl_sync(0xFFFFFFFF, value, gpu.ffs(live) - 1)
    ok = gpu.ballot_sync(mask, value == v) == live
    return (mask if ok else u32(0)), ok
