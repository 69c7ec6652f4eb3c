"""Numba-CUDA-style kernels on 64-bit types (float64, int64, uint64) and N-D arrays.

Written as Numba users write them (`cuda.` -> `umd.`, plus the annotations
docs/umd-compiler.md asks for: `f64[:]` for a 1-D float64 array, `i64` for an int64
scalar...). tests/umd/test_wide_types.py runs them on the reference executor and
checks them against numpy; tests/umd/test_numba_e2e.py runs some through a mount.
"""
import math

import numpy as np

import umd
from umd import f32, f64, float64, i32, i64, int32, int64, u32, u64, uint64


@umd.jit
def saxpy64(a: f64, x: f64[:], y: f64[:], out: f64[:]):
    i = umd.grid(1)
    if i < x.shape[0]:
        out[i] = a * x[i] + y[i]


@umd.jit
def dot_partial(x: float64[:], y: float64[:], out: float64[:]):
    # a grid-stride loop accumulating in a float64 local started with a literal
    start = umd.grid(1)
    acc = 0.0
    for i in range(start, len(x), umd.gridsize(1)):
        acc += x[i] * y[i]
    if start < out.shape[0]:
        out[start] = acc


@umd.jit
def row_sums(m: int64[:, :], out: int64[:]):
    r = umd.grid(1)
    if r < m.shape[0]:
        s = 0
        for c in range(m.shape[1]):
            s += m[r, c]
        out[r] = s


@umd.jit
def splitmix64(seed: u64, out: u64[:]):
    # the integer hash of Monte-Carlo kernels, on uint64
    i = umd.grid(1)
    if i < out.size:
        z = seed + u64(i) * u64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> 30)) * u64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> 27)) * u64(0x94D049BB133111EB)
        out[i] = z ^ (z >> 31)


@umd.jit
def floordiv_mod64(a: i64[:], b: i64[:], q: i64[:], r: i64[:]):
    i = umd.grid(1)
    if i < a.size:
        q[i] = a[i] // b[i]
        r[i] = a[i] % b[i]


@umd.jit
def promotions(x32: f32[:], y64: f64[:], n32: i32[:], big: i64, f_out: f64[:],
               i_out: i64[:], g_out: f64[:], h_out: f32[:], k_out: f64[:]):
    i = umd.grid(1)
    if i < x32.size:
        k_out[i] = y64[i] * 0.1             # in an f64 expression the literal is a double
        f_out[i] = x32[i] + y64[i]          # f32 op f64 -> f64
        i_out[i] = n32[i] + big             # i32 op i64 -> i64
        g_out[i] = n32[i] * 0.1 + y64[i]    # i32 op float literal is f32, then f64
        h_out[i] = x32[i] * 0.1             # an f32 expression keeps f32 (the literal too)


@umd.jit
def casts(x: f64[:], a: i32[:], f_i32: i32[:], f_i64: i64[:], f_u64: u64[:], f_f32: f32[:],
          i_f64: f64[:], u_f64: f64[:], l_f32: f32[:]):
    i = umd.grid(1)
    if i < x.size:
        f_i32[i] = int32(x[i]) if abs(x[i]) < 2e9 else 0
        f_i64[i] = int64(x[i])
        f_u64[i] = uint64(abs(x[i]))
        f_f32[i] = f32(x[i])
        i_f64[i] = float64(a[i])
        u_f64[i] = float64(u32(a[i]))
        l_f32[i] = f32(int64(a[i]) * 4398046511104)     # i64 -> f32 rounds once


@umd.jit
def math64(x: f64[:], out: f64[:, :]):
    i = umd.grid(1)
    if i < x.size:
        v = x[i]
        out[0, i] = math.sqrt(abs(v))
        out[1, i] = math.floor(v)
        out[2, i] = math.ceil(v)
        out[3, i] = math.trunc(v)
        out[4, i] = math.fabs(v)
        out[5, i] = math.exp(v / 8.0)
        out[6, i] = math.sin(v)
        out[7, i] = max(v, 0.25) - min(v, -0.25)
        out[8, i] = 1.0 if math.isnan(v) else -1.0
        out[9, i] = v ** 2 + v / 3.0


@umd.jit
def cube_fill(t: f64[:, :, :], scale: f64):
    i, j, k = umd.grid(3)
    if i < t.shape[0] and j < t.shape[1] and k < t.shape[2]:
        t[i, j, k] = scale * (i * 10000 + j * 100 + k) + t[i, j, k]


@umd.jit
def atomics64(x: f64[:], keys: i32[:], fsum: f64[:], isum: i64[:], usum: u64[:]):
    i = umd.grid(1)
    if i < x.size:
        umd.atomic.add(fsum, keys[i], x[i])
        umd.atomic.add(isum, keys[i], int64(keys[i]) << 40)
        umd.atomic.add(usum, 0, u64(1))


