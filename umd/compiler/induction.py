"""Strength reduction of loop addresses on induction variables (docs/umd-compiler.md 1.1).

In `for k0 in range(0, k, 16): ... b[(k0 + ty) * n + col]`, the byte offset
`((k0 + ty) * n + col) << 2` is an affine function of the loop counter: each turn of
the loop adds `(16 * n) << 2` to it. LLVM's loop strength reduction keeps such an
offset in a register of its own, computed once before the loop and stepped in the
latch, instead of recomputing it from the counter every iteration; this pass does the
same for the byte offsets of memory instructions (address lowering, addressing.py,
made them explicit).

The counter `i` is a basic induction variable: assigned once in the loop, at the top
level of its latch, `i = add i, c` with c loop-invariant (a for-range's increment).
The offset `t` is affine in i when it is i, or a temporary assigned once in the loop's
header or body (their ifs and regions included, not nested loops) by `add` / `sub` of
an affine value and an invariant one, `mul` of an affine value by an invariant one,
or `shl` of an affine value by a constant, all 32-bit integers. Then:

    before the loop:  iv = <the chain of t, read with i's value on entry>
                      step = <c carried through the chain's multiplies and shifts>
    in the loop:      the memory instructions read iv instead of t
    end of latch:     iv = add iv, step

Exact for every input: 32-bit integer add, sub, mul and shl are operations of the ring
of integers modulo 2^32, where f(i + c) = f(i) + (f's linear part)(c) for such an
affine chain f, whatever the signs and overflows. iv holds f(i) everywhere in the
header and body because both i and iv change only in the latch, i first; lanes that
skip a latch (a `break`, a divergent loop's finished lanes) never read iv again.
The offset, and so the address `base + zext(offset)`, is the same 32-bit value.

Done only when it saves: the instructions of the chain that nothing else reads
(they go as dead code) must outnumber the latch's one add. A chain that is just
`i << 2` stays (one shift either way).
"""
from __future__ import annotations

from umd.types import i32, u32

from . import ir

_INT32 = (i32, u32)
_MEMORY = ("load", "store", "atomic")


def reduce_loop_addresses(fn: ir.Function) -> int:
    """Give the affine byte offsets of memory instructions in loops an induction
    variable of their own where that saves work; returns how many."""
    counts = ir.def_counts(fn.body)
    readers: dict = {}                      # var -> the statements that read it
    for s in ir.walk(fn.body):
        for v in (s.uses() if isinstance(s, ir.Inst) else [getattr(s, "cond", None)]):
            if isinstance(v, ir.Var):
                readers.setdefault(v, []).append(s)
    state = {"next": ir.next_var_id(fn), "done": 0}

    def visit(block):
        i = 0
        while i < len(block):
            st = block[i]
            for sub in ir.sub_blocks(st):
                visit(sub)
            if isinstance(st, ir.Loop):
                before: list = []
                _reduce(st, counts, readers, state, before)
                block[i:i] = before
                i += len(before)
            i += 1

    visit(fn.body)
    return state["done"]


def _counter(loop: ir.Loop, inside: dict):
    """(i, c) of the loop's basic induction variable `i = add i, c`, or None."""
    for st in loop.latch:
        if isinstance(st, ir.Inst) and st.op == "add" and st.dst is not None \
                and st.dst.type in _INT32 and inside.get(st.dst) == 1 and st.dst in st.args:
            c = st.args[1] if st.args[0] is st.dst else st.args[0]
            if c is not st.dst and getattr(c, "type", None) in _INT32 \
                    and (not isinstance(c, ir.Var) or c not in inside):
                return st.dst, c
    return None


def _reduce(loop: ir.Loop, counts: dict, readers: dict, state: dict, before: list) -> None:
    inside: dict = {}
    for part in (loop.header, loop.body, loop.latch):
        for s in ir.walk(part):
            if isinstance(s, ir.Inst) and s.dst is not None:
                inside[s.dst] = inside.get(s.dst, 0) + 1
    found = _counter(loop, inside)
    if found is None:
        return
    i, c = found
    own = [b for part in (loop.header, loop.body) for b in ir.own_lists(part)]
    defs = {st.dst: st for b in own for st in b
            if isinstance(st, ir.Inst) and st.dst is not None and counts.get(st.dst) == 1
            and not st.dst.local and st.dst.arg is None}

    def invariant(a) -> bool:
        return not isinstance(a, ir.Var) or a not in inside

    def chain(t) -> list | None:
        """The instructions computing t from i, in order, if t is affine in i."""
        if t is i:
            return []
        st = defs.get(t)
        if st is None or st.dst.type not in _INT32 or \
                not all(getattr(a, "type", None) in _INT32 for a in st.args):
            return None
        a = st.args
        if st.op in ("add", "sub", "mul"):
            k = next((k for k in (0, 1) if invariant(a[1 - k]) and not invariant(a[k])), None)
        else:
            k = 0 if st.op == "shl" and isinstance(a[1], ir.Const) else None
        sub = None if k is None else chain(a[k])
        return None if sub is None else sub + [st]

    offsets: dict = {}
    for b in own:
        for st in b:
            if isinstance(st, ir.Inst) and st.op in _MEMORY and st.scaled \
                    and isinstance(st.args[0], ir.Var) and st.args[0] in defs:
                offsets.setdefault(st.args[0], []).append(st)
    for t, users in offsets.items():
        if len(readers.get(t, ())) != len(users) or any(u.args[0] is not t or t in u.args[1:]
                                                         for u in users):
            continue                        # t is read by something else too
        steps = chain(t)
        if not steps:
            continue
        dying = {t}
        for st in reversed(steps[:-1]):     # read only by instructions that go
            if all(isinstance(r, ir.Inst) and r.dst in dying for r in readers[st.dst]):
                dying.add(st.dst)
        if len(dying) < 2:
            continue
        iv, step = _materialize(steps, i, c, state, before)
        loop.latch.append(ir.Inst("add", iv, [iv, step], loop.line))
        for u in users:
            u.args[0] = iv
        state["done"] += 1


def _materialize(steps: list, i, c, state: dict, before: list):
    """Emit into `before` the chain's value at the loop's entry, into the new induction
    variable, and its step per turn of the loop; returns (iv, step)."""
    def new(t, prefix: str) -> ir.Var:
        v = ir.Var(f"{prefix}{state['next']}", t, state["next"], local=prefix == "iv")
        state["next"] += 1
        return v

    value, delta = {i: i}, {i: c}
    for n, st in enumerate(steps):
        a = st.args
        k = 0 if isinstance(a[0], ir.Var) and a[0] in value else 1
        v = new(st.dst.type, "iv" if n == len(steps) - 1 else "r")
        before.append(ir.Inst(st.op, v, [value.get(x, x) if isinstance(x, ir.Var) else x
                                         for x in a], st.line))
        value[st.dst] = v
        if st.op == "add" or st.op == "sub" and k == 0:
            delta[st.dst] = delta[a[k]]
            continue
        d = new(st.dst.type, "r")
        if st.op == "sub":                  # inv - affine
            before.append(ir.Inst("neg", d, [delta[a[1]]], st.line))
        else:                               # mul by an invariant, shl by a constant
            before.append(ir.Inst(st.op, d, [delta[a[0]], a[1]] if k == 0
                                  else [a[0], delta[a[1]]], st.line))
        delta[st.dst] = d
    return value[steps[-1].dst], delta[steps[-1].dst]
