"""SdmaEngine: every packet, faults, POLL_REGMEM, abort, two engines at once."""
import struct
import threading
import time

import numpy as np
import pytest

from kmd.hw import sdma as S
from kmd.hw.ih import (IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT, IH_SRC_PROT_FAULT,
                       IH_SRC_TRAP, IhEntry)
from kmd.hw.mmu import PTE_READ, GpuFault

from .conftest import RW, arena

IB_VA = 0x10_0000
MEM_VA = 0x100_0000
MEM_SIZE = 64 * 4096


class Rig:
    """One VM with an IB buffer and a data buffer, and one engine."""

    def __init__(self, hw, ih):
        self.pt = hw.PageTable()
        self.ih = ih
        self.engine = hw.SdmaEngine("sdma0", ih)
        self.ibbuf = np.zeros(16 * 4096, np.uint8)
        self.mem = np.zeros(MEM_SIZE, np.uint8)
        self.pt.map(IB_VA, self.ibbuf, 0, self.ibbuf.nbytes, PTE_READ)
        self.pt.map(MEM_VA, self.mem, 0, MEM_SIZE, RW)

    def run(self, ib: S.SdmaIb, **kw) -> S.SdmaResult:
        raw = ib.tobytes()
        self.ibbuf[:len(raw)] = np.frombuffer(raw, np.uint8)
        return self.engine.run(self.pt, IB_VA, len(ib), **kw)

    def u32(self, off: int) -> int:
        return int(self.mem[off:off + 4].view(np.uint32)[0])


@pytest.fixture
def rig(hw, ih):
    return Rig(hw, ih)


def test_nop_skips_count_dwords(rig):
    # A NOP whose count covers a bogus dword: the bogus one must not execute.
    r = rig.run(S.SdmaIb().raw(S.sdma_header(S.SDMA_OP_NOP, 0, 1), 0xFFFFFFFF).nop())
    assert (r.status, r.packets, r.packet_offset, r.opcode) == ("ok", 2, 2, 0)


def test_copy_linear(rig):
    rig.mem[:8192] = arena(8192, 7)
    r = rig.run(S.SdmaIb().copy_linear(MEM_VA + 0x10000 + 3, MEM_VA + 5, 7000))
    assert (r.status, r.packets, r.bytes_moved) == ("ok", 1, 7000)
    assert (rig.mem[0x10003:0x10003 + 7000] == rig.mem[5:7005]).all()


def test_copy_count_uses_22_bits(rig):
    # Reserved bits [31:22] of the count dword are ignored, as on hardware.
    rig.mem[:16] = 9
    ib = S.SdmaIb().raw(S.sdma_header(S.SDMA_OP_COPY), (0x3FF << 22) | 15, 0,
                        MEM_VA, 0, MEM_VA + 4096, 0)
    assert rig.run(ib).bytes_moved == 16
    assert (rig.mem[4096:4112] == 9).all() and rig.mem[4112] == 0


def test_write_linear(rig):
    r = rig.run(S.SdmaIb().write_linear(MEM_VA + 4092, [1, 2, 3]))
    assert (r.status, r.bytes_moved) == ("ok", 12)
    assert rig.mem[4092:4104].view(np.uint32).tolist() == [1, 2, 3]


def test_fence_and_timestamp(rig):
    before = time.monotonic_ns()
    r = rig.run(S.SdmaIb().fence(MEM_VA + 64, 0xDEADBEEF).timestamp(MEM_VA + 128))
    after = time.monotonic_ns()
    assert r.status == "ok" and r.packets == 2 and r.bytes_moved == 0
    assert rig.u32(64) == 0xDEADBEEF
    stamp, = struct.unpack("<Q", rig.mem[128:136].tobytes())
    assert before <= stamp <= after


def test_trap_pushes_ih_entries(rig, ih):
    r = rig.run(S.SdmaIb().trap(5).fence(MEM_VA, 1).trap(0x1234567), ctx_id=3, ring_id=1)
    assert r.status == "ok" and r.packets == 3
    assert ih.drain() == [IhEntry(IH_SRC_TRAP, 1, 3, 5), IhEntry(IH_SRC_TRAP, 1, 3, 0x1234567)]


