"""SDMA v4 (GFX9, Vega) packet encodings and the chaining IB builder.

This is hardware ABI shared by both sides of the syscall boundary, as Mesa's sid.h
is: the emulated engine (kmd/hw) decodes these packets and libvgpu builds them.
Encodings follow Linux drivers/gpu/drm/amd/amdgpu/vega10_sdma_pkt_open.h and the way
sdma_v4_0.c and libdrm tests/amdgpu emit them; docs/hw.md lists every field.
The Cython core mirrors these numbers in kmd/hw/_sdma_defs.pxi (a test checks them).
"""
from __future__ import annotations

import struct

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
