"""Full unrolling of small loops with a constant trip count (docs/umd-compiler.md 1).

A `for v in range(A, B, S)` whose bounds and step are constants after folding, whose
counter the body does not assign, and whose body has no `break`, `continue`, `return`
or device-function return, is replaced by one copy of the body per iteration with the
counter a constant in each.  The copies are what the loop would run, in the same
order, so results are bit-identical; what goes away is the counter, the compare and
the branches, and the constant counter folds into the addresses of the body
(`a_tile[ty, kk]` becomes a fixed offset, compiler/addressing.py).  Only loops whose
copies stay small are unrolled (MAX_TRIPS iterations, MAX_INSTS instructions in all).
Temporaries of the body are renamed in each copy, so each is still assigned once.
"""
from __future__ import annotations

import copy

from umd.types import u32

from . import ir

MAX_TRIPS = 32
MAX_INSTS = 512

_CMP = {"lt": lambda a, b: a < b, "gt": lambda a, b: a > b,
        "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b, "ne": lambda a, b: a != b}


def unroll_loops(fn: ir.Function) -> bool:
    """Unroll every eligible loop, innermost first; True when one was."""
    state = {"next": ir.next_var_id(fn), "changed": False}
    _visit(fn.body, state)
    return state["changed"]


def _visit(block: list, state) -> None:
    i = 0
    while i < len(block):
        st = block[i]
        if isinstance(st, ir.If):
            _visit(st.then, state)
            _visit(st.else_, state)
        elif isinstance(st, ir.Region):
            _visit(st.body, state)
        elif isinstance(st, ir.Loop):
            _visit(st.body, state)
            copies = _unrolled(block, i, st, state)
            if copies is not None:
                block[i:i + 1] = copies
                state["changed"] = True
                i += len(copies)
                continue
        i += 1


def _trips(block: list, i: int, loop: ir.Loop):
    """(counter, values it takes, value after the loop), or None when the loop is not a
    counted range loop with constant bounds (the frontend's shape: `ctr = mov start`
    right before the loop, `cond = cmp ctr, end` as the header, `ctr = add ctr, step`
    as the latch)."""
    if i == 0 or len(loop.header) != 1 or len(loop.latch) != 1:
        return None
    init, test, step = block[i - 1], loop.header[0], loop.latch[0]
    if not (isinstance(init, ir.Inst) and init.op == "mov" and isinstance(init.args[0], ir.Const)):
        return None
    ctr = init.dst
    if not (isinstance(ctr, ir.Var) and ctr.local and isinstance(test, ir.Inst)
            and test.op in _CMP and test.dst is loop.cond and test.args[0] is ctr
            and isinstance(test.args[1], ir.Const) and isinstance(step, ir.Inst)
            and step.op == "add" and step.dst is ctr and step.args[0] is ctr
            and isinstance(step.args[1], ir.Const)):
        return None
    t = ctr.type
    if t not in (ir.i32, u32):
        return None
    signed = t != u32

    def val(c):
        return ir.wrap32(c.value, ir.i32) if signed else c.value & 0xFFFFFFFF

    v, end, inc = val(init.args[0]), val(test.args[1]), step.args[1].value
    values = []
    while _CMP[test.op](v, end):
        if len(values) == MAX_TRIPS:
            return None
        values.append(v)
        v = val(ir.Const(v + inc, t))
    return ctr, values, v


def _unrolled(block: list, i: int, loop: ir.Loop, state) -> list | None:
    found = _trips(block, i, loop)
    if found is None:
        return None
    ctr, values, final = found
    body_insts = sum(1 for st in ir.walk(loop.body) if isinstance(st, ir.Inst))
    if body_insts * len(values) > MAX_INSTS:
        return None
    for st in ir.walk(loop.body):
        if isinstance(st, (ir.Break, ir.Continue, ir.Return, ir.Exit, ir.Region)):
            return None
        if isinstance(st, ir.Inst) and st.dst is ctr:
            return None
    temps = {st.dst for st in ir.walk(loop.body) if isinstance(st, ir.Inst)
             and st.dst is not None and not st.dst.local and st.dst.arg is None}
    out = []
    for v in values:
        subst = {ctr: ir.Const(v, ctr.type)}
        for tmp in temps:
            subst[tmp] = ir.Var(tmp.name, tmp.type, state["next"])
            state["next"] += 1
        out.extend(_copy_block(loop.body, subst))
    # Python leaves the counter at its last value; the loop left it one step further.
    # Keep what the loop did (dead-code elimination drops it when nothing reads it).
    out.append(ir.Inst("mov", ctr, [ir.Const(final, ctr.type)], loop.line))
    return out


def _copy_block(block: list, subst: dict) -> list:
    out = []
    for st in block:
        if isinstance(st, ir.Inst):
            c = copy.copy(st)
            c.args = [subst.get(a, a) if isinstance(a, ir.Var) else a for a in st.args]
            c.dst = subst.get(st.dst, st.dst) if st.dst is not None else None
            c.array = subst.get(st.array, st.array) if isinstance(st.array, ir.Var) else st.array
            out.append(c)
        elif isinstance(st, ir.If):
            out.append(ir.If(_sub(st.cond, subst), _copy_block(st.then, subst),
                             _copy_block(st.else_, subst), st.line))
        elif isinstance(st, ir.Loop):
            out.append(ir.Loop(_copy_block(st.header, subst), _sub(st.cond, subst),
                               _copy_block(st.body, subst), _copy_block(st.latch, subst),
                               st.line))
        else:
            raise AssertionError(f"unexpected {type(st).__name__} in an unrolled loop")
    return out


def _sub(x, subst):
    return subst.get(x, x) if isinstance(x, ir.Var) else x
