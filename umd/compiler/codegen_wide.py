"""Code generation for the 64-bit types (i64, u64, f64): register pairs and the vISA's
64-bit operations (docs/isa.md 4.8, docs/umd-compiler.md 7).

A mixin of codegen.CodeGen.  Every 64-bit value is a VGPR pair (uniformity puts them
there); constants go to scratch pairs: s[2:3] and s[4:5] as the first two sources,
v[4:5] as a third.  What the ISA lacks is built from it here: `ne`/`gt`/`ge` compares
(a lane-mask andn2, swapped operands), the remainder (a - (a / b) * b), 64-bit
integer min/max (compare + two v_cndmask_b32), bitwise ops and selects (per half),
and the conversions between 32-bit integers and f64 (through an extended pair).
"""
from __future__ import annotations

from umd.types import PtrType, f32, f64, i32, i64, u32

from . import ir

_M32 = 0xFFFFFFFF
_SCRATCH_PAIRS = ("s[2:3]", "s[4:5]", "v[4:5]")
_F64_BIN = {"add": "v_add_f64", "sub": "v_sub_f64", "mul": "v_mul_f64", "div": "v_div_f64",
            "min": "v_min_f64", "max": "v_max_f64"}
_U64_BIN = {"add": "v_add_u64", "sub": "v_sub_u64", "mul": "v_mul_lo_u64"}
_F64_UNARY = {"floor": "v_floor_f64", "ceil": "v_ceil_f64", "trunc": "v_trunc_f64",
              "rndne": "v_rndne_f64", "sqrt": "v_sqrt_f64"}


def is_wide(x) -> bool:
    t = getattr(x, "type", None)
    return t is not None and not isinstance(t, PtrType) and t.wide


class Raw:
    """An operand spelled as is (vcc, one half of a pair, a scratch pair)."""

    def __init__(self, text: str) -> None:
        self.text = text


