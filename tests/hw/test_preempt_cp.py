"""The command processor keeps its place when preempted (docs/preemption.md): inside a
DISPATCH_DIRECT (the waves go to the CSA), at a WAIT_REG_MEM, in a chained IB; run()
with the result's resume continues there, and the memory is that of an unpreempted run."""
import struct
import threading

import numpy as np
import pytest

from kmd.hw import _core, compute, cu_ref, ref
from kmd.hw import cp as C
from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE
from vgpu import pm4 as P
from vgpu.asm import assemble
from vgpu.pm4 import Pm4Ib

from .test_preempt_compute import LOOP

IB, DATA, CODE = 0x100000, 0x200000, 0x300000

# test_preempt_compute's LOOP, 9 turns: out[i] = out[i] * 3 + lid + wg, 9 times over.
KERNEL = assemble(LOOP.replace("s_cmp_lt_u32 s6, 100", "s_cmp_lt_u32 s6, 9"))

IMPLS = {"core": (_core.PageTable, lambda ih: _core.ComputeEngine("comp", ih, threads=2)),
         "ref": (ref.PageTable, lambda ih: cu_ref.ComputeEngine("comp", ih))}


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    return IMPLS[request.param]


class Gpu:
    def __init__(self, impl):
        table, engine = impl
        self.pt = table()
        self.bufs = {va: np.zeros(65536, np.uint8) for va in (IB, DATA, CODE)}
        self.pt.map(IB, self.bufs[IB], 0, 65536, PTE_READ)
        self.pt.map(DATA, self.bufs[DATA], 0, 65536, PTE_READ | PTE_WRITE)
        self.pt.map(CODE, self.bufs[CODE], 0, 65536, PTE_READ | PTE_EXEC)
        self.bufs[CODE][:len(KERNEL.code)] = np.frombuffer(KERNEL.code, np.uint8)
        self.ih = InterruptRing()
        self.cp = C.CommandProcessor("comp_1.0.0", self.ih, engine(self.ih))
        self.csa = np.zeros(compute.csa_bytes(2), np.uint8)

    def put_ib(self, at, ib):
        self.bufs[IB][at:at + len(ib) * 4] = np.frombuffer(ib.tobytes(), np.uint8)

    def run(self, at, ndw, resume=None):
        return self.cp.run(self.pt, IB + at, ndw, ctx_id=1, ring_id=0, resume=resume,
                           csa=self.csa)


def program(gpu):
    """Outer IB at 0x2000 (write, chained IB, fence) around an inner IB at 0x1000 with
    two dependent dispatches and a write between them. Returns the outer IB's dwords."""
    inner = (Pm4Ib().set_program(CODE, P.rsrc1(4, 24), P.rsrc2(4)).set_num_threads(64)
             .set_user_data([0, 0, DATA & 0xFFFFFFFF, DATA >> 32]).dispatch_direct(5)
             .write_data(DATA + 0x8004, [2]).dispatch_direct(5))
    gpu.put_ib(0x1000, inner)
    outer = (Pm4Ib().write_data(DATA + 0x8000, [1]).indirect_buffer(IB + 0x1000, len(inner))
             .release_mem(DATA + 0x8010, 0x55, data_sel=P.DATA_SEL_32))
    gpu.put_ib(0x2000, outer)
    gpu.bufs[DATA][:5 * 64 * 4] = np.arange(5 * 64 * 4, dtype=np.uint8)
    return len(outer)


def test_dispatch_preempted_resumed_through_the_chain(impl):
    plain = Gpu(impl)
    n = program(plain)
    r0 = plain.run(0x2000, n)
    assert r0.status == "ok" and r0.dispatches == 2
    for point in (0, 3, 17, 40, 101):
        gpu = Gpu(impl)
        program(gpu)
        gpu.cp.preempt_after(point)
        parts = [gpu.run(0x2000, n)]
        first = parts[0]
        assert first.status == "preempted" and first.opcode == P.PKT3_DISPATCH_DIRECT
        assert [f[0] for f in first.resume.frames] == [IB + 0x2000, IB + 0x1000]
        assert first.resume.dispatch is not None
        assert struct.unpack_from("<I", gpu.bufs[DATA], 0x8010) == (0,)  # fence not yet
        gpu.cp.preempt_after(point + 5)     # preempted again, in one of the dispatches
        while parts[-1].status == "preempted":
            parts.append(gpu.run(0x2000, n, resume=parts[-1].resume))
            gpu.cp.preempt_after(None)
        assert parts[-1].status == "ok"
        assert gpu.bufs[DATA].tobytes() == plain.bufs[DATA].tobytes()
        assert sum(p.dispatches for p in parts) == 2
        assert sum(p.counters["instructions"] for p in parts) == r0.counters["instructions"]
        assert sum(p.counters["dispatches"] for p in parts) == 2


def test_wait_reg_mem_preempted_in_a_chained_ib(impl):
    gpu = Gpu(impl)
    inner = Pm4Ib().write_data(DATA + 4, [7]).wait_reg_mem(DATA, 5, func=P.WAIT_FUNC_GE) \
        .write_data(DATA + 8, [9])
    gpu.put_ib(0x1000, inner)
    outer = Pm4Ib().indirect_buffer(IB + 0x1000, len(inner)).write_data(DATA + 12, [11])
    gpu.put_ib(0x2000, outer)
    out = []
    t = threading.Thread(target=lambda: out.append(gpu.run(0x2000, len(outer))))
    t.start()
    while struct.unpack_from("<I", gpu.bufs[DATA], 4) != (7,):
        threading.Event().wait(0.001)
    while not gpu.cp.preempt():
        threading.Event().wait(0.001)
    t.join()
    r = out[0]
    assert (r.status, r.opcode, r.packet_offset) == ("preempted", P.PKT3_WAIT_REG_MEM, 5)
    assert [(va, off) for va, _, off in r.resume.frames] == [(IB + 0x2000, 0), (IB + 0x1000, 5)]
    assert r.resume.dispatch is None
    assert gpu.cp.preempt() is False and not gpu.cp.abort()   # idle: dropped
    gpu.pt.write(DATA, struct.pack("<I", 5))
    r = gpu.run(0x2000, len(outer), resume=r.resume)
    assert r.status == "ok"
    assert struct.unpack_from("<4I", gpu.bufs[DATA], 0) == (5, 7, 9, 11)
    with pytest.raises(ValueError, match="resume"):
        gpu.run(0x1000, len(inner), resume=r.resume or C.CpResume([(IB, (), 0)], {}))


def test_abort_of_a_resumed_job(impl):
    gpu = Gpu(impl)
    n = program(gpu)
    gpu.cp.preempt_after(10)
    r = gpu.run(0x2000, n)
    assert r.status == "preempted"
    ib = Pm4Ib().wait_reg_mem(DATA + 0x9000, 1)
    gpu.put_ib(0x3000, ib)
    out = []
    t = threading.Thread(target=lambda: out.append(gpu.run(0x3000, len(ib))))
    t.start()
    while not gpu.cp.abort():
        threading.Event().wait(0.001)
    t.join()
    assert out[0].status == "aborted"
    r = gpu.run(0x2000, n, resume=r.resume)
    assert r.status == "ok"
