"""Uniformity analysis: which values live in scalar registers (docs/umd-compiler.md 5).

A value is uniform when every lane of a wave has the same one: it depends only on
arguments, block_idx, block_dim, grid_dim and constants, through integer operations
the scalar ALU has, and it is assigned under uniform control only.  Those go in SGPRs
(`Var.cls = 's'`); everything else in VGPRs ('v'):
  - thread_idx, loads, atomics, float arithmetic (there is no scalar float ALU) and
    the wave operations of ir.WAVE / ir.BITS (scalar_capable says no) are vector
    values, and so is anything computed from a vector value;
  - 64-bit values (i64, u64, f64) are vector values, kernel arguments too: the vISA's
    64-bit operations are VALU ones (docs/isa.md 4.8);
  - a variable assigned inside an `if` whose condition is a vector value, or inside a
    divergent loop, is a vector value (lanes that skip the assignment keep the old one);
  - a loop is divergent when its condition is a vector value, when a break, continue or
    return inside it (or the exit of an enclosing region) sits under a vector condition,
    or when the loop itself is in divergent code.  Divergent loops run under an EXEC
    mask; uniform ones branch on SCC;
  - a region (an inlined device function) is divergent when one of its exits (`return`)
    sits under a vector condition or in a divergent loop, or when it is in divergent
    code: lanes that left it wait, masked off, for its end.
Computed as a fixed point: demoting a value can make conditions, loops and further
values divergent.
"""
from __future__ import annotations

from umd.types import PtrType, f32

from . import ir
from .errors import KernelCompileError

_SCALAR_INT_OPS = {"mov", "add", "sub", "mul", "and", "or", "xor", "shl", "shr", "min",
                   "max", "neg", "not", "lnot", "eq", "ne", "lt", "le", "gt", "ge", "select"}


def is_vector(x) -> bool:
    if isinstance(x, ir.Var):
        return x.cls in ("v", "m")          # 'm': a lane mask (lane_masks.py)
    if isinstance(x, ir.Special):
        return x.cls == "v"
    return False


def _wide(t) -> bool:
    return not isinstance(t, PtrType) and t is not None and t.wide


def scalar_capable(inst: ir.Inst) -> bool:
    if _wide(inst.dst.type) or any(_wide(getattr(a, "type", None)) for a in inst.args):
        return False
    if inst.op == "mov":
        return True
    if inst.op == "cvt":
        return inst.dst.type != f32 and inst.args[0].type != f32
    if inst.op not in _SCALAR_INT_OPS:
        return False
    if inst.dst.type == f32:
        return False
    return all(getattr(a, "type", None) != f32 for a in inst.args)


def analyze(fn: ir.Function) -> None:
    for v in _all_vars(fn):
        v.cls = "v" if _wide(v.type) else "s"
    changed = True
    while changed:
        changed = False

        def demote(v):
            nonlocal changed
            if v.cls != "v":
                if isinstance(v.type, PtrType):
                    raise KernelCompileError(f"{fn.source_file}: {fn.name}: pointer "
                                             f"{v.name!r} would not be uniform")
                v.cls, changed = "v", True

        def visit(block, div):
            nonlocal changed
            for st in block:
                if isinstance(st, ir.Inst):
                    if st.dst is not None and (div or not scalar_capable(st) or
                                               any(is_vector(a) for a in st.args)):
                        demote(st.dst)
                elif isinstance(st, ir.If):
                    d = div or is_vector(st.cond)
                    visit(st.then, d)
                    visit(st.else_, d)
                elif isinstance(st, ir.Loop):
                    new = div or is_vector(st.cond) or _divergent_escape(st.body, False, 0)
                    if new != st.divergent:
                        st.divergent, changed = new, True
                    visit(st.header, st.divergent)
                    visit(st.body, st.divergent)
                    visit(st.latch, st.divergent)
                elif isinstance(st, ir.Region):
                    new = div or _divergent_exit(st.body, st, False)
                    if new != st.divergent:
                        st.divergent, changed = new, True
                    visit(st.body, st.divergent)

        visit(fn.body, False)


def _divergent_escape(block, under, depth, inner=frozenset()) -> bool:
    """A break/continue of this loop (depth 0), a return, or the exit of a region that
    encloses the loop (not in `inner`), under a vector condition."""
    for st in block:
        if isinstance(st, (ir.Break, ir.Continue)) and depth == 0 and under:
            return True
        if isinstance(st, ir.Return) and under:
            return True
        if isinstance(st, ir.Exit) and under and st.region not in inner:
            return True
        if isinstance(st, ir.If):
            u = under or is_vector(st.cond)
            if _divergent_escape(st.then, u, depth, inner) or _divergent_escape(st.else_, u, depth, inner):
                return True
        elif isinstance(st, ir.Loop):
            u = under or st.divergent
            if any(_divergent_escape(b, u, depth + 1, inner) for b in (st.header, st.body, st.latch)):
                return True
        elif isinstance(st, ir.Region):
            if _divergent_escape(st.body, under, depth, inner | {st}):
                return True
    return False


def _divergent_exit(block, region, under) -> bool:
    """An Exit of `region` under a vector condition or inside a divergent loop."""
    for st in block:
        if isinstance(st, ir.Exit) and st.region is region and under:
            return True
        if isinstance(st, ir.If):
            u = under or is_vector(st.cond)
            if _divergent_exit(st.then, region, u) or _divergent_exit(st.else_, region, u):
                return True
        elif isinstance(st, ir.Loop):
            u = under or st.divergent
            if any(_divergent_exit(b, region, u) for b in (st.header, st.body, st.latch)):
                return True
        elif isinstance(st, ir.Region):
            if _divergent_exit(st.body, region, under or st.divergent):
                return True
    return False


def has_divergent_return(block, under=False) -> bool:
    for st in block:
        if isinstance(st, ir.Return) and under:
            return True
        if isinstance(st, ir.If):
            u = under or is_vector(st.cond)
            if has_divergent_return(st.then, u) or has_divergent_return(st.else_, u):
                return True
        elif isinstance(st, ir.Loop):
            u = under or st.divergent
            if any(has_divergent_return(b, u) for b in (st.header, st.body, st.latch)):
                return True
        elif isinstance(st, ir.Region):
            if has_divergent_return(st.body, under or st.divergent):
                return True
    return False


def _all_vars(fn: ir.Function) -> set:
    out = set(fn.args)
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst):
            out.update(st.uses())
            if st.dst is not None:
                out.add(st.dst)
        elif isinstance(st, (ir.If, ir.Loop)) and isinstance(st.cond, ir.Var):
            out.add(st.cond)
    return out
