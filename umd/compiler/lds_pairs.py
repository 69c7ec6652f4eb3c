"""LDS pair loads: two loads of 32-bit elements of one shared array, up to 255 dwords
apart, become one ``ds_read2_b32`` (docs/umd-compiler.md 1.1).

Runs after lds_quads.py, on the shared loads it left, under its rules: two float32 or
int32 loads from the same array and the same byte-offset ``base``, in one statement
list with no store, atomic, barrier, trap or control flow between them and no new value
of ``base``, whose values are read only by arithmetic of their own type there
(lds_quads.READERS), become one load into a pair at the first one's place, register 0
the first load's value and register 1 the second's. The LDS holds the same bytes at
both (nothing writes it in between); a bounds fault is reported at the first one's line.

GCN's DS_READ2_B32 adds no byte offset to the address, only two 8-bit dword counts
(docs/isa.md 4.5). Loads at LDS byte offsets ``t0`` and ``t1`` (the array's place plus
the load's constant offset) pair when both are multiples of 4, differ, and lie within
1020 bytes of each other. When ``t0 / 4`` and ``t1 / 4`` are both in 0..255 the pair
reads through ``base``; otherwise through ``base + r``, a register ``add base, r`` with
``r`` the smaller offset. That register is made only for a list inside a loop that does
not assign ``base``: it then moves out of that loop (licm.py), so it costs one
instruction per launch, not one per iteration, and the later pairs of the list with the
same base whose offsets fit from ``r`` read through it too. (The tiled matmul's 16 reads
of B's column at 1024 + 64 * kk become 8 pairs through ``base + 1024``, made once before
the k0 loop.) Pairs form greedily: each candidate load with the earliest earlier one of
its run it can pair with.
"""
from __future__ import annotations

from . import ir, licm
from .lds_quads import movable, open_runs, rewrite, use_counts

_ELEMS = (ir.f32, ir.i32)
_SPAN = 4 * 255                 # bytes from the address register to the farthest dword


def merge_lds_pairs(fn: ir.Function) -> int:
    """Merge what can be merged in ``fn``; the number of pair loads made."""
    made = 0
    rebases: dict = {}              # the `add base, r` made -> r
    for block, loop in _blocks_in_loops(fn):
        while (pair := _find_pair(block, use_counts(fn), loop, rebases)) is not None:
            _merge(fn, block, pair, rebases)
            made += 1
    if rebases:
        licm.hoist_loop_invariants(fn, only=set(rebases))
    return made


def _blocks_in_loops(fn: ir.Function) -> list[tuple[list, ir.Loop | None]]:
    """Every statement list of ``fn`` with the innermost loop around it (None: none)."""
    out = []

    def visit(block, loop):
        out.append((block, loop))
        for st in block:
            for sub in ir.sub_blocks(st):
                visit(sub, st if isinstance(st, ir.Loop) else loop)
    visit(fn.body, None)
    return out


def _lds_offset(st: ir.Inst) -> int:
    return st.array.offset + st.offset


def _find_pair(block: list, uses: dict, loop, rebases: dict):
    """(first position, second position, (rebase, r) or None) of two loads that can
    merge, the rebase an ``add base, r`` made before or a new one (no dst yet), or None."""
    for pos, run in open_runs(block, _ELEMS):
        t1 = _lds_offset(block[pos])
        for p in sorted(run.values()):
            if p == pos:
                continue
            t0 = _lds_offset(block[p])
            if t0 == t1 or t0 % 4 or t1 % 4 or abs(t0 - t1) > _SPAN:
                continue
            if not movable(block, [p, pos], uses):
                continue
            lo, hi = min(t0, t1), max(t0, t1)
            if 0 <= lo and hi <= _SPAN:
                return p, pos, None
            rebase = _rebase(block, p, lo, hi, loop, rebases)
            if rebase is not None:
                return p, pos, rebase
    return None


def _rebase(block: list, first: int, lo: int, hi: int, loop, rebases: dict):
    """(``add base, r``, r): one of this list before ``first`` with lo - r and hi - r in
    0.._SPAN and no new value of base since; else a new one with r = lo when ``loop``
    does not assign base; else None."""
    base = block[first].args[0]
    for k in range(first - 1, -1, -1):
        st = block[k]
        r = rebases.get(st)
        if r is not None and st.args[0] is base and 0 <= lo - r and hi - r <= _SPAN:
            return st, r
        if any(isinstance(s, ir.Inst) and s.dst is base for s in ir.walk([st])):
            break
    if loop is None or any(isinstance(s, ir.Inst) and s.dst is base
                           for part in (loop.header, loop.body, loop.latch)
                           for s in ir.walk(part)):
        return None
    return ir.Inst("add", None, [base, ir.const(lo, base.type)], block[first].line), lo


def _merge(fn: ir.Function, block: list, pair: tuple, rebases: dict) -> None:
    p0, p1, rebase = pair
    base, r = block[p0].args[0], 0
    if rebase is not None:
        add, r = rebase
        if add.dst is None:         # new: its register, placed before the pair
            vid = ir.next_var_id(fn)
            add.dst = ir.Var(f"b{vid}", base.type, vid, cls=base.cls)
            block.insert(p0, add)
            rebases[add] = r
            p0, p1 = p0 + 1, p1 + 1
        base = add.dst
    rewrite(fn, block, [p0, p1], base, block[p0].offset - r, block[p1].offset - r)
