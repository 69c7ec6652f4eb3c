"""Loop-invariant code motion (docs/umd-compiler.md 1).

A pure instruction inside a loop (its header, its body, or an `if` or region of the
body; not a load, whose memory the loop may write, nor a wave operation, whose value
depends on the lanes that run it) whose operands are all defined
outside the loop, and whose result is a temporary assigned once, computes the same
value on every iteration: it moves to just before the loop.  Inner loops go first, so
an invariant climbs out of every loop it does not depend on.  Pure instructions have
no effect but their result (integer division by zero gives the ISA's value, floats do
not trap), so running one when the loop would have skipped it changes nothing.
"""
from __future__ import annotations

from . import ir

_NOT_MOVED = {"load"} | ir.WAVE        # memory the loop may write; EXEC-dependent values


def hoist_loop_invariants(fn: ir.Function, only: set | None = None) -> bool:
    """Hoist what can be hoisted (``only``: of these instructions); whether any moved."""
    counts = ir.def_counts(fn.body)
    changed = False

    def movable(st, inside) -> bool:
        return (isinstance(st, ir.Inst) and (only is None or st in only)
                and st.op in ir.PURE and st.op not in _NOT_MOVED
                and st.dst is not None and not st.dst.local and st.dst.arg is None
                and counts.get(st.dst) == 1
                and all(not isinstance(a, ir.Var) or a not in inside for a in st.args))

    def take(block, inside, out):
        """Move the invariant instructions of block (and of its ifs and regions) to out."""
        keep = []
        for st in block:
            if movable(st, inside):
                out.append(st)
                inside.discard(st.dst)
                continue
            if isinstance(st, ir.If):
                take(st.then, inside, out)
                take(st.else_, inside, out)
            elif isinstance(st, ir.Region):
                take(st.body, inside, out)
            keep.append(st)
        block[:] = keep

    def visit(block):
        nonlocal changed
        i = 0
        while i < len(block):
            st = block[i]
            if isinstance(st, ir.If):
                visit(st.then)
                visit(st.else_)
            elif isinstance(st, ir.Region):
                visit(st.body)
            elif isinstance(st, ir.Loop):
                visit(st.body)
                inside = {s.dst for part in (st.header, st.body, st.latch)
                          for s in ir.walk(part) if isinstance(s, ir.Inst) and s.dst is not None}
                moved: list = []
                while True:
                    n = len(moved)
                    take(st.header, inside, moved)
                    take(st.body, inside, moved)
                    if len(moved) == n:
                        break
                if moved:
                    block[i:i] = moved
                    i += len(moved)
                    changed = True
            i += 1

    visit(fn.body)
    return changed
