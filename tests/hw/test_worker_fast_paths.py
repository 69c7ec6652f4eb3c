"""The shortcuts a user-queue worker's tiny dispatches take (docs/userq.md, "Worker
cost"), each against the slower way it replaces: the Cython core's packed registers of
an ok result, its C counter table, the C sum of a run's counters, and the command
processor's inline SET_SH_REG and cached dispatch setup."""
import copy
import dataclasses
import pickle
import random
import struct

import numpy as np
import pytest

from kmd.hw import _core, cu_ref, l2_ref, ref
from kmd.hw import compute as C
from kmd.hw import cp as CP
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE
from vgpu import pm4 as P
from vgpu.asm import assemble

from .isa_gen import Rig

IB, DATA, CODE = 0x100000, 0x200000, 0x300000

KERNEL = """
    s_load_dword s4, s[0:1], 0
    v_add_u32 v1, s4, v0
    v_mov_b32 v2, 7
    s_mov_b32 s5, 0x1234
    s_endpgm
"""


def _run(engine, pt_cls, grid=(3, 1, 1), block=(40, 1, 1)):
    rig = Rig(engine, pt_cls)
    obj = assemble(KERNEL, "k.s")
    return rig.run(obj, grid, block)


def test_ok_result_registers_are_packed_until_read_and_equal_the_reference():
    core, want = _run(_core.ComputeEngine, _core.PageTable), _run(cu_ref.ComputeEngine, ref.PageTable)
    assert core.status == want.status == "ok"
    assert C.PACKED_REGS in core.__dict__ and "sgprs" not in core.__dict__
    assert core == want                     # dataclass equality reads sgprs and vgprs
    assert core.sgprs == want.sgprs and core.vgprs == want.vgprs
    assert core.sgprs is core.sgprs         # decoded once
    # made without the dataclass's __init__: every field there, as __init__ sets it
    assert type(core) is C.ComputeResult and core.resume is None and core.trap_code == 0
    rebuilt = C.ComputeResult(**{f.name: getattr(core, f.name) for f in dataclasses.fields(core)})
    assert rebuilt == core and rebuilt.counters == core.counters == want.counters | {
        k: core.counters[k] for k in ("tlb_hits", "tlb_misses", "pt_walks")}
    assert (core.workgroup, core.wave, core.exec, core.pc) == (want.workgroup, want.wave,
                                                                want.exec, want.pc)


def test_packed_registers_survive_copy_pickle_and_assignment():
    r = _run(_core.ComputeEngine, _core.PageTable)
    want_s = list(_run(_core.ComputeEngine, _core.PageTable).sgprs)
    assert pickle.loads(pickle.dumps(r)).sgprs == want_s
    assert copy.copy(r).vgprs == r.vgprs
    r2 = _run(_core.ComputeEngine, _core.PageTable)
    r2.sgprs = [1, 2]                       # a set attribute wins over the packed bytes
    assert r2.sgprs == [1, 2] and r2.vgprs == r.vgprs
    with pytest.raises(AttributeError):
        r.no_such_field
    assert not hasattr(C.ComputeResult("ok"), "no_such_field")


def test_c_counter_table_equals_dispatch_counters():
    rng = random.Random(7)
    codes = sorted(C._OP_EFFECTS)
    for trial in range(300):
        ops = {op: (rng.randrange(1, 1 << 20), rng.randrange(0, 1 << 25))
               for op in rng.sample(codes, rng.randrange(0, min(40, len(codes))))}
        kw = dict(waves=rng.randrange(100), lane_instructions=rng.randrange(1 << 30),
                  tlb_hits=rng.randrange(50), tlb_misses=rng.randrange(50),
                  walks=rng.randrange(80), dispatches=rng.randrange(2))
        l2 = dict(zip(_core.L2_COUNTERS, range(1, 6))) if trial % 3 == 0 else None
        got = _core.counters_of(ops, l2=dict(l2) if l2 else None, **kw)
        want = C.dispatch_counters(ops, l2=dict(l2) if l2 else None, **kw)
        assert got == want and list(got) == list(want)
    missing = next(op for op in range(256) if op not in C._OP_EFFECTS)
    assert _core.counters_of({missing: (1, 1)}, waves=1, lane_instructions=1) is None


