"""Performance counters of the engines (docs/observability.md): known counts from real
work, and the Cython core equal to the reference where both model the same thing."""
from pathlib import Path

import numpy as np
import pytest

from kmd.hw import _core, cu_ref, ref
from kmd.hw import sdma as S
from kmd.hw.compute import COMPUTE_COUNTERS, dispatch_counters
from kmd.hw.ih import InterruptRing
from vgpu import isa as I
from vgpu.asm import assemble, disassemble

from .conftest import RW
from .isa_gen import MEM_VA, Rig, random_program

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "kernels"
MMU = ("tlb_hits", "tlb_misses", "pt_walks")     # the reference has no TLB


def vector_add(rig, n):
    obj = assemble((SAMPLES / "vector_add.s").read_text(), "vector_add.s")
    rig.put(0, np.arange(n, dtype=np.float32))
    rig.put(4 * n, np.ones(n, np.float32))
    return obj, rig.run(obj, ((n + 63) // 64, 1, 1), (64, 1, 1),
                        {"a": MEM_VA, "b": MEM_VA + 4 * n, "c": MEM_VA + 8 * n, "n": n})


@pytest.mark.parametrize("engine,pt", [(cu_ref.ComputeEngine, ref.PageTable),
                                       (_core.ComputeEngine, _core.PageTable)])
def test_vector_add_counts_from_its_disassembly(engine, pt):
    """Every lane active (n a multiple of 64): each wave runs the whole program once."""
    n = 64 * 40
    rig = Rig(engine, pt)
    obj, r = vector_add(rig, n)
    assert r.status == "ok"
    names = [line.split()[0] for line in disassemble(obj.code).splitlines()
             if line.strip() and not line.rstrip().endswith(":")]
    names = [x for x in names if x in I.BY_NAME]
    waves = n // I.WAVE_SIZE
    c = r.counters
    assert c["dispatches"] == 1 and c["waves"] == waves
    assert c["instructions"] == len(names) * waves
    assert c["lane_instructions"] == len(names) * waves * I.WAVE_SIZE == r.lane_instructions
    assert c["valu"] == sum(x.startswith("v_") for x in names) * waves
    assert c["vmem"] == 3 * waves and c["smem"] == 3 * waves
    assert c["salu"] == (len(names) - c["valu"] // waves - 6) * waves
    # s_load_dwordx4 + x2 + dword per wave, two dword loads and one store per lane
    assert c["bytes_loaded"] == (16 + 8 + 4) * waves + 2 * 4 * n
    assert c["bytes_stored"] == 4 * n
    assert c["atomics"] == c["barriers"] == c["lds"] == 0


def test_core_tlb_counts_a_vector_add():
    rig = Rig(_core.ComputeEngine, _core.PageTable)
    _, r = vector_add(rig, 64 * 40)
    c = r.counters
    assert c["tlb_misses"] >= 1 and c["tlb_hits"] > c["tlb_misses"]
    assert c["pt_walks"] >= c["tlb_misses"]


@pytest.mark.parametrize("seed,wide", [(s, False) for s in range(0, 240, 8)] +
                         [(s, True) for s in range(0, 120, 8)])
def test_core_counts_like_the_reference(seed, wide):
    prog = random_program(seed, wide)
    got = Rig(_core.ComputeEngine, _core.PageTable).run_program(prog).counters
    want = Rig(cu_ref.ComputeEngine, ref.PageTable).run_program(prog).counters
    assert set(got) == set(want) == set(COMPUTE_COUNTERS)
    assert {k: v for k, v in got.items() if k not in MMU} == \
        {k: v for k, v in want.items() if k not in MMU}


def test_atomics_and_barriers_count_per_lane_and_per_wave():
    c = dispatch_counters({I.OP_GLOBAL_ATOMIC_ADD_U32: (2, 40), I.OP_DS_ADD_U32: (1, 32),
                           I.OP_S_BARRIER: (4, 128)}, waves=4, lane_instructions=200)
    assert (c["atomics"], c["barriers"]) == (72, 4)
    assert (c["bytes_loaded"], c["bytes_stored"]) == (160, 160)    # global atomics only
    assert (c["vmem"], c["lds"], c["salu"]) == (2, 1, 4)


# -- SDMA ----------------------------------------------------------------------------------------
IB_VA, SRC, DST = 0x10_0000, 0x20_0000, 0x40_0000


def sdma_rig(hw):
    pt = hw.PageTable()
    bufs = [np.zeros(1 << 20, np.uint8) for _ in range(3)]
    for va, buf in zip((IB_VA, SRC, DST), bufs):
        pt.map(va, buf, 0, buf.nbytes, RW)
    return pt, bufs


@pytest.mark.parametrize("hw", [_core, ref], ids=["core", "ref"])
def test_sdma_counts_bytes_walks_and_packets(hw):
    pt, bufs = sdma_rig(hw)
    ib = (S.SdmaIb().copy_linear(DST + 100, SRC + 4000, 10000)      # 4 src pages, 3 dst
          .constant_fill(DST + 65536, 0x55, 8192)                  # 2 pages
          .write_linear(DST + 4092, [1, 2])                        # 2 pages
          .fence(DST + 8, 7).nop())
    raw = np.array(ib.dwords, np.uint32).view(np.uint8)
    bufs[0][:raw.nbytes] = raw
    r = hw.SdmaEngine("sdma0", InterruptRing()).run(pt, IB_VA, len(ib.dwords))
    assert r.status == "ok"
    assert r.bytes_read == 10000
    assert r.bytes_written == 10000 + 8192 + 8 + 4
    assert r.pt_walks == 1 + (4 + 3) + 2 + 2 + 1
    assert r.packet_ops == {S.SDMA_OP_COPY: 1, S.SDMA_OP_CONST_FILL: 1, S.SDMA_OP_WRITE: 1,
                            S.SDMA_OP_FENCE: 1, S.SDMA_OP_NOP: 1}


@pytest.mark.parametrize("hw", [_core, ref], ids=["core", "ref"])
def test_sdma_fault_counts_only_completed_packets(hw):
    pt, bufs = sdma_rig(hw)
    ib = S.SdmaIb().copy_linear(DST, SRC, 64).copy_linear(0x7000_0000_0000, SRC, 64)
    raw = np.array(ib.dwords, np.uint32).view(np.uint8)
    bufs[0][:raw.nbytes] = raw
    r = hw.SdmaEngine("sdma0", InterruptRing()).run(pt, IB_VA, len(ib.dwords))
    assert r.status == "fault"
    assert (r.bytes_read, r.bytes_written, r.packet_ops) == (64, 64, {S.SDMA_OP_COPY: 1})
