"""Store sinking (docs/umd-compiler.md 1): an `if`/`else` whose two sides both end by
storing to the same element stores once, after it.

    if c: t[i] = a[j]             v = 0.0
    else: t[i] = 0.0       ->     if c: v = a[j]
                                  t[i] = v

Each lane still stores once, to the same address, the value of the side it took.  A
side that only stored a constant or a value computed before the `if` becomes that
value's assignment before it, so the `else` disappears (no EXEC switch, no second
branch).  The index must not change inside either side.  One thing differs: two lanes
of one wave storing to the same address from different sides is a race (CUDA leaves
the winner undefined); before, the `else` lanes' store came last, now the higher lane
wins, as for any one store.
"""
from __future__ import annotations

from . import ir


def sink_stores(fn: ir.Function) -> bool:
    state = {"next": ir.next_var_id(fn), "changed": False}
    stable = ir.stable_vars(fn)

    def visit(block):
        out = []
        for st in block:
            if isinstance(st, ir.If):
                visit(st.then)
                visit(st.else_)
                sunk = _sink(st, stable, state)
                if sunk is not None:
                    before, after = sunk
                    k = len(out)
                    if before and isinstance(before[0].args[0], ir.Const):
                        # a constant goes above the instructions that compute the
                        # condition, which the code generator fuses with the branch
                        while k and isinstance(out[k - 1], ir.Inst):
                            k -= 1
                    out[k:k] = before
                    out.append(st)
                    out.append(after)
                    state["changed"] = True
                    continue
            else:
                for sub in ir.sub_blocks(st):
                    visit(sub)
            out.append(st)
        block[:] = out

    visit(fn.body)
    return state["changed"]


def _sink(st: ir.If, stable, state):
    if not st.then or not st.else_:
        return None
    a, b = st.then[-1], st.else_[-1]
    if not (isinstance(a, ir.Inst) and isinstance(b, ir.Inst) and a.op == b.op == "store"
            and a.array is b.array and (a.scaled, a.offset) == (b.scaled, b.offset)):
        return None
    ia, ib = a.args[0], b.args[0]
    if not (ia is ib or (isinstance(ia, ir.Const) and ia == ib)):
        return None
    assigned = {s.dst for blk in (st.then, st.else_) for s in ir.walk(blk)
                if isinstance(s, ir.Inst) and s.dst is not None}
    if isinstance(ia, ir.Var) and ia in assigned:
        return None
    arr = a.array
    elem = arr.elem if isinstance(arr, ir.SharedArray) else arr.type.elem
    value = ir.Var(f"sv{state['next']}", elem.register, state["next"], local=True)
    state["next"] += 1
    before = []
    va, vb = a.args[1], b.args[1]
    st.then[-1] = ir.Inst("mov", value, [va], a.line)
    if len(st.else_) == 1 and (isinstance(vb, ir.Const) or vb in stable and vb not in assigned):
        before.append(ir.Inst("mov", value, [vb], b.line))
        st.else_.clear()
    else:
        st.else_[-1] = ir.Inst("mov", value, [vb], b.line)
    after = ir.Inst("store", None, [ia, value], a.line, array=arr, scaled=a.scaled,
                    offset=a.offset)
    return before, after
