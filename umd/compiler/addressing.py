"""Address lowering: element indices of vector memory accesses become byte offsets in
the IR, where the other passes can share and hoist them (docs/umd-compiler.md 1).

`load a, i` becomes `b = shl i, 2; load a, bytes b`: the `<< 2` the code generator
used to emit before every access is an ordinary instruction, so `x[i]` and `y[i]`
share one (cse.py) and a loop-invariant one leaves the loop (licm.py).

Shared (LDS) arrays also take constant parts of the index into the instruction's
offset: `lds[t + c]` is `ds_read (t << 2), base + 4c`.  That is exact because LDS
addresses are 32-bit and wrap (docs/isa.md 4.5: `(A + offset) mod 2^32`), as the
index arithmetic does.  Global addresses are 64-bit (`base + zext(v) + offset`), so
there a constant moved out of the 32-bit register would change where a negative or
wrapping index lands: global accesses keep their whole index in the register.

Runs after uniformity analysis (compiler/uniformity.py), on 32-bit vector indices of
4-byte elements only: a scalar index is one `v_lshl_b32` into the address register
either way, and 8-byte elements keep the code generator's own addressing.
"""
from __future__ import annotations

from umd.types import i32, u32

from . import ir

_MAX_LDS_OFFSET = (1 << 23) - 1 - 0x10000     # the 24-bit signed field, above any LDS base


def lower_addresses(fn: ir.Function) -> bool:
    stable = ir.stable_vars(fn)
    defs = {st.dst: st for st in ir.walk(fn.body)
            if isinstance(st, ir.Inst) and st.dst in stable}
    state = {"next": ir.next_var_id(fn), "changed": False}

    def visit(block):
        out = []
        for st in block:
            if isinstance(st, ir.Inst) and st.op in ("load", "store", "atomic") \
                    and not st.scaled and isinstance(st.args[0], (ir.Var, ir.Special)) \
                    and st.args[0].cls == "v" and st.args[0].type in (i32, u32) \
                    and _elem(st.array).itemsize == 4:
                base, const = st.args[0], 0
                if isinstance(st.array, ir.SharedArray):
                    base, const = _split(base, defs, stable)
                    if abs(4 * const) > _MAX_LDS_OFFSET:
                        base, const = st.args[0], 0
                byte = ir.Var(f"b{state['next']}", u32, state["next"])
                byte.cls = "v"
                state["next"] += 1
                out.append(ir.Inst("shl", byte, [base, ir.Const(2, u32)], st.line))
                st.args[0], st.scaled, st.offset = byte, True, 4 * const
                state["changed"] = True
            else:
                for sub in ir.sub_blocks(st):
                    sub[:] = visit(sub)
            out.append(st)
        return out

    fn.body[:] = visit(fn.body)
    return state["changed"]


def _elem(array):
    return array.elem if isinstance(array, ir.SharedArray) else array.type.elem


def _split(x, defs, stable, depth: int = 0):
    """(t, c) with x == t + c (mod 2^32), c a Python int: constants peeled off adds and
    subtracts.  `defs` maps the stable variables (ir.stable_vars) to their definitions;
    only those are looked through, and only onto a stable operand, so `t` still holds,
    at the access, the value it had where x was computed."""
    st = defs.get(x) if isinstance(x, ir.Var) else None
    if st is None or depth > 8 or st.dst.type not in (i32, u32):
        return x, 0
    a = st.args
    if not all(isinstance(v, (ir.Const, ir.Special)) or v in stable for v in a):
        return x, 0
    if st.op == "add" and isinstance(a[1], ir.Const):
        t, c = _split(a[0], defs, stable, depth + 1)
        return t, c + ir.wrap32(a[1].value, i32)
    if st.op == "add" and isinstance(a[0], ir.Const):
        t, c = _split(a[1], defs, stable, depth + 1)
        return t, c + ir.wrap32(a[0].value, i32)
    if st.op == "sub" and isinstance(a[1], ir.Const):
        t, c = _split(a[0], defs, stable, depth + 1)
        return t, c - ir.wrap32(a[1].value, i32)
    return x, 0
