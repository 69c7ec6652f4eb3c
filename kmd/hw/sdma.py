"""The SDMA engine's side of the packet format: packet lengths and the run result.

The encodings themselves live in vgpu/sdma.py, shared with libvgpu's builders.
"""
from __future__ import annotations

import dataclasses

from kmd.hw.mmu import GpuFault
from vgpu.sdma import *  # noqa: F401,F403  (the packet encodings)
from vgpu.sdma import SdmaIb, sdma_header  # noqa: F401


# How long a POLL_REGMEM sleeps between two reads (GIL released).
SDMA_POLL_STEP_US = 50
# A COPY_LINEAR or CONSTANT_FILL runs in pieces of this many bytes, with a preemption
# point between two (docs/preemption.md): at memmove speed, well under a millisecond.
SDMA_CHUNK_BYTES = 1 << 20

# An IB of at most this many dwords made only of packets of bounded, tiny work (NOP,
# FENCE, TRAP, TIMESTAMP, WRITE_LINEAR: no COPY_LINEAR, CONSTANT_FILL or POLL_REGMEM)
# runs with the GIL held (the Cython core): it is over in about a microsecond, and
# releasing the GIL for it would hand the interpreter to another thread and make the
# ring's worker wait to get it back before it can signal the job's fence.
SDMA_HELD_IB_DW = 64

# Fault reasons that are not page faults.
REASON_ILLEGAL_OPCODE = "illegal_opcode"
REASON_TRUNCATED = "truncated"


class IllegalPacket(Exception):
    """A packet the engine refuses: `reason` is 'illegal_opcode' or 'truncated'."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def pages_spanned(va: int, n: int) -> int:
    """Pages of 4 KiB that [va, va + n) touches: the walks of one access."""
    return ((va + n - 1) >> 12) - (va >> 12) + 1 if n > 0 else 0


def packet_length(ib, pos: int) -> int:
    """Dwords taken by the packet at `pos` of `ib` (a sequence of dwords).

    Raises IllegalPacket for an unknown op/sub-op/field value or a packet that
    runs past the end of the IB.  The Cython core mirrors this function.
    """
    hdr = ib[pos]
    op, sub = hdr & 0xFF, hdr >> 8 & 0xFF
    if op == SDMA_OP_NOP:
        length = 1 + (hdr >> 16 & SDMA_NOP_COUNT_MASK)
    elif op == SDMA_OP_COPY and sub == SDMA_SUBOP_COPY_LINEAR:
        length = 7
    elif op == SDMA_OP_WRITE and sub == SDMA_SUBOP_WRITE_LINEAR:
        if pos + 4 > len(ib):
            raise IllegalPacket(REASON_TRUNCATED)
        length = 5 + (ib[pos + 3] & SDMA_WRITE_COUNT_MASK)
    elif op == SDMA_OP_FENCE:
        length = 4
    elif op == SDMA_OP_TRAP:
        length = 2
    elif op == SDMA_OP_POLL_REGMEM and hdr >> 28 & 7 != 7:
        length = 6
    elif op == SDMA_OP_CONST_FILL and hdr >> 30 in (SDMA_FILLSIZE_BYTE, SDMA_FILLSIZE_DWORD):
        length = 5
    elif op == SDMA_OP_TIMESTAMP and sub == SDMA_SUBOP_TIMESTAMP_GET_GLOBAL:
        length = 3
    else:
        raise IllegalPacket(REASON_ILLEGAL_OPCODE)
    if pos + length > len(ib):
        raise IllegalPacket(REASON_TRUNCATED)
    return length



def bounded_ib(ib) -> bool:
    """Whether IB `ib` (a sequence of dwords) does only bounded, tiny work: the Python
    twin of the Cython core's held_ib. At most SDMA_HELD_IB_DW dwords and no packet
    whose work is not bounded by the IB's own size (COPY_LINEAR, CONSTANT_FILL) or
    that sleeps (POLL_REGMEM). A bad packet ends the scan: the run stops there."""
    if len(ib) > SDMA_HELD_IB_DW:
        return False
    pos = 0
    while pos < len(ib):
        try:
            length = packet_length(ib, pos)
        except IllegalPacket:
            return True
        if ib[pos] & 0xFF in (SDMA_OP_COPY, SDMA_OP_CONST_FILL, SDMA_OP_POLL_REGMEM):
            return False
        pos += length
    return True


@dataclasses.dataclass
class SdmaResult:
    """Outcome of SdmaEngine.run().

    status: 'ok', 'fault', 'aborted' or 'preempted' (resume: the SdmaResume that
    continues it).  fault: the GpuFault of a page fault
    (also for a fault while fetching the IB), else None.  reason: the fault's
    reason ('unmapped', 'permission') or 'illegal_opcode' / 'truncated'; None
    when status is not 'fault'.  packet_offset: dword index in the IB of the
    faulting / aborted packet, or of the last packet executed (0 if none).
    opcode: that packet's op, -1 when the IB could not be fetched or was empty.
    packets: packets fully executed.  bytes_moved: bytes written by fully
    executed COPY_LINEAR, WRITE_LINEAR and CONSTANT_FILL packets.

    Performance counters (docs/observability.md): bytes_read / bytes_written, the
    memory the fully executed packets read and wrote (COPY's source and destination,
    WRITE / FILL / FENCE / TIMESTAMP destinations) plus every POLL_REGMEM read;
    pt_walks, the page-table walks (pages translated: the IB fetch and those
    accesses; the engine has no TLB); packet_ops, {opcode: packets completed}.
    """

    status: str
    fault: GpuFault | None = None
    reason: str | None = None
    packet_offset: int = 0
    opcode: int = -1
    packets: int = 0
    bytes_moved: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    pt_walks: int = 0
    packet_ops: dict = dataclasses.field(default_factory=dict)
    resume: SdmaResume | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass
class SdmaResume:
    """Where a preempted run stops (opaque to the KMD): the IB's bytes as fetched, the
    dword offset of the packet to continue at, and the bytes of it already done (a
    COPY_LINEAR or CONSTANT_FILL stopped between two chunks)."""

    ib: bytes
    pos: int
    done: int = 0


def copy_in_chunks(src: int, dst: int, n: int) -> bool:
    """Whether a COPY_LINEAR of n bytes runs in SDMA_CHUNK_BYTES pieces: only when its
    source and destination do not overlap, so the pieces copy what one memmove would."""
    return n > SDMA_CHUNK_BYTES and (src + n <= dst or dst + n <= src)


def check_resume(resume, ib_size_dw: int) -> None:
    """Argument check of SdmaEngine.run(resume=)."""
    if resume is not None and (not isinstance(resume, SdmaResume)
                               or len(resume.ib) != ib_size_dw * 4):
        raise ValueError("run: resume does not belong to this IB")