@pytest.mark.parametrize("fill_size,elem", [(S.SDMA_FILLSIZE_BYTE, 1), (S.SDMA_FILLSIZE_DWORD, 4)])
def test_constant_fill(rig, fill_size, elem):
    r = rig.run(S.SdmaIb().constant_fill(MEM_VA + 8, 0xA1B2C3D4, 4096 * 3, fill_size))
    assert (r.status, r.bytes_moved) == ("ok", 4096 * 3)
    region = rig.mem[8:8 + 4096 * 3]
    if elem == 1:
        assert (region == 0xD4).all()
    else:
        assert (region.view(np.uint32) == 0xA1B2C3D4).all()
    assert rig.mem[4096 * 3 + 8] == 0


def test_register_poll_is_a_no_op(rig):
    r = rig.run(S.SdmaIb().poll_regmem(0x1234, 1, mem_poll=False).fence(MEM_VA, 7))
    assert r.status == "ok" and rig.u32(0) == 7


@pytest.mark.parametrize("func,value,passes", [
    (S.SDMA_FUNC_ALWAYS, 0, True), (S.SDMA_FUNC_LT, 11, True), (S.SDMA_FUNC_LE, 10, True),
    (S.SDMA_FUNC_EQ, 10, True), (S.SDMA_FUNC_NE, 9, True), (S.SDMA_FUNC_GE, 10, True),
    (S.SDMA_FUNC_GT, 9, True), (S.SDMA_FUNC_LT, 10, False), (S.SDMA_FUNC_EQ, 11, False),
])
def test_poll_regmem_compare_functions(rig, func, value, passes):
    rig.mem[0:4] = np.array([0xF000000A], np.uint32).view(np.uint8)     # masked: 10
    ib = S.SdmaIb().poll_regmem(MEM_VA, value, mask=0xFF, func=func)
    if passes:
        assert rig.run(ib).status == "ok"
        return
    timer = threading.Timer(0.05, rig.engine.abort)
    timer.start()
    r = rig.run(ib)
    timer.join()
    assert (r.status, r.packets, r.packet_offset, r.opcode) == ("aborted", 0, 0, 8)


def test_poll_regmem_satisfied_by_another_thread(rig):
    ib = S.SdmaIb().poll_regmem(MEM_VA, 42).fence(MEM_VA + 4, 1)
    result = []
    t = threading.Thread(target=lambda: result.append(rig.run(ib)))
    t.start()
    time.sleep(0.02)
    assert rig.u32(4) == 0          # still waiting
    rig.mem[0:4] = np.array([42], np.uint32).view(np.uint8)
    t.join(10)
    assert result[0].status == "ok" and rig.u32(4) == 1


def test_poll_regmem_abort(rig, ih):
    ib = S.SdmaIb().fence(MEM_VA + 4, 1).poll_regmem(MEM_VA, 1).fence(MEM_VA + 4, 2)
    result = []
    t = threading.Thread(target=lambda: result.append(rig.run(ib)))
    t.start()
    while rig.u32(4) != 1:
        time.sleep(0.001)
    while not rig.engine.abort():   # False until run() has started
        time.sleep(0.001)
    t.join(10)
    r = result[0]
    assert (r.status, r.packets, r.packet_offset, r.opcode) == ("aborted", 1, 4, 8)
    assert rig.u32(4) == 1 and ih.drain() == []
    assert rig.engine.abort() is False      # idle: nothing to abort
    assert rig.run(S.SdmaIb().nop()).status == "ok"


def test_fault_unmapped_target(rig, ih):
    bad = MEM_VA + MEM_SIZE + 16
    r = rig.run(S.SdmaIb().fence(MEM_VA, 1).copy_linear(bad, MEM_VA, 64).fence(MEM_VA, 2),
                ctx_id=9)
    assert (r.status, r.reason, r.packet_offset, r.opcode, r.packets) == \
        ("fault", "unmapped", 4, 1, 1)
    assert r.fault == GpuFault(bad, "write", "unmapped")
    assert rig.u32(0) == 1
    assert ih.drain() == [IhEntry(IH_SRC_PAGE_FAULT, 0, 9, bad)]


def test_fault_read_only_target(rig, ih):
    r = rig.run(S.SdmaIb().write_linear(IB_VA + 8192, [1]))
    assert r.fault == GpuFault(IB_VA + 8192, "write", "permission")
    assert ih.drain() == [IhEntry(IH_SRC_PROT_FAULT, 0, 0, IB_VA + 8192)]


