"""Multiply-add contraction: `a * b + c` as one instruction (docs/umd-compiler.md 1).

- ``contract_fma``, for kernels compiled with ``fastmath=True``: a fused multiply-add.
  Numba's CUDA target contracts multiplies and adds only under fastmath (NVVM's -fma=1,
  with flush-to-zero and the approximate division and square root, which have no
  counterpart here: the vISA's are exact). Contracting changes the rounding (the
  product is not rounded on its own), so it is never done otherwise.
- ``contract_mad``, always: float32 ``mad`` (v_mad_f32, GCN's unfused V_MAD_F32) rounds
  the product and then the sum, bit for bit what the v_mul_f32 and v_add_f32 it
  replaces give, so results do not change; one instruction fewer per pair (the
  accumulation of a dot product). Not when two of the three operands are constants:
  VOP3 takes no literal, so each would cost an s_mov. The same for 32-bit integers
  whose add is a vector one (v_mad_u32, exact modulo 2^32 like the pair it replaces):
  ``block_idx.x * block_dim.x + thread_idx.x`` is one instruction instead of an
  s_mul_i32 and a v_add_u32. Not with a constant operand: its s_mov would cost what
  the mad saves.

An ``add`` of a float type whose operand is a temporary defined by a ``mul`` of the
same type, earlier in the same statement list and used nowhere else, becomes
``fma(x, y, other)`` (or ``mad``); the mul is then dead. Neither factor may be
reassigned between the two, so the new instruction reads what the mul read.
"""
from __future__ import annotations

from . import ir


def contract_fma(fn: ir.Function) -> int:
    """Fuse what can be fused in ``fn``; the number of adds turned into fmas."""
    return _contract(fn, "fma")


def contract_mad(fn: ir.Function) -> int:
    """Merge float32 multiplies into the adds that use them; the number of mads."""
    return _contract(fn, "mad")


def _contract(fn: ir.Function, into: str) -> int:
    uses: dict = {}
    for st in ir.walk(fn.body):
        for v in _reads(st):
            uses[v] = uses.get(v, 0) + 1
    counts = ir.def_counts(fn.body)
    return _block(fn.body, uses, counts, into) + sum(
        _block(sub, uses, counts, into) for st in ir.walk(fn.body) for sub in ir.sub_blocks(st))


def _reads(st) -> list:
    if isinstance(st, ir.Inst):
        return st.uses()
    cond = getattr(st, "cond", None)
    return [cond] if isinstance(cond, ir.Var) else []


def _block(block: list, uses: dict, counts: dict, into: str) -> int:
    fused = 0
    muls: dict = {}                       # temporary -> (position, its mul)
    for pos, st in enumerate(block):
        if not isinstance(st, ir.Inst):
            continue
        if st.op == "add" and st.dst is not None and _contractible(st.dst, into):
            for k in (0, 1):
                t = st.args[k]
                hit = muls.get(t) if isinstance(t, ir.Var) else None
                if hit is None or uses.get(t) != 1 or counts.get(t) != 1:
                    continue
                where, mul = hit
                args = [mul.args[0], mul.args[1], st.args[1 - k]]
                consts = sum(isinstance(a, ir.Const) for a in args)
                if mul.dst.type != st.dst.type or _reassigned(block[where + 1:pos], mul.args) \
                        or (into == "mad" and consts > (0 if st.dst.type.is_int else 1)):
                    continue
                st.op, st.args = into, args
                fused += 1
                break
        if st.op == "mul" and st.dst is not None and (_contractible(st.dst, into) or _int32(st.dst.type)):
            muls[st.dst] = (pos, st)
    return fused


def _contractible(dst, into: str) -> bool:
    """fma: every float type; mad: float32 (GCN has no V_MAD_F64), and 32-bit integers
    whose result is a vector (v_mad_u32: the low 32 bits of a * b + c, what the multiply
    and the add give, signed or not). A uniform integer add stays a scalar add: a mad
    is a vector instruction only."""
    t = dst.type
    if getattr(t, "wide", False):
        return into == "fma" and t.is_float
    if t.is_float:
        return True
    return into == "mad" and t.is_int and getattr(dst, "cls", "s") == "v"


def _int32(t) -> bool:
    """A 32-bit integer multiply: a mad's factors even when it is uniform (the vector
    add it feeds decides)."""
    return t.is_int and not getattr(t, "wide", False)


def _reassigned(between: list, factors: list) -> bool:
    written = {s.dst for s in ir.walk(between) if isinstance(s, ir.Inst) and s.dst is not None}
    return any(isinstance(f, ir.Var) and f in written for f in factors)
