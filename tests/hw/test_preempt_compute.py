"""Compute preemption at instruction boundaries (docs/preemption.md), on both executors:
a dispatch stopped by preempt() from another thread or by the test trigger
(preempt_after), its workgroups saved to the context save area and resumed, leaves the
memory, final wave state and summed counters of an unpreempted run."""
import threading

import numpy as np
import pytest

from kmd.hw import _core, compute, cu_ref, ref

from .isa_gen import MEM_VA, Rig
from .preempting import SUMMED, WAVE_FIELDS, Preempting
from .test_cu_differential import SAMPLE_RUNS

UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]
SLOT = compute.CSA_SLOT_BYTES

# Every lane marks that its wave started (mem[0x100]), spins until mem[0x200] is
# non-zero, then stores lane id * 3 + workgroup id x at 0x1000 + 4 * global id, and
# adds 1 to mem[0x300] once per workgroup.
SPIN = """
    v_mov_b32 v1, 1
    v_mov_b32 v2, 0
    global_store_dword v2, v1, s[2:3], 0x100
spin:
    global_load_dword v3, v2, s[2:3], 0x200
    v_readfirstlane_b32 s4, v3
    s_cmp_eq_u32 s4, 0
    s_cbranch_scc1 spin
    v_mul_lo_u32 v4, v0, 3
    v_add_u32 v4, v4, s16
    s_lshl_b32 s5, s16, 6
    v_add_u32 v5, v0, s5
    v_lshl_b32 v5, v5, 2
    global_store_dword v5, v4, s[2:3], 0x1000
    v_cmp_eq_u32 vcc, v0, 0
    s_and_saveexec_b32 s6, vcc
    global_atomic_add_u32 off, v2, v1, s[2:3], 0x300
    s_endpgm
"""

ENGINES = {
    "core1": lambda name, ih: _core.ComputeEngine(name, ih, threads=1),
    "core2": lambda name, ih: _core.ComputeEngine(name, ih, threads=2),
    "ref": cu_ref.ComputeEngine,
}
TABLES = {"core1": _core.PageTable, "core2": _core.PageTable, "ref": ref.PageTable}


def rig(kind: str) -> Rig:
    return Rig(ENGINES[kind], TABLES[kind])


@pytest.fixture(params=sorted(ENGINES))
def kind(request):
    return request.param


def assert_same_as_unpreempted(kind, run, points):
    """run(rig) unpreempted and preempted at `points`: same memory, final wave, counters.
    Returns the parts of the preempted run."""
    plain = rig(kind)
    r0 = run(plain)
    cut = rig(kind)
    csa = np.zeros(compute.csa_bytes(2), np.uint8)
    cut.engine = Preempting(cut.engine, points, csa)
    r1 = run(cut)
    parts = cut.engine.parts
    assert r0.status == "ok"
    assert cut.mem.tobytes() == plain.mem.tobytes()
    assert [getattr(r1, f) for f in WAVE_FIELDS] == [getattr(r0, f) for f in WAVE_FIELDS]
    assert sum(p.instructions for p in parts) == r0.instructions
    assert sum(p.lane_instructions for p in parts) == r0.lane_instructions
    for name in SUMMED:
        assert sum(p.counters[name] for p in parts) == r0.counters[name], name
    return parts


@pytest.mark.parametrize("sample", sorted(SAMPLE_RUNS))
def test_sample_kernel_preempted_and_resumed(kind, sample):
    # reduce_sum and matmul_tiled keep LDS and wait at barriers across the preemptions.
    if sample == "reduce_sum" and kind == "core2":
        pytest.skip("float atomics from two threads: the sum's rounding follows their order")
    parts = assert_same_as_unpreempted(kind, SAMPLE_RUNS[sample], [5, 60, 0, 333])
    assert len(parts) >= 3 and parts[0].status == "preempted"


@pytest.mark.parametrize("sample", ["reduce_sum", "matmul_tiled"])
def test_preempt_at_every_point_of_a_barrier_kernel(kind, sample):
    """Preempted after each of its first instructions: every wave state between two
    barriers (some waves waiting, some running) goes through the CSA."""
    if sample == "reduce_sum" and kind == "core2":
        pytest.skip("float atomics from two threads: the sum's rounding follows their order")
    for n in range(0, 120, 7 if kind == "ref" else 1):
        assert_same_as_unpreempted(kind, SAMPLE_RUNS[sample], [n, n])


