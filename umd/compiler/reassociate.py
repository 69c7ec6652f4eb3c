"""Reassociation of 32-bit integer adds in loops, so their invariant part leaves the
loop (docs/umd-compiler.md 1).

`a[row * k + k0 + tx]` parses as `((row * k) + k0) + tx`: two adds per iteration,
though only k0 changes. With `x = add p, v` and `d = add x, q`, where p and q are
loop-invariant and v is not, this pass rewrites them as `x = add p, q` (invariant:
licm.py then moves it out) and `d = add x, v`: one add per iteration. Chains of more
invariant terms fold one step at a time, each rewritten x counting as invariant.

Exact for every input: 32-bit adds wrap modulo 2^32 (docs/isa.md 4.2), and addition
modulo 2^32 is associative and commutative, so `d` gets the same bits whatever the
signs and whatever the intermediate sums overflow to. Address lowering
(addressing.py) has already made the index a 32-bit byte offset, `shl d, 2`, added
to the 64-bit base by the memory instruction; `d` does not change, so neither does
the address. Only adds of i32 / u32 values; x must be a temporary assigned once and
read only by `d`, both in the same statement list, and v not reassigned between them
(so `d` reads the v that x read).

Runs after address lowering, CSE and a first loop-invariant code motion (which has
moved out the invariant terms, `row * k`), then licm.py runs again.
"""
from __future__ import annotations

from umd.types import i32, u32

from . import ir

_INT32 = (i32, u32)


def reassociate_loop_adds(fn: ir.Function) -> int:
    """Rewrite the add pairs described above in every loop; returns how many."""
    counts = ir.def_counts(fn.body)
    uses: dict = {}
    for st in ir.walk(fn.body):
        reads = st.uses() if isinstance(st, ir.Inst) else [getattr(st, "cond", None)]
        for v in reads:
            if isinstance(v, ir.Var):
                uses[v] = uses.get(v, 0) + 1
    done = 0

    def visit(block):
        nonlocal done
        for st in block:
            if isinstance(st, ir.Loop):
                inside = {s.dst for part in (st.header, st.body, st.latch)
                          for s in ir.walk(part) if isinstance(s, ir.Inst) and s.dst is not None}
                for part in (st.header, st.body):
                    done += _rewrite_lists(part, inside, counts, uses)
            for sub in ir.sub_blocks(st):
                visit(sub)

    visit(fn.body)
    return done


def _rewrite_lists(block: list, inside: set, counts: dict, uses: dict) -> int:
    """Rewrite in `block` and the ifs and regions nested in it (not nested loops: they
    have their own invariants, and visit() reaches them)."""
    done = 0
    invariant: set = set()          # adds of this loop rewritten to invariant operands

    def inv(a) -> bool:
        """Same value everywhere in the loop: defined outside it, or a rewritten add
        (which then reads only such values; x = add p, q needs q defined before x)."""
        return not isinstance(a, ir.Var) or a not in inside or a in invariant

    for b in ir.own_lists(block):
        where = {st.dst: k for k, st in enumerate(b)
                 if isinstance(st, ir.Inst) and st.dst is not None and counts.get(st.dst) == 1}
        for k, d in enumerate(b):
            if not _is_add(d):
                continue
            for xi in (0, 1):
                x, q = d.args[xi], d.args[1 - xi]
                j = where.get(x)
                if j is None or j >= k or not inv(q) or inv(x) or uses.get(x) != 1 \
                        or q in invariant and where.get(q, k) >= j \
                        or x.local or x.arg is not None or not _is_add(b[j]):
                    continue
                xdef = b[j]
                pi = next((i for i in (0, 1) if inv(xdef.args[i]) and not inv(xdef.args[1 - i])),
                          None)
                if pi is None:
                    continue
                p, v = xdef.args[pi], xdef.args[1 - pi]
                if isinstance(v, ir.Var) and _assigned(b[j + 1:k], v):
                    continue
                xdef.args = [p, q]
                d.args = [x, v]
                invariant.add(x)
                done += 1
                break
    return done


def _is_add(st) -> bool:
    return (isinstance(st, ir.Inst) and st.op == "add" and st.dst is not None
            and st.dst.type in _INT32
            and all(getattr(a, "type", None) in _INT32 for a in st.args))


def _assigned(between: list, v) -> bool:
    return any(isinstance(s, ir.Inst) and s.dst is v for s in ir.walk(between))
