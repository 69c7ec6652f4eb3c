"""Pure-Python twin of kmd.hw._core (selected with VGPU_HW=ref).

Written for clarity, not speed: one dict entry per page, numpy slices per page.
It defines the behaviour the Cython core must reproduce byte for byte; the
differential tests in tests/hw/test_differential.py hold them together.
"""
from __future__ import annotations

import struct
import threading
import time

import numpy as np

from kmd.hw.ih import (IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT, IH_SRC_PROT_FAULT,
                       IH_SRC_TRAP, InterruptRing)
from kmd.hw.mmu import (ACCESS_FLAG, PAGE_MASK, PAGE_SHIFT, PAGE_SIZE, PTE_EXEC, PTE_READ,
                        PTE_WRITE, GpuFault, PinnedBuffers, check_map_args, check_unmap_args)
from kmd.hw import sdma as S
from kmd.hw.run_control import RunControl

_VA_MASK = (1 << 64) - 1

__all__ = ["PageTable", "SdmaEngine", "InterruptRing", "GpuFault", "PTE_READ", "PTE_WRITE",
           "PTE_EXEC"]


class PageTable:
    """A per-file GPU VM: 4 KiB pages of host numpy buffers (see docs/hw.md)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ptes: dict[int, tuple[np.ndarray, int, int]] = {}  # page -> (buf, offset, flags)
        self._pinned: tuple | None = None

    # -- mapping -----------------------------------------------------------
    def map(self, va: int, buf: np.ndarray, buf_offset: int, size: int, flags: int) -> None:
        check_map_args(va, buf, buf_offset, size, flags)
        with self._lock:
            for i in range(size >> PAGE_SHIFT):
                self._ptes[(va >> PAGE_SHIFT) + i] = (buf, buf_offset + (i << PAGE_SHIFT), flags)
            self._pinned = None

    def unmap(self, va: int, size: int) -> None:
        check_unmap_args(va, size)
        with self._lock:
            for i in range(size >> PAGE_SHIFT):
                self._ptes.pop((va >> PAGE_SHIFT) + i, None)
            self._pinned = None

    def translate(self, va: int) -> tuple[int | None, int]:
        pte = self._ptes.get(va >> PAGE_SHIFT)
        if pte is None:
            return None, 0
        buf, off, flags = pte
        return buf.ctypes.data + off + (va & PAGE_MASK), flags

    def mapped_pages(self) -> int:
        return len(self._ptes)

    def pin(self) -> PinnedBuffers:
        with self._lock:
            if self._pinned is None:
                self._pinned = tuple({id(b): b for b, _, _ in self._ptes.values()}.values())
            return PinnedBuffers(self._pinned)

    # -- walking -----------------------------------------------------------
    def _walk(self, va: int, n: int, access: str):
        """Pieces (buf, offset, length) covering [va, va+n) up to the first bad page.

        Returns (pieces, fault) where fault is None or (op_offset, GpuFault).
        """
        need = ACCESS_FLAG[access]
        pieces, done = [], 0
        with self._lock:
            while done < n:
                cur = (va + done) & _VA_MASK    # the C core's uint64 wraps
                length = min(PAGE_SIZE - (cur & PAGE_MASK), n - done)
                # Past the top of the VA space nothing is mapped.
                pte = None if va + done > _VA_MASK else self._ptes.get(cur >> PAGE_SHIFT)
                if pte is None or not pte[2] & need:
                    reason = "unmapped" if pte is None else "permission"
                    return pieces, (done, GpuFault(cur, access, reason))
                pieces.append((pte[0], pte[1] + (cur & PAGE_MASK), length))
                done += length
        return pieces, None

    @staticmethod
    def _gather(pieces, limit: int) -> bytes:
        out, got = [], 0
        for buf, off, length in pieces:
            length = min(length, limit - got)
            if length <= 0:
                break
            out.append(buf[off:off + length].tobytes())
            got += length
        return b"".join(out)

    @staticmethod
    def _scatter(pieces, data: bytes) -> None:
        pos = 0
        for buf, off, length in pieces:
            length = min(length, len(data) - pos)
            if length <= 0:
                break
            buf[off:off + length] = np.frombuffer(data, np.uint8, length, pos)
            pos += length

    # -- accesses ----------------------------------------------------------
    def read(self, va: int, n: int) -> bytes:
        pieces, fault = self._walk(va, n, "read")
        if fault:
            raise fault[1]
        return self._gather(pieces, n)

    def write(self, va: int, data) -> None:
        data = bytes(data)
        pieces, fault = self._walk(va, len(data), "write")
        self._scatter(pieces, data[:fault[0]] if fault else data)
        if fault:
            raise fault[1]

    def copy(self, dst_va: int, src_va: int, n: int) -> None:
        src, sfault = self._walk(src_va, n, "read")
        dst, dfault = self._walk(dst_va, n, "write")
        fault = min((f for f in (sfault, dfault) if f), key=lambda f: f[0], default=None)
        limit = fault[0] if fault else n
        self._scatter(dst, self._gather(src, limit))
        if fault:
            raise fault[1]

    def fill(self, dst_va: int, value: int, n: int, elem_size: int = 4) -> None:
        if elem_size == 1:
            pattern = bytes([value & 0xFF])
        elif elem_size == 4:
            pattern = struct.pack("<I", value & 0xFFFFFFFF)
        else:
            raise ValueError(f"fill: elem_size must be 1 or 4, not {elem_size}")
        dst, fault = self._walk(dst_va, n, "write")
        limit = fault[0] if fault else n
        self._scatter(dst, (pattern * (limit // len(pattern) + 1))[:limit])
        if fault:
            raise fault[1]


_COMPARE = {
    S.SDMA_FUNC_ALWAYS: lambda a, b: True,
    S.SDMA_FUNC_LT: lambda a, b: a < b,
    S.SDMA_FUNC_LE: lambda a, b: a <= b,
    S.SDMA_FUNC_EQ: lambda a, b: a == b,
    S.SDMA_FUNC_NE: lambda a, b: a != b,
    S.SDMA_FUNC_GE: lambda a, b: a >= b,
    S.SDMA_FUNC_GT: lambda a, b: a > b,
}


class _Aborted(Exception):
    pass


class _Preempted(Exception):
    pass


class SdmaEngine(RunControl):
    """One SDMA engine (sdma0, sdma1...).  run() executes one IB to completion, or
    until preempt(): abort() and preempt() stop it at a packet or chunk boundary or a
    poll step (docs/preemption.md)."""

    #: Called with the dword position of a POLL_REGMEM whose first read did not satisfy
    #: it (the packets before it are done): a user queue publishes its rptr there.
    on_wait = None

    def __init__(self, name: str, ih: InterruptRing) -> None:
        self.name = name
        self.ih = ih

    def bounded(self, pt: PageTable, ib_va: int, ib_size_dw: int) -> bool:
        """Whether the IB of `ib_size_dw` dwords at `ib_va` does only bounded work
        (sdma.bounded_ib), what a direct run asks (kmd/direct_run.py). False when it is
        longer than SDMA_HELD_IB_DW or cannot be read (its run reports the fault)."""
        if ib_size_dw > S.SDMA_HELD_IB_DW:
            return False
        if not ib_size_dw:
            return True
        try:
            ib = memoryview(pt.read(ib_va, ib_size_dw * 4)).cast("I")
        except GpuFault:
            return False
        return S.bounded_ib(ib)

    def run(self, pt: PageTable, ib_va: int, ib_size_dw: int, ctx_id: int = 0,
            ring_id: int = 0, resume: S.SdmaResume | None = None, csa=None) -> S.SdmaResult:
        """Run one IB; with `resume` (a preempted result's), continue it. `csa` is
        accepted for the ring's sake: SDMA has no wave state to save."""
        if ib_size_dw < 0:
            raise ValueError(f"run: negative IB size {ib_size_dw}")
        S.check_resume(resume, ib_size_dw)
        self._stop = None
        self._running = True
        pin = pt.pin()
        try:
            return self._run(pt, ib_va, ib_size_dw, ctx_id, ring_id, resume)
        finally:
            self._running = False
            self._stop = None
            pin.release()

    def _boundary(self) -> None:
        """A preemption point: raises _Aborted / _Preempted when asked to stop."""
        if self._stop == "abort":
            raise _Aborted
        if self._stop == "preempt" or self._steps == self._trigger:
            if self._steps == self._trigger:
                self._trigger = None
            raise _Preempted
        self._steps += 1

    def _run(self, pt, ib_va, ib_size_dw, ctx_id, ring_id, resume) -> S.SdmaResult:
        if resume is not None:
            raw, pos, self._done = resume.ib, resume.pos, resume.done
            walks = 0
        else:
            try:
                raw = pt.read(ib_va, ib_size_dw * 4)
            except GpuFault as fault:
                self._push_fault(fault, ring_id, ctx_id)
                return S.SdmaResult("fault", fault, fault.reason)
            pos, self._done, walks = 0, 0, S.pages_spanned(ib_va, ib_size_dw * 4)
        ib = struct.unpack(f"<{ib_size_dw}I", raw)
        last, last_op, packets, moved, self._steps = 0, -1, 0, 0, 0
        self._tally = {"read": 0, "written": 0, "walks": walks}
        ops: dict[int, int] = {}
        result = None
        while pos < len(ib):
            op = ib[pos] & 0xFF
            try:
                if not self._done:      # a packet continued between chunks starts there
                    self._boundary()
                length = S.packet_length(ib, pos)
                moved += self._execute(pt, ib, pos, ctx_id, ring_id)
                self._done = 0
            except GpuFault as fault:
                self._push_fault(fault, ring_id, ctx_id)
                result = S.SdmaResult("fault", fault, fault.reason, pos, op, packets, moved)
            except S.IllegalPacket as bad:
                self.ih.push(IH_SRC_ILLEGAL_INST, ring_id, ctx_id, pos)
                result = S.SdmaResult("fault", None, bad.reason, pos, op, packets, moved)
            except _Aborted:
                result = S.SdmaResult("aborted", None, None, pos, op, packets, moved)
            except _Preempted:
                result = S.SdmaResult("preempted", None, None, pos, op, packets, moved)
                result.resume = S.SdmaResume(raw, pos, self._done)
            if result is not None:
                break
            ops[op] = ops.get(op, 0) + 1
            last, last_op = pos, op
            packets += 1
            pos += length
        if result is None:
            result = S.SdmaResult("ok", None, None, last, last_op, packets, moved)
        t = self._tally
        result.bytes_read, result.bytes_written, result.pt_walks = t["read"], t["written"], t["walks"]
        result.packet_ops = dict(sorted(ops.items()))
        return result

    def _count(self, va: int, n: int, *, read: bool) -> None:
        """Performance counters of one completed access of n bytes at va."""
        self._tally["read" if read else "written"] += n
        self._tally["walks"] += S.pages_spanned(va, n)

    def _push_fault(self, fault: GpuFault, ring_id: int, ctx_id: int) -> None:
        src = IH_SRC_PAGE_FAULT if fault.reason == "unmapped" else IH_SRC_PROT_FAULT
        self.ih.push(src, ring_id, ctx_id, fault.va)

    def _execute(self, pt: PageTable, ib, pos: int, ctx_id: int, ring_id: int) -> int:
        """Run one validated packet; returns the bytes it moved."""
        hdr = ib[pos]
        op = hdr & 0xFF
        if op == S.SDMA_OP_COPY:
            n = (ib[pos + 1] & S.SDMA_COPY_COUNT_MASK) + 1
            src, dst = ib[pos + 3] | ib[pos + 4] << 32, ib[pos + 5] | ib[pos + 6] << 32
            if S.copy_in_chunks(src, dst, n):
                self._chunks(n, lambda off, k: pt.copy(dst + off, src + off, k))
            else:
                pt.copy(dst, src, n)
            self._count(src, n, read=True)
            self._count(dst, n, read=False)
            return n
        if op == S.SDMA_OP_WRITE:
            count = (ib[pos + 3] & S.SDMA_WRITE_COUNT_MASK) + 1
            data = struct.pack(f"<{count}I", *ib[pos + 4:pos + 4 + count])
            pt.write(ib[pos + 1] | ib[pos + 2] << 32, data)
            self._count(ib[pos + 1] | ib[pos + 2] << 32, count * 4, read=False)
            return count * 4
        if op == S.SDMA_OP_FENCE:
            pt.write(ib[pos + 1] | ib[pos + 2] << 32, struct.pack("<I", ib[pos + 3]))
            self._count(ib[pos + 1] | ib[pos + 2] << 32, 4, read=False)
        elif op == S.SDMA_OP_TRAP:
            self.ih.push(IH_SRC_TRAP, ring_id, ctx_id, ib[pos + 1] & S.SDMA_TRAP_INT_CONTEXT_MASK)
        elif op == S.SDMA_OP_POLL_REGMEM:
            self._poll(pt, hdr, ib[pos + 1] | ib[pos + 2] << 32, ib[pos + 3], ib[pos + 4], pos)
        elif op == S.SDMA_OP_CONST_FILL:
            n = (ib[pos + 4] & S.SDMA_CONST_FILL_COUNT_MASK) + 1
            elem = 1 if hdr >> 30 == S.SDMA_FILLSIZE_BYTE else 4
            dst = ib[pos + 1] | ib[pos + 2] << 32
            # Chunks are a multiple of 4 bytes: each starts at byte 0 of the pattern.
            self._chunks(n, lambda off, k: pt.fill(dst + off, ib[pos + 3], k, elem))
            self._count(ib[pos + 1] | ib[pos + 2] << 32, n, read=False)
            return n
        elif op == S.SDMA_OP_TIMESTAMP:
            pt.write(ib[pos + 1] | ib[pos + 2] << 32, struct.pack("<Q", time.monotonic_ns()))
            self._count(ib[pos + 1] | ib[pos + 2] << 32, 8, read=False)
        return 0

    def _chunks(self, n: int, step) -> None:
        """step(offset, bytes) over n bytes in SDMA_CHUNK_BYTES pieces from self._done,
        a preemption point between two (self._done records the progress)."""
        while self._done < n:
            if self._done:
                self._boundary()
            k = min(S.SDMA_CHUNK_BYTES, n - self._done)
            step(self._done, k)
            self._done += k

    def _poll(self, pt: PageTable, hdr: int, addr: int, value: int, mask: int, pos: int) -> None:
        if not hdr >> 31:
            return      # register poll: no registers are emulated (docs/hw.md)
        compare = _COMPARE[hdr >> 28 & 7]
        told = self.on_wait is None
        while True:
            mem, = struct.unpack("<I", pt.read(addr, 4))
            self._tally["read"] += 4
            self._tally["walks"] += 1
            if compare(mem & mask, value):
                return
            if not told:
                told = True
                self.on_wait(pos)
            if self._stop == "abort":
                raise _Aborted
            if self._stop == "preempt":     # the packet runs again on resume: it only reads
                raise _Preempted
            time.sleep(S.SDMA_POLL_STEP_US * 1e-6)