def test_add_counters_equals_the_python_sum():
    rng = random.Random(3)
    for _ in range(100):
        names = [f"c{i}" for i in range(12)]
        mine = {n: rng.randrange(1000) for n in rng.sample(names, 6)}
        theirs = {n: rng.randrange(1000) for n in rng.sample(names, 8)}
        a, b = dict(mine), dict(mine)
        _core.add_counters(a, theirs)
        CP._add_counters_py(b, theirs)
        assert a == b and list(a) == list(b)


# -- the command processor ------------------------------------------------------------
@pytest.fixture
def mem():
    pt = _core.PageTable()
    bufs = {va: np.zeros(65536, np.uint8) for va in (IB, DATA, CODE)}
    pt.map(IB, bufs[IB], 0, 65536, PTE_READ)
    pt.map(DATA, bufs[DATA], 0, 65536, PTE_READ | PTE_WRITE)
    pt.map(CODE, bufs[CODE], 0, 65536, PTE_READ | PTE_EXEC)
    obj = assemble("v_mov_b32 v1, s0\n s_endpgm\n", "k.s")
    bufs[CODE][:len(obj.code)] = np.frombuffer(obj.code, np.uint8)
    return pt, bufs


def _cp_run(mem, dwords, l2=None):
    pt, bufs = mem
    data = struct.pack(f"<{len(dwords)}I", *dwords)
    bufs[IB][:len(data)] = np.frombuffer(data, np.uint8)
    ih = InterruptRing()
    cp = CP.CommandProcessor("comp_1.0.0", ih, cus=1, l2=l2)
    r = cp.run(pt, IB, len(dwords))
    return (r.status, r.reason, r.packet_offset, r.opcode, r.packets, list(r.packet_ops.items()),
            list(r.sh_regs.items()), r.dispatches, list(r.counters.items()), r.dispatch,
            [(f.va, f.offset) for f in r.ib_chain], r.fault, [(e.src_id, e.data) for e in ih.drain()],
            bytes(bufs[DATA][:64]))


def _l2():
    """An L2 model of the kind the command processor's compute engine takes (the
    reference twin's under VGPU_HW=ref, as kmd.hw.cp imported it)."""
    return l2_ref.L2Cache() if CP.REFERENCE else _core.L2Cache()


def _ib(*extra):
    ib = P.Pm4Ib().set_program(CODE, P.rsrc1(8, 24), P.rsrc2(2, 0)).set_num_threads(32, 1, 1)
    ib.set_user_data([9, 8]).dispatch_direct(2, 1, 1)
    ib.dwords.extend([P.PM4_NOP_FILLER] * 3)
    ib.set_sh_reg(P.COMPUTE_USER_DATA_0, 1, 2, 3).dispatch_direct(1, 1, 1)
    ib.release_mem(0, 0, P.DATA_SEL_NONE, event=P.EVENT_BOTTOM_OF_PIPE_TS, cache=P.RELEASE_WB)
    for e in extra:
        e(ib)
    return ib.release_mem(0, 0, P.DATA_SEL_NONE, event=P.EVENT_BOTTOM_OF_PIPE_TS).dwords


def _raw(*dw):
    return lambda ib: ib.dwords.extend(dw)


def _release(sel, n=7):
    return _raw(P.pm4_type3_header(P.PKT3_RELEASE_MEM, n), 0, sel, *[0] * (n - 2))


