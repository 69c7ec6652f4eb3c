"""PM4 type-3 packets for the compute ring, the compute SH registers, and the
chaining IB builder.

Hardware ABI shared by both sides of the syscall boundary (as Mesa's sid.h is):
the command processor (kmd/hw/cp.py) decodes these packets and libvgpu builds them.
Opcodes are AMD's (Linux drivers/gpu/drm/amd/amdgpu/soc15d.h, Mesa sid.h); packet
bodies follow how gfx_v9_0.c emits them (gfx_v9_0_ring_emit_fence,
gfx_v9_0_wait_reg_mem, gfx_v9_0_ring_emit_ib_compute, gfx_v9_0_emit_mem_sync), and
DMA_DATA as Mesa's CP DMA (si_cp_dma.c / ac_cmdbuf) and libdrm's tests emit it.
Register offsets are GFX9's, counted in dwords from the SH base 0x2C00 as
SET_SH_REG takes them. docs/pm4.md lists every field.
"""
from __future__ import annotations

import struct

# -- header -------------------------------------------------------------------
# Type-3 header: type [31:30] = 3, count [29:16] = body dwords - 1, opcode [15:8].
# Bit 1 is the shader-type bit (PACKET3_COMPUTE in nvd.h): ignored, as vgpu has
# no graphics pipe. Bit 0 is the predicate bit: must be 0.
PM4_TYPE3 = 3
PM4_COUNT_MASK = 0x3FFF
PM4_SHADER_TYPE_COMPUTE = 1 << 1
PM4_PREDICATE = 1 << 0

PKT3_NOP = 0x10
PKT3_DISPATCH_DIRECT = 0x15
PKT3_WRITE_DATA = 0x37
PKT3_WAIT_REG_MEM = 0x3C
PKT3_INDIRECT_BUFFER = 0x3F
PKT3_RELEASE_MEM = 0x49
PKT3_DMA_DATA = 0x50
PKT3_ACQUIRE_MEM = 0x58
PKT3_SET_SH_REG = 0x76

PKT3_NAMES = {
    PKT3_NOP: "NOP", PKT3_DISPATCH_DIRECT: "DISPATCH_DIRECT", PKT3_WRITE_DATA: "WRITE_DATA",
    PKT3_WAIT_REG_MEM: "WAIT_REG_MEM", PKT3_INDIRECT_BUFFER: "INDIRECT_BUFFER",
    PKT3_RELEASE_MEM: "RELEASE_MEM", PKT3_DMA_DATA: "DMA_DATA", PKT3_ACQUIRE_MEM: "ACQUIRE_MEM",
    PKT3_SET_SH_REG: "SET_SH_REG",
}

# amdgpu pads rings and IBs with PACKET3(NOP, 0x3FFF) = 0xFFFF1000, which the CP
# takes as a one-dword NOP (the count is not honoured), see gfx_v9_0 ring funcs' nop.
PM4_NOP_FILLER = 0xFFFF1000

# Fixed body sizes (dwords after the header), as gfx_v9_0.c emits them.
PKT3_BODY_DW = {
    PKT3_DISPATCH_DIRECT: 4,     # dim x, y, z, dispatch initiator
    PKT3_WAIT_REG_MEM: 6,        # control, addr lo, addr hi, reference, mask, poll interval
    PKT3_INDIRECT_BUFFER: 3,     # addr lo, addr hi, control
    PKT3_RELEASE_MEM: 7,         # event, data/int select, addr lo, hi, data lo, hi, int ctx
    PKT3_DMA_DATA: 6,            # control, src addr lo (or data), src hi, dst lo, dst hi, command
    PKT3_ACQUIRE_MEM: 6,         # coher cntl, size, size hi, base lo, base hi, poll interval
}


def pm4_type3_header(opcode: int, body_dw: int) -> int:
    """`(3 << 30) | ((count - 1) << 16) | (opcode << 8)` for a body of `body_dw` dwords."""
    if not 1 <= body_dw <= PM4_COUNT_MASK + 1:
        raise ValueError(f"PM4 packet body of {body_dw} dwords (1..{PM4_COUNT_MASK + 1})")
    return PM4_TYPE3 << 30 | (body_dw - 1) << 16 | (opcode & 0xFF) << 8


