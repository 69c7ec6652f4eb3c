"""vISA: the instruction encoding, register files and code-object header.

Hardware ABI shared by the assembler (vgpu/asm.py), both executors (kmd/hw/cu_ref.py
and the Cython core), the KMD's crash dumps and the compiler, as Mesa's sid.h is.
docs/isa.md is the specification; this module is its tables. Nothing else defines
these numbers.

Every instruction is one little-endian 64-bit word. Four formats share the low byte
(the opcode) and differ in how the other 56 bits are cut:

    SOPP  [7:0] op | [31:8] 0               | [63:32] imm32 (branch offset, trap code)
    ALU   [7:0] op | [15:8] dst | [23:16] src0 | [31:24] src1 | [63:32] literal
    VOP3  [7:0] op | [15:8] dst | [23:16] src0 | [31:24] src1 | [39:32] src2 | [63:40] 0
    MEM   [7:0] op | [15:8] dst | [23:16] addr | [31:24] base | [39:32] data | [63:40] offset (signed)
"""
from __future__ import annotations

import dataclasses
import struct

ISA_VERSION = 1

# -- machine limits -----------------------------------------------------------------
WAVE_SIZE = 32                  # lanes per wave; EXEC and VCC are 32-bit masks
INST_BYTES = 8                  # every instruction is one 64-bit word
MAX_SGPRS = 104                 # s0..s103
MAX_VGPRS = 128                 # v0..v127 (per lane)
MAX_LDS_BYTES = 64 * 1024       # per workgroup
MAX_BLOCK_THREADS = 1024        # threads per workgroup (32 waves)
# What one compute unit holds at once, GCN's resources per CU (the AMD GCN3 ISA guide,
# "Compute unit" chapter; ROCm's occupancy calculator): 4 SIMDs of 10 wave slots, a
# register file per SIMD of 64 KiB of VGPRs (512 registers of our 32-lane waves) and
# 800 SGPRs, 64 KiB of LDS, 16 workgroups. It bounds a cooperative dispatch: every
# workgroup waiting at s_barrier_grid is held (max_resident_workgroups).
SIMDS_PER_CU = 4
WAVE_SLOTS_PER_SIMD = 10
VGPRS_PER_SIMD = 512
SGPRS_PER_SIMD = 800
LDS_BYTES_PER_CU = 64 * 1024
MAX_WORKGROUPS_PER_CU = 16
LANE_MASK = (1 << WAVE_SIZE) - 1

# -- register conventions at wave start ------------------------------------------------
USER_SGPRS = 16                 # user_data[0..15] -> s0..s15
SGPR_KERNARG = 0                # the loader puts the kernarg segment VA in s[0:1]
SGPR_WORKGROUP_ID = 16          # s16, s17, s18 = workgroup id x, y, z
MIN_SGPRS = SGPR_WORKGROUP_ID + 3
VGPR_LOCAL_ID = 0               # v0, v1, v2 = local (thread-in-workgroup) id x, y, z
MIN_VGPRS = VGPR_LOCAL_ID + 3

# -- operand codes (8 bits, the dst/src/addr/base/data fields) ------------------------
# 0..103 s0..s103, 104 vcc, 105 exec, 106 scc, 107..125 illegal, 126 off,
# 127 literal (the ALU word's imm32), 128..255 v0..v127.
OPR_VCC = 104
OPR_EXEC = 105
OPR_SCC = 106
OPR_OFF = 126
OPR_LIT = 127
OPR_VGPR = 128

CANONICAL_NAN = 0x7FC00000      # every NaN a float op produces is written as this
CANONICAL_NAN64 = 0x7FF8000000000000    # the same for the 64-bit float operations

# -- formats -----------------------------------------------------------------------
FMT_SOPP, FMT_ALU, FMT_VOP3, FMT_MEM = "sopp", "alu", "vop3", "mem"