CASES = {
    "ok": (),
    "unknown register": (_raw(P.pm4_type3_header(P.PKT3_SET_SH_REG, 2), 0x100, 5),),
    "short SET_SH_REG": (_raw(P.pm4_type3_header(P.PKT3_SET_SH_REG, 1), P.COMPUTE_PGM_LO),),
    "truncated SET_SH_REG": (_raw(P.pm4_type3_header(P.PKT3_SET_SH_REG, 3), P.COMPUTE_PGM_LO, 1),),
    "no threads": (lambda ib: ib.set_sh_reg(P.COMPUTE_NUM_THREAD_X, 0), lambda ib: ib.dispatch_direct(1)),
    "17 user SGPRs": (lambda ib: ib.set_sh_reg(P.COMPUTE_PGM_RSRC2, 17 << P.RSRC2_USER_SGPR_SHIFT),
                      lambda ib: ib.dispatch_direct(1)),
    "no program": (lambda ib: ib.set_sh_reg(P.COMPUTE_PGM_LO, 0, 0), lambda ib: ib.dispatch_direct(1)),
    "no initiator": (lambda ib: ib.dispatch_direct(1, 1, 1, initiator=0),),
    "fence write": (lambda ib: ib.release_mem(DATA + 8, 77, P.DATA_SEL_32, event=P.EVENT_BOTTOM_OF_PIPE_TS),),
    "interrupt": (_release(2 << 24),),
    "bad dst_sel": (_release(3 << 16),),
    "bad data_sel": (_release(5 << 29),),
    "short RELEASE_MEM": (_release(0, 6),),
    "type 2": (_raw(0x80000000),),
    "predicated": (_raw(P.pm4_type3_header(P.PKT3_SET_SH_REG, 2) | 1, P.COMPUTE_PGM_LO, 5),),
}


@pytest.mark.parametrize("l2", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cp_fast_paths_equal_the_python_lines(mem, monkeypatch, case, l2):
    """The same IB three ways: the Python lines alone with no cached register range
    (every SET_SH_REG through _set_sh_reg), the Python lines with the ranges cached,
    and the Cython core's packet loop and counter sum (the default): equal results,
    faults, interrupts and memory, with and without an L2 model. The fast paths are
    installed by hand for the third run: with VGPU_HW=ref the command processor runs
    the Python lines by default, and the comparison must still be made."""
    runs = []
    for fast in (False, False, True):
        if not fast:
            monkeypatch.setattr(CP, "_simple_packets", None)
            monkeypatch.setattr(CP, "_add_counters", CP._add_counters_py)
            if not runs:
                CP._SH_RANGES_OK.clear()
        else:
            monkeypatch.setattr(CP, "_simple_packets", _core.simple_packets)
            monkeypatch.setattr(CP, "_add_counters", _core.add_counters)
        mem[1][DATA][:] = 0
        runs.append(_cp_run(mem, _ib(*CASES[case]), _l2() if l2 else None))
    assert runs[0] == runs[1] == runs[2]
    status = runs[0][0]
    assert status == ("ok" if case in ("ok", "fence write", "interrupt") else "fault")
    if case == "ok":
        assert runs[0][7] == 2 and dict(runs[0][6])[P.COMPUTE_USER_DATA_0 + 2] == 3


def test_cp_fast_loop_stops_for_abort_and_preempt(mem):
    """simple_packets runs nothing once the CP is asked to stop: the caller's checks see
    the request at that very packet."""
    ib = tuple(_ib())
    for flag in ("_abort", "_preempt"):
        cp = CP.CommandProcessor("comp_1.0.0", InterruptRing(), cus=1)
        setattr(cp, flag, True)
        regs, ops = {}, {}
        assert _core.simple_packets(cp, ib, 0, regs, ops, CP._SH_RANGES_OK, P.PM4_NOP_FILLER,
                                    P.PKT3_NOP, P.PKT3_SET_SH_REG, P.PM4_COUNT_MASK,
                                    P.PKT3_RELEASE_MEM, P.RELEASE_DST_TC_L2, True) == (0, 0, -1, -1)
        assert regs == ops == {}
