"""The reference twin of kmd/hw/_userq.pxi (VGPU_HW=ref): a user queue worker's wait
for its write pointer and its publish of the read pointer after a run, in Python,
with the same API and behaviour (docs/userq.md)."""
from __future__ import annotations

import ctypes
import os
import struct
import time

from vgpu import futex, pm4

from .mmu import PTE_WRITE, GpuFault
from .sdma import IllegalPacket, packet_length

_SDMA_FENCE, _SDMA_WRITE = 5, 2
MAX_FENCES = 64


def userq_wait(pt, db_addr: int, wptr_va: int, rptr: int, timeout: float, spin: float = 0.0) -> int:
    """The u64 at `wptr_va` once it differs from `rptr`: at once, else polled for at
    most `spin` s, else after one FUTEX_WAIT of at most `timeout` s (less the spin)
    on the doorbell word at `db_addr`. -1: still `rptr`; -2: `wptr_va` is unmapped."""
    try:
        db = ctypes.c_uint32.from_address(db_addr).value
        w = struct.unpack("<Q", pt.read(wptr_va, 8))[0]
        spin = min(spin, timeout)
        end = time.monotonic() + spin
        while w == rptr and spin > 0 and time.monotonic() < end:
            os.sched_yield()   # as the Cython worker: a client on this CPU runs meanwhile
            db = ctypes.c_uint32.from_address(db_addr).value
            w = struct.unpack("<Q", pt.read(wptr_va, 8))[0]
        if w == rptr and timeout - spin > 0:
            futex.wait(db_addr, db, timeout - spin)
            w = struct.unpack("<Q", pt.read(wptr_va, 8))[0]
    except GpuFault:
        return -2
    return -1 if w == rptr else w


def fence_vas(dws, sdma: bool) -> list[int]:
    """The VAs fence packets among `dws` write (SDMA FENCE, WRITE_LINEAR; PM4
    RELEASE_MEM, WRITE_DATA), at most MAX_FENCES; an unknown packet ends the scan."""
    out, pos, n = [], 0, len(dws)
    while pos < n and len(out) < MAX_FENCES:
        hdr = dws[pos]
        if sdma:
            try:
                length = packet_length(dws, pos)
            except IllegalPacket:
                break
            if hdr & 0xFF in (_SDMA_FENCE, _SDMA_WRITE) and pos + 2 < n:
                out.append(dws[pos + 1] | dws[pos + 2] << 32)
        else:
            if hdr == pm4.PM4_NOP_FILLER or hdr >> 30 == 2:
                pos += 1
                continue
            if hdr >> 30 != 3:
                break
            length = (hdr >> 16 & 0x3FFF) + 2
            op = hdr >> 8 & 0xFF
            if op == pm4.PKT3_RELEASE_MEM and pos + 4 < n:
                out.append(dws[pos + 3] | dws[pos + 4] << 32)
            elif op == pm4.PKT3_WRITE_DATA and pos + 3 < n:
                out.append(dws[pos + 2] | dws[pos + 3] << 32)
        pos += length
    return out


def userq_done(pt, va: int, n: int, sdma: bool, rptr_va: int, rptr: int) -> None:
    """After `n` dwords at `va` ran: store `rptr` at `rptr_va` (if mapped writable) and
    FUTEX_WAKE it and every word the fence packets among them wrote."""
    fences = []
    if n:
        try:
            fences = fence_vas(struct.unpack(f"<{n}I", pt.read(va, 4 * n)), sdma)
        except GpuFault:
            pass
    addr, flags = pt.translate(rptr_va)
    if addr is not None and flags & PTE_WRITE:
        ctypes.c_uint64.from_address(addr).value = rptr
        futex.wake(addr)
    for i, fva in enumerate(fences):
        if i and fva & ~3 == fences[i - 1] & ~3:
            continue                  # the same word again: woken already
        addr, _ = pt.translate(fva & ~3)
        if addr is not None:
            futex.wake(addr)
