"""Common-subexpression elimination (docs/umd-compiler.md 1).

A pure instruction (no load: memory may change in between; no wave operation, whose
value depends on which lanes run it, ir.WAVE) that computes what an
earlier one already computed, from the same operands holding the same values, is
dropped and its result replaced by the earlier one's.  "Earlier" means on every path:
before it in the same block, or in a block that encloses this one (a value computed
inside an `if`, a loop or a region is not available after it; a loop's latch sees
only what its header computed, since `continue` skips the rest of the body).  An
assignment to a variable forgets the expressions that read it or live in it; a loop
forgets, on entry, everything about the variables it assigns (the back edge).
Integer `add`, `mul`, `and`, `or`, `xor`, `min`, `max`, `eq` and `ne` match with their
operands swapped.
"""
from __future__ import annotations

from . import ir

_COMMUTATIVE = {"add", "mul", "and", "or", "xor", "min", "max", "eq", "ne"}


def _assigned(blocks) -> set:
    return {st.dst for b in blocks for st in ir.walk(b)
            if isinstance(st, ir.Inst) and st.dst is not None}


def _kill(avail: dict, dead: set) -> None:
    for k in [k for k, (v, reads) in avail.items() if v in dead or reads & dead]:
        del avail[k]


def eliminate_common_subexpressions(fn: ir.Function) -> bool:
    stable = ir.stable_vars(fn)
    counts = ir.def_counts(fn.body)
    subst: dict = {}
    changed = False

    def key(st):
        if st.op not in ir.PURE or st.op in ("load", "mov") or st.op in ir.WAVE \
                or st.dst is None:
            return None
        ops = []
        for a in st.args:
            if isinstance(a, ir.Const):
                ops.append(("c", a.bits(), a.type.kind))
            elif isinstance(a, ir.Special):
                ops.append(("s", a.name))
            else:
                ops.append(("v", a.id))
        if st.op in _COMMUTATIVE and st.dst.type.is_int:
            ops.sort()
        return (st.op, repr(st.dst.type), tuple(ops))

    def visit(block, avail):
        nonlocal changed
        out = []
        for st in block:
            if isinstance(st, ir.Inst):
                st.args = [subst.get(a, a) if isinstance(a, ir.Var) else a for a in st.args]
                k = key(st)
                if k is not None and k in avail:
                    prev = avail[k][0]
                    changed = True
                    if prev in stable and not st.dst.local and counts.get(st.dst) == 1:
                        subst[st.dst] = prev        # every use is dominated by this one
                        continue
                    st.op, st.args = "mov", [prev]
                if st.dst is not None:
                    _kill(avail, {st.dst})
                    reads = {a for a in st.args if isinstance(a, ir.Var)}
                    if k is not None and k not in avail and st.op != "mov" \
                            and st.dst not in reads:
                        avail[k] = (st.dst, reads)
            elif isinstance(st, ir.If):
                st.cond = subst.get(st.cond, st.cond)
                visit(st.then, dict(avail))
                visit(st.else_, dict(avail))
                _kill(avail, _assigned([st.then, st.else_]))
            elif isinstance(st, ir.Loop):
                _kill(avail, _assigned([st.header, st.body, st.latch]))
                head = dict(avail)
                visit(st.header, head)
                st.cond = subst.get(st.cond, st.cond)
                visit(st.body, dict(head))
                latch = dict(head)
                _kill(latch, _assigned([st.body]))
                visit(st.latch, latch)
            elif isinstance(st, ir.Region):
                visit(st.body, dict(avail))
                _kill(avail, _assigned([st.body]))
            out.append(st)
        block[:] = out

    visit(fn.body, {})
    return changed