# Operand kinds, one per used field.  The assembler parses them, the executors check
# them at decode time (a wrong kind is an illegal instruction) -- docs/isa.md 3.2.
K_SDST = "sdst"         # sN, vcc, exec
K_SDST2 = "sdst2"       # s[n:n+1]
K_SDST4 = "sdst4"       # s[n:n+3]
K_SDST8 = "sdst8"       # s[n:n+7]
K_SDST16 = "sdst16"     # s[n:n+15]
K_SSRC = "ssrc"         # sN, vcc, exec, scc, literal
K_SSRC2 = "ssrc2"       # s[n:n+1]
K_SMASK = "smask"       # sN, vcc, exec (a lane mask; no literal)
K_VDST = "vdst"         # vN
K_VDST_OFF = "vdst_off" # vN or off (atomic return value)
K_VSRC = "vsrc"         # vN, sN, vcc, exec, scc, literal
K_VREG = "vreg"         # vN only
K_VREG2 = "vreg2"       # v[n:n+1]
K_VSRC2 = "vsrc2"       # v[n:n+1] or s[n:n+1] (a 64-bit source; no literal)
K_VDST2_OFF = "vdst2_off"   # v[n:n+1] or off (64-bit atomic return value)
K_VREG4 = "vreg4"       # v[n:n+3] (a 64-bit compare-and-swap's data and compare value)
K_GADDR = "gaddr"       # v[n:n+1] when base is off, else vN (32-bit offset)
K_SBASE = "sbase"       # s[n:n+1] or off
K_SBASE2 = "sbase2"     # s[n:n+1] (scalar loads)
K_OFFSET = "offset"     # signed 24-bit byte offset (MEM [63:40])
K_OFFSET2 = "offset2"   # two 8-bit dword counts: offset0 MEM [47:40], offset1 [55:48]; [63:56] 0
K_BRANCH = "branch"     # signed 32-bit byte offset from the next instruction (SOPP imm32)
K_IMM = "imm"           # unsigned 32-bit immediate (SOPP imm32)

# Which field each operand of an assembly line lands in, per format and kind.
FIELD_DST, FIELD_SRC0, FIELD_SRC1, FIELD_SRC2 = "dst", "src0", "src1", "src2"
FIELD_ADDR, FIELD_BASE, FIELD_DATA, FIELD_IMM = "addr", "base", "data", "imm"


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """One opcode: `operands` are (field, kind) in assembly order.

    `ftype` is 'f32' when the sources are floats (the disassembler prints literals as
    floats), 'f64' for the 64-bit float operations, else 'b32'.
    """

    code: int
    name: str
    fmt: str
    operands: tuple[tuple[str, str], ...]
    ftype: str = "b32"