@umd.jit
def block_sum64(x: f64[:], out: f64[:]):
    buf = umd.shared.array(64, float64)
    t = umd.threadIdx.x
    i = umd.grid(1)
    buf[t] = x[i] if i < x.size else 0.0
    umd.syncthreads()
    for k in range(6):                      # strides 32, 16, ... 1
        if t < 32 >> k:
            buf[t] += buf[t + (32 >> k)]
        umd.syncthreads()
    if t == 0:
        out[umd.blockIdx.x] = buf[0]


@umd.jit
def compare64(a: i64[:], b: u64[:], x: f64[:], out: i32[:, :]):
    i = umd.grid(1)
    if i < a.size:
        out[0, i] = a[i] < 0
        out[1, i] = a[i] >= -5
        out[2, i] = a[i] != 7
        out[3, i] = b[i] > u64(0x8000000000000000)
        out[4, i] = x[i] != x[i]
        out[5, i] = x[i] >= 0.5
        out[6, i] = a[i] == x[i]            # i64 == f64 compares as f64
        out[7, i] = i < 4_294_967_299       # a 64-bit literal: i is widened (not 3 in i32)


@umd.jit
def bit_ops64(a: i64[:], b: u64[:], out: u64[:, :], sout: i64[:, :]):
    i = umd.grid(1)
    if i < a.size:
        out[0, i] = b[i] & u64(0xF0F0F0F0F0F0F0F0)
        out[1, i] = b[i] | u64(3)
        out[2, i] = ~b[i]
        out[3, i] = b[i] << u64(i % 64)
        out[4, i] = b[i] >> u64(i % 64)
        sout[0, i] = a[i] >> (i % 64)
        sout[1, i] = -a[i]
        sout[2, i] = max(a[i], -a[i])
        sout[3, i] = min(a[i], 5)
        sout[4, i] = a[i] * a[i] - 3


