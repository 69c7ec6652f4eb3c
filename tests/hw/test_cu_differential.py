"""Differential test of the two compute executors (docs/isa.md 10): the Cython core
(kmd.hw._core.ComputeEngine, two worker threads) against the reference (kmd.hw.cu_ref),
also each preempted at random points and resumed (docs/preemption.md).

The same program runs on both; memory must be equal byte for byte, the ComputeResults
equal field by field (state of the reported wave, counters, fault) and the IH entries
equal.  Inputs: 240 generated valid, race-free programs, the six sample kernels, and one
program per fault kind (also in a later workgroup, so the first fault in workgroup order
is the one both report).
"""
import random
from pathlib import Path

import numpy as np
import pytest

from kmd.hw import _core, compute, cu_ref, ref
from kmd.hw.mmu import PTE_READ, PTE_WRITE
from vgpu import isa as I
from vgpu.asm import assemble

from .isa_gen import CODE_VA, KARG_VA, MEM_VA, Rig, random_program
from .preempting import SUMMED, WAVE_FIELDS, Preempting

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kernels"
UD = [0, 0, MEM_VA & 0xFFFFFFFF, MEM_VA >> 32]


def rigs(threads: int = 2):
    def core(name, ih):
        return _core.ComputeEngine(name, ih, threads=threads)
    return (Rig(cu_ref.ComputeEngine, ref.PageTable), Rig(core, _core.PageTable))


def same(run, threads: int = 2):
    """run(rig) on both executors; asserts equal results, memory and IH entries."""
    out = []
    for rig in rigs(threads):
        r = run(rig)
        out.append((r, rig.mem.tobytes(), [(e.src_id, e.data) for e in rig.ih.drain()]))
    (r_ref, mem_ref, ih_ref), (r_core, mem_core, ih_core) = out
    assert r_core == r_ref
    assert mem_core == mem_ref
    assert ih_core == ih_ref
    return r_ref


@pytest.mark.parametrize("seed", range(240))
def test_random_program(seed):
    prog = random_program(seed)
    r = same(lambda rig: rig.run_program(prog))
    assert r.status == "ok"


@pytest.mark.parametrize("seed", range(160))
def test_random_wide_program(seed):
    """Programs that mix the 64-bit operations (docs/isa.md 4.8) into the 32-bit ones."""
    prog = random_program(seed, wide=True)
    assert "64" in prog.text
    r = same(lambda rig: rig.run_program(prog))
    assert r.status == "ok"


# -- sample kernels ----------------------------------------------------------------------------
def sample(name):
    return assemble((SAMPLES / f"{name}.s").read_text(), f"{name}.s")


def _floats(rig, off, n, seed, scale=1.0):
    x = (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)
    rig.put(off, x)


SAMPLE_RUNS = {
    "vector_add": lambda rig: (_floats(rig, 0, 1000, 1), _floats(rig, 0x1000, 1000, 2),
                               rig.run(sample("vector_add"), (16, 1, 1), (64, 1, 1),
                                       {"a": MEM_VA, "b": MEM_VA + 0x1000,
                                        "c": MEM_VA + 0x2000, "n": 1000}))[-1],
    "saxpy": lambda rig: (_floats(rig, 0, 900, 3), _floats(rig, 0x1000, 900, 4),
                          rig.run(sample("saxpy"), (15, 1, 1), (64, 1, 1),
                                  {"x": MEM_VA, "y": MEM_VA + 0x1000, "a": -1.75,
                                   "n": 900}))[-1],
    "reduce_sum": lambda rig: (_floats(rig, 0, 1000, 5),
                               rig.run(sample("reduce_sum"), (16, 1, 1), (64, 1, 1),
                                       {"x": MEM_VA, "out": MEM_VA + 0x1000, "n": 1000}))[-1],
    "matmul_tiled": lambda rig: (_floats(rig, 0, 24 * 32, 6), _floats(rig, 0x1000, 32 * 40, 7),
                                 rig.run(sample("matmul_tiled"), (5, 3, 1), (8, 8, 1),
                                         {"a": MEM_VA, "b": MEM_VA + 0x1000,
                                          "c": MEM_VA + 0x3000, "m": 24, "n": 40,
                                          "k": 32}))[-1],
    "softmax": lambda rig: (_floats(rig, 0, 7 * 150, 8, 4.0),
                            rig.run(sample("softmax"), (7, 1, 1), (64, 1, 1),
                                    {"x": MEM_VA, "y": MEM_VA + 0x2000, "n": 150}))[-1],
    "relu_gelu": lambda rig: (_floats(rig, 0, 500, 9, 3.0),
                              rig.run(sample("relu_gelu"), (8, 1, 1), (64, 1, 1),
                                      {"x": MEM_VA, "relu": MEM_VA + 0x1000,
                                       "gelu": MEM_VA + 0x2000, "n": 500}))[-1],
}