def pm4_type(header: int) -> int:
    return header >> 30 & 3


def pm4_opcode(header: int) -> int:
    return header >> 8 & 0xFF


def pm4_body_dw(header: int) -> int:
    """Body dwords of a type-3 packet (count + 1)."""
    return (header >> 16 & PM4_COUNT_MASK) + 1


# -- SH registers (GFX9, dword offsets from the SH base, as SET_SH_REG takes them) --
SH_REG_BASE = 0x2C00            # PACKET3_SET_SH_REG_START
SH_REG_END = 0x3000             # PACKET3_SET_SH_REG_END
SH_REG_COUNT = SH_REG_END - SH_REG_BASE

# Mesa sid.h byte addresses R_00B81C.. / 4 - 0x2C00.
COMPUTE_NUM_THREAD_X = 0x207    # R_00B81C_COMPUTE_NUM_THREAD_X
COMPUTE_NUM_THREAD_Y = 0x208    # R_00B820
COMPUTE_NUM_THREAD_Z = 0x209    # R_00B824
COMPUTE_PGM_LO = 0x20C          # R_00B830: code VA [39:8] (256-byte aligned)
COMPUTE_PGM_HI = 0x20D          # R_00B834: code VA [47:40]
COMPUTE_PGM_RSRC1 = 0x212       # R_00B848
COMPUTE_PGM_RSRC2 = 0x213       # R_00B84C
COMPUTE_USER_DATA_0 = 0x240     # R_00B900 .. R_00B93C: USER_DATA_0..15
COMPUTE_USER_DATA_COUNT = 16

SH_REG_NAMES = {
    COMPUTE_NUM_THREAD_X: "COMPUTE_NUM_THREAD_X", COMPUTE_NUM_THREAD_Y: "COMPUTE_NUM_THREAD_Y",
    COMPUTE_NUM_THREAD_Z: "COMPUTE_NUM_THREAD_Z", COMPUTE_PGM_LO: "COMPUTE_PGM_LO",
    COMPUTE_PGM_HI: "COMPUTE_PGM_HI", COMPUTE_PGM_RSRC1: "COMPUTE_PGM_RSRC1",
    COMPUTE_PGM_RSRC2: "COMPUTE_PGM_RSRC2",
    **{COMPUTE_USER_DATA_0 + i: f"COMPUTE_USER_DATA_{i}" for i in range(COMPUTE_USER_DATA_COUNT)},
}
# Registers vgpu implements; SET_SH_REG of any other offset is a fault.
SH_REGS_KNOWN = frozenset(SH_REG_NAMES)

# The program address is 256-byte aligned and split as AMD does: PGM_LO holds
# VA >> 8, PGM_HI the bits above (radv: va >> 8, S_00B834_DATA(va >> 40)).
PGM_ADDR_ALIGN = 256


def pgm_lo_hi(code_va: int) -> tuple[int, int]:
    if code_va % PGM_ADDR_ALIGN:
        raise ValueError(f"program address {code_va:#x} is not {PGM_ADDR_ALIGN}-byte aligned")
    return code_va >> 8 & 0xFFFFFFFF, code_va >> 40 & 0xFF


def pgm_address(lo: int, hi: int) -> int:
    return (lo & 0xFFFFFFFF) << 8 | (hi & 0xFF) << 40


# COMPUTE_PGM_RSRC1, AMD's granule fields (S_00B848_VGPRS / _SGPRS):
#   VGPRS [5:0] = ceil(vgprs / 4) - 1, SGPRS [9:6] = ceil(sgprs / 8) - 1.
RSRC1_VGPRS_SHIFT, RSRC1_VGPRS_MASK, VGPR_GRANULE = 0, 0x3F, 4
RSRC1_SGPRS_SHIFT, RSRC1_SGPRS_MASK, SGPR_GRANULE = 6, 0x0F, 8
MAX_VGPRS = (RSRC1_VGPRS_MASK + 1) * VGPR_GRANULE     # 256
MAX_SGPRS = (RSRC1_SGPRS_MASK + 1) * SGPR_GRANULE     # 128

