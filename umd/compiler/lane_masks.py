"""Vector bools as lane masks in SGPRs (docs/umd-compiler.md 1).

A vector compare writes a lane mask (one bit per lane, docs/isa.md 4.6); keeping a
bool as a 0/1 VGPR costs a v_cndmask to make it and a v_cmp_ne to test it again at
every use. LLVM's AMDGPU back end keeps i1 values in SGPR lane masks instead
(SILowerI1Copies); this pass does the same for the bools where that is exact, and
marks them `Var.cls = 'm'` (an SGPR; the code generator ANDs it into EXEC or VCC).

A bool is a mask when it is a vector bool assigned once (ir.stable_vars) by a compare,
by `and` / `or` / `lnot` of masks, or by a `select` of two masks on a uniform bool
(a variable-step range's `i < stop if step > 0 else i > stop`: s_cselect_b32), and
each of its uses is one that takes a lane mask: the condition of an `if`, of a
divergent loop or of a `select`, or an operand of a mask's `and` / `or` / `lnot` /
`select`. A mask's bits are right only for the lanes on
where it was computed (a v_cmp writes 0 for the others; s_not and s_or set bits of
lanes that were off). So every use must run with EXEC a subset of the EXEC at the
definition: the use sits after the definition in the same statement list, or nested
in a statement that comes after it there (a loop's header and body count as one
list, its condition between them). Lanes only come back on at the end of the
construct that turned them off, so such a use never sees a lane that was off at the
definition. Not a mask: a bool read after the `if`, loop or region that computed it
(lanes that skipped the definition must keep their own value, a VGPR's), one read
in a loop's latch from its body (`continue` turns lanes back on there), one
assigned twice, and one used as a number.

Runs last among the IR passes, after the final uniformity analysis.
"""
from __future__ import annotations

from umd.types import bool_

from . import ir

_LOGIC = {"and", "or", "lnot"}


def assign_lane_masks(fn: ir.Function) -> int:
    """Mark the bools that can be lane masks (cls 'm'); returns how many."""
    defs, uses = _positions(fn.body)
    stable = ir.stable_vars(fn)
    masks = {v for v, (st, _) in defs.items()
             if v.type == bool_ and v.cls == "v" and v in stable
             and (st.op in ir.COMPARE or st.op in _LOGIC or _uniform_select(st))}
    changed = True
    while changed:
        changed = False
        for v in list(masks):
            st, where = defs[v]
            operands = st.args if st.op in _LOGIC else st.args[1:] if st.op == "select" else ()
            ok = all(a in masks for a in operands)
            ok = ok and all(_takes_mask(user, v, masks) and _after(where, at)
                            for user, at in uses.get(v, ()))
            if not ok:
                masks.discard(v)
                changed = True
    for v in masks:
        v.cls = "m"
    return len(masks)


def _uniform_select(st) -> bool:
    """`select c, a, b` on a uniform bool c (SCC picks one of two masks)."""
    return st.op == "select" and getattr(st.args[0], "cls", "s") == "s"


def _takes_mask(user, v, masks) -> bool:
    """`user` reads `v` only where a lane mask does."""
    if isinstance(user, (ir.If, ir.Loop)):
        return True
    if user.op == "select" and user.dst in masks:       # a mask chosen on a uniform bool
        return user.args[0] is not v
    if user.op == "select":
        return user.args[0] is v and all(a is not v for a in user.args[1:])
    return user.op in _LOGIC and user.dst in masks


def _after(definition: tuple, use: tuple) -> bool:
    """The use's position chain passes through the definition's statement list at a
    later statement."""
    block, k = definition
    return any(b == block and j > k for b, j in use)


def _positions(body: list):
    """{var: (defining Inst, (list key, index))} for vars assigned once here, and
    {var: [(using statement, chain of (list key, index) from the function body)]}."""
    defs: dict = {}
    uses: dict = {}
    seen: dict = {}

    def use(v, user, chain):
        if isinstance(v, ir.Var):
            uses.setdefault(v, []).append((user, chain))

    def visit(block, key, base, outer):
        for k, st in enumerate(block):
            chain = outer + ((key, base + k),)
            if isinstance(st, ir.Inst):
                for a in st.args:
                    use(a, st, chain)
                if st.dst is not None:
                    seen[st.dst] = seen.get(st.dst, 0) + 1
                    defs[st.dst] = (st, (key, base + k))
            elif isinstance(st, ir.If):
                use(st.cond, st, chain)
                visit(st.then, id(st.then), 0, chain)
                visit(st.else_, id(st.else_), 0, chain)
            elif isinstance(st, ir.Loop):
                head = id(st.header)             # header, condition, body: one list
                n = len(st.header)
                visit(st.header, head, 0, chain)
                use(st.cond, st, chain + ((head, n),))
                visit(st.body, head, n + 1, chain)
                visit(st.latch, id(st.latch), 0, chain)
            elif isinstance(st, ir.Region):
                visit(st.body, id(st.body), 0, chain)

    visit(body, id(body), 0, ())
    return {v: d for v, d in defs.items() if seen[v] == 1}, uses