def test_full_wave_global_access_over_two_pages():
    # Lane l reads dword (l % 16) of row l // 16, rows 2 KiB apart and the second row
    # across a page boundary (the engine's two-page fast path); then every lane stores
    # to one of 8 addresses in reverse order (the highest lane wins), and to a permuted
    # row spanning two pages.
    text = """
    v_and_b32 v4, v0, 15
    v_lshr_b32 v5, v0, 4
    v_mul_lo_u32 v5, v5, 2040
    v_lshl_b32 v4, v4, 2
    v_add_u32 v4, v4, v5
    global_load_dword v6, v4, s[2:3], 0xfc0
    v_and_b32 v7, v0, 7
    v_lshl_b32 v7, v7, 2
    global_store_dword v7, v6, s[2:3], 0x4000
    v_sub_u32 v8, 31, v0
    v_lshl_b32 v8, v8, 2
    global_store_dword v8, v0, s[2:3], 0x5fc0
    s_endpgm
    """
    def run(rig):
        rig.put(0, np.arange(4096, dtype=np.uint32))
        return rig.run(text, (2, 1, 1), (32, 1, 1), user_data=UD, sgprs=24, vgprs=9)
    r = same(run)
    assert r.status == "ok"


# (offset of lanes 0-15, of lanes 16-31, an unmapped page): rows in two pages; one row
# twice (a store's upper half wins); halves overlapping by 8 dwords; a half across a
# page boundary (the lane loop runs); the upper half's load, or store, on an unmapped
# page (a load writes nothing, a store keeps lanes 0-15); offsets wrapping 2^32.
HALF_WAVE_CASES = {"two_pages": (0x40, 0x1880, None), "same_row": (0x2000, 0x2000, None),
                   "overlap": (0x2000, 0x2020, None), "page_crossing": (0x0fe0, 0x3000, None),
                   "load_unmapped": (0x3000, 0x5000, 0x5000),
                   "store_unmapped": (0x3000, 0x5000, 0xd000),
                   "wrap": (0xffffffe0, 0x100, None)}


