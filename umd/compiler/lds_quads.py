"""LDS quad loads: four loads of consecutive 32-bit elements of one shared array become
one ``ds_read_b128`` (docs/umd-compiler.md 1.1).

After address lowering a shared load is ``x = load lds:A, bytes+off base`` (the byte
offset ``base`` in a VGPR, ``off`` a constant). Four such loads in one statement list,
from the same array and the same ``base``, at ``off``, ``off + 4``, ``off + 8`` and
``off + 12`` (a row of a tile read by an unrolled loop: ``a_tile[ty, kk]``), with
nothing between the first and the last that writes LDS, synchronises or leaves the
list (no store, atomic, barrier, trap, branch or loop) and no new value of ``base``,
become one load into a quad ``q`` at the first one's place; each loaded value's reads
up to its next assignment read ``q``'s register ``k`` (``ir.Part``) instead.

Only float32 values read by float arithmetic (add, sub, mul, mad, fma, min, max), all in
that list, after the load: the code generator then names the quad's registers where
it named the value's. The LDS holds the same bytes at the first load as at the last
(nothing writes it in between), so the values are the same; a fault (out of bounds)
is reported at the first load's line instead of a later one's. Runs after the last
uniformity analysis, before register allocation.
"""
from __future__ import annotations

from . import ir

_READERS = {"add", "sub", "mul", "mad", "fma", "min", "max"}


def merge_lds_quads(fn: ir.Function) -> int:
    """Merge what can be merged in ``fn``; the number of quad loads made."""
    made = 0
    blocks = [fn.body] + [sub for st in ir.walk(fn.body) for sub in ir.sub_blocks(st)]
    for block in blocks:
        while (group := _find_group(block, _use_counts(fn))) is not None:
            _rewrite(fn, block, group)
            made += 1
    return made


def _use_counts(fn: ir.Function) -> dict:
    uses: dict = {}
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst):
            for v in st.uses():
                uses[v] = uses.get(v, 0) + 1
        elif isinstance(getattr(st, "cond", None), ir.Var):
            uses[st.cond] = uses.get(st.cond, 0) + 1
    return uses


def _candidate(st) -> bool:
    return (isinstance(st, ir.Inst) and st.op == "load" and isinstance(st.array, ir.SharedArray)
            and st.scaled and st.array.elem == ir.f32 and isinstance(st.dst, ir.Var)
            and not st.dst.local and st.dst.arg is None and st.dst.cls == "v"
            and isinstance(st.args[0], (ir.Var, ir.Special)))


def _find_group(block: list, uses: dict):
    """Positions of four loads that can merge, in offset order, or None."""
    open_runs: dict = {}          # (array, base) -> {offset: position}
    for pos, st in enumerate(block):
        if not isinstance(st, ir.Inst) or st.op in ir.SIDE_EFFECTS:
            open_runs.clear()       # control flow, or LDS may change / waves meet
            continue
        if _candidate(st):
            run = open_runs.setdefault((st.array.name, st.args[0]), {})
            run.setdefault(st.offset, pos)
            for off in sorted(run):
                quad = [run.get(off + 4 * k) for k in range(4)]
                if None not in quad and _movable(block, quad, uses):
                    return quad
        if st.dst is not None:      # a new base ends the runs that use it
            for key in [k for k in open_runs if k[1] is st.dst]:
                del open_runs[key]
    return None


def _windows(block: list, quad: list) -> list[list[tuple[int, int]]] | None:
    """For each load, the (position, argument index) of the reads of its value: from
    the load to the next assignment of the same variable. None when one is not a
    float read _READERS allows."""
    out = []
    for pos in quad:
        x = block[pos].dst
        reads = []
        for p in range(pos + 1, len(block)):
            st = block[p]
            if not isinstance(st, ir.Inst):
                return None
            hits = [k for k, a in enumerate(st.args) if a is x]
            if hits:
                if st.op not in _READERS or st.dst is None or st.dst.type != ir.f32:
                    return None
                reads.extend((p, k) for k in hits)
            if st.dst is x or st.array is x:
                break
        out.append(reads)
    return out


def _movable(block: list, quad: list, uses: dict) -> bool:
    """Every read of the four values is in this list after its load (and found by
    _windows), so replacing them and deleting three loads changes nothing else."""
    windows = _windows(block, quad)
    if windows is None:
        return False
    for pos, reads in zip(quad, windows):
        x = block[pos].dst
        seen = sum(1 for st in block if isinstance(st, ir.Inst) for a in st.args if a is x)
        if uses.get(x, 0) != seen or not reads:
            return False
        # every read of x in this list must follow an assignment of x in it
        for st in block:
            if isinstance(st, ir.Inst) and st.dst is x:
                break
            if isinstance(st, ir.Inst) and any(a is x for a in st.args):
                return False
    return True


def _rewrite(fn: ir.Function, block: list, quad: list) -> None:
    first = min(quad)
    load = block[first]
    vid = ir.next_var_id(fn)
    q = ir.Var(f"q{vid}", ir.VecType(ir.f32, 4), vid, cls="v")
    for k, (pos, reads) in enumerate(zip(quad, _windows(block, quad))):
        for p, i in reads:
            block[p].args[i] = ir.Part(q, k)
    quad_load = ir.Inst("load", q, [load.args[0]], load.line, array=load.array,
                        scaled=True, offset=block[quad[0]].offset)
    for pos in sorted(quad, reverse=True):
        del block[pos]
    block.insert(first, quad_load)