@pytest.mark.parametrize("ib", [
    S.SdmaIb().nop().raw(0x3F),                                     # unknown op
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_COPY, 1), *[0] * 6),  # tiled copy
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_TIMESTAMP, 0), 0, 0),  # TIMESTAMP_SET
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_CONST_FILL, 0, 1 << 14), 0, 0, 0, 0),
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_POLL_REGMEM, 0, 0xF000), 0, 0, 0, 0, 0),
])
def test_fault_illegal_opcode(rig, ih, ib):
    r = rig.run(ib)
    assert (r.status, r.reason, r.fault, r.packet_offset, r.packets) == \
        ("fault", "illegal_opcode", None, 1, 1)
    assert ih.drain() == [IhEntry(IH_SRC_ILLEGAL_INST, 0, 0, 1)]


@pytest.mark.parametrize("ib", [
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_COPY), 0, 0),
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_WRITE), MEM_VA, 0),
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_WRITE), MEM_VA, 0, 3, 1, 2),
    S.SdmaIb().nop().raw(S.sdma_header(S.SDMA_OP_NOP, 0, 5), 0),
])
def test_fault_truncated_packet(rig, ih, ib):
    r = rig.run(ib)
    assert (r.status, r.reason, r.packet_offset, r.packets) == ("fault", "truncated", 1, 1)
    assert ih.drain() == [IhEntry(IH_SRC_ILLEGAL_INST, 0, 0, 1)]


def test_fault_ib_unmapped(rig, ih):
    r = rig.engine.run(rig.pt, IB_VA + 16 * 4096 - 8, 4)
    assert (r.status, r.reason, r.packet_offset, r.opcode, r.packets) == \
        ("fault", "unmapped", 0, -1, 0)
    assert r.fault == GpuFault(IB_VA + 16 * 4096, "read", "unmapped")
    assert ih.drain() == [IhEntry(IH_SRC_PAGE_FAULT, 0, 0, IB_VA + 16 * 4096)]


def test_ib_needs_read_permission(hw, ih):
    pt = hw.PageTable()
    from kmd.hw.mmu import PTE_WRITE
    pt.map(IB_VA, np.zeros(4096, np.uint8), 0, 4096, PTE_WRITE)
    r = hw.SdmaEngine("sdma0", ih).run(pt, IB_VA, 1)
    assert r.fault == GpuFault(IB_VA, "read", "permission")


def test_empty_ib(rig):
    r = rig.engine.run(rig.pt, IB_VA, 0)
    assert (r.status, r.packets, r.packet_offset, r.opcode) == ("ok", 0, 0, -1)


def test_two_engines_in_parallel(hw, ih):
    """Lock-step handshake: each engine waits on the other's progress fence.

    Both IBs can only finish if both run() calls make progress at the same time,
    and between handshakes each does a large copy (GIL released in memmove).
    """
    pt = hw.PageTable()
    big = np.zeros(32 << 20, np.uint8)
    pt.map(MEM_VA, big, 0, big.nbytes, RW)
    ibs = np.zeros(2 * 4096 * 4, np.uint8)
    pt.map(IB_VA, ibs, 0, ibs.nbytes, PTE_READ)
    flag = [MEM_VA, MEM_VA + 4]
    steps = 20
    results: list = [None, None]
    engines = [hw.SdmaEngine(f"sdma{i}", ih) for i in range(2)]

    def build(me: int) -> S.SdmaIb:
        ib, other = S.SdmaIb(), 1 - me
        src, dst = MEM_VA + (1 << 20) + me * (15 << 20), MEM_VA + (8 << 20) + me * (15 << 20)
        for step in range(1, steps + 1):
            ib.copy_linear(dst, src, 4 << 20).fence(flag[me], step)
            ib.poll_regmem(flag[other], step, func=S.SDMA_FUNC_GE)
        return ib

    for i in range(2):
        raw = build(i).tobytes()
        ibs[i * 16384:i * 16384 + len(raw)] = np.frombuffer(raw, np.uint8)

    def go(i: int) -> None:
        results[i] = engines[i].run(pt, IB_VA + i * 16384, len(build(i)), ring_id=i)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.bytes_moved for r in results] == [steps * (4 << 20)] * 2
    assert big[0:8].view(np.uint32).tolist() == [steps, steps]


