"""IR optimisations: constant folding and propagation, dead-code elimination.

Folding computes exactly what the hardware would (docs/isa.md 3): 32-bit wrapping
integers, binary32 results rounded from double, the ISA's division-by-zero and
min/max NaN rules.  Anything whose result could differ (a libm call that raises in
Python) is left to run on the device.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from umd.types import bool_, f32, f64, i32, u32

from . import ir


def fold(op: str, t, args, src_type=None):
    """The constant result of `op` on Const args, or None when it is not folded."""
    vals = [a.value for a in args]
    at = args[0].type if args else t
    try:
        with np.errstate(all="ignore"):
            r = _fold(op, t, at, vals)
    except (OverflowError, ValueError, ZeroDivisionError):
        return None
    if r is None:
        return None
    return ir.const(r, t)


def _fold(op, t, at, v):
    if getattr(t, "wide", False) or getattr(at, "wide", False):
        return _fold_wide(op, t, at, v)
    if op == "mov":
        return v[0]
    if op == "select":
        return v[1] if v[0] else v[2]
    if op == "bitcast":
        if t == f32:
            return struct.unpack("<f", struct.pack("<I", v[0] & 0xFFFFFFFF))[0]
        return struct.unpack("<I", struct.pack("<f", v[0]))[0]
    if op == "fma":
        a, b, c = (float(np.float32(x)) for x in v)
        return ir.to_f32(a * b + c)
    if op == "mad" and not t.is_float:     # v_mad_u32: modulo 2^32, like mul and add
        return v[0] * v[1] + v[2]
    if op == "mad":
        a, b, c = (float(np.float32(x)) for x in v)
        return ir.to_f32(ir.to_f32(a * b) + c)
    if op == "cvt":
        x = v[0]
        if t == f32:
            return float(x & 0xFFFFFFFF if at == u32 else x)
        if at == f32:
            if math.isnan(x):
                return 0
            lo, hi = (-(1 << 31), (1 << 31) - 1) if t == i32 else (0, (1 << 32) - 1)
            return max(lo, min(hi, int(x))) if math.isfinite(x) else (hi if x > 0 else lo)
        return x
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        a, b = v
        if at == u32:
            a, b = a & 0xFFFFFFFF, b & 0xFFFFFFFF
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                "ge": a >= b}[op]
    if t == f32:
        return _fold_float(op, v)
    if t == bool_:
        a = v[0]
        if op == "lnot":
            return not a
        b = v[1]
        return {"and": a & b, "or": a | b, "xor": a ^ b}.get(op)
    return _fold_int(op, t, v)


def _fold_float(op, v):
    a = np.float32(v[0])
    if len(v) == 2:
        b = np.float32(v[1])
        if op in ("add", "sub", "mul", "div"):
            return ir.to_f32({"add": float(a) + float(b), "sub": float(a) - float(b),
                              "mul": float(a) * float(b),
                              "div": float(a / b)}[op])
        if op in ("min", "max"):
            if math.isnan(a):
                return float(b)
            if math.isnan(b):
                return float(a)
            return float(a if (a < b if op == "min" else a > b) else b)
        return None
    x = float(a)
    if op == "neg":
        return -x
    if op == "fabs":
        return abs(x)
    if op in ("floor", "ceil", "trunc", "rndne"):
        return float({"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rndne": np.rint}[op](a))
    if not math.isfinite(x):
        return None                     # libm special cases: leave them to the device
    fn = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "sin": math.sin,
          "cos": math.cos, "tanh": math.tanh, "exp2": lambda y: 2.0 ** y, "log2": math.log2,
          "rsqrt": lambda y: 1.0 / math.sqrt(y)}.get(op)
    return ir.to_f32(fn(x)) if fn else None


def _fold_wide(op, t, at, v):
    """Folding when a 64-bit type is involved (docs/isa.md 4.8): Python ints wrapped to
    64 bits, Python floats (binary64, as the hardware); the rest runs on the device."""
    if op in ("mov", "select"):
        return v[0] if op == "mov" else (v[1] if v[0] else v[2])
    if op == "bitcast":
        if t == f64:
            return struct.unpack("<d", struct.pack("<Q", v[0] & 0xFFFFFFFFFFFFFFFF))[0]
        return struct.unpack("<Q", struct.pack("<d", v[0]))[0]
    if op == "cvt":
        x = v[0]
        if t == f32 and at.is_int:        # one rounding, as v_cvt_f32_i64 (not via f64)
            return float(np.array(x, at.dtype).astype(np.float32))
        if t.is_float:
            return float(x)                 # f64 -> f32: const() rounds once
        if at.is_float:
            if not math.isfinite(x):
                return None
            bits = t.itemsize * 8
            lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if t.signed else (0, (1 << bits) - 1)
            return int(x) if lo <= int(x) <= hi else None
        return x
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        a, b = v
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
                "ge": a >= b}[op]
    if t == f64:
        if len(v) == 1:
            x = v[0]
            return {"neg": -x, "fabs": abs(x), "floor": float(np.floor(x)),
                    "ceil": float(np.ceil(x)), "trunc": float(np.trunc(x)),
                    "rndne": float(np.rint(x)),
                    "sqrt": math.sqrt(x) if x >= 0 else None}.get(op)
        if len(v) == 2 and op in ("add", "sub", "mul", "div"):
            a, b = v
            return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[op]
        return None
    if not t.is_int or t == bool_:
        return None
    a = v[0]
    if len(v) == 1:
        return {"neg": -a, "not": ~a}.get(op)
    b = v[1]
    if op in ("add", "sub", "mul", "and", "or", "xor", "min", "max"):
        return {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b,
                "xor": a ^ b, "min": min(a, b), "max": max(a, b)}[op]
    if op == "shl":
        return a << (b & 63)
    if op == "shr":
        return a >> (b & 63)                # a is already signed for i64, unsigned for u64
    return None                             # division: the device's rules (docs/isa.md 4.8)


def _fold_int(op, t, v):
    signed = t == i32
    a = v[0]
    if len(v) == 1:
        return {"neg": -a, "not": ~a}.get(op)
    b = v[1]
    ua, ub = a & 0xFFFFFFFF, b & 0xFFFFFFFF
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op in ("and", "or", "xor"):
        return {"and": ua & ub, "or": ua | ub, "xor": ua ^ ub}[op]
    if op == "shl":
        return ua << (ub & 31)
    if op == "shr":
        return (ir.wrap32(a, i32) if signed else ua) >> (ub & 31)
    if op in ("min", "max"):
        x, y = (ir.wrap32(a, i32), ir.wrap32(b, i32)) if signed else (ua, ub)
        return min(x, y) if op == "min" else max(x, y)
    if op in ("idiv", "rem"):
        if not signed:
            if ub == 0:
                return 0xFFFFFFFF if op == "idiv" else ua
            return ua // ub if op == "idiv" else ua % ub
        x, y = ir.wrap32(a, i32), ir.wrap32(b, i32)
        if y == 0:
            return -1 if op == "idiv" else x
        q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
        return q if op == "idiv" else x - q * y
    return None


# -- passes -----------------------------------------------------------------------------
def optimize(fn: ir.Function) -> None:
    for _ in range(16):
        changed = propagate_constants(fn)
        changed |= simplify_control(fn.body)
        changed |= eliminate_dead_code(fn)
        if not changed:
            break


def coalesce_moves(fn: ir.Function) -> bool:
    """`t = op ...; v = mov t` with t a temporary read only there becomes `v = op ...`
    (`acc += x` is one instruction instead of an add and a copy).  The two are adjacent,
    so nothing reads v in between."""
    counts = ir.def_counts(fn.body)
    uses: dict = {}
    for st in ir.walk(fn.body):
        refs = st.uses() if isinstance(st, ir.Inst) else (
            [st.cond] if isinstance(st, (ir.If, ir.Loop)) else [])
        for r in refs:
            if isinstance(r, ir.Var):
                uses[r] = uses.get(r, 0) + 1
    changed = False

    def visit(block):
        nonlocal changed
        out = []
        for st in block:
            prev = out[-1] if out else None
            if isinstance(st, ir.Inst) and st.op == "mov" and isinstance(st.args[0], ir.Var) \
                    and isinstance(prev, ir.Inst) and prev.dst is st.args[0] \
                    and prev.op in ir.PURE and not prev.dst.local and prev.dst.arg is None \
                    and counts.get(prev.dst) == 1 and uses.get(prev.dst) == 1 \
                    and prev.dst.type == st.dst.type and st.dst.arg is None:
                prev.dst = st.dst
                changed = True
                continue
            for sub in ir.sub_blocks(st):
                visit(sub)
            out.append(st)
        block[:] = out

    visit(fn.body)
    return changed


def _subst(x, consts):
    return consts.get(x, x) if isinstance(x, ir.Var) else x


def propagate_constants(fn: ir.Function) -> bool:
    """Fold instructions on constants; a local assigned once, at the top level, or a
    temporary assigned once anywhere, to a constant (or a hardware id such as
    thread_idx.x: copy propagation) is that value everywhere (its definition precedes
    every use)."""
    defs: dict[ir.Var, int] = {}
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst) and st.dst is not None:
            defs[st.dst] = defs.get(st.dst, 0) + 1
    consts = {}
    for st in fn.body:
        if isinstance(st, ir.Inst) and st.op == "mov" and \
                isinstance(st.args[0], (ir.Const, ir.Special)) \
                and defs.get(st.dst) == 1 and st.dst.arg is None:
            consts[st.dst] = st.args[0]
    # A temporary is read only after its one definition, wherever that is (a local
    # assigned inside a loop may be read before it on the next iteration).
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst) and st.op == "mov" and \
                isinstance(st.args[0], (ir.Const, ir.Special)) and not st.dst.local \
                and defs.get(st.dst) == 1 and st.dst.arg is None:
            consts[st.dst] = st.args[0]
    changed = False

    def visit(block):
        nonlocal changed
        for st in block:
            if isinstance(st, ir.Inst):
                new = [_subst(a, consts) for a in st.args]
                if new != st.args:
                    st.args, changed = new, True
                if st.op == "select" and isinstance(st.args[0], ir.Const):
                    st.op, st.args, changed = "mov", [st.args[1] if st.args[0].value else st.args[2]], True
                if st.op in ir.PURE and st.op not in ("mov", "load") and st.args and \
                        all(isinstance(a, ir.Const) for a in st.args):
                    r = fold(st.op, st.dst.type, st.args)
                    if r is not None:
                        st.op, st.args, changed = "mov", [r], True
            elif isinstance(st, ir.If):
                c = _subst(st.cond, consts)
                changed |= c is not st.cond
                st.cond = c
                visit(st.then)
                visit(st.else_)
            elif isinstance(st, ir.Loop):
                visit(st.header)
                c = _subst(st.cond, consts)
                changed |= c is not st.cond
                st.cond = c
                visit(st.body)
                visit(st.latch)
            elif isinstance(st, ir.Region):
                visit(st.body)

    visit(fn.body)
    return changed


def simplify_control(block: list) -> bool:
    """Inline ifs on constants, drop statements after break/continue/return."""
    changed = False
    out = []
    for st in block:
        if isinstance(st, ir.If):
            changed |= simplify_control(st.then) | simplify_control(st.else_)
            if isinstance(st.cond, ir.Const):
                out.extend(st.then if st.cond.value else st.else_)
                changed = True
                continue
        elif isinstance(st, ir.Loop):
            changed |= simplify_control(st.header) | simplify_control(st.body) | \
                simplify_control(st.latch)
            if isinstance(st.cond, ir.Const) and not st.cond.value:
                out.extend(st.header)
                changed = True
                continue
        elif isinstance(st, ir.Region):
            changed |= simplify_control(st.body)
            changed |= _strip_tail_exits(st.body, st)
            if not any(isinstance(s, ir.Exit) and s.region is st for s in ir.walk(st.body)):
                out.extend(st.body)             # nothing leaves it early: a plain block
                changed = True
                continue
        out.append(st)
        if isinstance(st, (ir.Break, ir.Continue, ir.Return, ir.Exit)):
            changed |= len(out) < len(block) and block.index(st) < len(block) - 1
            break
    block[:] = out
    return changed


def _strip_tail_exits(block: list, region: ir.Region) -> bool:
    """Drop the Exits of `region` that are the last thing it runs anyway (`return x` at
    the end of a device function, or at the end of both sides of a final if/else)."""
    if not block:
        return False
    last = block[-1]
    if isinstance(last, ir.Exit) and last.region is region:
        block.pop()
        return True
    if isinstance(last, ir.If):
        return _strip_tail_exits(last.then, region) | _strip_tail_exits(last.else_, region)
    return False


def eliminate_dead_code(fn: ir.Function) -> bool:
    used: set = set()
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst):
            used.update(st.uses())
        elif isinstance(st, (ir.If, ir.Loop)) and isinstance(st.cond, ir.Var):
            used.add(st.cond)
    changed = False

    def visit(block):
        nonlocal changed
        out = []
        for st in block:
            if isinstance(st, ir.Inst):
                if st.dst is not None and st.dst not in used:
                    if st.op in ir.PURE:
                        changed = True
                        continue
                    st.dst, changed = None, True
            elif isinstance(st, ir.If):
                visit(st.then)
                visit(st.else_)
                if not st.then and not st.else_:
                    changed = True
                    continue
            elif isinstance(st, ir.Loop):
                for sub in ir.sub_blocks(st):
                    visit(sub)
            elif isinstance(st, ir.Region):
                visit(st.body)
                if not st.body:
                    changed = True
                    continue
            out.append(st)
        block[:] = out

    visit(fn.body)
    return changed