def _ops() -> list[OpInfo]:
    ops: list[OpInfo] = []

    def op(code, name, fmt, *operands, ftype="b32"):
        ops.append(OpInfo(code, name, fmt, tuple(operands), ftype))

    D, S0, S1, S2 = FIELD_DST, FIELD_SRC0, FIELD_SRC1, FIELD_SRC2
    A, B, DA, I = FIELD_ADDR, FIELD_BASE, FIELD_DATA, FIELD_IMM
    # SOPP: program control.  0x00 is illegal so that running into zeroed memory faults.
    op(0x01, "s_endpgm", FMT_SOPP)
    op(0x02, "s_nop", FMT_SOPP)
    op(0x03, "s_branch", FMT_SOPP, (I, K_BRANCH))
    op(0x04, "s_cbranch_scc0", FMT_SOPP, (I, K_BRANCH))
    op(0x05, "s_cbranch_scc1", FMT_SOPP, (I, K_BRANCH))
    op(0x06, "s_cbranch_vccz", FMT_SOPP, (I, K_BRANCH))
    op(0x07, "s_cbranch_vccnz", FMT_SOPP, (I, K_BRANCH))
    op(0x08, "s_cbranch_execz", FMT_SOPP, (I, K_BRANCH))
    op(0x09, "s_cbranch_execnz", FMT_SOPP, (I, K_BRANCH))
    op(0x0A, "s_barrier", FMT_SOPP)
    op(0x0B, "s_trap", FMT_SOPP, (I, K_IMM))
    op(0x0C, "s_barrier_grid", FMT_SOPP)     # every workgroup of the dispatch (docs/isa.md 4.1)
    # SOP1: scalar, one source.
    op(0x10, "s_mov_b32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x11, "s_mov_b64", FMT_ALU, (D, K_SDST2), (S0, K_SSRC2))
    op(0x12, "s_not_b32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x13, "s_bcnt1_i32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x14, "s_ff1_i32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x15, "s_and_saveexec_b32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x16, "s_or_saveexec_b32", FMT_ALU, (D, K_SDST), (S0, K_SSRC))
    op(0x17, "s_memtime", FMT_ALU, (D, K_SDST2))
    # VOP1 bit counting (GCN's V_FFBL_B32, V_FFBH_U32, V_BFREV_B32), in free SOP1 codes.
    op(0x18, "v_ffbl_b32", FMT_ALU, (D, K_VDST), (S0, K_VSRC))
    op(0x19, "v_ffbh_u32", FMT_ALU, (D, K_VDST), (S0, K_VSRC))
    op(0x1A, "v_bfrev_b32", FMT_ALU, (D, K_VDST), (S0, K_VSRC))
    # SOP2: scalar, two sources.
    for code, name in enumerate(("s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32",
                                 "s_mul_i32", "s_mul_hi_u32", "s_and_b32", "s_or_b32",
                                 "s_xor_b32", "s_andn2_b32", "s_orn2_b32", "s_lshl_b32",
                                 "s_lshr_b32", "s_ashr_i32", "s_min_i32", "s_min_u32",
                                 "s_max_i32", "s_max_u32", "s_cselect_b32"), 0x20):
        op(code, name, FMT_ALU, (D, K_SDST), (S0, K_SSRC), (S1, K_SSRC))
    # SOPC: scalar compares, write SCC.
    code = 0x40
    for t in ("i32", "u32"):
        for c in ("eq", "ne", "lt", "le", "gt", "ge"):
            op(code, f"s_cmp_{c}_{t}", FMT_ALU, (S0, K_SSRC), (S1, K_SSRC))
            code += 1
    # SMEM: scalar loads (kernel arguments).
    op(0x50, "s_load_dword", FMT_MEM, (D, K_SDST), (B, K_SBASE2), (I, K_OFFSET))
    op(0x51, "s_load_dwordx2", FMT_MEM, (D, K_SDST2), (B, K_SBASE2), (I, K_OFFSET))
    op(0x52, "s_load_dwordx4", FMT_MEM, (D, K_SDST4), (B, K_SBASE2), (I, K_OFFSET))
    # GCN's S_LOAD_DWORDX8 / X16 (a whole kernarg segment in one load), in free codes.
    op(0x54, "s_load_dwordx8", FMT_MEM, (D, K_SDST8), (B, K_SBASE2), (I, K_OFFSET))
    op(0x55, "s_load_dwordx16", FMT_MEM, (D, K_SDST16), (B, K_SBASE2), (I, K_OFFSET))
    # VOP1: vector, one source.
    for code, name, ft in ((0x60, "v_mov_b32", "b32"), (0x61, "v_not_b32", "b32"),
                           (0x62, "v_cvt_f32_i32", "b32"), (0x63, "v_cvt_f32_u32", "b32"),
                           (0x64, "v_cvt_i32_f32", "f32"), (0x65, "v_cvt_u32_f32", "f32"),
                           (0x66, "v_floor_f32", "f32"), (0x67, "v_ceil_f32", "f32"),
                           (0x68, "v_trunc_f32", "f32"), (0x69, "v_rndne_f32", "f32"),
                           (0x6A, "v_rcp_f32", "f32"), (0x6B, "v_sqrt_f32", "f32"),
                           (0x6C, "v_rsqrt_f32", "f32"), (0x6D, "v_exp_f32", "f32"),
                           (0x6E, "v_exp2_f32", "f32"), (0x6F, "v_log_f32", "f32"),
                           (0x70, "v_log2_f32", "f32"), (0x71, "v_sin_f32", "f32"),
                           (0x72, "v_cos_f32", "f32"), (0x73, "v_tanh_f32", "f32")):
        op(code, name, FMT_ALU, (D, K_VDST), (S0, K_VSRC), ftype=ft)
    op(0x78, "v_readfirstlane_b32", FMT_ALU, (D, K_SDST), (S0, K_VREG))
    # VOP2: vector, two sources.
    for code, name, ft in ((0x80, "v_add_u32", "b32"), (0x81, "v_sub_u32", "b32"),
                           (0x82, "v_mul_lo_u32", "b32"), (0x83, "v_mul_hi_u32", "b32"),
                           (0x84, "v_mul_hi_i32", "b32"), (0x85, "v_and_b32", "b32"),
                           (0x86, "v_or_b32", "b32"), (0x87, "v_xor_b32", "b32"),
                           (0x88, "v_lshl_b32", "b32"), (0x89, "v_lshr_b32", "b32"),
                           (0x8A, "v_ashr_i32", "b32"), (0x8B, "v_min_i32", "b32"),
                           (0x8C, "v_max_i32", "b32"), (0x8D, "v_min_u32", "b32"),
                           (0x8E, "v_max_u32", "b32"), (0x8F, "v_div_u32", "b32"),
                           (0x90, "v_rem_u32", "b32"), (0x91, "v_div_i32", "b32"),
                           (0x92, "v_rem_i32", "b32"), (0x93, "v_add_co_u32", "b32"),
                           (0x94, "v_addc_co_u32", "b32"), (0x95, "v_sub_co_u32", "b32"),
                           (0x98, "v_add_f32", "f32"), (0x99, "v_sub_f32", "f32"),
                           (0x9A, "v_mul_f32", "f32"), (0x9B, "v_div_f32", "f32"),
                           (0x9C, "v_min_f32", "f32"), (0x9D, "v_max_f32", "f32")):
        op(code, name, FMT_ALU, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC), ftype=ft)
    # Lane counting (GCN's V_MBCNT_LO_U32_B32 on a 32-lane wave, V_BCNT_U32_B32).
    op(0x96, "v_mbcnt_lo_u32_b32", FMT_ALU, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC))
    op(0x97, "v_bcnt_u32_b32", FMT_ALU, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC))
    op(0x9E, "v_readlane_b32", FMT_ALU, (D, K_SDST), (S0, K_VREG), (S1, K_SSRC))
    op(0x9F, "v_writelane_b32", FMT_ALU, (D, K_VDST), (S0, K_SSRC), (S1, K_SSRC))
    # VOP3: vector, three sources (no literal).
    op(0xA0, "v_fma_f32", FMT_VOP3, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC), (S2, K_VSRC),
       ftype="f32")
    op(0xA1, "v_mad_u32", FMT_VOP3, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC), (S2, K_VSRC))
    op(0xA2, "v_cndmask_b32", FMT_VOP3, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC),
       (S2, K_SMASK))
    # GCN's V_MAD_F32 (not fused: the product is rounded, then the sum), in a free code.
    op(0x1B, "v_mad_f32", FMT_VOP3, (D, K_VDST), (S0, K_VSRC), (S1, K_VSRC), (S2, K_VSRC),
       ftype="f32")
    # VOPC: vector compares, write a lane mask.
    code = 0xB0
    for t in ("i32", "u32", "f32"):
        for c in ("eq", "ne", "lt", "le", "gt", "ge"):
            op(code, f"v_cmp_{c}_{t}", FMT_ALU, (D, K_SDST), (S0, K_VSRC), (S1, K_VSRC),
               ftype="f32" if t == "f32" else "b32")
            code += 1
    # LDS.
    op(0xC8, "ds_read_b32", FMT_MEM, (D, K_VDST), (A, K_VREG), (I, K_OFFSET))
    op(0xC9, "ds_write_b32", FMT_MEM, (A, K_VREG), (DA, K_VREG), (I, K_OFFSET))
    # GCN's DS_READ_B128 (four consecutive dwords into a quad), in a free code.
    op(0x53, "ds_read_b128", FMT_MEM, (D, K_VREG4), (A, K_VREG), (I, K_OFFSET))
    # GCN's DS_READ2_B32 (dwords at A + 4 * offset0 and A + 4 * offset1 into a pair; the
    # two offsets packed as GCN packs them: offset0 [7:0], offset1 [15:8]), in a free code.
    op(0x56, "ds_read2_b32", FMT_MEM, (D, K_VREG2), (A, K_VREG), (I, K_OFFSET2))
    for code, name, ft in ((0xCA, "ds_add_u32", "b32"), (0xCB, "ds_add_f32", "f32"),
                           (0xCC, "ds_max_i32", "b32"), (0xCD, "ds_max_u32", "b32"),
                           (0xCE, "ds_max_f32", "f32"), (0xC2, "ds_min_i32", "b32"),
                           (0xC3, "ds_min_u32", "b32"), (0xC4, "ds_min_f32", "f32"),
                           (0xC5, "ds_sub_u32", "b32"), (0xC6, "ds_wrxchg_rtn_b32", "b32")):
        op(code, name, FMT_MEM, (D, K_VDST_OFF), (A, K_VREG), (DA, K_VREG), (I, K_OFFSET),
           ftype=ft)
    op(0xC7, "ds_cmpst_rtn_b32", FMT_MEM, (D, K_VDST_OFF), (A, K_VREG), (DA, K_VREG2),
       (I, K_OFFSET))
    # Cross-lane permutes through the LDS crossbar (no LDS memory is touched).
    op(0xCF, "ds_bpermute_b32", FMT_MEM, (D, K_VDST), (A, K_VREG), (DA, K_VREG), (I, K_OFFSET))
    op(0xEA, "ds_permute_b32", FMT_MEM, (D, K_VDST), (A, K_VREG), (DA, K_VREG), (I, K_OFFSET))
    # Global memory through the VM.
    for code, name in ((0xD0, "global_load_dword"), (0xD1, "global_load_ubyte"),
                       (0xD2, "global_load_sbyte"), (0xD3, "global_load_ushort"),
                       (0xD4, "global_load_sshort")):
        op(code, name, FMT_MEM, (D, K_VDST), (A, K_GADDR), (B, K_SBASE), (I, K_OFFSET))
    for code, name in ((0xD8, "global_store_dword"), (0xD9, "global_store_byte"),
                       (0xDA, "global_store_short")):
        op(code, name, FMT_MEM, (A, K_GADDR), (DA, K_VREG), (B, K_SBASE), (I, K_OFFSET))
    for code, name, ft in ((0xE0, "global_atomic_add_u32", "b32"),
                           (0xE1, "global_atomic_add_f32", "f32"),
                           (0xE2, "global_atomic_max_i32", "b32"),
                           (0xE3, "global_atomic_max_u32", "b32"),
                           (0xE4, "global_atomic_max_f32", "f32"),
                           (0xE5, "global_atomic_min_i32", "b32"),
                           (0xE6, "global_atomic_min_u32", "b32"),
                           (0xE7, "global_atomic_min_f32", "f32"),
                           (0xE8, "global_atomic_xchg_b32", "b32")):
        op(code, name, FMT_MEM, (D, K_VDST_OFF), (A, K_GADDR), (DA, K_VREG), (B, K_SBASE),
           (I, K_OFFSET), ftype=ft)
    op(0xE9, "global_atomic_cmpswap_b32", FMT_MEM, (D, K_VDST_OFF), (A, K_GADDR),
       (DA, K_VREG2), (B, K_SBASE), (I, K_OFFSET))
    _wide_ops(op)
    return ops


