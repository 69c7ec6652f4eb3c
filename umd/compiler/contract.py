"""FMA contraction: `a * b + c` as one fused multiply-add, for kernels compiled with
``fastmath=True`` (docs/umd-compiler.md 1).

Numba's CUDA target contracts multiplies and adds only under fastmath (NVVM's -fma=1,
with flush-to-zero and the approximate division and square root, which have no
counterpart here: the vISA's are exact). Contracting changes the rounding (the product
is not rounded on its own), so it is never done otherwise.

An ``add`` of a float type whose operand is a temporary defined by a ``mul`` of the
same type, earlier in the same statement list and used nowhere else, becomes
``fma(x, y, other)``; the mul is then dead. Neither factor may be reassigned between
the two, so the fma reads what the mul read.
"""
from __future__ import annotations

from . import ir


def contract_fma(fn: ir.Function) -> int:
    """Fuse what can be fused in ``fn``; the number of adds turned into fmas."""
    uses: dict = {}
    for st in ir.walk(fn.body):
        for v in _reads(st):
            uses[v] = uses.get(v, 0) + 1
    counts = ir.def_counts(fn.body)
    return _block(fn.body, uses, counts) + sum(
        _block(sub, uses, counts) for st in ir.walk(fn.body) for sub in ir.sub_blocks(st))


def _reads(st) -> list:
    if isinstance(st, ir.Inst):
        return st.uses()
    cond = getattr(st, "cond", None)
    return [cond] if isinstance(cond, ir.Var) else []


def _block(block: list, uses: dict, counts: dict) -> int:
    fused = 0
    muls: dict = {}                       # temporary -> (position, its mul)
    for pos, st in enumerate(block):
        if not isinstance(st, ir.Inst):
            continue
        if st.op == "add" and st.dst is not None and st.dst.type.is_float:
            for k in (0, 1):
                t = st.args[k]
                hit = muls.get(t) if isinstance(t, ir.Var) else None
                if hit is None or uses.get(t) != 1 or counts.get(t) != 1:
                    continue
                where, mul = hit
                if mul.dst.type != st.dst.type or _reassigned(block[where + 1:pos], mul.args):
                    continue
                st.op, st.args = "fma", [mul.args[0], mul.args[1], st.args[1 - k]]
                fused += 1
                break
        if st.op == "mul" and st.dst is not None and st.dst.type.is_float:
            muls[st.dst] = (pos, st)
    return fused


def _reassigned(between: list, factors: list) -> bool:
    written = {s.dst for s in ir.walk(between) if isinstance(s, ir.Inst) and s.dst is not None}
    return any(isinstance(f, ir.Var) and f in written for f in factors)