@pytest.mark.parametrize("overlap", [False, True])
def test_large_copies_keep_memmove_semantics(hw, ih, overlap):
    # Copies of 1 MiB and more use streaming stores in the core (from any alignment);
    # an overlapping copy must still behave as one memmove, a disjoint one must land
    # byte for byte.
    size, pt = 12 << 20, hw.PageTable()
    mem = arena(size, 3)
    want = mem.copy()
    ib = np.zeros(4096, np.uint8)
    pt.map(IB_VA, ib, 0, 4096, PTE_READ)
    pt.map(MEM_VA, mem, 0, size, RW)
    src, dst, n = (5, 1 << 20, (4 << 20) - 7) if overlap else (5, (6 << 20) + 3, (4 << 20) - 7)
    raw = S.SdmaIb().copy_linear(MEM_VA + dst, MEM_VA + src, n).tobytes()
    ib[:len(raw)] = np.frombuffer(raw, np.uint8)
    r = hw.SdmaEngine("sdma0", ih).run(pt, IB_VA, len(raw) // 4)
    want[dst:dst + n] = want[src:src + n].copy()
    assert r.status == "ok" and np.array_equal(mem, want)


@pytest.mark.parametrize("fill_size,offset", [(S.SDMA_FILLSIZE_DWORD, 0), (S.SDMA_FILLSIZE_DWORD, 5),
                                              (S.SDMA_FILLSIZE_BYTE, 3)])
def test_large_fills_match_the_pattern(hw, ih, fill_size, offset):
    size, pt, n = 6 << 20, hw.PageTable(), (4 << 20) - 9
    mem = np.zeros(size, np.uint8)
    ib = np.zeros(4096, np.uint8)
    pt.map(IB_VA, ib, 0, 4096, PTE_READ)
    pt.map(MEM_VA, mem, 0, size, RW)
    raw = S.SdmaIb().constant_fill(MEM_VA + offset, 0x11223344, n, fill_size).tobytes()
    ib[:len(raw)] = np.frombuffer(raw, np.uint8)
    r = hw.SdmaEngine("sdma0", ih).run(pt, IB_VA, len(raw) // 4)
    pattern = (np.full(1, 0x44, np.uint8) if fill_size == S.SDMA_FILLSIZE_BYTE
               else np.frombuffer(struct.pack("<I", 0x11223344), np.uint8))
    want = np.tile(pattern, -(-n // len(pattern)))[:n]
    assert r.status == "ok" and np.array_equal(mem[offset:offset + n], want)
    assert not mem[:offset].any() and not mem[offset + n:].any()



def test_bounded_says_which_ibs_a_direct_run_may_take(rig):
    """SdmaEngine.bounded (kmd/direct_run.py): IBs of at most SDMA_HELD_IB_DW dwords
    without COPY_LINEAR, CONSTANT_FILL or POLL_REGMEM, read where they are mapped;
    an unreadable IB is False (its run reports the fault); the same on both engines."""
    cases = [
        (S.SdmaIb().nop(), True),
        (S.SdmaIb().write_linear(MEM_VA, [1, 2, 3]).fence(MEM_VA + 64, 7).trap(), True),
        (S.SdmaIb().nop().copy_linear(MEM_VA, MEM_VA + 4096, 64), False),
        (S.SdmaIb().constant_fill(MEM_VA, 0, 64), False),
        (S.SdmaIb().poll_regmem(MEM_VA, 1), False),
    ]
    for ib, want in cases:
        words = ib.tobytes()
        rig.ibbuf[:len(words)] = np.frombuffer(words, np.uint8)
        assert rig.engine.bounded(rig.pt, IB_VA, len(words) // 4) is want, ib
        assert S.bounded_ib(memoryview(words).cast("I")) is want   # the twin agrees
    assert rig.engine.bounded(rig.pt, IB_VA, 0) is True
    assert rig.engine.bounded(rig.pt, IB_VA, S.SDMA_HELD_IB_DW + 1) is False   # too long to hold
    assert rig.engine.bounded(rig.pt, 0x7777_0000, 4) is False                 # not mapped
    assert rig.engine.bounded(rig.pt, MEM_VA - 8, 4) is False                  # runs off its mapping