def _wide_ops(op) -> None:
    """The 64-bit operations on register pairs (docs/isa.md 4.8), in the opcode holes
    0x74-0x77, 0x79-0x7F, 0xA3-0xAF and 0xF0-0xFF.  ftype 'f64' marks float ones."""
    D, S0, S1, S2 = FIELD_DST, FIELD_SRC0, FIELD_SRC1, FIELD_SRC2
    A, B, DA, I = FIELD_ADDR, FIELD_BASE, FIELD_DATA, FIELD_IMM
    # VOP1: conversions and roundings.  (dst kind, src kind) per name.
    for code, name, dst, src in (
            (0x74, "v_cvt_f64_f32", K_VREG2, K_VSRC), (0x75, "v_cvt_f32_f64", K_VDST, K_VSRC2),
            (0x76, "v_cvt_f64_i64", K_VREG2, K_VSRC2), (0x77, "v_cvt_f64_u64", K_VREG2, K_VSRC2),
            (0x79, "v_cvt_i64_f64", K_VREG2, K_VSRC2), (0x7A, "v_cvt_u64_f64", K_VREG2, K_VSRC2),
            (0x7B, "v_cvt_f32_i64", K_VDST, K_VSRC2), (0x7C, "v_cvt_f32_u64", K_VDST, K_VSRC2),
            (0x7D, "v_sqrt_f64", K_VREG2, K_VSRC2), (0x7E, "v_floor_f64", K_VREG2, K_VSRC2),
            (0x7F, "v_trunc_f64", K_VREG2, K_VSRC2), (0xA4, "v_ceil_f64", K_VREG2, K_VSRC2),
            (0xA5, "v_rndne_f64", K_VREG2, K_VSRC2)):
        op(code, name, FMT_ALU, (D, dst), (S0, src), ftype="f64" if "f64" in name else "b32")
    op(0xA3, "v_fma_f64", FMT_VOP3, (D, K_VREG2), (S0, K_VSRC2), (S1, K_VSRC2), (S2, K_VSRC2),
       ftype="f64")
    # VOPC: 64-bit compares (ne, gt and ge are derived: docs/isa.md 4.8).
    for code, name in ((0xA6, "v_cmp_eq_i64"), (0xA7, "v_cmp_lt_i64"), (0xA8, "v_cmp_le_i64"),
                       (0xA9, "v_cmp_lt_u64"), (0xAA, "v_cmp_le_u64"), (0xAB, "v_cmp_eq_f64"),
                       (0xAC, "v_cmp_lt_f64"), (0xAD, "v_cmp_le_f64")):
        op(code, name, FMT_ALU, (D, K_SDST), (S0, K_VSRC2), (S1, K_VSRC2),
           ftype="f64" if name.endswith("f64") else "b32")
    op(0xAE, "global_load_dwordx2", FMT_MEM, (D, K_VREG2), (A, K_GADDR), (B, K_SBASE),
       (I, K_OFFSET))
    op(0xAF, "global_store_dwordx2", FMT_MEM, (A, K_GADDR), (DA, K_VREG2), (B, K_SBASE),
       (I, K_OFFSET))
    # VOP2: two 64-bit sources (the shifts: a 32-bit amount).
    for code, name in enumerate(("v_add_f64", "v_sub_f64", "v_mul_f64", "v_div_f64",
                                 "v_min_f64", "v_max_f64", "v_add_u64", "v_sub_u64",
                                 "v_mul_lo_u64", "v_div_u64", "v_div_i64"), 0xF0):
        op(code, name, FMT_ALU, (D, K_VREG2), (S0, K_VSRC2), (S1, K_VSRC2),
           ftype="f64" if name.endswith("f64") else "b32")
    for code, name in ((0xFB, "v_lshl_b64"), (0xFC, "v_lshr_b64"), (0xFD, "v_ashr_i64")):
        op(code, name, FMT_ALU, (D, K_VREG2), (S0, K_VSRC2), (S1, K_VSRC))
    for code, name, ft in ((0xFE, "global_atomic_add_u64", "b32"),
                           (0xFF, "global_atomic_add_f64", "f64"),
                           (0x58, "global_atomic_max_i64", "b32"),
                           (0x59, "global_atomic_max_u64", "b32"),
                           (0x5A, "global_atomic_max_f64", "f64"),
                           (0x5B, "global_atomic_min_i64", "b32"),
                           (0x5C, "global_atomic_min_u64", "b32"),
                           (0x5D, "global_atomic_min_f64", "f64"),
                           (0x5E, "global_atomic_xchg_b64", "b32")):
        op(code, name, FMT_MEM, (D, K_VDST2_OFF), (A, K_GADDR), (DA, K_VREG2), (B, K_SBASE),
           (I, K_OFFSET), ftype=ft)
    op(0x5F, "global_atomic_cmpswap_b64", FMT_MEM, (D, K_VDST2_OFF), (A, K_GADDR),
       (DA, K_VREG4), (B, K_SBASE), (I, K_OFFSET))


