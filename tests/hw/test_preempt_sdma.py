"""SDMA preemption at packet boundaries (docs/preemption.md), on both engines: a long
COPY_LINEAR / CONSTANT_FILL runs in SDMA_CHUNK_BYTES pieces with a preemption point
between two; a preempted run resumed (several times) leaves the bytes, IH entries and
summed counters of an unpreempted one."""
import struct
import threading

import numpy as np
import pytest

from kmd.hw import sdma as S
from kmd.hw.mmu import PTE_READ

from .conftest import RW, arena

IB_VA = 0x10_0000
SRC_VA = 0x1000_0000
DST_VA = 0x2000_0000
MiB = 1 << 20
SIZE = 10 * MiB


class Rig:
    def __init__(self, hw, ih):
        self.pt = hw.PageTable()
        self.ih = ih
        self.engine = hw.SdmaEngine("sdma0", ih)
        self.ibbuf = np.zeros(4096, np.uint8)
        self.src = arena(SIZE, 3)
        self.dst = arena(SIZE, 4)
        self.pt.map(IB_VA, self.ibbuf, 0, 4096, PTE_READ)
        self.pt.map(SRC_VA, self.src, 0, SIZE, RW)
        self.pt.map(DST_VA, self.dst, 0, SIZE, RW)

    def load(self, ib: S.SdmaIb) -> int:
        raw = ib.tobytes()
        self.ibbuf[:len(raw)] = np.frombuffer(raw, np.uint8)
        return len(ib)

    def run(self, n, **kw):
        return self.engine.run(self.pt, IB_VA, n, ctx_id=2, ring_id=1, **kw)


def long_ib():
    """Two 4 MiB copies (one overlapping itself: not cut), a 3 MiB + 5 byte dword
    fill and a byte fill, a fence and a trap between them."""
    return (S.SdmaIb().copy_linear(DST_VA + 3, SRC_VA + 1, 4 * MiB)
            .trap(7).constant_fill(DST_VA + 5 * MiB + 2, 0xA1B2C3D4, 3 * MiB + 5)
            .copy_linear(SRC_VA + 4096, SRC_VA, 4 * MiB)
            .constant_fill(SRC_VA + 8 * MiB, 0x5A, MiB + 77, S.SDMA_FILLSIZE_BYTE)
            .fence(DST_VA + 9 * MiB, 0x1234))


COUNTED = ("packets", "bytes_moved", "bytes_read", "bytes_written")


def test_long_packets_preempted_between_chunks(hw, ih):
    plain = Rig(hw, ih)
    n = plain.load(long_ib())
    r0 = plain.run(n)
    want_ih = [(e.src_id, e.data) for e in ih.drain()]
    assert r0.status == "ok"
    # Boundaries: 6 packet starts, 3 chunk starts in the first copy, 3 in the dword
    # fill, 1 in the byte fill; the overlapping copy runs whole.
    for point in range(0, 15):
        rig = Rig(hw, ih)
        rig.load(long_ib())
        rig.engine.preempt_after(point)
        parts = [rig.run(n)]
        while parts[-1].status == "preempted":
            parts.append(rig.run(n, resume=parts[-1].resume))
        assert parts[-1].status == "ok"
        assert len(parts) == (2 if point < 13 else 1), point
        assert np.array_equal(rig.dst, plain.dst) and np.array_equal(rig.src, plain.src)
        assert [(e.src_id, e.data) for e in ih.drain()] == want_ih
        for name in COUNTED:
            assert sum(getattr(p, name) for p in parts) == getattr(r0, name), name
        summed = {}
        for p in parts:
            for op, k in p.packet_ops.items():
                summed[op] = summed.get(op, 0) + k
        assert summed == r0.packet_ops
        if point in (1, 2, 3):      # inside the first copy, after `point` MiB
            assert (parts[0].packet_offset, parts[0].resume.done) == (0, point * MiB)


def test_preempted_several_times(hw, ih):
    plain = Rig(hw, ih)
    n = plain.load(long_ib())
    plain.run(n)
    rig = Rig(hw, ih)
    rig.load(long_ib())
    parts, resume = [], None
    while True:
        rig.engine.preempt_after(1)
        parts.append(rig.run(n, resume=resume))
        if parts[-1].status != "preempted":
            break
        resume = parts[-1].resume
    assert len(parts) == 13
    assert np.array_equal(rig.dst, plain.dst) and np.array_equal(rig.src, plain.src)


def test_poll_preempted_and_resumed(hw, ih):
    rig = Rig(hw, ih)
    ib = (S.SdmaIb().fence(DST_VA, 1).poll_regmem(DST_VA + 4, 9, 0xFFFFFFFF, S.SDMA_FUNC_EQ)
          .fence(DST_VA + 8, 3))
    rig.dst[:12] = 0
    n = rig.load(ib)
    out = []
    t = threading.Thread(target=lambda: out.append(rig.run(n)))
    t.start()
    while rig.dst[0] != 1:
        threading.Event().wait(0.001)
    while not rig.engine.preempt():
        threading.Event().wait(0.001)
    t.join()
    r = out[0]
    assert (r.status, r.packet_offset, r.opcode, r.packets) == ("preempted", 4, S.SDMA_OP_POLL_REGMEM, 1)
    assert rig.engine.preempt() is False        # idle: dropped, the next run is not touched
    rig.pt.write(DST_VA + 4, struct.pack("<I", 9))
    r = rig.run(n, resume=r.resume)
    assert r.status == "ok" and struct.unpack_from("<3I", rig.dst, 0) == (1, 9, 3)
    with pytest.raises(ValueError, match="resume"):
        rig.run(n - 1, resume=out[0].resume)


def test_abort_wins_over_preempt(hw, ih):
    rig = Rig(hw, ih)
    n = rig.load(S.SdmaIb().poll_regmem(DST_VA + 4, 9, 0xFFFFFFFF, S.SDMA_FUNC_EQ))
    rig.dst[4:8] = 0
    out = []
    t = threading.Thread(target=lambda: out.append(rig.run(n)))
    t.start()
    while not rig.engine.abort():
        threading.Event().wait(0.001)
    rig.engine.preempt()
    t.join()
    assert out[0].status == "aborted"
