"""The 64-bit vISA operations in the reference executor (docs/isa.md 4.8).

`WideOps` is a mixin of kmd/hw/cu_ref.py's dispatch: one method per opcode, values are
Python ints holding the 64 bits of a register pair (`lo | hi << 32`).  The functions
below define the arithmetic bit for bit; the Cython core (kmd/hw/_cu_wide.pxi) must
agree with them (tests/hw/test_cu_differential.py).

Float rules, as the 32-bit ones (docs/isa.md 3): IEEE binary64 with round to nearest
even; every NaN a float operation produces is CANONICAL_NAN64; min/max return the other
operand when one is NaN.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

from kmd.hw import compute as C
from vgpu import isa as I

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
_D = struct.Struct("<d")
_Q = struct.Struct("<Q")


def f64_bits(x: float) -> int:
    """The bits of a double; NaN canonical."""
    if x != x:
        return I.CANONICAL_NAN64
    return _Q.unpack(_D.pack(x))[0]


def bits_f64(u: int) -> float:
    return _D.unpack(_Q.pack(u & M64))[0]


def s64(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def binary_f64(name: str, a: int, b: int) -> int:
    x, y = bits_f64(a), bits_f64(b)
    if name == "v_add_f64":
        return f64_bits(x + y)
    if name == "v_sub_f64":
        return f64_bits(x - y)
    if name == "v_mul_f64":
        return f64_bits(x * y)
    if y == 0:                              # v_div_f64: IEEE x / ±0
        if x == 0 or x != x:
            return I.CANONICAL_NAN64
        return f64_bits(math.copysign(math.inf, x) * math.copysign(1.0, y))
    return f64_bits(x / y)


def min_f64(a: int, b: int) -> int:
    x, y = bits_f64(a), bits_f64(b)
    r = b if x != x else a if y != y else (a if x < y else b)
    return I.CANONICAL_NAN64 if bits_f64(r) != bits_f64(r) else r


def max_f64(a: int, b: int) -> int:
    x, y = bits_f64(a), bits_f64(b)
    r = b if x != x else a if y != y else (a if x > y else b)
    return I.CANONICAL_NAN64 if bits_f64(r) != bits_f64(r) else r


def fma_f64(a: int, b: int, c: int) -> int:
    """a * b + c with one rounding (C's fma())."""
    x, y, z = bits_f64(a), bits_f64(b), bits_f64(c)
    if not (math.isfinite(x) and math.isfinite(y)):
        return f64_bits(x * y + z)          # the product is inf or NaN exactly
    if not math.isfinite(z):
        return f64_bits(z)                  # a finite product cannot cancel inf
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        # IEEE: an exact zero sum is +0, unless both terms are zeros of sign -
        prod_neg = (math.copysign(1.0, x) * math.copysign(1.0, y)) < 0
        both_neg = x * y == 0 and prod_neg and math.copysign(1.0, z) < 0
        return f64_bits(-0.0 if both_neg else 0.0)
    try:
        return f64_bits(float(exact))       # int / int true division: correctly rounded
    except OverflowError:
        return f64_bits(math.inf if exact > 0 else -math.inf)


def _libm(fn, x: float) -> float:
    try:
        return fn(x)
    except ValueError:
        return math.nan


def unary_f64(name: str, a: int) -> int:
    """v_sqrt/floor/ceil/trunc/rndne_f64 (the roundings keep ±0 and ±inf)."""
    x = bits_f64(a)
    if x != x:
        return I.CANONICAL_NAN64
    if name == "v_sqrt_f64":
        return f64_bits(_libm(math.sqrt, x))
    if math.isinf(x) or x == 0:
        return a
    r = {"v_floor_f64": math.floor, "v_ceil_f64": math.ceil, "v_trunc_f64": math.trunc,
         "v_rndne_f64": round}[name](x)
    return f64_bits(math.copysign(float(r), x))


def int_to_f32(n: int) -> int:
    """An integer rounded to binary32 in one step (nearest even), as C's (float)n."""
    m = abs(n)
    shift = m.bit_length() - 24
    if shift > 0:
        q, r = divmod(m, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        m = q << shift
    return C.f32_bits(float(-m if n < 0 else m))    # exact: at most 24 significant bits


def cvt_i64_f64(a: int) -> int:
    x = bits_f64(a)
    if x != x:
        return 0
    if x >= 9223372036854775808.0:
        return (1 << 63) - 1
    if x <= -9223372036854775808.0:
        return 1 << 63
    return int(x) & M64


def cvt_u64_f64(a: int) -> int:
    x = bits_f64(a)
    if x != x or x <= -1.0:
        return 0
    if x >= 18446744073709551616.0:
        return M64
    return int(x) & M64


def div_u64(a: int, b: int) -> int:
    return a // b if b else M64


def div_i64(a: int, b: int) -> int:
    x, y = s64(a), s64(b)
    if y == 0:
        return M64                          # -1, as v_div_i32
    if x == -(1 << 63) and y == -1:
        return a
    q = abs(x) // abs(y)
    return (q if (x < 0) == (y < 0) else -q) & M64


def _cmp(name: str, a: int, b: int) -> bool:
    t = name[-3:]
    if t == "i64":
        a, b = s64(a), s64(b)
    elif t == "f64":
        a, b = bits_f64(a), bits_f64(b)
    c = name.split("_")[2]
    return a == b if c == "eq" else a < b if c == "lt" else a <= b


# name -> f(a, b) on 64-bit values (shifts: b is the 32-bit amount).
BINARY = {
    "v_min_f64": min_f64, "v_max_f64": max_f64,
    "v_add_u64": lambda a, b: a + b & M64, "v_sub_u64": lambda a, b: a - b & M64,
    "v_mul_lo_u64": lambda a, b: a * b & M64, "v_div_u64": div_u64, "v_div_i64": div_i64,
    "v_lshl_b64": lambda a, b: a << (b & 63) & M64, "v_lshr_b64": lambda a, b: a >> (b & 63),
    "v_ashr_i64": lambda a, b: s64(a) >> (b & 63) & M64,
}
for _n in ("v_add_f64", "v_sub_f64", "v_mul_f64", "v_div_f64"):
    BINARY[_n] = (lambda n: lambda a, b: binary_f64(n, a, b))(_n)

# name -> f(a) -> result; a is 64 bits unless the source is 32-bit (f64_f32).
UNARY = {
    "v_cvt_f64_f32": lambda a: f64_bits(C.bits_f32(a)),
    "v_cvt_f32_f64": lambda a: C.f32_bits(bits_f64(a)),
    "v_cvt_f64_i64": lambda a: f64_bits(float(s64(a))),      # int -> float rounds to nearest
    "v_cvt_f64_u64": lambda a: f64_bits(float(a)),
    "v_cvt_i64_f64": cvt_i64_f64, "v_cvt_u64_f64": cvt_u64_f64,
    "v_cvt_f32_i64": lambda a: int_to_f32(s64(a)), "v_cvt_f32_u64": int_to_f32,
}
for _n in ("v_sqrt_f64", "v_floor_f64", "v_ceil_f64", "v_trunc_f64", "v_rndne_f64"):
    UNARY[_n] = (lambda n: lambda a: unary_f64(n, a))(_n)

ATOMIC = {"global_atomic_add_u64": lambda m, d, c: m + d & M64,
          "global_atomic_add_f64": lambda m, d, c: binary_f64("v_add_f64", m, d),
          "global_atomic_max_i64": lambda m, d, c: m if s64(m) > s64(d) else d,
          "global_atomic_max_u64": lambda m, d, c: max(m, d),
          "global_atomic_max_f64": lambda m, d, c: max_f64(m, d),
          "global_atomic_min_i64": lambda m, d, c: m if s64(m) < s64(d) else d,
          "global_atomic_min_u64": lambda m, d, c: min(m, d),
          "global_atomic_min_f64": lambda m, d, c: min_f64(m, d),
          "global_atomic_xchg_b64": lambda m, d, c: d,
          # v[n:n+3]: the data, then the compare value (GCN's GLOBAL_ATOMIC_CMPSWAP_X2)
          "global_atomic_cmpswap_b64": lambda m, d, c: d if m == c else m}


class WideOps:
    """op_<name> for every 64-bit opcode; mixed into cu_ref's _Dispatch."""

    def read64(self, w, c: int) -> list[int]:
        """Lane values of a 64-bit source: a VGPR pair, or an SGPR pair broadcast."""
        if c >= I.OPR_VGPR:
            lo, hi = w.v[c - I.OPR_VGPR], w.v[c - I.OPR_VGPR + 1]
            return [lo[l] | hi[l] << 32 for l in range(I.WAVE_SIZE)]
        return [w.s[c] | w.s[c + 1] << 32] * I.WAVE_SIZE

    @staticmethod
    def write64(w, c: int, lane: int, value: int) -> None:
        r = c - I.OPR_VGPR
        w.v[r][lane], w.v[r + 1][lane] = value & M32, value >> 32 & M32

    def wide(self, w, info, i):
        name = info.name
        lanes = [l for l in range(I.WAVE_SIZE) if w.exec >> l & 1]
        src_kind = info.operands[1][1]
        a = self.read64(w, i.src0) if src_kind == I.K_VSRC2 else self.vread(w, i.src0, i.imm)
        if name.startswith("v_cmp_"):
            b = self.read64(w, i.src1)
            mask = 0
            for l in lanes:
                mask |= int(_cmp(name, a[l], b[l])) << l
            self.swrite(w, i.dst, mask)
            return None
        if name == "v_fma_f64":
            b, c = self.read64(w, i.src1), self.read64(w, i.src2)
            out = {l: fma_f64(a[l], b[l], c[l]) for l in lanes}
        elif name in BINARY:
            b = self.read64(w, i.src1) if info.operands[2][1] == I.K_VSRC2 else \
                self.vread(w, i.src1, i.imm)
            fn = BINARY[name]
            out = {l: fn(a[l], b[l]) for l in lanes}
        else:
            fn = UNARY[name]
            out = {l: fn(a[l]) for l in lanes}
        if info.operands[0][1] == I.K_VDST:
            dst = w.v[i.dst - I.OPR_VGPR]
            for l, value in out.items():
                dst[l] = value & M32
        else:
            for l, value in out.items():
                self.write64(w, i.dst, l, value)
        return None

    def wide_load(self, w, i):
        values = {}
        for l in [l for l in range(I.WAVE_SIZE) if w.exec >> l & 1]:
            addr = self.gaddr(w, i, l)
            self._aligned(addr, 8, "read")
            values[l] = _Q.unpack(self.pt_read(addr, 8))[0]
        for l, value in values.items():
            self.write64(w, i.dst, l, value)

    def wide_store(self, w, i):
        data = self.read64(w, i.data)
        for l in [l for l in range(I.WAVE_SIZE) if w.exec >> l & 1]:
            addr = self.gaddr(w, i, l)
            self._aligned(addr, 8, "write")
            self.pt_write(addr, _Q.pack(data[l]))

    def wide_atomic(self, w, info, i):
        fn = ATOMIC[info.name]
        data = self.read64(w, i.data)
        cmp = self.read64(w, i.data + 2) if info.name.endswith("cmpswap_b64") else data
        for l in [l for l in range(I.WAVE_SIZE) if w.exec >> l & 1]:
            addr = self.gaddr(w, i, l)
            self._aligned(addr, 8, "read")
            self.check_atomic(addr)
            old = _Q.unpack(self.pt_read(addr, 8))[0]
            self.pt_write(addr, _Q.pack(fn(old, data[l], cmp[l])))
            if i.dst != I.OPR_OFF:
                self.write64(w, i.dst, l, old)


def install(dispatch_cls) -> None:
    """op_<name> methods on the dispatch class for every 64-bit opcode."""
    for info in I.OPCODES:
        name = info.name
        if name == "global_load_dwordx2":
            impl = lambda self, w, i: self.wide_load(w, i)              # noqa: E731
        elif name == "global_store_dwordx2":
            impl = lambda self, w, i: self.wide_store(w, i)             # noqa: E731
        elif name in ATOMIC:
            impl = (lambda n: lambda self, w, i: self.wide_atomic(w, n, i))(info)
        elif name in BINARY or name in UNARY or name == "v_fma_f64" or \
                (name.startswith("v_cmp_") and name[-2:] == "64"):
            impl = (lambda n: lambda self, w, i: self.wide(w, n, i))(info)
        else:
            continue
        setattr(dispatch_cls, "op_" + name, impl)


__all__ = ["WideOps", "install"]