OPCODES: tuple[OpInfo, ...] = tuple(_ops())
BY_CODE: dict[int, OpInfo] = {o.code: o for o in OPCODES}
BY_NAME: dict[str, OpInfo] = {o.name: o for o in OPCODES}
assert len(BY_CODE) == len(OPCODES) == len(BY_NAME)

# The 64-bit operations (_wide_ops): the executors hand them to their own code.
WIDE_CODES = frozenset(o.code for o in OPCODES
                       if 0x74 <= o.code <= 0x7F and o.code != 0x78 or 0xA3 <= o.code <= 0xAF
                       or o.code >= 0xF0 or 0x58 <= o.code <= 0x5F)

# Named opcodes the executors switch on (generated: OP_S_ENDPGM = 0x01, ...).
globals().update({"OP_" + o.name.upper(): o.code for o in OPCODES})

# -- the word -----------------------------------------------------------------------
OFFSET_BITS = 24                # MEM [63:40]
OFFSET_MIN = -(1 << (OFFSET_BITS - 1))
OFFSET_MAX = (1 << (OFFSET_BITS - 1)) - 1
OFFSET2_MAX = 255               # offset0 / offset1 of an offset2 operand (dwords)


def offset2_split(imm: int) -> tuple[int, int]:
    """(offset0, offset1) in dwords of an offset2 operand's MEM offset field."""
    return imm & 0xFF, imm >> 8 & 0xFF


