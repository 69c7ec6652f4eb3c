"""PM4 DMA_DATA (the CP DMA, opcode 0x50) on the compute ring's command processor:
the copy and fill forms Mesa's GFX9 CP DMA and libdrm's tests emit, SAIC/DAIC,
NOWHERE, the faults, the abort of a long copy, the encoding and the disassembly."""
import struct
import threading

import numpy as np
import pytest

from kmd.hw import cp as C
from kmd.hw import InterruptRing
from kmd.hw.ih import IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT
from vgpu import pm4 as P
from vgpu.pm4 import Pm4Ib

from .test_cp import DATA, IB, mem, run, u32  # noqa: F401  (fixture)

SRC, DST = DATA, DATA + 0x8000


def fill_src(mem, data: bytes, off=0):
    mem[1][DATA][off: off + len(data)] = np.frombuffer(data, np.uint8)


def test_encoding_is_soc15d_and_mesa():
    ib = Pm4Ib().dma_data(0x1122334455, 0x66778899AA, 100)
    hdr, control, src_lo, src_hi, dst_lo, dst_hi, command = ib.dwords
    assert hdr == P.pm4_type3_header(0x50, 6) == 0xC0055000      # PACKET3(PACKET3_DMA_DATA, 5)
    assert control == 3 << 29 | 3 << 20 | 1 << 31                  # SRC_SEL L2, DST_SEL L2, CP_SYNC
    assert (src_lo, src_hi, dst_lo, dst_hi) == (0x778899AA, 0x66, 0x22334455, 0x11)
    assert command == 100
    fill = Pm4Ib().dma_fill(DST, 0xDEADBEEF, 64).dwords
    assert fill[1] >> 29 & 3 == P.DMA_SRC_DATA and fill[2] == 0xDEADBEEF
    with pytest.raises(ValueError):
        Pm4Ib().dma_data(0, 0, 1 << 26)


def test_copy(mem):
    payload = bytes(range(256)) * 3 + b"xyz"                       # 771 bytes: not dword sized
    fill_src(mem, payload)
    res, ih, _ = run(mem, Pm4Ib().dma_data(DST, SRC, len(payload)))
    assert res.status == "ok" and res.packets == 1 and res.bytes_moved == len(payload)
    assert bytes(mem[1][DATA][0x8000: 0x8000 + len(payload)]) == payload
    assert mem[1][DATA][0x8000 + len(payload)] == 0 and ih == []


def test_copy_with_sas_das_memory_forms(mem):
    """SRC_SEL 0 / DST_SEL 0 with SAS = DAS = 0 address memory as L2 does."""
    fill_src(mem, b"\x11\x22\x33\x44" * 4)
    res, _, _ = run(mem, Pm4Ib().dma_data(DST, SRC, 16, src_sel=P.DMA_SRC_ADDR, dst_sel=P.DMA_DST_ADDR,
                                          cp_sync=False))
    assert res.status == "ok" and u32(mem, 0x8000, 4) == (0x44332211,) * 4


def test_fill(mem):
    res, _, _ = run(mem, Pm4Ib().dma_fill(DST + 4, 0xCAFEF00D, 4096))
    assert res.status == "ok" and res.bytes_moved == 4096
    assert u32(mem, 0x8000, 1) == (0,)
    assert set(u32(mem, 0x8004, 1024)) == {0xCAFEF00D}
    assert u32(mem, 0x8004 + 4096, 1) == (0,)


def test_saic_repeats_the_first_source_dword_and_daic_keeps_the_last(mem):
    fill_src(mem, struct.pack("<4I", 7, 8, 9, 10))
    res, _, _ = run(mem, Pm4Ib().dma_data(DST, SRC, 16, command=P.DMA_CMD_SAIC))
    assert res.status == "ok" and u32(mem, 0x8000, 4) == (7, 7, 7, 7)
    res, _, _ = run(mem, Pm4Ib().dma_data(DST + 64, SRC, 16, command=P.DMA_CMD_DAIC))
    assert res.status == "ok" and u32(mem, 0x8040, 2) == (10, 0)


def test_nowhere_reads_and_writes_nothing(mem):
    fill_src(mem, b"\xff" * 64)
    res, ih, _ = run(mem, Pm4Ib().dma_data(DST, SRC, 64, dst_sel=P.DMA_DST_NOWHERE))
    assert res.status == "ok" and not mem[1][DATA][0x8000:0x8040].any()
    # a prefetch of memory that is not there is still a page fault
    res, ih, _ = run(mem, Pm4Ib().dma_data(DST, 0x7000000, 64, dst_sel=P.DMA_DST_NOWHERE))
    assert res.status == "fault" and res.reason == "unmapped" and ih[0].src_id == IH_SRC_PAGE_FAULT