def test_async_preempt_from_another_thread(kind):
    """A dispatch preempted mid-way by preempt() from another thread (its waves spin
    until released), resumed after: the result of a run that never spun."""
    def launch(r, **kw):
        return r.run(SPIN, (6, 1, 1), (64, 1, 1), user_data=UD, sgprs=24, vgprs=8, **kw)

    plain = rig(kind)
    plain.mem[0x200] = 1
    expect = launch(plain)
    assert expect.status == "ok"

    r = rig(kind)
    csa = np.zeros(compute.csa_bytes(2), np.uint8)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", launch(r, csa=csa)))
    t.start()
    while r.mem[0x100] == 0:        # a wave is spinning
        threading.Event().wait(0.001)
    while not r.engine.preempt():
        threading.Event().wait(0.001)
    t.join()
    first = out["r"]
    assert first.status == "preempted"
    saved = first.resume.saved
    assert saved and all(compute.csa_slot_header(csa, slot)["workgroup"] == wg
                         for wg, slot in saved)
    assert all(compute.csa_slot_header(csa, slot)["magic"] == compute.CSA_MAGIC
               for _, slot in saved)
    assert first.pc != 0 and int.from_bytes(r.mem[0x300:0x304], "little") < 6
    assert r.engine.preempt() is False          # nothing runs: dropped
    r.mem[0x200] = 1
    final = launch(r, csa=csa, resume=first.resume)
    assert final.status == "ok"
    mem = r.mem.copy()
    mem[0x100:0x104] = plain.mem[0x100:0x104]
    assert mem.tobytes() == plain.mem.tobytes()
    assert int.from_bytes(r.mem[0x300:0x304], "little") == 6
    assert final.counters["dispatches"] == 0 and first.counters["dispatches"] == 1
    assert first.counters["waves"] + final.counters["waves"] == 12


def test_csa_contents_equal_on_both_executors():
    """One worker thread: the core stops at the reference's instruction and writes the
    same bytes to the CSA (layout: kmd/hw/compute.py)."""
    areas = []
    for kind in ("ref", "core1"):
        r = rig(kind)
        csa = np.zeros(compute.csa_bytes(1), np.uint8)
        r.engine.preempt_after(41)
        res = SAMPLE_RUNS["matmul_tiled"](_with_csa(r, csa))
        assert res.status == "preempted" and len(res.resume.saved) == 1
        areas.append((csa.tobytes(), res.resume.saved, res.resume.pending, res.pc,
                      res.instructions, res.workgroup, res.wave))
    assert areas[0] == areas[1]
    h = compute.csa_slot_header(np.frombuffer(areas[0][0], np.uint8), 0)
    assert h["nwaves"] == 2 and h["lds_bytes"] > 0


def _with_csa(r, csa):
    engine = r.engine

    class WithCsa:
        def dispatch(self, pt, code_va, **kw):
            return engine.dispatch(pt, code_va, csa=csa, **kw)
    r.engine = WithCsa()
    return r


def test_resume_checks(kind):
    r = rig(kind)
    r.engine.preempt_after(3)
    res = r.run(SPIN.replace("s_cbranch_scc1 spin", "s_nop"), (2, 1, 1), (64, 1, 1),
                user_data=UD, sgprs=24, vgprs=8)
    assert res.status == "preempted"
    with pytest.raises(ValueError, match="another dispatch"):
        r.run(SPIN, (3, 1, 1), (64, 1, 1), user_data=UD, sgprs=24, vgprs=8, resume=res.resume)
    with pytest.raises(TypeError):
        r.run(SPIN, (2, 1, 1), (64, 1, 1), user_data=UD, sgprs=24, vgprs=8, resume=object())
    with pytest.raises(ValueError, match="csa"):
        r.run(SPIN, (2, 1, 1), (64, 1, 1), user_data=UD, sgprs=24, vgprs=8,
              csa=np.zeros(SLOT - 4096, np.uint8))


