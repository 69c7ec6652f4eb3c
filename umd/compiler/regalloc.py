"""Register allocation: linear scan over live intervals (docs/umd-compiler.md 6).

The program is numbered in textual order.  A temporary lives from its definition to
its last use.  A named variable that is live anywhere inside a loop lives across the
whole loop (its value flows around the back edge), and in divergent code a VGPR must
keep its old value in lanes that skip an assignment, so a variable keeps one register
for its whole interval.  Registers:
  s[0:1] kernarg pointer, s2..s5 scratch, s16..s18 workgroup ids (reserved);
  s6..s15 and s19..s103 allocatable (pointers take a pair, no alignment; a lane
  mask, lane_masks.py, takes one);
  v0..v2 thread ids, v3..v5 scratch (reserved); v6..v127 allocatable (64-bit values
  take a pair); a kernel with a 64-bit compare-and-swap reserves v6..v7 as well (its
  data and compare value go in v[4:7]).
Control-flow masks take SGPRs above the allocated ones during code generation.
Running out of registers is a compile error (there is no spilling).
"""
from __future__ import annotations

from . import ir
from .errors import KernelCompileError

SCRATCH_S = (2, 3, 4, 5)
SCRATCH_V = (3, 4, 5)
ALLOC_S = tuple(range(6, 16)) + tuple(range(19, 104))
ALLOC_V = tuple(range(6, 128))


def live_intervals(fn: ir.Function) -> dict:
    first: dict = {}
    last: dict = {}
    loops: list[tuple[int, int]] = []
    pos = 0

    def touch(v, p):
        if isinstance(v, ir.Var):
            first.setdefault(v, p)
            first[v] = min(first[v], p)
            last[v] = max(last.get(v, p), p)

    def visit(block):
        nonlocal pos
        for st in block:
            pos += 1
            if isinstance(st, ir.Inst):
                for u in st.uses():
                    touch(u, pos)
                if st.dst is not None:
                    touch(st.dst, pos)
            elif isinstance(st, ir.If):
                touch(st.cond, pos)
                visit(st.then)
                visit(st.else_)
                pos += 1
            elif isinstance(st, ir.Loop):
                start = pos
                visit(st.header)
                pos += 1
                touch(st.cond, pos)
                visit(st.body)
                visit(st.latch)
                pos += 1
                loops.append((start, pos))
            elif isinstance(st, ir.Region):
                visit(st.body)
                pos += 1

    visit(fn.body)
    for a in fn.args:                  # arguments are defined by the prologue
        if a in first:
            first[a] = 0
    changed = True
    while changed:
        changed = False
        for v in first:
            named = v.local or v.arg is not None
            for s, e in loops:
                if first[v] > e or last[v] < s or (first[v] <= s and last[v] >= e):
                    continue
                if first[v] < s:                # live into the loop: live through it
                    last[v] = e
                    changed = True
                elif named and last[v] < e or first[v] > s and named:
                    # assigned inside: the value may flow around the back edge
                    first[v], last[v] = min(first[v], s), max(last[v], e)
                    changed = True
    return {v: (first[v], last[v]) for v in first}


def allocate(fn: ir.Function) -> tuple[int, int]:
    """Set Var.reg for every live variable; returns (highest SGPR, highest VGPR) used."""
    intervals = live_intervals(fn)
    # Arguments first, in kernarg order: consecutive arguments get consecutive SGPRs,
    # which the prologue loads with one s_load_dwordx2/x4 (codegen.py).
    order = sorted(intervals, key=lambda v: (intervals[v][0], v.arg is None,
                                             v.arg.offset if v.arg is not None else v.id))
    scratch_v = SCRATCH_V + ((6, 7) if any(_is_cas64(st) for st in ir.walk(fn.body)) else ())
    free = {"s": list(ALLOC_S), "v": [r for r in ALLOC_V if r not in scratch_v]}
    active: list = []
    top = {"s": max(SCRATCH_S + (18,)), "v": max(scratch_v)}
    prev_arg = None     # the last scalar argument placed (kernarg order)
    for v in order:
        start, end = intervals[v]
        for a in list(active):
            if intervals[a][1] < start:
                active.remove(a)
                free[_file(a)].extend(_regs(a))
                free[_file(a)].sort()
        pool = free[_file(v)]
        width = ir.width(v.type)
        reg = _kernarg_slot(v, prev_arg, pool, width)
        for r in pool if reg is None else ():
            if all(r + k in pool for k in range(width)):
                reg = r
                break
        if reg is None:
            kind = "SGPRs" if _file(v) == "s" else "VGPRs"
            raise KernelCompileError(
                f"{fn.source_file}: {fn.name}: out of {kind}: too many values live at once "
                f"(no spilling; simplify the kernel or split it)")
        for k in range(width):
            pool.remove(reg + k)
        v.reg = reg
        top[_file(v)] = max(top[_file(v)], reg + width - 1)
        active.append(v)
        if v.arg is not None and v.cls == "s":
            prev_arg = v
    return top["s"], top["v"]


# Unused kernel arguments of at most this many dwords between two used ones keep their
# place in the SGPRs, so the prologue loads both with one wider s_load (codegen.py
# _kernarg_loads: saxpy's n, a, x, y and block_dim.x in one x8 and one x2 instead of
# an x4, an x2 and a dword). The skipped SGPRs are free afterwards.
KERNARG_GAP_DWORDS = 3


def _kernarg_slot(v, prev, pool: list[int], width: int) -> int | None:
    """The SGPR that keeps scalar argument `v` at its kernarg distance from `prev`
    (the argument placed before it), when that run of registers, gap included, is
    free; else None (the first free run is taken)."""
    if v.arg is None or v.cls != "s" or prev is None:
        return None
    end = prev.arg.offset + prev.arg.size
    gap = v.arg.offset - end
    if gap < 0 or gap % 4 or gap // 4 > KERNARG_GAP_DWORDS:
        return None
    first = prev.reg + ir.width(prev.type)
    reg = first + gap // 4
    return reg if all(r in pool for r in range(first, reg + width)) else None


def _file(v) -> str:
    """The register file of a value: lane masks (cls 'm', lane_masks.py) are SGPRs."""
    return "s" if v.cls == "m" else v.cls


def _is_cas64(st) -> bool:
    return (isinstance(st, ir.Inst) and st.op == "atomic" and st.kind == "cas"
            and isinstance(st.array, ir.Var) and st.array.type.elem.wide)


def _regs(v) -> list[int]:
    return [v.reg + k for k in range(ir.width(v.type))]