@dataclasses.dataclass(frozen=True)
class Inst:
    """A decoded word: the raw fields, whatever the format uses.

    `imm` is the SOPP/ALU imm32 (unsigned) or the MEM offset (signed 24-bit);
    `src2` is VOP3's, `addr`/`base`/`data` MEM's (they alias src0/src1/src2's bits).
    """

    op: int
    dst: int = 0
    src0: int = 0
    src1: int = 0
    src2: int = 0
    imm: int = 0

    # MEM-format names for the same bits.
    @property
    def addr(self) -> int:
        return self.src0

    @property
    def base(self) -> int:
        return self.src1

    @property
    def data(self) -> int:
        return self.src2


def encode(fmt: str, op: int, dst: int = 0, src0: int = 0, src1: int = 0, src2: int = 0,
           imm: int = 0) -> int:
    """The 64-bit word of one instruction (fields already range-checked)."""
    word = (op & 0xFF) | (dst & 0xFF) << 8 | (src0 & 0xFF) << 16 | (src1 & 0xFF) << 24
    if fmt == FMT_SOPP:
        return (op & 0xFF) | (imm & 0xFFFFFFFF) << 32
    if fmt == FMT_ALU:
        return word | (imm & 0xFFFFFFFF) << 32
    if fmt == FMT_VOP3:
        return word | (src2 & 0xFF) << 32
    return word | (src2 & 0xFF) << 32 | (imm & 0xFFFFFF) << 40       # MEM