# out[i] = out[i] * 3 + lid + wg, 100 times over, for i = wg * 64 + lid: a long
# workgroup (about 1,200 instructions), so a preempted worker is almost always inside one.
LOOP = """
    s_lshl_b32 s5, s16, 6
    v_add_u32 v1, v0, s5
    v_lshl_b32 v1, v1, 2
    global_load_dword v2, v1, s[2:3]
    s_mov_b32 s6, 0
loop:
    v_mul_lo_u32 v2, v2, 3
    v_add_u32 v2, v2, v0
    v_add_u32 v2, v2, s16
    s_add_u32 s6, s6, 1
    s_cmp_lt_u32 s6, 100
    s_cbranch_scc1 loop
    global_store_dword v1, v2, s[2:3]
    s_endpgm
"""


@pytest.mark.parametrize("kind", ["core1", "core2"])
def test_big_grid_preempted_many_times(kind):
    """1100 workgroups: the core hands them out in chunks; preempted with both workers
    inside a workgroup, two workgroups wait in the CSA and must come back one per
    worker (a chunk holding both would leave no slot for the next save)."""
    def run(r):
        r.put(0, np.arange(1100 * 64, dtype=np.uint32))
        return r.run(LOOP, (1100, 1, 1), (64, 1, 1), user_data=UD, sgprs=24, vgprs=4)
    parts = assert_same_as_unpreempted(kind, run, [20000, 5000, 5000, 5000, 5000])
    assert len(parts) == 6
    assert all(1 <= len(p.resume.saved) <= (2 if kind == "core2" else 1) for p in parts[:-1])


# SPIN with a counter per workgroup (at 0x80000), bumped on every turn of the spin.
SPIN_COUNTING = SPIN.replace("""spin:
""", """    s_lshl_b32 s7, s16, 2
    v_mov_b32 v6, s7
    global_atomic_add_u32 off, v2, v1, s[2:3], 0x104
spin:
    global_atomic_add_u32 off, v6, v1, s[2:3], 0x80000
""")


def test_two_saved_workgroups_come_back_one_per_worker():
    """Two workers each spinning in a workgroup of a chunked grid are preempted: both
    workgroups go to the CSA; on resume each worker takes one (their spin counters move
    again), a second preemption saves both again, and the end result is that of a run
    that never spun."""
    def launch(r, **kw):
        return r.run(SPIN_COUNTING, (1100, 1, 1), (64, 1, 1), user_data=UD, sgprs=24,
                     vgprs=8, **kw)

    def in_thread(fn):
        out = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        return t, out

    def turns(r, wg):
        return int(r.mem[0x80000 + 4 * wg:0x80004 + 4 * wg].view(np.uint32)[0])

    def preempt(r, t):
        while not r.engine.preempt():
            threading.Event().wait(0.001)
        t.join()

    plain = rig("core2")
    plain.mem[0x200] = 1
    assert launch(plain).status == "ok"
    r = rig("core2")
    csa = np.zeros(compute.csa_bytes(2), np.uint8)
    t, out = in_thread(lambda: launch(r, csa=csa))
    while r.mem[0x104:0x108].view(np.uint32)[0] < 64:    # two workgroups' first waves
        threading.Event().wait(0.001)
    preempt(r, t)
    first = out[0]
    assert first.status == "preempted" and len(first.resume.saved) == 2
    before = {wg: turns(r, wg) for wg, _ in first.resume.saved}
    t, out = in_thread(lambda: launch(r, csa=csa, resume=first.resume))
    while any(turns(r, wg) == n for wg, n in before.items()):
        threading.Event().wait(0.001)
    preempt(r, t)
    second = out[0]
    assert second.status == "preempted"
    assert sorted(wg for wg, _ in second.resume.saved) == sorted(before)
    assert second.counters["waves"] == 0        # nothing new was launched
    r.mem[0x200] = 1
    assert launch(r, csa=csa, resume=second.resume).status == "ok"
    for m in (r.mem, plain.mem):
        m[0x100:0x108] = 0
        m[0x80000:0x80000 + 4 * 1100] = 0
    assert r.mem.tobytes() == plain.mem.tobytes()