# COMPUTE_PGM_RSRC2 (S_00B84C_*): USER_SGPR [5:1] = user data registers copied to
# s0.. at wave start; LDS_SIZE [23:15] in 512-byte granules (128 dwords, GFX7+).
RSRC2_USER_SGPR_SHIFT, RSRC2_USER_SGPR_MASK = 1, 0x1F
RSRC2_LDS_SIZE_SHIFT, RSRC2_LDS_SIZE_MASK, LDS_GRANULE = 15, 0x1FF, 512
MAX_LDS_BYTES = 64 * 1024       # per workgroup, as on GFX9

# DISPATCH_DIRECT dispatch initiator: COMPUTE_SHADER_EN must be set (bit 0).
DISPATCH_INITIATOR_COMPUTE_SHADER_EN = 1 << 0


def _granules(n: int, granule: int) -> int:
    return max(1, -(-n // granule)) - 1


def rsrc1(vgprs: int, sgprs: int) -> int:
    """COMPUTE_PGM_RSRC1 for a kernel using `vgprs` vector and `sgprs` scalar registers."""
    if not 0 <= vgprs <= MAX_VGPRS or not 0 <= sgprs <= MAX_SGPRS:
        raise ValueError(f"{vgprs} VGPRs / {sgprs} SGPRs (at most {MAX_VGPRS} / {MAX_SGPRS})")
    return (_granules(vgprs, VGPR_GRANULE) << RSRC1_VGPRS_SHIFT
            | _granules(sgprs, SGPR_GRANULE) << RSRC1_SGPRS_SHIFT)


def rsrc2(user_sgprs: int, lds_bytes: int = 0) -> int:
    """COMPUTE_PGM_RSRC2: user SGPR count and LDS bytes (rounded up to 512)."""
    if not 0 <= user_sgprs <= COMPUTE_USER_DATA_COUNT:
        raise ValueError(f"{user_sgprs} user SGPRs (at most {COMPUTE_USER_DATA_COUNT})")
    if not 0 <= lds_bytes <= MAX_LDS_BYTES:
        raise ValueError(f"{lds_bytes} bytes of LDS (at most {MAX_LDS_BYTES})")
    return (user_sgprs << RSRC2_USER_SGPR_SHIFT
            | -(-lds_bytes // LDS_GRANULE) << RSRC2_LDS_SIZE_SHIFT)


def decode_rsrc1(value: int) -> tuple[int, int]:
    """(vgprs, sgprs) a kernel may use, from COMPUTE_PGM_RSRC1."""
    return ((value >> RSRC1_VGPRS_SHIFT & RSRC1_VGPRS_MASK) + 1) * VGPR_GRANULE, \
           ((value >> RSRC1_SGPRS_SHIFT & RSRC1_SGPRS_MASK) + 1) * SGPR_GRANULE


def decode_rsrc2(value: int) -> tuple[int, int]:
    """(user_sgprs, lds_bytes) from COMPUTE_PGM_RSRC2."""
    return (value >> RSRC2_USER_SGPR_SHIFT & RSRC2_USER_SGPR_MASK,
            (value >> RSRC2_LDS_SIZE_SHIFT & RSRC2_LDS_SIZE_MASK) * LDS_GRANULE)


# -- packet fields ----------------------------------------------------------------
# INDIRECT_BUFFER control dword: IB size in dwords [19:0], VALID [23] (must be set),
# vmid [27:24] (ignored: the IB runs in the submitting file's VM).
IB_SIZE_MASK = 0xFFFFF
IB_VALID = 1 << 23
MAX_IB_DEPTH = 4                # chained IBs deeper than this are a fault

# RELEASE_MEM (soc15d.h PACKET3_RELEASE_MEM_*): dw1 EVENT_TYPE [5:0], EVENT_INDEX
# [11:8] (recorded, not checked); dw2 DST_SEL [17:16], INT_SEL [26:24], DATA_SEL [31:29].
EVENT_CACHE_FLUSH_AND_INV_TS = 0x14     # what gfx_v9_0_ring_emit_fence uses
EVENT_BOTTOM_OF_PIPE_TS = 0x28          # Mesa V_028A90_BOTTOM_OF_PIPE_TS: an EOP event, no flush
EVENT_INDEX_EOP = 5
# RELEASE_MEM dw1 cache actions, done at the event before the data write (soc15d.h
# EOP_*). vgpu models the L2 only (docs/cache.md): TC_WB writes its dirty lines
# back, TC_ACTION invalidates it; the L1 / volatile / metadata / NC qualifiers are
# accepted and change nothing (vgpu has one memory type and no L1).
EOP_TCL1_VOL_ACTION_EN = 1 << 12
EOP_TC_VOL_ACTION_EN = 1 << 13
EOP_TC_WB_ACTION_EN = 1 << 15
EOP_TCL1_ACTION_EN = 1 << 16
EOP_TC_ACTION_EN = 1 << 17
EOP_TC_NC_ACTION_EN = 1 << 19
EOP_TC_MD_ACTION_EN = 1 << 21
# The two fences gfx_v9_0_ring_emit_fence emits: write back only
# (AMDGPU_FENCE_FLAG_TC_WB_ONLY), and the default write back + invalidate.
RELEASE_WB = EOP_TC_WB_ACTION_EN | EOP_TC_NC_ACTION_EN
RELEASE_WB_INV = EOP_TCL1_ACTION_EN | EOP_TC_ACTION_EN | EOP_TC_WB_ACTION_EN | EOP_TC_MD_ACTION_EN
RELEASE_DST_MEM, RELEASE_DST_TC_L2 = 0, 1
DATA_SEL_NONE, DATA_SEL_32, DATA_SEL_64, DATA_SEL_TIMESTAMP = 0, 1, 2, 3
INT_SEL_NONE, INT_SEL_INT, INT_SEL_INT_WRITE_CONFIRM = 0, 1, 2

# WAIT_REG_MEM dw1: FUNCTION [2:0], MEM_SPACE [5:4] (0 register, 1 memory),
# OPERATION [7:6] (0 wait), ENGINE [9:8] (ignored). Functions as amdgpu numbers them.
WAIT_FUNC_ALWAYS, WAIT_FUNC_LT, WAIT_FUNC_LE, WAIT_FUNC_EQ = 0, 1, 2, 3
WAIT_FUNC_NE, WAIT_FUNC_GE, WAIT_FUNC_GT = 4, 5, 6
WAIT_MEM_SPACE_REG, WAIT_MEM_SPACE_MEM = 0, 1
WAIT_FUNC_NAMES = ("always", "<", "<=", "==", "!=", ">=", ">", "reserved")

# WRITE_DATA dw1: DST_SEL [11:8] (1 memory sync, 2 TC_L2, 5 memory: all write
# memory; 0 register and the rest are faults), WR_ONE_ADDR [16], WR_CONFIRM [20].
WRITE_DST_MEM_SYNC, WRITE_DST_TC_L2, WRITE_DST_MEM = 1, 2, 5
WRITE_DST_MEMORY = frozenset((WRITE_DST_MEM_SYNC, WRITE_DST_TC_L2, WRITE_DST_MEM))
WR_ONE_ADDR = 1 << 16
WR_CONFIRM = 1 << 20

# DMA_DATA (soc15d.h PACKET3_DMA_DATA_*, Mesa sid.h S_411_* / S_415_*), the CP DMA:
# dw1 CONTROL: ENGINE [0] (ignored), SRC_CACHE_POLICY [14:13], DST_SEL [21:20],
# DST_CACHE_POLICY [26:25], SRC_SEL [30:29], CP_SYNC [31] (cache and sync bits are
# ignored: vgpu has no caches and runs packets in order); dw2/dw3 the source address
# (or, SRC_SEL DATA, dw2 the dword to fill with); dw4/dw5 the destination address;
# dw6 COMMAND: BYTE_COUNT [25:0] (GFX9's width), SAS [26] / DAS [27] (1: register
# space), SAIC [28] / DAIC [29] (1: the source / destination address does not
# increment), RAW_WAIT [30], DIS_WC [31] (ignored).
DMA_DATA_DST_SEL_SHIFT, DMA_DATA_SRC_SEL_SHIFT = 20, 29
DMA_DATA_CP_SYNC = 1 << 31
DMA_DST_ADDR, DMA_DST_GDS, DMA_DST_NOWHERE, DMA_DST_ADDR_TC_L2 = 0, 1, 2, 3
DMA_SRC_ADDR, DMA_SRC_GDS, DMA_SRC_DATA, DMA_SRC_ADDR_TC_L2 = 0, 1, 2, 3
DMA_BYTE_COUNT_MASK = (1 << 26) - 1
DMA_CMD_SAS, DMA_CMD_DAS = 1 << 26, 1 << 27
DMA_CMD_SAIC, DMA_CMD_DAIC = 1 << 28, 1 << 29
DMA_CMD_RAW_WAIT, DMA_CMD_DIS_WC = 1 << 30, 1 << 31
DMA_SRC_NAMES = ("addr", "gds", "data", "addr_l2")
DMA_DST_NAMES = ("addr", "gds", "nowhere", "addr_l2")

# ACQUIRE_MEM dw1 CP_COHER_CNTL (soc15d.h PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_*): the
# caches to act on before later packets read memory. As for RELEASE_MEM, vgpu models
# the L2: TC_WB_ACTION_ENA writes it back, TC_ACTION_ENA invalidates it; the other
# caches' bits are accepted and do nothing.
COHER_TC_NC_ACTION_ENA = 1 << 3
COHER_TC_WC_ACTION_ENA = 1 << 4
COHER_TC_INV_METADATA_ACTION_ENA = 1 << 5
COHER_TCL1_VOL_ACTION_ENA = 1 << 15
COHER_TC_WB_ACTION_ENA = 1 << 18
COHER_TCL1_ACTION_ENA = 1 << 22
COHER_TC_ACTION_ENA = 1 << 23
COHER_SH_KCACHE_ACTION_ENA = 1 << 27
COHER_SH_ICACHE_ACTION_ENA = 1 << 29
# What gfx_v9_0_emit_mem_sync puts before every job's IBs: write back and invalidate.
ACQUIRE_WB_INV = (COHER_SH_ICACHE_ACTION_ENA | COHER_SH_KCACHE_ACTION_ENA | COHER_TC_ACTION_ENA
                  | COHER_TCL1_ACTION_ENA | COHER_TC_WB_ACTION_ENA)
# An invalidate of the L2 and the shader caches without a write-back.
ACQUIRE_INV = (COHER_SH_ICACHE_ACTION_ENA | COHER_SH_KCACHE_ACTION_ENA | COHER_TC_ACTION_ENA
               | COHER_TCL1_ACTION_ENA)

# The L2 actions a packet asks for, as flags (kmd/hw L2Cache.sync takes them).
L2_WRITEBACK, L2_INVALIDATE = 1, 2
L2_ACTION_NAMES = {0: "none", L2_WRITEBACK: "wb", L2_INVALIDATE: "inv", L2_WRITEBACK | L2_INVALIDATE: "wb+inv"}


def release_mem_l2_actions(event_dw: int) -> int:
    """L2_WRITEBACK / L2_INVALIDATE flags of RELEASE_MEM's dw1 (EOP_TC_WB / EOP_TC_ACTION)."""
    return ((L2_WRITEBACK if event_dw & EOP_TC_WB_ACTION_EN else 0)
            | (L2_INVALIDATE if event_dw & EOP_TC_ACTION_EN else 0))


def acquire_mem_l2_actions(coher_cntl: int) -> int:
    """L2_WRITEBACK / L2_INVALIDATE flags of ACQUIRE_MEM's CP_COHER_CNTL."""
    return ((L2_WRITEBACK if coher_cntl & COHER_TC_WB_ACTION_ENA else 0)
            | (L2_INVALIDATE if coher_cntl & COHER_TC_ACTION_ENA else 0))


class Pm4Ib:
    """Builds a PM4 indirect buffer for the compute ring; every method appends and
    returns self, so calls chain (tinygrad's PM4 queue style)."""

    def __init__(self) -> None:
        self.dwords: list[int] = []

    def _pkt(self, opcode: int, *body: int) -> Pm4Ib:
        self.dwords.append(pm4_type3_header(opcode, len(body)))
        self.dwords.extend(dw & 0xFFFFFFFF for dw in body)
        return self

    def nop(self, count: int = 0) -> Pm4Ib:
        """A NOP with `count` filler dwords after the header (count 0 is one dword:
        the 0xFFFF1000 filler amdgpu pads with)."""
        if count == 0:
            return self.raw(PM4_NOP_FILLER)
        return self._pkt(PKT3_NOP, *[0] * count)

    def set_sh_reg(self, reg: int, *values: int) -> Pm4Ib:
        """SET_SH_REG: consecutive registers from `reg` (offset from SH base 0x2C00)."""
        return self._pkt(PKT3_SET_SH_REG, reg, *values)

    def set_program(self, code_va: int, rsrc1_value: int, rsrc2_value: int) -> Pm4Ib:
        lo, hi = pgm_lo_hi(code_va)
        return (self.set_sh_reg(COMPUTE_PGM_LO, lo, hi)
                .set_sh_reg(COMPUTE_PGM_RSRC1, rsrc1_value, rsrc2_value))

    def set_num_threads(self, x: int, y: int = 1, z: int = 1) -> Pm4Ib:
        return self.set_sh_reg(COMPUTE_NUM_THREAD_X, x, y, z)

    def set_user_data(self, values, start: int = 0) -> Pm4Ib:
        values = list(values)
        if start + len(values) > COMPUTE_USER_DATA_COUNT or not values:
            raise ValueError(f"user data {start}..{start + len(values) - 1} (0..15)")
        return self.set_sh_reg(COMPUTE_USER_DATA_0 + start, *values)

    def dispatch_direct(self, x: int, y: int = 1, z: int = 1,
                        initiator: int = DISPATCH_INITIATOR_COMPUTE_SHADER_EN) -> Pm4Ib:
        """DISPATCH_DIRECT of x*y*z workgroups (thread groups)."""
        return self._pkt(PKT3_DISPATCH_DIRECT, x, y, z, initiator)

    def indirect_buffer(self, va: int, size_dw: int) -> Pm4Ib:
        """Run the IB at `va` (dword aligned), then come back (gfx_v9_0_ring_emit_ib_compute)."""
        return self._pkt(PKT3_INDIRECT_BUFFER, va & 0xFFFFFFFC, va >> 32 & 0xFFFF,
                         IB_VALID | (size_dw & IB_SIZE_MASK))

    def release_mem(self, addr: int, value: int = 0, data_sel: int = DATA_SEL_64,
                    int_sel: int = INT_SEL_NONE, int_ctx: int = 0,
                    event: int = EVENT_CACHE_FLUSH_AND_INV_TS, cache: int = 0) -> Pm4Ib:
        """End-of-pipe write: after earlier dispatches finish and the `cache` actions
        (EOP_* bits: RELEASE_WB, RELEASE_WB_INV) are done, write `value` (32 or 64
        bits) or the GPU timestamp to `addr`, optionally raise an interrupt."""
        return self._pkt(PKT3_RELEASE_MEM, event | EVENT_INDEX_EOP << 8 | cache,
                         data_sel << 29 | int_sel << 24 | RELEASE_DST_MEM << 16,
                         addr, addr >> 32, value, value >> 32, int_ctx)

    def wait_reg_mem(self, addr: int, ref: int, mask: int = 0xFFFFFFFF,
                     func: int = WAIT_FUNC_EQ, interval: int = 4) -> Pm4Ib:
        """Wait until `(mem32 & mask) func ref` (memory space, gfx_v9_0_wait_reg_mem)."""
        return self._pkt(PKT3_WAIT_REG_MEM, (func & 7) | WAIT_MEM_SPACE_MEM << 4,
                         addr, addr >> 32, ref, mask, interval)

    def write_data(self, addr: int, data) -> Pm4Ib:
        """Write dwords to memory at `addr` (DST_SEL 5, WR_CONFIRM)."""
        data = list(data)
        return self._pkt(PKT3_WRITE_DATA, WRITE_DST_MEM << 8 | WR_CONFIRM, addr, addr >> 32, *data)

    def dma_data(self, dst: int, src: int, nbytes: int, src_sel: int = DMA_SRC_ADDR_TC_L2,
                 dst_sel: int = DMA_DST_ADDR_TC_L2, command: int = 0, cp_sync: bool = True) -> Pm4Ib:
        """CP DMA: copy `nbytes` from `src` to `dst` (SRC_SEL/DST_SEL L2, as Mesa's
        GFX9 CP DMA does); with src_sel=DMA_SRC_DATA, `src` is the dword to fill with."""
        if not 0 <= nbytes <= DMA_BYTE_COUNT_MASK:
            raise ValueError(f"DMA_DATA of {nbytes} bytes (at most {DMA_BYTE_COUNT_MASK})")
        control = (dst_sel << DMA_DATA_DST_SEL_SHIFT | src_sel << DMA_DATA_SRC_SEL_SHIFT
                   | (DMA_DATA_CP_SYNC if cp_sync else 0))
        return self._pkt(PKT3_DMA_DATA, control, src, src >> 32, dst, dst >> 32,
                         (command & ~DMA_BYTE_COUNT_MASK) | nbytes)

    def dma_fill(self, dst: int, value: int, nbytes: int) -> Pm4Ib:
        """CP DMA fill: `nbytes` (a multiple of 4) at `dst` with the dword `value`."""
        return self.dma_data(dst, value & 0xFFFFFFFF, nbytes, src_sel=DMA_SRC_DATA)

    def acquire_mem(self, coher_cntl: int = ACQUIRE_INV, base: int = 0,
                    size: int = 0xFFFFFFFF) -> Pm4Ib:
        """Cache actions (CP_COHER_CNTL bits: ACQUIRE_INV, ACQUIRE_WB_INV) before later
        packets read memory, over the whole address space as amdgpu emits it (the
        range is recorded; vgpu acts on the whole L2, docs/cache.md)."""
        return self._pkt(PKT3_ACQUIRE_MEM, coher_cntl, size, 0, base >> 8, base >> 40, 10)

    def raw(self, *dws: int) -> Pm4Ib:
        self.dwords.extend(dw & 0xFFFFFFFF for dw in dws)
        return self

    def tobytes(self) -> bytes:
        return struct.pack(f"<{len(self.dwords)}I", *self.dwords)

    def __len__(self) -> int:
        return len(self.dwords)


# -- disassembly ------------------------------------------------------------------
def _addr(dws, i: int) -> str:
    return f"{dws[i] | dws[i + 1] << 32:#x}"


def describe_packet(dws, pos: int) -> tuple[str, int]:
    """(text, length in dwords) of the packet at `pos`. Length 0: the packet cannot
    be decoded (not type 3, or it runs past the end); the text says why."""
    hdr = dws[pos]
    if hdr == PM4_NOP_FILLER:
        return "NOP (filler)", 1
    kind = pm4_type(hdr)
    if kind != PM4_TYPE3:
        return f"<type-{kind} packet {hdr:#010x}: only type 3 is accepted>", 0
    op, n = pm4_opcode(hdr), pm4_body_dw(hdr)
    if pos + 1 + n > len(dws):
        return f"<{PKT3_NAMES.get(op, f'opcode {op:#x}')} needs {n} body dwords, IB ends after " \
               f"{len(dws) - pos - 1}>", 0
    b = dws[pos + 1: pos + 1 + n]
    name = PKT3_NAMES.get(op)
    if name is None:
        return f"<unknown opcode {op:#04x}, {n} body dwords>", 1 + n
    if op == PKT3_NOP:
        text = f"NOP count={n}"
    elif op == PKT3_SET_SH_REG:
        regs = [f"{SH_REG_NAMES.get(b[0] + i, f'SH+{b[0] + i:#x}')}={v:#x}" for i, v in enumerate(b[1:])]
        text = "SET_SH_REG " + " ".join(regs[:8]) + (" ..." if len(regs) > 8 else "")
    elif n != PKT3_BODY_DW.get(op, n) and op not in (PKT3_WRITE_DATA,):
        text = f"{name} <{n} body dwords, expected {PKT3_BODY_DW[op]}>"
    elif op == PKT3_DISPATCH_DIRECT:
        text = f"DISPATCH_DIRECT groups={b[0]}x{b[1]}x{b[2]} initiator={b[3]:#x}"
    elif op == PKT3_INDIRECT_BUFFER:
        text = (f"INDIRECT_BUFFER va={b[0] & 0xFFFFFFFC | (b[1] & 0xFFFF) << 32:#x} "
                f"dwords={b[2] & IB_SIZE_MASK} valid={b[2] >> 23 & 1}")
    elif op == PKT3_RELEASE_MEM:
        sel = {0: "none", 1: "value32", 2: "value64", 3: "timestamp"}.get(b[1] >> 29, f"data_sel{b[1] >> 29}")
        value = b[4] | b[5] << 32 if b[1] >> 29 == DATA_SEL_64 else b[4]
        text = (f"RELEASE_MEM event={b[0] & 0x3F:#x} l2={L2_ACTION_NAMES[release_mem_l2_actions(b[0])]}"
                f" addr={_addr(b, 2)} {sel}"
                + (f"={value:#x}" if b[1] >> 29 in (DATA_SEL_32, DATA_SEL_64) else "")
                + f" int_sel={b[1] >> 24 & 7}")
    elif op == PKT3_WAIT_REG_MEM:
        space = "mem" if b[0] >> 4 & 3 == WAIT_MEM_SPACE_MEM else "reg"
        text = (f"WAIT_REG_MEM {space} addr={_addr(b, 1)} (value & {b[4]:#x}) "
                f"{WAIT_FUNC_NAMES[b[0] & 7]} {b[3]:#x} interval={b[5] & 0xFFFF}")
    elif op == PKT3_WRITE_DATA:
        data = " ".join(f"{d:#x}" for d in b[3:7]) + (" ..." if n > 7 else "")
        text = f"WRITE_DATA dst_sel={b[0] >> 8 & 0xF} addr={_addr(b, 1)} dwords={n - 3} data=[{data}]"
    elif op == PKT3_DMA_DATA:
        src_sel, dst_sel = b[0] >> DMA_DATA_SRC_SEL_SHIFT & 3, b[0] >> DMA_DATA_DST_SEL_SHIFT & 3
        src = f"data={b[1]:#x}" if src_sel == DMA_SRC_DATA else f"src={DMA_SRC_NAMES[src_sel]}:{_addr(b, 1)}"
        cmd = "".join(f" {name}" for bit, name in ((DMA_CMD_SAS, "sas"), (DMA_CMD_DAS, "das"),
                                                     (DMA_CMD_SAIC, "saic"), (DMA_CMD_DAIC, "daic"))
                      if b[5] & bit)
        text = (f"DMA_DATA {src} dst={DMA_DST_NAMES[dst_sel]}:{_addr(b, 3)} "
                f"bytes={b[5] & DMA_BYTE_COUNT_MASK}{cmd}")
    else:
        text = (f"ACQUIRE_MEM coher_cntl={b[0]:#x} l2={L2_ACTION_NAMES[acquire_mem_l2_actions(b[0])]}"
                f" size={b[1]:#x} base={(b[3] | b[4] << 32) << 8:#x}")
    return text, 1 + n


def disasm_pm4(dwords, mark: int | None = None) -> list[str]:
    """One line per packet: dword offset, packet name, decoded fields. The packet
    at dword `mark` gets a `>>>` prefix (the failing packet in a crash dump).
    Stops at a packet that cannot be decoded, showing its raw dwords."""
    dws = [int(d) & 0xFFFFFFFF for d in dwords]
    lines, pos = [], 0
    while pos < len(dws):
        text, length = describe_packet(dws, pos)
        prefix = ">>> " if pos == mark else "    "
        if length == 0:
            raw = " ".join(f"{d:08x}" for d in dws[pos:pos + 8])
            lines.append(f"{prefix}{pos:04x}: {text} [{raw}]")
            break
        lines.append(f"{prefix}{pos:04x}: {text}")
        pos += length
    return lines
