"""The compute ring's command processor (kmd/hw/cp.py) on a bare page table, with a
stand-in for the compute units where a dispatch's own work does not matter."""
import dataclasses
import struct
import threading
import time

import numpy as np
import pytest

from kmd.hw import cp as C
from kmd.hw import PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault, InterruptRing, PageTable
from kmd.hw.ih import IH_SRC_CP_EOP, IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT
from vgpu import pm4 as P
from vgpu.pm4 import Pm4Ib

IB, DATA, CODE = 0x100000, 0x200000, 0x300000


@dataclasses.dataclass
class FakeResult:
    status: str = "ok"
    reason: str | None = None
    fault: GpuFault | None = None
    counters: dict = dataclasses.field(default_factory=lambda: {"dispatches": 1, "waves": 2})


class FakeCompute:
    """Records dispatches; `script` gives the results to return, in order."""

    def __init__(self, *script):
        self.calls, self.script = [], list(script)
        self.spin = threading.Event()
        self.aborted = threading.Event()

    def dispatch(self, pt, code_va, **kw):
        self.calls.append(dict(code_va=code_va, **kw))
        r = self.script.pop(0) if self.script else FakeResult()
        if r == "spin":  # an endless kernel: only abort() ends it
            self.spin.set()
            self.aborted.wait(10)
            return FakeResult("aborted")
        return r

    def abort(self):
        if not self.spin.is_set():
            return False
        self.aborted.set()
        return True


@pytest.fixture
def mem():
    pt = PageTable()
    bufs = {va: np.zeros(65536, np.uint8) for va in (IB, DATA, CODE)}
    pt.map(IB, bufs[IB], 0, 65536, PTE_READ)
    pt.map(DATA, bufs[DATA], 0, 65536, PTE_READ | PTE_WRITE)
    pt.map(CODE, bufs[CODE], 0, 65536, PTE_READ | PTE_EXEC)
    return pt, bufs