def decode(word: int) -> Inst:
    """Split a word into fields by its opcode's format (unknown opcodes: ALU split)."""
    op = word & 0xFF
    info = BY_CODE.get(op)
    fmt = info.fmt if info else FMT_ALU
    dst, src0, src1 = word >> 8 & 0xFF, word >> 16 & 0xFF, word >> 24 & 0xFF
    if fmt == FMT_SOPP:
        return Inst(op, dst, src0, src1, 0, word >> 32)
    if fmt == FMT_ALU:
        return Inst(op, dst, src0, src1, 0, word >> 32)
    src2 = word >> 32 & 0xFF
    if fmt == FMT_VOP3:
        return Inst(op, dst, src0, src1, src2, word >> 40)     # imm must be 0
    off = word >> 40
    return Inst(op, dst, src0, src1, src2, off - (1 << 24) if off & 0x800000 else off)


# -- structural checks (docs/isa.md 2.3 step 2; the executors add the range check) -----
def _is_sgpr(c: int) -> bool:
    return c < MAX_SGPRS


def _is_vgpr(c: int) -> bool:
    return c >= OPR_VGPR


_KIND_OK = {
    K_SDST: lambda c: _is_sgpr(c) or c in (OPR_VCC, OPR_EXEC),
    K_SDST2: _is_sgpr, K_SDST4: _is_sgpr, K_SDST8: _is_sgpr, K_SDST16: _is_sgpr,
    K_SSRC2: _is_sgpr, K_SBASE2: _is_sgpr,
    K_SSRC: lambda c: _is_sgpr(c) or c in (OPR_VCC, OPR_EXEC, OPR_SCC, OPR_LIT),
    K_SMASK: lambda c: _is_sgpr(c) or c in (OPR_VCC, OPR_EXEC),
    K_VDST: _is_vgpr, K_VREG: _is_vgpr, K_VREG2: _is_vgpr, K_VREG4: _is_vgpr,
    K_VDST_OFF: lambda c: _is_vgpr(c) or c == OPR_OFF,
    K_VDST2_OFF: lambda c: _is_vgpr(c) or c == OPR_OFF,
    K_VSRC2: lambda c: _is_sgpr(c) or _is_vgpr(c),
    K_VSRC: lambda c: _is_sgpr(c) or _is_vgpr(c) or c in (OPR_VCC, OPR_EXEC, OPR_SCC, OPR_LIT),
    K_GADDR: _is_vgpr,
    K_SBASE: lambda c: _is_sgpr(c) or c == OPR_OFF,
}
KIND_WIDTH = {K_SDST2: 2, K_SSRC2: 2, K_SBASE2: 2, K_SBASE: 2, K_SDST4: 4, K_SDST8: 8, K_SDST16: 16,
              K_VREG2: 2,
              K_VSRC2: 2, K_VDST2_OFF: 2, K_VREG4: 4}
_ATTR = {FIELD_DST: "dst", FIELD_SRC0: "src0", FIELD_SRC1: "src1", FIELD_SRC2: "src2",
         FIELD_ADDR: "src0", FIELD_BASE: "src1", FIELD_DATA: "src2"}


def operand_fields(info: OpInfo, inst: Inst | None = None) -> dict[str, str]:
    """{Inst attribute (dst/src0/src1/src2): kind} of the register fields `info` uses.

    With `inst`, a global address resolves to a VGPR pair when base is off.
    """
    out = {}
    for field, kind in info.operands:
        if field == FIELD_IMM:
            continue
        if kind == K_GADDR and inst is not None and inst.src1 == OPR_OFF:
            kind = K_VREG2
        out[_ATTR[field]] = kind
    return out


def check_fields(info: OpInfo, inst: Inst) -> str | None:
    """Why `inst` is not a valid `info` instruction (kinds, zero fields), or None."""
    fields = operand_fields(info, inst)
    for attr in ("dst", "src0", "src1", "src2"):
        code = getattr(inst, attr)
        kind = fields.get(attr)
        if kind is None:
            if code:
                return f"unused field {attr} is {code}, not 0"
            continue
        if not _KIND_OK[kind](code):
            return f"{attr} {opr_name(code)} is not a {kind} operand"
        if code == OPR_LIT and info.fmt != FMT_ALU:
            return "a literal is only allowed in the ALU format"
    uses_imm = any(f == FIELD_IMM for f, _ in info.operands)
    if info.fmt == FMT_ALU:
        if inst.imm and not any(getattr(inst, a) == OPR_LIT for a in fields):
            return "literal field is not 0 but no operand is lit"
    elif (info.fmt == FMT_VOP3 or (info.fmt == FMT_SOPP and not uses_imm)) and inst.imm:
        return "reserved bits are not 0"
    elif info.operands and info.operands[-1][1] == K_OFFSET2 and not 0 <= inst.imm <= 0xFFFF:
        return "offset bits [63:56] are not 0"
    return None


