"""SDMA v4 (GFX9, Vega) packet encodings, the run result, and an IB builder.

Encodings follow Linux drivers/gpu/drm/amd/amdgpu/vega10_sdma_pkt_open.h and the
way sdma_v4_0.c and libdrm tests/amdgpu emit them; docs/hw.md lists every field.
The Cython core mirrors these numbers in _sdma_defs.pxi (a test checks they agree).
"""
from __future__ import annotations

import dataclasses
import struct

from kmd.hw.mmu import GpuFault

# Header dword: op[7:0] | sub_op[15:8] | extra[31:16]
SDMA_OP_NOP = 0
SDMA_OP_COPY = 1
SDMA_OP_WRITE = 2
SDMA_OP_FENCE = 5
SDMA_OP_TRAP = 6
SDMA_OP_POLL_REGMEM = 8
SDMA_OP_CONST_FILL = 11
SDMA_OP_TIMESTAMP = 13

SDMA_SUBOP_COPY_LINEAR = 0
SDMA_SUBOP_WRITE_LINEAR = 0
SDMA_SUBOP_TIMESTAMP_GET_GLOBAL = 2

# Field masks (vega10_sdma_pkt_open.h).
SDMA_NOP_COUNT_MASK = 0x3FFF            # header [29:16]
SDMA_COPY_COUNT_MASK = 0x3FFFFF         # dw1 [21:0], bytes - 1
SDMA_WRITE_COUNT_MASK = 0xFFFFF         # dw3 [19:0], dwords - 1
SDMA_CONST_FILL_COUNT_MASK = 0x3FFFFF   # dw4 [21:0], bytes - 1
SDMA_TRAP_INT_CONTEXT_MASK = 0xFFFFFFF  # dw1 [27:0]
SDMA_POLL_RETRY_INFINITE = 0xFFF        # dw5 retry_count [27:16]

SDMA_FILLSIZE_BYTE = 0                  # CONSTANT_FILL header [31:30]
SDMA_FILLSIZE_DWORD = 2

# POLL_REGMEM compare functions (header func [30:28]), as amdgpu numbers them.
SDMA_FUNC_ALWAYS, SDMA_FUNC_LT, SDMA_FUNC_LE, SDMA_FUNC_EQ = 0, 1, 2, 3
SDMA_FUNC_NE, SDMA_FUNC_GE, SDMA_FUNC_GT = 4, 5, 6

# How long a POLL_REGMEM sleeps between two reads (GIL released).
SDMA_POLL_STEP_US = 50

# Fault reasons that are not page faults.
REASON_ILLEGAL_OPCODE = "illegal_opcode"
REASON_TRUNCATED = "truncated"


class IllegalPacket(Exception):
    """A packet the engine refuses: `reason` is 'illegal_opcode' or 'truncated'."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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



@dataclasses.dataclass
class SdmaResult:
    """Outcome of SdmaEngine.run().

    status: 'ok', 'fault' or 'aborted'.  fault: the GpuFault of a page fault
    (also for a fault while fetching the IB), else None.  reason: the fault's
    reason ('unmapped', 'permission') or 'illegal_opcode' / 'truncated'; None
    when status is not 'fault'.  packet_offset: dword index in the IB of the
    faulting / aborted packet, or of the last packet executed (0 if none).
    opcode: that packet's op, -1 when the IB could not be fetched or was empty.
    packets: packets fully executed.  bytes_moved: bytes written by fully
    executed COPY_LINEAR, WRITE_LINEAR and CONSTANT_FILL packets.
    """

    status: str
    fault: GpuFault | None = None
    reason: str | None = None
    packet_offset: int = 0
    opcode: int = -1
    packets: int = 0
    bytes_moved: int = 0


def sdma_header(op: int, sub_op: int = 0, extra: int = 0) -> int:
    return (op & 0xFF) | (sub_op & 0xFF) << 8 | (extra & 0xFFFF) << 16


class SdmaIb:
    """Builds an SDMA indirect buffer; every method appends and returns self."""

    def __init__(self) -> None:
        self.dwords: list[int] = []

    def _emit(self, *dws: int) -> SdmaIb:
        self.dwords.extend(dw & 0xFFFFFFFF for dw in dws)
        return self

    def nop(self, count: int = 0) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_NOP, 0, count & SDMA_NOP_COUNT_MASK), *[0] * count)

    def copy_linear(self, dst: int, src: int, nbytes: int) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_COPY, SDMA_SUBOP_COPY_LINEAR), nbytes - 1, 0,
                          src, src >> 32, dst, dst >> 32)

    def write_linear(self, dst: int, data: list[int]) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_WRITE, SDMA_SUBOP_WRITE_LINEAR), dst, dst >> 32,
                          len(data) - 1, *data)

    def fence(self, addr: int, value: int) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_FENCE), addr, addr >> 32, value)

    def trap(self, int_context: int = 0) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_TRAP), int_context & SDMA_TRAP_INT_CONTEXT_MASK)

    def poll_regmem(self, addr: int, value: int, mask: int = 0xFFFFFFFF,
                    func: int = SDMA_FUNC_EQ, interval: int = 10,
                    retry: int = SDMA_POLL_RETRY_INFINITE, mem_poll: bool = True) -> SdmaIb:
        extra = (func & 7) << 12 | int(mem_poll) << 15    # func [30:28], mem_poll [31]
        return self._emit(sdma_header(SDMA_OP_POLL_REGMEM, 0, extra), addr, addr >> 32,
                          value, mask, (interval & 0xFFFF) | (retry & 0xFFF) << 16)

    def timestamp(self, addr: int) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_TIMESTAMP, SDMA_SUBOP_TIMESTAMP_GET_GLOBAL),
                          addr, addr >> 32)

    def constant_fill(self, dst: int, value: int, nbytes: int,
                      fill_size: int = SDMA_FILLSIZE_DWORD) -> SdmaIb:
        return self._emit(sdma_header(SDMA_OP_CONST_FILL, 0, (fill_size & 3) << 14),
                          dst, dst >> 32, value, nbytes - 1)

    def raw(self, *dws: int) -> SdmaIb:
        return self._emit(*dws)

    def tobytes(self) -> bytes:
        return struct.pack(f"<{len(self.dwords)}I", *self.dwords)

    def __len__(self) -> int:
        return len(self.dwords)