def run(mem, ib, compute=None, at=0):
    pt, bufs = mem
    data = ib.tobytes() if isinstance(ib, Pm4Ib) else ib
    bufs[IB][at: at + len(data)] = np.frombuffer(data, np.uint8)
    ih = InterruptRing()
    cp = C.CommandProcessor("comp_1.0.0", ih, compute or FakeCompute())
    return cp.run(pt, IB + at, len(data) // 4, ctx_id=3, ring_id=2), ih.drain(), cp


def u32(mem, off, n=1):
    return struct.unpack_from(f"<{n}I", mem[1][DATA], off)


def test_header_and_register_offsets():
    assert P.pm4_type3_header(P.PKT3_NOP, 1) == 0xC0001000
    assert P.pm4_type3_header(P.PKT3_SET_SH_REG, 3) == 0xC0027600
    # Mesa sid.h byte addresses / 4 - SH base
    assert P.COMPUTE_PGM_LO == 0xB830 // 4 - 0x2C00
    assert P.COMPUTE_PGM_RSRC1 == 0xB848 // 4 - 0x2C00
    assert P.COMPUTE_USER_DATA_0 == 0xB900 // 4 - 0x2C00
    assert P.COMPUTE_NUM_THREAD_X == 0xB81C // 4 - 0x2C00
    assert P.decode_rsrc1(P.rsrc1(10, 20)) == (12, 24)
    assert P.decode_rsrc2(P.rsrc2(4, 1000)) == (4, 1024)


def test_write_release_and_nops(mem):
    ib = (Pm4Ib().nop().nop(3).acquire_mem().write_data(DATA, [1, 2, 3])
          .release_mem(DATA + 16, 0x1122334455667788).release_mem(DATA + 32, 7, P.DATA_SEL_32)
          .release_mem(DATA + 40, data_sel=P.DATA_SEL_TIMESTAMP))
    before = time.monotonic_ns()
    r, ih, _ = run(mem, ib)
    assert r.status == "ok" and r.packets == 7 and ih == []
    assert u32(mem, 0, 3) == (1, 2, 3)
    assert struct.unpack_from("<Q", mem[1][DATA], 16)[0] == 0x1122334455667788
    assert u32(mem, 32, 2) == (7, 0)
    assert struct.unpack_from("<Q", mem[1][DATA], 40)[0] >= before


def test_release_mem_interrupt(mem):
    r, ih, _ = run(mem, Pm4Ib().release_mem(DATA, 1, int_sel=P.INT_SEL_INT_WRITE_CONFIRM, int_ctx=9))
    assert r.status == "ok" and [(e.src_id, e.ring_id, e.ctx_id, e.data) for e in ih] == [(IH_SRC_CP_EOP, 2, 3, 9)]


def test_dispatch_takes_the_sh_registers(mem):
    ib = (Pm4Ib().set_program(CODE + 256, P.rsrc1(8, 120), P.rsrc2(3, 2048))
          .set_num_threads(64, 2).set_user_data([5, 6, 7, 8]).dispatch_direct(4, 3, 2))
    r, _, cp = run(mem, ib)
    assert r.status == "ok" and r.dispatches == 1
    call, = cp.compute.calls
    assert call == dict(code_va=CODE + 256, sgprs=104, vgprs=8, lds_bytes=2048, grid=(4, 3, 2),
                        block=(64, 2, 1), user_data=[5, 6, 7], ctx_id=3, ring_id=2,
                        resume=None, csa=None)
    assert r.sh_regs[P.COMPUTE_PGM_LO] == (CODE + 256) >> 8


def test_packets_and_dispatch_counters_are_summed(mem):
    ib = (Pm4Ib().set_program(CODE, P.rsrc1(4, 24), 0).set_num_threads(32)
          .dispatch_direct(1).dispatch_direct(2).raw(P.PM4_NOP_FILLER))
    r, _, _ = run(mem, ib)
    assert r.status == "ok"
    assert r.counters == {"dispatches": 2, "waves": 4}
    assert r.packet_ops == {P.PKT3_SET_SH_REG: 3, P.PKT3_DISPATCH_DIRECT: 2, P.PKT3_NOP: 1}
    assert sum(r.packet_ops.values()) == r.packets


def test_sh_registers_reset_per_ib(mem):
    pt, bufs = mem
    compute = FakeCompute()
    cp = C.CommandProcessor("c", InterruptRing(), compute)
    ib = Pm4Ib().set_program(CODE, P.rsrc1(4, 24), 0).set_num_threads(1).dispatch_direct(1)
    bufs[IB][:len(ib) * 4] = np.frombuffer(ib.tobytes(), np.uint8)
    assert cp.run(pt, IB, len(ib)).status == "ok"
    again = Pm4Ib().dispatch_direct(1)
    bufs[IB][:4 * len(again)] = np.frombuffer(again.tobytes(), np.uint8)
    r = cp.run(pt, IB, len(again))
    assert r.status == "fault" and r.reason == C.REASON_BAD_DISPATCH


@pytest.mark.parametrize("ib, reason", [
    (Pm4Ib().raw(0x00001234), C.REASON_ILLEGAL_PACKET),                        # type 0
    (Pm4Ib().raw(0x80000000), C.REASON_ILLEGAL_PACKET),                        # type 2
    (Pm4Ib().raw(P.pm4_type3_header(0x99, 1), 0), C.REASON_ILLEGAL_PACKET),     # unknown opcode
    (Pm4Ib().raw(P.pm4_type3_header(P.PKT3_DISPATCH_DIRECT, 3), 1, 1, 1), C.REASON_ILLEGAL_PACKET),
    (Pm4Ib().raw(P.pm4_type3_header(P.PKT3_NOP, 4), 0), C.REASON_TRUNCATED),
    (Pm4Ib().set_sh_reg(0x100, 1), C.REASON_BAD_REGISTER),
    (Pm4Ib().dispatch_direct(1), C.REASON_BAD_DISPATCH),                       # no program
    (Pm4Ib().set_program(CODE, P.rsrc1(4, 16), 0).set_num_threads(1).dispatch_direct(1),
     C.REASON_BAD_DISPATCH),                                                   # < 19 SGPRs
    (Pm4Ib().set_program(CODE, P.rsrc1(4, 24), 0).set_num_threads(1025).dispatch_direct(1), C.REASON_BAD_DISPATCH),
    (Pm4Ib().write_data(DATA + 2, [1]), C.REASON_MISALIGNED),
    (Pm4Ib().wait_reg_mem(DATA, 0, func=7), C.REASON_ILLEGAL_PACKET),
])
def test_bad_packets_fault(mem, ib, reason):
    r, ih, _ = run(mem, Pm4Ib().nop().raw(*ib.dwords))
    assert (r.status, r.reason, r.fault) == ("fault", reason, None)
    last = P.disasm_pm4(ib.dwords)[-1]       # the bad packet is the last one
    assert r.packet_offset == 1 + int(last.split(":")[0], 16)
    assert [(e.src_id, e.data) for e in ih] == [(IH_SRC_ILLEGAL_INST, r.packet_offset)]


def test_page_faults(mem):
    r, ih, _ = run(mem, Pm4Ib().write_data(0x900000, [1]))
    assert (r.status, r.reason, r.fault) == ("fault", "unmapped", GpuFault(0x900000, "write", "unmapped"))
    assert [(e.src_id, e.data) for e in ih] == [(IH_SRC_PAGE_FAULT, 0x900000)]
    r, _, _ = run(mem, Pm4Ib().release_mem(IB + 0x8000, 1))   # the IB is read-only
    assert (r.reason, r.fault.access) == ("permission", "write")
    pt, _ = mem
    r = C.CommandProcessor("c", InterruptRing(), FakeCompute()).run(pt, 0x800000, 4)
    assert (r.status, r.reason, r.opcode) == ("fault", "unmapped", -1)


def test_dispatch_fault_is_the_waves(mem):
    bad = FakeResult("fault", "unmapped", GpuFault(0x5000, "read", "unmapped"))
    ib = Pm4Ib().set_program(CODE, P.rsrc1(4, 24), 0).set_num_threads(32).dispatch_direct(1).release_mem(DATA, 1)
    r, ih, _ = run(mem, ib, FakeCompute(bad))
    assert (r.status, r.reason, r.fault, r.opcode, r.dispatch) == ("fault", "unmapped", bad.fault,
                                                                      P.PKT3_DISPATCH_DIRECT, bad)
    assert ih == []                   # the compute units push their own entry
    assert u32(mem, 0) == (0,)        # the fence after it never ran


def test_indirect_buffer_chain(mem):
    pt, bufs = mem
    inner = Pm4Ib().write_data(DATA + 8, [0xAB])
    bufs[IB][0x1000:0x1000 + len(inner) * 4] = np.frombuffer(inner.tobytes(), np.uint8)
    r, _, _ = run(mem, Pm4Ib().indirect_buffer(IB + 0x1000, len(inner)).write_data(DATA, [1]), at=0x2000)
    assert r.status == "ok" and u32(mem, 0, 3) == (1, 0, 0xAB) and len(r.ib_chain) == 1
    # a fault inside the chained IB names both levels
    bad = Pm4Ib().nop().raw(0x1)
    bufs[IB][0x1000:0x1000 + 8] = np.frombuffer(bad.tobytes(), np.uint8)
    r, _, _ = run(mem, Pm4Ib().nop(2).indirect_buffer(IB + 0x1000, 2), at=0x2000)
    assert r.reason == C.REASON_ILLEGAL_PACKET and r.packet_offset == 1
    assert [(f.va, f.offset) for f in r.ib_chain] == [(IB + 0x2000, 3), (IB + 0x1000, 1)]
    # an IB that calls itself is stopped at the depth limit
    loop = Pm4Ib().indirect_buffer(IB + 0x3000, 4)
    r, _, _ = run(mem, loop, at=0x3000)
    assert r.reason == C.REASON_IB_DEPTH and len(r.ib_chain) == P.MAX_IB_DEPTH + 1


def test_wait_reg_mem_waits_and_aborts(mem):
    pt, bufs = mem
    cp = C.CommandProcessor("c", InterruptRing(), FakeCompute())
    ib = Pm4Ib().wait_reg_mem(DATA, 5, func=P.WAIT_FUNC_GE).write_data(DATA + 4, [1])
    bufs[IB][:len(ib) * 4] = np.frombuffer(ib.tobytes(), np.uint8)
    out = []
    t = threading.Thread(target=lambda: out.append(cp.run(pt, IB, len(ib))))
    t.start()
    time.sleep(0.05)
    assert t.is_alive()
    pt.write(DATA, struct.pack("<I", 6))
    t.join(5)
    assert out[0].status == "ok" and u32(mem, 4) == (1,)
    pt.write(DATA, struct.pack("<I", 0))
    out.clear()
    t = threading.Thread(target=lambda: out.append(cp.run(pt, IB, len(ib))))
    t.start()
    time.sleep(0.05)
    assert cp.abort()
    t.join(5)
    assert (out[0].status, out[0].packet_offset, out[0].opcode) == ("aborted", 0, P.PKT3_WAIT_REG_MEM)
    assert not cp.abort()


def test_abort_reaches_a_running_dispatch(mem):
    pt, bufs = mem
    compute = FakeCompute("spin")
    cp = C.CommandProcessor("c", InterruptRing(), compute)
    ib = Pm4Ib().set_program(CODE, P.rsrc1(4, 24), 0).set_num_threads(1).dispatch_direct(1)
    bufs[IB][:len(ib) * 4] = np.frombuffer(ib.tobytes(), np.uint8)
    out = []
    t = threading.Thread(target=lambda: out.append(cp.run(pt, IB, len(ib))))
    t.start()
    assert compute.spin.wait(5)
    assert cp.abort()
    t.join(5)
    assert out[0].status == "aborted" and out[0].opcode == P.PKT3_DISPATCH_DIRECT


def test_disassembler_marks_the_packet():
    ib = Pm4Ib().set_program(0x400000, P.rsrc1(4, 8), P.rsrc2(2)).dispatch_direct(2).release_mem(0x1000, 5)
    lines = P.disasm_pm4(ib.dwords, mark=8)
    assert lines[0].strip().startswith("0000: SET_SH_REG COMPUTE_PGM_LO=0x4000")
    assert lines[2].startswith(">>> 0008: DISPATCH_DIRECT groups=2x1x1")
    assert "RELEASE_MEM" in lines[3] and "value64=0x5" in lines[3]
    assert "type-2" in P.disasm_pm4([0x80000000])[0]
