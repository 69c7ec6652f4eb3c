"""Library functions of the kernel language, written in the kernel language itself.

The frontend inlines them like device functions where a kernel needs them:
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
import math

import umd.intrinsics as gpu
from umd.types import f32, i32, u32

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


def fpowi(x: f32, b: i32) -> f32:
    # Numba's int_power for a float base: squaring, 1 / r for a negative exponent,
    # math.pow beyond 2^16
    e = u32(-b) if b < 0 else u32(b)
    if e > 65536:
        return powf(x, f32(b))
    r = 1.0
    v = x
    while e != 0:
        if (e & 1) != 0:
            r = r * v
        e = e >> 1
        if e != 0:
            v = v * v
    return 1.0 / r if b < 0 else r


def ipow(a: i32, b: i32) -> i32:
    # Numba's int_power (NumPy error model): 0 ** negative is INT_MIN, an integer other
    # than 1 and -1 to a negative power is 0
    if b < 0:
        if a == 0:
            return -2147483648
        if a != 1 and a != -1:
            return 0
    e = u32(-b) if b < 0 else u32(b)
    r = 1
    v = a
    while e != 0:
        if (e & 1) != 0:
            r = r * v
        e = e >> 1
        if e != 0:
            v = v * v
    return r