@umd.jit
def warp_sum64(x: f64[:], out: f64[:]):
    # the shfl_down warp reduce of Numba's documentation, on float64
    i = umd.grid(1)
    v = x[i] if i < x.size else 0.0
    offset = 16
    while offset > 0:
        v += umd.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if umd.laneid == 0:
        out[i // 32] = v


@umd.jit(device=True)
def poly64(x, c0, c1):
    if x < 0:
        return -(c0 + c1 * x)
    return c0 + c1 * x


@umd.jit
def control64(n: i64, x: f64[:], out: f64[:], cnt: i64[:]):
    i = umd.grid(1)
    if i < x.size:
        v = x[i]
        acc = 0.0
        k = i64(0)
        while k < n:                        # a loop on a 64-bit counter (divergent)
            acc += v
            k += 1
        for j in range(n - 2, n):           # 64-bit range bounds
            acc += j
        loc = umd.local.array(4, float64)
        for q in range(4):
            loc[q] = v * q
        acc += loc[i % 4]                   # a variable index: selects on pairs
        acc += poly64(v, 0.5, 2.0)          # a device function on f64
        lo, hi = min(v, -v), max(v, -v)
        acc += hi - lo
        out[i] = acc if v != 0.0 else -1.0
        old = umd.atomic.add(cnt, 0, i64(1))
        if old < 0:
            out[i] = 1e300


@umd.jit
def transcendentals64(x: f64[:], y: f64[:], out: f64[:, :]):
    # Numba-style float64 math: each result is float64 and must be float64-accurate
    i = umd.grid(1)
    if i < x.size:
        v = x[i]
        out[0, i] = math.exp(v)
        out[1, i] = math.exp2(v)
        out[2, i] = math.log(v)
        out[3, i] = math.log2(v)
        out[4, i] = math.log10(v)
        out[5, i] = math.sin(v)
        out[6, i] = math.cos(v)
        out[7, i] = math.tanh(v)
        out[8, i] = math.pow(v, y[i])
        out[9, i] = v ** y[i]


@umd.jit
def int_powers64(a: int64[:], b: int64[:], x: f64[:], out_i: int64[:], out_f: f64[:]):
    i = umd.grid(1)
    if i < a.size:
        out_i[i] = a[i] ** b[i]
        out_f[i] = x[i] ** b[i]


@umd.jit
def minmax_exch_cas64(x: f64[:], k: int64[:], u: uint64[:], fo: f64[:], io: int64[:], uo: uint64[:],
              olds: int64[:]):
    # Numba's atomics on 64-bit arrays: min/max (and the nan- forms) on float64, int64
    # and uint64, exch, and a compare-and-swap loop that builds a 64-bit maximum
    i = umd.grid(1)
    if i < x.size:
        umd.atomic.max(fo, 0, x[i])
        umd.atomic.min(fo, 1, x[i])
        umd.atomic.nanmax(fo, 2, x[i])
        umd.atomic.max(io, 0, k[i])
        umd.atomic.min(io, 1, k[i])
        umd.atomic.max(uo, 0, u[i])
        umd.atomic.min(uo, 1, u[i])
        olds[i] = umd.atomic.exch(io, 2, k[i])
        # CAS loop: io[3] = max over i of k[i] ^ 0x5555 (as Numba programs do it)
        want = k[i] ^ 0x5555
        old = io[3]
        while old < want:
            seen = umd.atomic.cas(io, 3, old, want)
            if seen == old:
                break
            old = seen


@umd.jit
def cas_counter64(counter: uint64[:], n: int64):
    # every thread adds its index with compare_and_swap on counter[0] (a 64-bit sum)
    i = umd.grid(1)
    if i < n:
        old = counter[0]
        while True:
            seen = umd.atomic.compare_and_swap(counter, old, old + uint64(i) * uint64(4294967296))
            if seen == old:
                break
            old = seen


@umd.jit(device=True)
def more_math(v, w, out, i):
    # the same Numba-style calls on float64 and float32 arguments
    out[0, i] = math.tan(v)
    out[1, i] = math.atan(v)
    out[2, i] = math.atan2(v, w)
    out[3, i] = math.asin(v)
    out[4, i] = math.acos(v)
    out[5, i] = math.sinh(v)
    out[6, i] = math.cosh(v)
    out[7, i] = math.asinh(v)
    out[8, i] = math.acosh(v)
    out[9, i] = math.atanh(v)
    out[10, i] = math.hypot(v, w)
    out[11, i] = math.expm1(v)
    out[12, i] = math.log1p(v)
    out[13, i] = math.radians(v)
    out[14, i] = math.degrees(v)
    out[15, i] = math.erf(v)


@umd.jit
def more_math64(x: f64[:], y: f64[:], out: f64[:, :]):
    i = umd.grid(1)
    if i < x.size:
        more_math(x[i], y[i], out, i)


@umd.jit
def more_math32(x: f32[:], y: f32[:], out: f32[:, :]):
    i = umd.grid(1)
    if i < x.size:
        more_math(x[i], y[i], out, i)

@umd.jit
def draws(states: u64[:, :], raw: uint64[:, :], u32s: f32[:, :], u64s: f64[:, :], n32: f32[:],
          n64: f64[:]):
    # Numba's numba.cuda.random, as umd.random: each thread draws from its own state
    i = umd.grid(1)
    if i < states.shape[0]:
        for k in range(4):
            raw[i, k] = umd.random.xoroshiro128p_next(states, i)
        for k in range(8):
            u32s[i, k] = umd.random.xoroshiro128p_uniform_float32(states, i)
            u64s[i, k] = umd.random.xoroshiro128p_uniform_float64(states, i)
        n32[i] = umd.random.xoroshiro128p_normal_float32(states, i)
        n64[i] = umd.random.xoroshiro128p_normal_float64(states, i)


@umd.jit
def pi_darts(states: umd.random.xoroshiro128p_type, per_thread: i32, hits: int32[:]):
    # the Monte-Carlo pi of Numba's random-number documentation
    i = umd.grid(1)
    if i < states.shape[0]:
        inside = 0
        for k in range(per_thread):
            x = umd.random.xoroshiro128p_uniform_float32(states, i)
            y = umd.random.xoroshiro128p_uniform_float32(states, i)
            if x * x + y * y <= 1.0:
                inside += 1
        umd.atomic.add(hits, 0, inside)


@umd.jit
def bit_atomics(flags: u32[:], masks: int64[:], counters: u32[:], wide: uint64[:], olds: u32[:]):
    # Numba's atomic.and_/or_/xor/inc/dec, on global and shared arrays, 32 and 64 bits
    i = umd.grid(1)
    t = umd.threadIdx.x
    sh = umd.shared.array(4, u32)
    if t < 4:
        sh[t] = 0
    umd.syncthreads()
    if i < 96:
        umd.atomic.or_(flags, 0, u32(1) << u32(i % 32))
        umd.atomic.and_(flags, 1, ~(u32(1) << u32(i % 32)))
        umd.atomic.xor(flags, 2, u32(i))
        umd.atomic.or_(masks, i % 2, int64(1) << int64(i % 64))
        olds[i] = umd.atomic.inc(counters, 0, u32(9))
        umd.atomic.dec(counters, 1, u32(1000))
        umd.atomic.xor(wide, 0, uint64(i) << uint64(40))
        umd.atomic.inc(sh, 0, u32(1 << 30))
        umd.atomic.or_(sh, 1, u32(1) << u32(t % 32))
    umd.syncthreads()
    if t == 0:
        umd.atomic.add(counters, 2, sh[0])
        umd.atomic.or_(flags, 3, sh[1])


GAUSS5 = np.array([1.0, 4.0, 6.0, 4.0, 1.0], np.float32) / 16.0
LUT = np.arange(12, dtype=np.int64).reshape(3, 4) * 1000000007


@umd.jit
def smooth_const(x: f32[:], out: f32[:], lut_out: int64[:]):
    # Numba's cuda.const.array_like: a 5-tap filter and a 2-D table in constant memory
    weights = umd.const.array_like(GAUSS5)
    table = umd.const.array_like(LUT)
    i = umd.grid(1)
    if i < x.size:
        acc = f32(0.0)
        for k in range(5):
            j = min(max(i + k - 2, 0), x.size - 1)
            acc += weights[k] * x[j]
        out[i] = acc
        lut_out[i] = table[i % 3, i % 4] + i64(weights.size)