def registers(info: OpInfo, inst: Inst) -> list[tuple[bool, int, int]]:
    """(is_vgpr, first index, count) of every register `inst` names."""
    out = []
    for attr, kind in operand_fields(info, inst).items():
        code = getattr(inst, attr)
        width = KIND_WIDTH.get(kind, 1)
        if _is_sgpr(code):
            out.append((False, code, width))
        elif _is_vgpr(code):
            out.append((True, code - OPR_VGPR, width))
    return out


def sext32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def opr_name(code: int) -> str:
    """Assembly spelling of a single operand code (no pairs)."""
    if code < MAX_SGPRS:
        return f"s{code}"
    if code >= OPR_VGPR:
        return f"v{code - OPR_VGPR}"
    return {OPR_VCC: "vcc", OPR_EXEC: "exec", OPR_SCC: "scc", OPR_OFF: "off",
            OPR_LIT: "lit"}.get(code, f"?{code}")


# -- code object (.vco) -----------------------------------------------------------------
VCO_MAGIC = 0x314F4356          # b"VCO1"
VCO_HEADER = struct.Struct("<IHHHHIIIIIIII20s")
VCO_HEADER_SIZE = 64
assert VCO_HEADER.size == VCO_HEADER_SIZE


@dataclasses.dataclass
class VcoHeader:
    """The 64-byte code-object header (docs/isa.md 8), all fields little-endian.

    `entry` is the byte offset of the first instruction inside the code; the loader
    sets the dispatch's program address to code VA + entry.  `meta` is UTF-8 JSON.
    """

    sgprs: int
    vgprs: int
    lds_bytes: int
    entry: int
    code_offset: int
    code_size: int
    meta_offset: int
    meta_size: int
    kernarg_size: int
    version: int = ISA_VERSION
    header_size: int = VCO_HEADER_SIZE
    flags: int = 0
    block: tuple[int, int, int] = (0, 0, 0)     # required block size, 0 = any

    def pack(self) -> bytes:
        return VCO_HEADER.pack(VCO_MAGIC, self.version, self.header_size, self.sgprs,
                               self.vgprs, self.lds_bytes, self.entry, self.code_offset,
                               self.code_size, self.meta_offset, self.meta_size,
                               self.kernarg_size, self.flags,
                               struct.pack("<III", *self.block) + bytes(8))

    @classmethod
    def unpack(cls, data: bytes) -> VcoHeader:
        if len(data) < VCO_HEADER_SIZE:
            raise ValueError(f"code object too short for its header ({len(data)} bytes)")
        (magic, version, header_size, sgprs, vgprs, lds, entry, code_off, code_size,
         meta_off, meta_size, kernarg, flags, tail) = VCO_HEADER.unpack_from(data)
        if magic != VCO_MAGIC:
            raise ValueError(f"not a vISA code object (magic {magic:#x})")
        if version != ISA_VERSION:
            raise ValueError(f"code object is vISA version {version}, not {ISA_VERSION}")
        block = struct.unpack_from("<III", tail)
        return cls(sgprs, vgprs, lds, entry, code_off, code_size, meta_off, meta_size, kernarg,
                   version, header_size, flags, block)


def max_resident_workgroups(threads: int, sgprs: int, vgprs: int, lds_bytes: int) -> int:
    """Workgroups of `threads` threads, each wave using `sgprs`/`vgprs` and the
    workgroup `lds_bytes` of LDS, that one compute unit holds at once (the occupancy
    model of the constants above): the cooperative limit per CU (docs/isa.md 4.1)."""
    waves = -(-max(threads, 1) // WAVE_SIZE)
    per_simd = min(WAVE_SLOTS_PER_SIMD, VGPRS_PER_SIMD // max(vgprs, 1),
                   SGPRS_PER_SIMD // max(sgprs, 1))
    fit = (SIMDS_PER_CU * per_simd) // waves
    if lds_bytes:
        fit = min(fit, LDS_BYTES_PER_CU // lds_bytes)
    return max(0, min(fit, MAX_WORKGROUPS_PER_CU))
