"""s_barrier_grid (docs/isa.md 4.1), the grid barrier of cooperative dispatches, on both
executors: every workgroup waits until all of the dispatch's have reached it (the
waiting ones held as a preempted workgroup is, the rest run), then they continue; LDS
and registers survive it; a workgroup past the engine's capacity that reaches it
faults; a cooperative dispatch is not preempted."""
import numpy as np
import pytest

from kmd.hw import _core, compute, cu_ref, ref
from vgpu import isa

from vgpu.asm import assemble

from .isa_gen import CODE_VA, MEM_VA, Rig
from .preempting import SUMMED

UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]
N = 0x4000          # byte offset of the second output
M = 0x8000          # byte offset of the third

# Thread t of workgroup g (64 threads, two waves; G = s4 workgroups) writes g*64+t+1 to
# word g*64+t and t*7 to its LDS word; after the grid barrier it copies the word of
# the same thread of workgroup (g+1) % G to N (0 if that workgroup had not written
# yet: the test of the barrier), then adds its own LDS word (kept across the
# barrier); after a second barrier, the N word of workgroup (g+2) % G to M.
NEIGHBOURS = """
    s_lshl_b32 s5, s16, 6              ; g * 64
    v_add_u32 v3, v0, s5               ; global id
    v_add_u32 v4, v3, 1
    v_lshl_b32 v5, v3, 2
    global_store_dword v5, v4, s[2:3], 0
    v_mul_lo_u32 v6, v0, 7
    v_lshl_b32 v7, v0, 2
    ds_write_b32 v7, v6, 0
    s_barrier_grid
    s_add_u32 s6, s16, 1
    s_cmp_lt_u32 s6, s4
    s_cselect_b32 s6, s6, 0            ; (g + 1) % G
    s_lshl_b32 s6, s6, 6
    v_add_u32 v8, v0, s6
    v_lshl_b32 v8, v8, 2
    global_load_dword v9, v8, s[2:3], 0
    ds_read_b32 v10, v7, 0
    v_add_u32 v9, v9, v10
    global_store_dword v5, v9, s[2:3], 0x4000
    s_barrier_grid
    s_add_u32 s6, s16, 2
    s_sub_u32 s7, s6, s4
    s_cmp_lt_u32 s6, s4
    s_cselect_b32 s6, s6, s7           ; (g + 2) % G for G >= 2
    s_lshl_b32 s6, s6, 6
    v_add_u32 v8, v0, s6
    v_lshl_b32 v8, v8, 2
    global_load_dword v9, v8, s[2:3], 0x4000
    global_store_dword v5, v9, s[2:3], 0x8000
    s_endpgm
"""
ASM = f".lds 256\n{NEIGHBOURS}"

ENGINES = {
    "core1": lambda name, ih: _core.ComputeEngine(name, ih, threads=1),
    "core2": lambda name, ih: _core.ComputeEngine(name, ih, threads=2),
    "ref": cu_ref.ComputeEngine,
}
TABLES = {"core1": _core.PageTable, "core2": _core.PageTable, "ref": ref.PageTable}


@pytest.fixture(params=sorted(ENGINES))
def kind(request):
    return request.param


def rig(kind: str) -> Rig:
    return Rig(ENGINES[kind], TABLES[kind])


def expected(groups: int):
    t = np.arange(64)
    first = np.concatenate([(g * 64 + t + 1) for g in range(groups)]).astype(np.uint32)
    second = np.concatenate([first[((g + 1) % groups) * 64:][:64] + t * 7
                             for g in range(groups)]).astype(np.uint32)
    third = np.concatenate([second[((g + 2) % groups) * 64:][:64] for g in range(groups)])
    return first, second, third


@pytest.mark.parametrize("groups", [2, 3, 8])
def test_every_workgroup_sees_every_other_ones_writes(kind, groups):
    r = rig(kind)
    ud = UD + [groups]
    res = r.run(ASM, (groups, 1, 1), (64, 1, 1), user_data=ud)
    assert res.status == "ok", res
    first, second, third = expected(groups)
    assert (r.u32(0, 64 * groups) == first).all()
    assert (r.u32(N, 64 * groups) == second).all()
    assert (r.u32(M, 64 * groups) == third).all()
    assert res.counters["barriers"] == 2 * 2 * groups      # two waves, two barriers each


def test_a_workgroup_barrier_still_works_beside_it(kind):
    prog = """
    v_lshl_b32 v3, v0, 2
    ds_write_b32 v3, v0, 0
    s_barrier
    v_sub_u32 v4, 63, v0
    v_lshl_b32 v4, v4, 2
    ds_read_b32 v5, v4, 0
    s_barrier_grid
    s_lshl_b32 s5, s16, 6
    v_add_u32 v6, v0, s5
    v_lshl_b32 v6, v6, 2
    global_store_dword v6, v5, s[2:3], 0
    s_endpgm
    """
    r = rig(kind)
    res = r.run(".lds 256\n" + prog, (3, 1, 1), (64, 1, 1), user_data=UD)
    assert res.status == "ok", res
    assert (r.u32(0, 192) == np.tile(63 - np.arange(64), 3)).all()


