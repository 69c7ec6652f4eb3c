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

The search for loads that may merge (``open_runs``), the check that their values can be
renamed (``movable``) and the rewrite (``rewrite``) are shared with lds_pairs.py.
"""
from __future__ import annotations

from typing import Iterator

from . import ir

# The operations that may read a merged value, per element type: they name the vector's
# register where they named the value's (codegen.py's operands accept an ir.Part).
READERS = {ir.f32: {"add", "sub", "mul", "mad", "fma", "min", "max"},
           ir.i32: {"add", "sub", "mul", "mad", "min", "max", "and", "or", "xor"}}


def merge_lds_quads(fn: ir.Function) -> int:
    """Merge what can be merged in ``fn``; the number of quad loads made."""
    made = 0
    for block in _blocks(fn):
        while (group := _find_group(block, use_counts(fn))) is not None:
            rewrite(fn, block, group, block[group[0]].args[0], block[group[0]].offset)
            made += 1
    return made


def _blocks(fn: ir.Function) -> list[list]:
    """Every statement list of ``fn``."""
    return [fn.body] + [sub for st in ir.walk(fn.body) for sub in ir.sub_blocks(st)]


def use_counts(fn: ir.Function) -> dict:
    uses: dict = {}
    for st in ir.walk(fn.body):
        if isinstance(st, ir.Inst):
            for v in st.uses():
                uses[v] = uses.get(v, 0) + 1
        elif isinstance(getattr(st, "cond", None), ir.Var):
            uses[st.cond] = uses.get(st.cond, 0) + 1
    return uses


def candidate(st, elems=(ir.f32,)) -> bool:
    """A shared load of one 32-bit element of a type in ``elems`` into a VGPR."""
    return (isinstance(st, ir.Inst) and st.op == "load" and isinstance(st.array, ir.SharedArray)
            and st.scaled and st.array.elem in elems and isinstance(st.dst, ir.Var)
            and not isinstance(st.dst.type, ir.VecType)
            and not st.dst.local and st.dst.arg is None and st.dst.cls == "v"
            and isinstance(st.args[0], (ir.Var, ir.Special)))


def open_runs(block: list, elems) -> Iterator[tuple[int, dict]]:
    """(position, run) at each candidate load of ``block``: ``run`` maps the byte offsets
    of the candidates since the last store, atomic, barrier, trap, control flow or new
    value of the base, from the same array and base as this one, to their positions
    (the first load at each offset), this one included."""
    runs: dict = {}               # (array, base) -> {offset: position}
    for pos, st in enumerate(block):
        if not isinstance(st, ir.Inst) or st.op in ir.SIDE_EFFECTS:
            runs.clear()            # control flow, or LDS may change / waves meet
            continue
        if candidate(st, elems):
            run = runs.setdefault((st.array.name, st.args[0]), {})
            run.setdefault(st.offset, pos)
            yield pos, run
        if st.dst is not None:      # a new base ends the runs that use it
            for key in [k for k in runs if k[1] is st.dst]:
                del runs[key]


def _find_group(block: list, uses: dict):
    """Positions of four loads that can merge, in offset order, or None."""
    for _, run in open_runs(block, (ir.f32,)):
        for off in sorted(run):
            quad = [run.get(off + 4 * k) for k in range(4)]
            if None not in quad and movable(block, quad, uses):
                return quad
    return None


def _windows(block: list, group: list, uses: dict) -> list[list[tuple[int, int]]] | None:
    """For each load, the (position, argument index) of the reads of its value: from
    the load to the next assignment of the same variable, or to control flow once all
    its reads are found. None when one is not a read READERS allows."""
    out = []
    for pos in group:
        x = block[pos].dst
        reads = []
        for p in range(pos + 1, len(block)):
            st = block[p]
            if not isinstance(st, ir.Inst):
                if len(reads) < uses.get(x, 0):
                    return None
                break
            hits = [k for k, a in enumerate(st.args) if a is x]
            if hits:
                if st.op not in READERS[x.type] or st.dst is None or st.dst.type != x.type:
                    return None
                reads.extend((p, k) for k in hits)
            if st.dst is x or st.array is x:
                break
        out.append(reads)
    return out


def movable(block: list, group: list, uses: dict) -> bool:
    """Every read of the loaded values is in this list after its load (and found by
    _windows), so replacing them and deleting all loads but one changes nothing else."""
    windows = _windows(block, group, uses)
    if windows is None:
        return False
    for pos, reads in zip(group, windows):
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


def rewrite(fn: ir.Function, block: list, group: list, base, offset: int,
            offset1: int = 0) -> None:
    """Replace the loads at ``group`` (movable) by one load of a vector, register k the
    value of ``group[k]``, from ``base`` at ``offset`` (a pair: and ``offset1``), placed
    where the first of them was."""
    first = min(group)
    load = block[group[0]]
    vid = ir.next_var_id(fn)
    vec = ir.Var(f"q{vid}", ir.VecType(load.array.elem, len(group)), vid, cls="v")
    for k, (pos, reads) in enumerate(zip(group, _windows(block, group, use_counts(fn)))):
        for p, i in reads:
            block[p].args[i] = ir.Part(vec, k)
    merged = ir.Inst("load", vec, [base], block[first].line, array=load.array, scaled=True,
                     offset=offset, offset1=offset1)
    for pos in sorted(group, reverse=True):
        del block[pos]
    block.insert(first, merged)