class WideCodeGen:
    """64-bit instructions; uses CodeGen's ins, op, reg and vector_cond."""

    # -- operands ------------------------------------------------------------------------
    def halves(self, x) -> tuple:
        """(lo, hi) of a 64-bit operand as 32-bit op() arguments."""
        if isinstance(x, ir.Const):
            bits = x.bits()
            return ir.Const(bits & _M32, u32), ir.Const(bits >> 32, u32)
        return Raw(f"v{x.reg}"), Raw(f"v{x.reg + 1}")

    def pair(self, x, slot: int) -> str:
        """A 64-bit source operand; a constant goes into scratch pair `slot`."""
        if not isinstance(x, ir.Const):
            return f"v[{x.reg}:{x.reg + 1}]"
        bits, where = x.bits(), _SCRATCH_PAIRS[slot]
        mov = "v_mov_b32" if where[0] == "v" else "s_mov_b32"
        first = 4 if where[0] == "v" else 2 + 2 * slot
        self.ins(f"{mov} {where[0]}{first}, {bits & _M32:#x}")
        self.ins(f"{mov} {where[0]}{first + 1}, {bits >> 32:#x}")
        return where

    def extend(self, x, signed: bool) -> str:
        """A 32-bit operand sign- or zero-extended into the scratch pair v[4:5]."""
        if isinstance(x, ir.Const):
            v = ir.wrap32(x.value, i32 if signed else u32)
            return self.pair(ir.const(v, i64), 2)
        self.op("v_mov_b32", "v4", x)
        if signed:
            self.ins("v_ashr_i32 v5, v4, 31")
        else:
            self.ins("v_mov_b32 v5, 0")
        return "v[4:5]"

    def two(self, mnemonic: str, dst, a, b=None) -> None:
        """A 32-bit operation applied to both halves (bitwise ops, moves)."""
        for k in range(2):
            args = [self.halves(a)[k]] + ([self.halves(b)[k]] if b is not None else [])
            self.op(mnemonic, f"v{dst.reg + k}", *args)

    # -- instructions --------------------------------------------------------------------
    def wide_inst(self, st: ir.Inst) -> None:
        op, d, a = st.op, st.dst, st.args
        t = d.type
        if op == "cvt":
            return self.wide_convert(d, a[0])
        if op in ("mov", "bitcast"):
            return self.two("v_mov_b32", d, a[0])
        dst = self.reg(d)
        if t == f64:
            if op in _F64_BIN:
                return self.ins(f"{_F64_BIN[op]} {dst}, {self.pair(a[0], 0)}, {self.pair(a[1], 1)}")
            if op in _F64_UNARY:
                return self.ins(f"{_F64_UNARY[op]} {dst}, {self.pair(a[0], 0)}")
            if op == "fma":
                srcs = [self.pair(x, k) for k, x in enumerate(a)]
                return self.ins(f"v_fma_f64 {dst}, {', '.join(srcs)}")
            if op in ("neg", "fabs"):
                lo, hi = self.halves(a[0])
                self.op("v_mov_b32", f"v{d.reg}", lo)
                if op == "neg":
                    return self.op("v_xor_b32", f"v{d.reg + 1}", hi, ir.Const(0x80000000, u32))
                return self.op("v_and_b32", f"v{d.reg + 1}", hi, ir.Const(0x7FFFFFFF, u32))
            raise AssertionError(f"no f64 form of {op}")
        signed = t.signed
        if op in _U64_BIN:
            return self.ins(f"{_U64_BIN[op]} {dst}, {self.pair(a[0], 0)}, {self.pair(a[1], 1)}")
        if op in ("and", "or", "xor"):
            return self.two(f"v_{op}_b32", d, a[0], a[1])
        if op == "not":
            return self.two("v_not_b32", d, a[0])
        if op in ("shl", "shr"):
            name = "v_lshl_b64" if op == "shl" else "v_ashr_i64" if signed else "v_lshr_b64"
            amount = self.halves(a[1])[0]
            self.op(name, dst, Raw(self.pair(a[0], 0)), amount)
            return None
        if op == "neg":
            return self.ins(f"v_sub_u64 {dst}, {self.pair(ir.const(0, t), 0)}, {self.pair(a[0], 1)}")
        if op in ("idiv", "rem"):
            div = "v_div_i64" if signed else "v_div_u64"
            x, y = self.pair(a[0], 0), self.pair(a[1], 1)
            if op == "idiv":
                return self.ins(f"{div} {dst}, {x}, {y}")
            self.ins(f"{div} v[4:5], {x}, {y}")
            self.ins(f"v_mul_lo_u64 v[4:5], v[4:5], {y}")
            return self.ins(f"v_sub_u64 {dst}, {x}, v[4:5]")
        if op in ("min", "max"):
            # D = (a < b) == (op is min) ? a : b
            cmp = "lt_i64" if signed else "lt_u64"
            self.ins(f"v_cmp_{cmp} vcc, {self.pair(a[0], 0)}, {self.pair(a[1], 1)}")
            first, second = (a[1], a[0]) if op == "min" else (a[0], a[1])
            for k in range(2):
                self.op("v_cndmask_b32", f"v{d.reg + k}", self.halves(first)[k],
                        self.halves(second)[k], Raw("vcc"))
            return None
        raise AssertionError(f"no 64-bit integer form of {op}")

    def wide_convert(self, d, x) -> None:
        """d = x converted, one of them 64-bit (docs/umd-compiler.md 2.3)."""
        t, s = d.type, x.type
        dst = self.reg(d)
        if t == f64:
            if s == f32:
                return self.op("v_cvt_f64_f32", dst, x)
            if s.wide:
                return self.ins(f"v_cvt_f64_{s.kind} {dst}, {self.pair(x, 0)}")
            return self.ins(f"v_cvt_f64_{'i64' if s.signed else 'u64'} {dst}, "
                            f"{self.extend(x, s.signed)}")
        if t.wide:                                  # to i64 / u64
            if s.wide and s.is_int:
                return self.two("v_mov_b32", d, x)
            if s == f64:
                return self.ins(f"v_cvt_{t.kind}_f64 {dst}, {self.pair(x, 0)}")
            if s == f32:
                self.op("v_cvt_f64_f32", "v[4:5]", x)
                return self.ins(f"v_cvt_{t.kind}_f64 {dst}, v[4:5]")
            self.op("v_mov_b32", f"v{d.reg}", x)
            if s.signed:
                return self.ins(f"v_ashr_i32 v{d.reg + 1}, v{d.reg}, 31")
            return self.ins(f"v_mov_b32 v{d.reg + 1}, 0")
        # a 64-bit source, a 32-bit destination
        if t == f32:
            return self.ins(f"v_cvt_f32_{s.kind} {dst}, {self.pair(x, 0)}")
        if s.is_int:
            return self.op("v_mov_b32", dst, self.halves(x)[0])        # the low half
        # f64 -> i32 / u32: the low half of the 64-bit conversion
        self.ins(f"v_cvt_{'i64' if t.signed else 'u64'}_f64 v[4:5], {self.pair(x, 0)}")
        return self.ins(f"v_mov_b32 {dst}, v4")

    def wide_compare(self, st: ir.Inst, mask: str) -> None:
        """A compare of 64-bit operands into the lane mask `mask` (vcc or an SGPR)."""
        a, b = st.args
        t = a.type
        kind = "f64" if t == f64 else "i64" if t.signed else "u64"
        op = st.op
        if op in ("gt", "ge"):
            a, b, op = b, a, {"gt": "lt", "ge": "le"}[op]
        if op in ("eq", "ne"):
            kind = "f64" if t == f64 else "i64"
        name = f"v_cmp_{'eq' if op == 'ne' else op}_{kind}"
        self.ins(f"{name} {mask}, {self.pair(a, 0)}, {self.pair(b, 1)}")
        if op == "ne":                              # not equal (f64: or unordered)
            self.ins(f"s_andn2_b32 {mask}, exec, {mask}")

    def wide_select(self, st: ir.Inst, fused=None) -> None:
        cond, a, b = st.args
        mask = self.vector_cond(cond, fused)
        for k in range(2):
            self.op("v_cndmask_b32", f"v{st.dst.reg + k}", self.halves(b)[k], self.halves(a)[k],
                    Raw(mask))

    def wide_memory(self, st: ir.Inst, arr, lds: bool, tail: str) -> None:
        """load/store/atomic of an 8-byte element; v3 holds the byte offset."""
        if st.op == "load":
            if not lds:
                return self.ins(f"global_load_dwordx2 {self.reg(st.dst)}, v3, {tail}")
            for k in range(2):
                self.ins(f"ds_read_b32 v{st.dst.reg + k}, v3, {arr.offset + 4 * k}")
            return None
        value = st.args[-1]
        if isinstance(value, ir.Const) or value.cls != "v":
            data = self.pair(value, 2)
        else:
            data = self.reg(value)
        if st.op == "store":
            if not lds:
                return self.ins(f"global_store_dwordx2 v3, {data}, {tail}")
            lo = int(data.strip("v[]").split(":")[0])
            for k in range(2):
                self.ins(f"ds_write_b32 v3, v{lo + k}, {arr.offset + 4 * k}")
            return None
        assert not lds, st.kind
        dst = self.reg(st.dst) if st.dst is not None else "off"
        elem = arr.type.elem
        if st.kind == "cas":             # v[4:7]: the new value, then the compare value
            for k, x in enumerate((st.args[2], st.args[1])):
                for h, half in enumerate(self.halves(x)):
                    self.op("v_mov_b32", f"v{4 + 2 * k + h}", half)
            return self.ins(f"global_atomic_cmpswap_b64 {dst}, v3, v[4:7], {tail}")
        if st.kind == "xchg":
            sfx = "b64"
        elif st.kind == "add":
            sfx = "f64" if elem == f64 else "u64"
        else:
            sfx = "f64" if elem == f64 else "i64" if elem == i64 else "u64"
        return self.ins(f"global_atomic_{st.kind}_{sfx} {dst}, v3, {data}, {tail}")