def test_same_final_state_and_counters_on_both(kind):
    a, b = rig("ref"), rig(kind)
    ra = a.run(ASM, (5, 1, 1), (64, 1, 1), user_data=UD + [5])
    rb = b.run(ASM, (5, 1, 1), (64, 1, 1), user_data=UD + [5])
    assert a.mem.tobytes() == b.mem.tobytes()
    for f in ("status", "pc", "workgroup", "wave", "exec", "sgprs", "vgprs", "instructions",
              "lane_instructions"):
        assert getattr(ra, f) == getattr(rb, f), f
    for name in SUMMED:                     # the reference has no TLB to count
        assert ra.counters[name] == rb.counters[name], name


def test_capacity_is_the_resident_workgroups_of_the_compute_units():
    cap = compute.grid_barrier_capacity((64, 1, 1), 24, 12, 256, 2)
    assert cap == 2 * isa.max_resident_workgroups(64, 24, 12, 256) == 32
    assert compute.grid_barrier_capacity((1024, 1, 1), 104, 128, 0, 2) == 0    # 32 waves at 128 VGPRs
    assert isa.max_resident_workgroups(256, 24, 40, 0) == 5          # 10 wave slots x 4 SIMDs / 8 waves
    assert isa.max_resident_workgroups(64, 24, 12, 40000) == 1       # LDS-limited


def test_past_the_capacity_the_barrier_faults(kind):
    r = rig(kind)
    obj = assemble(ASM)
    threads = 1 if kind == "core1" else 2
    cap = compute.grid_barrier_capacity((64, 1, 1), obj.sgprs, obj.vgprs, obj.lds_bytes, threads)
    res = r.run(obj, (cap + 1, 1, 1), (64, 1, 1), user_data=UD + [cap + 1])
    assert res.status == "fault" and res.reason == "illegal_instruction"
    assert res.workgroup == (cap, 0, 0) and res.wave == 0
    words = np.frombuffer(obj.code, np.uint64)
    assert res.pc == 8 * int(np.flatnonzero(words == isa.OP_S_BARRIER_GRID)[0])
    assert (r.u32(N, 64) == 0).all()        # nobody passed the barrier


def test_a_cooperative_dispatch_is_the_one_whose_code_has_the_barrier(kind):
    r = rig(kind)
    r.load(ASM)
    assert compute.window_has_grid_barrier(r.pt, CODE_VA)
    r.load("v_mov_b32 v1, 0\n s_barrier\n s_endpgm")
    assert not compute.window_has_grid_barrier(r.pt, CODE_VA)


def test_preempt_is_refused_during_a_cooperative_dispatch(kind):
    """The held workgroups are not in the CSA: preempt() says no, as between IBs."""
    r = rig(kind)
    r.engine.preempt_after(10)
    res = r.run(ASM, (4, 1, 1), (64, 1, 1), user_data=UD + [4])
    assert res.status == "ok"
    assert (r.u32(M, 256) == expected(4)[2]).all()
    r.engine.preempt_after(None)


# Marks mem[0x100], spins until mem[0x200] is non-zero, then passes a grid barrier.
SPIN_THEN_BARRIER = """
    v_mov_b32 v1, 1
    v_mov_b32 v2, 0
    global_store_dword v2, v1, s[2:3], 0x100
spin:
    global_load_dword v3, v2, s[2:3], 0x200
    v_readfirstlane_b32 s4, v3
    s_cmp_eq_u32 s4, 0
    s_cbranch_scc1 spin
    s_barrier_grid
    s_lshl_b32 s5, s16, 2
    v_mov_b32 v4, s5
    global_store_dword v4, v1, s[2:3], 0x1000
    s_endpgm
"""


def test_preempt_from_another_thread_is_refused_while_it_runs(kind):
    import threading
    import time
    r = rig(kind)
    out = {}
    t = threading.Thread(target=lambda: out.update(res=r.run(SPIN_THEN_BARRIER, (3, 1, 1), (32, 1, 1),
                                                             user_data=UD)))
    t.start()
    deadline = time.monotonic() + 10
    while r.u32(0x100, 1)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert r.engine.cooperative
    assert r.engine.preempt() is False          # refused, as between IBs
    r.mem[0x200] = 1
    t.join(10)
    assert out["res"].status == "ok"
    assert (r.u32(0x1000, 3) == 1).all()
    assert not r.engine.cooperative