@pytest.mark.parametrize("case", sorted(HALF_WAVE_CASES))
def test_full_wave_global_half_waves(case):
    # Each half-wave of a full wave loads 16 consecutive dwords, then stores 16 at
    # 0x8000 further (a 16-wide block's tile rows: the engine copies each half at once).
    lo, hi, hole = HALF_WAVE_CASES[case]
    text = f"""
    v_and_b32 v4, v0, 15
    v_lshl_b32 v4, v4, 2
    v_cmp_lt_u32 vcc, v0, 16
    v_mov_b32 v5, {hi}
    v_mov_b32 v6, {lo}
    v_cndmask_b32 v5, v5, v6, vcc
    v_add_u32 v4, v4, v5
    global_load_dword v7, v4, s[2:3], 0
    v_add_u32 v7, v7, v0
    global_store_dword v4, v7, s[2:3], 0x8000
    s_endpgm
    """
    def run(rig):
        rig.put(0, np.arange(0x8000 // 4, dtype=np.uint32) * 3)
        if hole is not None:
            rig.pt.unmap(MEM_VA + hole, 0x1000)
        return rig.run(text, (1, 1, 1), (32, 1, 1), user_data=UD, sgprs=24, vgprs=8)
    r = same(run)
    assert (r.status == "ok") == (hole is None and case != "wrap"), r


@pytest.mark.parametrize("last", ["read_only", "unmapped", "other_buffer"])
def test_translations_of_a_block_of_pages(last):
    # The core's TLB fills a missed page's 8-page block at once: pages of one block from
    # another host buffer, read-only or unmapped must translate as page by page. A load
    # from the block's first page, then one from page 3 (another buffer), then a store
    # to page 2 (read-only, unmapped, or the other buffer).
    va = MEM_VA + 0x40000
    text = f"""
    s_mov_b32 s20, {va}
    s_mov_b32 s21, 0
    v_lshl_b32 v4, v0, 2
    global_load_dword v5, v4, s[20:21], 0
    global_load_dword v6, v4, s[20:21], 0x3000
    v_add_u32 v5, v5, v6
    global_store_dword v4, v5, s[2:3], 0x100
    global_store_dword v4, v5, s[20:21], 0x2000
    s_endpgm
    """
    def run(rig):
        other = (np.arange(2048, dtype=np.uint32) * 7).view(np.uint8)     # two pages
        rig.put(0x40000, np.arange(1024, dtype=np.uint32))
        rig.pt.unmap(va + 0x2000, 0x2000)
        rig.pt.map(va + 0x3000, other, 0, 0x1000, PTE_READ | PTE_WRITE)
        if last == "read_only":
            rig.pt.map(va + 0x2000, rig.mem, 0x42000, 0x1000, PTE_READ)
        elif last == "other_buffer":
            rig.pt.map(va + 0x2000, other, 0x1000, 0x1000, PTE_READ | PTE_WRITE)
        r = rig.run(text, (1, 1, 1), (32, 1, 1), user_data=UD, sgprs=24, vgprs=8)
        rig.mem[0x80000:0x80000 + other.size] = other     # compared with the arena
        return r
    r = same(run)
    assert (r.status == "ok") == (last == "other_buffer"), r


@pytest.mark.parametrize("fault", [False, True])
def test_full_wave_lds_half_waves(fault):
    # Half-waves of 16 consecutive dwords (the engine copies them), overlapping halves
    # (the upper half wins), one dword per half (the last lane of each half wins), pairs
    # of both patterns (ds_read2_b32), then optionally a read whose upper lanes run past
    # the LDS (the first bad lane faults).
    text = f"""
    v_and_b32 v4, v0, 15
    v_lshl_b32 v4, v4, 2
    v_lshr_b32 v5, v0, 4
    v_lshl_b32 v6, v5, 6
    v_add_u32 v7, v4, v6
    ds_write_b32 v7, v0, 0
    v_lshl_b32 v8, v5, 3
    v_add_u32 v8, v8, v4
    v_add_u32 v13, v0, 100
    ds_write_b32 v8, v13, 64
    v_lshl_b32 v9, v5, 2
    ds_write_b32 v9, v0, 200
    ds_read_b32 v10, v7, 0
    ds_read_b32 v11, v9, 200
    ds_read_b32 v12, v8, 60
    v_lshl_b32 v13, v0, 2
    global_store_dword v13, v10, s[2:3], 0
    global_store_dword v13, v11, s[2:3], 0x100
    global_store_dword v13, v12, s[2:3], 0x200
    ds_read2_b32 v[10:11], v4 offset0:48 offset1:16
    ds_read2_b32 v[11:12], v9 offset0:1 offset1:60
    global_store_dword v13, v10, s[2:3], 0x300
    global_store_dword v13, v11, s[2:3], 0x400
    global_store_dword v13, v12, s[2:3], 0x500
    {"ds_read_b32 v10, v7, 200" if fault else ""}
    s_endpgm
    """
    r = same(lambda rig: rig.run(text, (2, 1, 1), (64, 1, 1), user_data=UD, sgprs=24,
                                 vgprs=14, lds_bytes=256))
    assert r.status == ("fault" if fault else "ok")


# Float atomic adds from several workgroups round differently in another order, so a
# kernel that sums floats across workgroups is only deterministic on one worker thread
# (docs/isa.md 1.2: only commutative integer atomics are order-free).
ORDER_SENSITIVE = {"reduce_sum"}


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_sample_kernel(name):
    r = same(SAMPLE_RUNS[name], threads=1 if name in ORDER_SENSITIVE else 2)
    assert r.status == "ok" and r.lane_instructions > 0


def test_sample_read_unmapped_faults_alike():
    r = same(lambda rig: rig.run(sample("read_unmapped"), (1, 1, 1), (64, 1, 1),
                                 {"src": 0x7000_0000, "dst": MEM_VA}))
    assert (r.status, r.reason) == ("fault", "unmapped")


# -- every fault kind ------------------------------------------------------------------------
# Programs run with grid (4, 1, 1) x block (40, 1, 1) (two waves per workgroup); the
# `s_cmp_eq_u32 s16, K` guard makes only workgroup K fault, after the others ran a while.
FAULT_BODIES = {
    "illegal_opcode": ".inst 0x00000000000000ff",
    "illegal_zero_word": ".inst 0x0",
    "illegal_operand": f".inst {I.encode(I.FMT_ALU, I.OP_S_MOV_B32, 20, I.OPR_VGPR + 1):#x}",
    "illegal_branch": "s_branch 4",
    "bad_register": "v_mov_b32 v12, 0",
    "unmapped_load": "v_mov_b32 v4, 0\n v_mov_b32 v5, 0x7000\n global_load_dword v6, v[4:5], off, 8",
    "unmapped_store_upper_lanes": f"v_lshl_b32 v4, v0, 2\n global_store_dword v4, v0, s[2:3], "
                                  f"{256 * 4096 - 64}",
    "permission_store": f"s_mov_b32 s20, {CODE_VA}\n s_mov_b32 s21, 0\n v_lshl_b32 v4, v0, 2\n"
                        "global_store_dword v4, v0, s[20:21]",
    "permission_atomic": f"s_mov_b32 s20, {KARG_VA}\n s_mov_b32 s21, 0\n v_mov_b32 v4, 0\n"
                         "global_atomic_add_u32 v5, v4, v0, s[20:21]",
    "misaligned_global": "v_mov_b32 v4, 2\n global_load_dword v5, v4, s[2:3]",
    "misaligned_dwordx2": "v_mov_b32 v4, 4\n global_load_dwordx2 v[5:6], v4, s[2:3]",
    "unmapped_store_dwordx2": "v_mov_b32 v4, 0\n v_mov_b32 v5, 0x7000\n "
                              "global_store_dwordx2 v[4:5], v[4:5], off",
    # a whole wave of consecutive qwords (the core's one-translation fast path)
    "unmapped_store_dwordx2_wave": f"v_lshl_b32 v4, v0, 3\n global_store_dwordx2 v4, v[4:5], "
                                   f"s[2:3], {256 * 4096}",
    "permission_store_dwordx2_wave": f"s_mov_b32 s20, {CODE_VA}\n s_mov_b32 s21, 0\n "
                                     "v_lshl_b32 v4, v0, 3\n global_store_dwordx2 v4, v[4:5], s[20:21]",
    "misaligned_scalar": "s_load_dword s20, s[2:3], 2",
    "unmapped_scalar": "s_mov_b32 s20, 0\n s_mov_b32 s21, 0x7000\n s_load_dwordx4 s[20:23], s[20:21]",
    "misaligned_lds": "v_mov_b32 v4, 2\n ds_read_b32 v5, v4",
    "lds_bounds": "v_mov_b32 v4, 12\n ds_write_b32 v4, v4, 4",
    # a full wave (the engine's fast LDS path) whose upper lanes are out of range, or
    # one of whose lanes is misaligned: the fault is the first bad lane's
    "lds_bounds_upper_lanes": "v_lshl_b32 v4, v0, 2\n ds_write_b32 v4, v0, 0\n"
                              " ds_read_b32 v5, v4, 0",
    "misaligned_lds_one_lane": "v_and_b32 v4, v0, 3\n v_lshl_b32 v4, v4, 2\n v_mov_b32 v5, 2\n"
                               " v_cmp_eq_u32 vcc, v0, 7\n v_cndmask_b32 v4, v4, v5, vcc\n"
                               " ds_write_b32 v4, v0, 0\n ds_read_b32 v6, v4, 0",
    # a pair whose second address is out of range from the lane that reads dword 1 on
    "lds_bounds_read2": "v_lshl_b32 v4, v0, 2\n ds_read2_b32 v[5:6], v4 offset1:3",
    "trap": "s_trap 0x42",
    "fetch_unmapped": "s_branch 0x7ff00",
    # the body starts at pc 56: branch into the kernarg page (readable, not executable)
    "fetch_permission": f"s_branch {KARG_VA - CODE_VA - 64}",
}


@pytest.mark.parametrize("faulting_wg", [0, 2])
@pytest.mark.parametrize("kind", sorted(FAULT_BODIES))
def test_fault(kind, faulting_wg):
    text = f"""
    v_mov_b32 v7, 0x1234
    v_lshl_b32 v8, v0, 2
    s_lshl_b32 s22, s16, 8
    v_add_u32 v8, v8, s22
    global_store_dword v8, v0, s[2:3], 0x10000    ; each workgroup leaves a trace
    s_cmp_eq_u32 s16, {faulting_wg}
    s_cbranch_scc0 done
    {FAULT_BODIES[kind]}
done:
    s_endpgm
    """
    def run(rig):
        return rig.run(text, (4, 1, 1), (40, 1, 1), user_data=UD, sgprs=24, vgprs=10,
                       lds_bytes=16)
    out = []
    for rig in rigs():
        r = run(rig)
        traces = rig.mem[0x10000:0x10000 + 256 * faulting_wg + 160]
        out.append((r, rig.mem[:0x10000].tobytes(), traces.tobytes(),
                    [(e.src_id, e.data) for e in rig.ih.drain()]))
    assert out[0][0].status == "fault" and out[0][0].workgroup == (faulting_wg, 0, 0)
    # Memory of the workgroups up to the faulting one is equal; the core's second thread
    # may have run later workgroups too (docs/hw.md).
    assert out[1] == out[0]


def test_misaligned_program_address():
    r = same(lambda rig: rig.engine.dispatch(rig.pt, CODE_VA + 4, sgprs=20, vgprs=3,
                                             lds_bytes=0, grid=(3, 1, 1), block=(1, 1, 1),
                                             user_data=[]))
    assert (r.reason, r.fault.access) == ("misaligned", "exec")


def test_fetch_past_the_code_mapping():
    r = same(lambda rig: rig.engine.dispatch(rig.pt, 0x5000_0000, sgprs=20, vgprs=3,
                                             lds_bytes=0, grid=(2, 1, 1), block=(1, 1, 1),
                                             user_data=[]))
    assert r.reason == "unmapped"


# -- random preemption points (docs/preemption.md) -------------------------------------------
@pytest.mark.parametrize("seed", range(160))
def test_random_program_preempted(seed):
    """Each executor preempted by its instruction trigger at one to three random points
    (one per part) and resumed from its CSA: the memory and final wave state of its
    unpreempted run, and the counters summed over the parts, equal to the other's."""
    prog = random_program(seed, wide=seed % 2 == 1)
    rng = random.Random(seed)
    outs = []
    for plain, cut in zip(rigs(), rigs()):
        r0 = plain.run_program(prog)
        assert r0.status == "ok"
        points = [rng.randrange(r0.instructions + 1) for _ in range(rng.randint(1, 3))]
        cut.engine = Preempting(cut.engine, points, np.zeros(compute.csa_bytes(2), np.uint8))
        r1 = cut.run_program(prog)
        parts = cut.engine.parts
        assert cut.mem.tobytes() == plain.mem.tobytes()
        assert [getattr(r1, f) for f in WAVE_FIELDS] == [getattr(r0, f) for f in WAVE_FIELDS]
        assert sum(p.instructions for p in parts) == r0.instructions
        for name in SUMMED:
            assert sum(p.counters[name] for p in parts) == r0.counters[name], name
        if isinstance(cut.engine.engine, cu_ref.ComputeEngine):     # one worker: exact
            assert (parts[0].status == "preempted") == (points[0] < r0.instructions)
        outs.append((plain.mem.tobytes(), [getattr(r0, f) for f in WAVE_FIELDS]))
    assert outs[0] == outs[1]