def test_zero_bytes_moves_nothing(mem):
    res, _, _ = run(mem, Pm4Ib().dma_data(0x7000000, 0x7000000, 0))
    assert res.status == "ok" and res.bytes_moved == 0


@pytest.mark.parametrize("ib,reason", [
    (Pm4Ib().dma_data(DST, SRC, 16, src_sel=P.DMA_SRC_GDS), "illegal_packet"),
    (Pm4Ib().dma_data(DST, SRC, 16, dst_sel=P.DMA_DST_GDS), "illegal_packet"),
    (Pm4Ib().dma_data(DST, SRC, 16, src_sel=P.DMA_SRC_ADDR, command=P.DMA_CMD_SAS), "illegal_packet"),
    (Pm4Ib().dma_data(DST, SRC, 16, dst_sel=P.DMA_DST_ADDR, command=P.DMA_CMD_DAS), "illegal_packet"),
    (Pm4Ib().dma_fill(DST, 1, 6), "misaligned"),
    (Pm4Ib().dma_fill(DST + 2, 1, 8), "misaligned"),
    (Pm4Ib().dma_data(DST, SRC + 1, 8, command=P.DMA_CMD_SAIC), "misaligned"),
    (Pm4Ib().dma_data(DST + 2, SRC, 8, command=P.DMA_CMD_DAIC), "misaligned"),
    (Pm4Ib().raw(P.pm4_type3_header(P.PKT3_DMA_DATA, 5), 0, 0, 0, 0, 0), "illegal_packet"),
])
def test_refused_forms_fault(mem, ib, reason):
    res, ih, _ = run(mem, ib)
    assert res.status == "fault" and res.reason == reason and res.opcode == P.PKT3_DMA_DATA
    assert ih[0].src_id == IH_SRC_ILLEGAL_INST


def test_page_faults(mem):
    res, ih, _ = run(mem, Pm4Ib().dma_data(DST, 0x7000000, 16))
    assert res.status == "fault" and res.fault.access == "read" and res.fault.va == 0x7000000
    res, ih, _ = run(mem, Pm4Ib().dma_data(IB + 0x8000, SRC, 16))       # the IB BO is read-only
    assert res.status == "fault" and res.reason == "permission" and res.fault.access == "write"


def test_abort_stops_a_long_copy(mem, monkeypatch):
    """The TDR's abort is honoured between DMA steps: the copy stops part way."""
    monkeypatch.setattr(C, "DMA_STEP_BYTES", 4)
    pt, bufs = mem
    cp = C.CommandProcessor("comp_1.0.0", InterruptRing())
    started, go = threading.Event(), threading.Event()

    class SlowPt:
        """The page table, but the first source read waits until the abort is sent."""

        def __getattr__(self, name):
            return getattr(pt, name)

        def read(self, va, n):
            if va == SRC and n == 4:
                started.set()
                go.wait(5)
            return pt.read(va, n)

    fill_src(mem, b"\x5a" * 0x4000)
    ib = Pm4Ib().dma_data(DST, SRC, 0x4000).tobytes()
    bufs[IB][: len(ib)] = np.frombuffer(ib, np.uint8)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", cp.run(SlowPt(), IB, len(ib) // 4)))
    t.start()
    assert started.wait(5)
    assert cp.abort()
    go.set()
    t.join(10)
    assert out["r"].status == "aborted" and out["r"].opcode == P.PKT3_DMA_DATA
    copied = bytes(bufs[DATA][0x8000:0xC000])
    assert copied[:4] == b"\x5a" * 4 and copied[-4:] == bytes(4)


def test_disassembly():
    lines = P.disasm_pm4(Pm4Ib().dma_data(0x2000, 0x1000, 64).dma_fill(0x3000, 0xAB, 8)
                         .dma_data(0x2000, 0x1000, 4, command=P.DMA_CMD_SAIC).dwords)
    assert lines[0].endswith("DMA_DATA src=addr_l2:0x1000 dst=addr_l2:0x2000 bytes=64")
    assert lines[1].endswith("DMA_DATA data=0xab dst=addr_l2:0x3000 bytes=8")
    assert lines[2].endswith("bytes=4 saic")
