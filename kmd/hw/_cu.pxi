# The Cython compute unit (docs/isa.md, docs/hw.md "Compute unit"), included by _core.pyx
# so that it translates addresses through the PageTable's C++ map directly.
#
# A dispatch decodes the code window once (the exec-mapped pages from the program
# address, at most CU_WINDOW bytes) into DInst records; every wave then runs without the
# GIL, one instruction at a time, each a loop over 32 lanes under EXEC.  Workgroups are
# handed out in chunks from an atomic counter to `threads` C threads (the calling thread
# is one of them).  kmd/hw/cu_ref.py is the twin that defines the behaviour.
cimport cython
from libc.stdint cimport int8_t, int16_t, int32_t, uint16_t
from libc.math cimport (ceil, copysign, cos, exp, exp2, floor, log, log2, rint, sin, sqrt,
                        tanh, trunc)
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp

include "_cu_defs.pxi"    # generated from vgpu/isa.py by kmd/hw/gen_defs.py

import numpy as np

from kmd.hw import compute as _cu_py
from vgpu import isa as _isa

cdef extern from *:
    """
    #include <pthread.h>
    #include <string.h>
    static inline float cu_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
    static inline uint32_t cu_u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
    /* f32(): round to binary32 (nearest even, overflow to inf), NaN canonical. */
    static inline uint32_t cu_canon(float f) { return f != f ? 0x7FC00000u : cu_u(f); }
    static inline uint32_t cu_f32(double d) { return cu_canon((float)d); }
    static inline int cu_popcount(uint32_t x) {     /* no libgcc call without -mpopcnt */
        x = x - ((x >> 1) & 0x55555555u);
        x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
        return (int)((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
    }
    static inline int cu_ctz(uint32_t x) { return __builtin_ctz(x); }
    /* Lane l's bit of a mask. cu_lane_sel's and-compare vectorizes with SSE2; a per-lane
       `(m >> l) & 1` needs a variable shift SSE2 lacks, and Cython's `x if c else y`
       becomes a branch: both kept the lane loops scalar (v_cndmask 2x a v_add). */
    static const uint32_t CU_LANE_BIT[32] = {
        1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7,
        1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
        1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
        1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
    /* b where lane l's bit of m is set, else a; branch-free. */
    static inline uint32_t cu_lane_sel(uint32_t m, int l, uint32_t a, uint32_t b) {
        uint32_t sel = 0u - (uint32_t)((m & CU_LANE_BIT[l]) != 0);
        return (b & sel) | (a & ~sel);
    }
    static inline void cu_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
    /* The lane mask of 32 compare results (each 0 or 1): bit l = r[l]. SSE2 (every
       x86-64) packs them to bytes and takes the byte signs, 16 lanes per movemask;
       the plain loop (variable shifts: not vectorized) elsewhere. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline uint32_t cu_lane_mask(const uint32_t* r) {
        uint32_t m = 0;
        for (int h = 0; h < 2; h++) {
            const __m128i* p = (const __m128i*)(r + 16 * h);
            __m128i a = _mm_packs_epi32(_mm_loadu_si128(p), _mm_loadu_si128(p + 1));
            __m128i b = _mm_packs_epi32(_mm_loadu_si128(p + 2), _mm_loadu_si128(p + 3));
            __m128i x = _mm_packs_epi16(a, b);
            m |= (uint32_t)_mm_movemask_epi8(_mm_slli_epi16(x, 7)) << (16 * h);
        }
        return m;
    }
    #else
    static inline uint32_t cu_lane_mask(const uint32_t* r) {
        uint32_t m = 0;
        for (int l = 0; l < 32; l++) m |= r[l] << l;
        return m;
    }
    #endif
    static const uint64_t CU_NO_LIMIT = UINT64_MAX;     /* no test trigger armed */
    /* Zeroed, cache-line aligned and padded: the two workers write their registers on
       every instruction, so no line may hold data of both (false sharing). */
    static inline void* cu_zalloc(size_t n) {
        size_t size = (n + 63) & ~(size_t)63;
        void* p = aligned_alloc(64, size ? size : 64);
        if (p) memset(p, 0, size ? size : 64);
        return p;
    }
    /* Global atomics are real read-modify-writes: the other worker thread may hit the
       same dword (p is 4-aligned: checked before). */
    static inline uint32_t cu_atomic_load(uint32_t* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline int cu_atomic_cas(uint32_t* p, uint32_t* expected, uint32_t desired) {
        return __atomic_compare_exchange_n(p, expected, desired, 0, __ATOMIC_SEQ_CST,
                                           __ATOMIC_SEQ_CST);
    }
    """
    float cu_f(uint32_t u) nogil
    uint32_t cu_u(float f) nogil
    uint32_t cu_canon(float f) nogil
    uint32_t cu_f32(double d) nogil
    int cu_popcount(uint32_t x) nogil
    int cu_ctz(uint32_t x) nogil
    void cu_prefetch(const void* p) nogil
    uint32_t cu_lane_mask(const uint32_t* r) nogil
    uint32_t cu_lane_sel(uint32_t m, int l, uint32_t a, uint32_t b) nogil
    const uint64_t CU_NO_LIMIT
    void* cu_zalloc(size_t n) nogil
    uint32_t cu_atomic_load(uint32_t* p) nogil
    bint cu_atomic_cas(uint32_t* p, uint32_t* expected, uint32_t desired) nogil
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t*, void*, void* (*)(void*) noexcept nogil, void*) nogil
    int pthread_join(pthread_t, void**) nogil

DEF CU_WINDOW = 65536          # bytes of code decoded up front (8192 instructions)
DEF TLB_BITS = 6
DEF TLB_SIZE = 64              # per-thread translation cache entries (direct mapped)
DEF TLB_FILL_PAGES = 8         # a miss fills its block of 8 pages (translate_miss)
DEF NO_PAGE = -1
DEF PREFETCH_AHEAD = 2048     # bytes ahead of a full-wave contiguous load (global_mem)

# Operand kinds (vgpu/isa.py K_*), filled into _cu_ops from its tables at import.
cdef enum Kind:
    K_NONE = 0
    K_SDST
    K_SDST2
    K_SDST4
    K_SDST8
    K_SDST16
    K_SSRC
    K_SSRC2
    K_SMASK
    K_VDST
    K_VDST_OFF
    K_VSRC
    K_VREG
    K_VREG2
    K_GADDR
    K_SBASE
    K_SBASE2
    K_VSRC2
    K_VDST2_OFF
    K_VREG4

cdef enum Fmt:
    F_NONE = 0
    F_SOPP
    F_ALU
    F_VOP3
    F_MEM

# Wave/decode/fault outcomes.  Order of the reasons = _CU_REASONS.
cdef enum CuCode:
    CU_OK = 0
    CU_ILLEGAL
    CU_BAD_REGISTER
    CU_UNMAPPED
    CU_PERMISSION
    CU_MISALIGNED
    CU_LDS_BOUNDS
    CU_TRAP
    CU_ABORTED          # the abort flag was seen before an instruction
    CU_CANCELLED        # a lower workgroup faulted: this one does not count
    CU_BARRIER          # run_wave: the wave waits at s_barrier
    CU_DONE             # run_wave: the wave ended
    CU_PREEMPTED        # the preempt flag or the test trigger was seen before an instruction
    CU_GRID             # run_wave: the wave waits at s_barrier_grid
    CU_PARKED           # run_workgroup: the workgroup is held at the grid barrier

# CuShared.stop: what preempt() / abort() ask of the workers (one int, read before
# every instruction). An abort overrides a preemption, never the reverse. STOP_COUNT:
# the test trigger is armed, so every instruction takes stop_code's slow path, which
# counts; with it disarmed the trigger costs nothing.
DEF STOP_ABORT = 1
DEF STOP_PREEMPT = 2
DEF STOP_COUNT = 3

_PACKED_REGS = _cu_py.PACKED_REGS


def _ok_fields():
    """The fields of ComputeResult("ok") but sgprs, vgprs and counters, which an ok
    result with packed registers sets itself: a dispatch fills a new result's __dict__
    from them instead of running the dataclass's __init__. None (use __init__) if a
    field has a default made per instance that this does not know of."""
    import dataclasses
    for f in dataclasses.fields(_cu_py.ComputeResult):
        if f.default_factory is not dataclasses.MISSING and f.name not in ("sgprs", "vgprs", "counters"):
            return None
    if hasattr(_cu_py.ComputeResult, "__post_init__"):
        return None
    d = dict(_cu_py.ComputeResult("ok").__dict__)
    del d["sgprs"], d["vgprs"], d["counters"]
    return d


_OK_FIELDS = _ok_fields()
_ComputeResult = _cu_py.ComputeResult
_new_result = object.__new__
# compute.py's save-area layout, bound once (a tiny dispatch reads them every time).
cdef Py_ssize_t _CSA_SLOT_BYTES = _cu_py.CSA_SLOT_BYTES
cdef Py_ssize_t _CSA_MAX_SLOTS = _cu_py.CSA_MAX_SLOTS
cdef Py_ssize_t _CSA_SLOT_HEADER_BYTES = _cu_py.CSA_SLOT_HEADER.size
_CU_REASONS = (None, _cu_py.REASON_ILLEGAL, _cu_py.REASON_BAD_REGISTER,
               _cu_py.REASON_UNMAPPED, _cu_py.REASON_PERMISSION, _cu_py.REASON_MISALIGNED,
               _cu_py.REASON_LDS_BOUNDS, _cu_py.REASON_TRAP)

cdef enum WaveState:
    W_RUN = 0
    W_BARRIER
    W_DONE
    W_GRID              # at s_barrier_grid (never saved: held workgroups are saved running)

cdef struct OpDesc:
    uint8_t fmt
    uint8_t uses_imm
    uint8_t wide        # a 64-bit operation (_cu_wide.pxi)
    uint8_t offset2     # the MEM offset is an offset2 operand: bits [63:56] must be 0
    uint8_t kind[4]     # dst, src0, src1, src2 (MEM: dst, addr, base, data)

cdef OpDesc _cu_ops[256]

# run_wave's branch of each opcode (one switch instead of a chain of range tests).
cdef enum OpClass:
    CL_SOPP = 0
    CL_SOP1
    CL_SOP2
    CL_SCMP
    CL_SLOAD
    CL_BITS
    CL_LANE
    CL_VOP1
    CL_VOP2
    CL_VOP3
    CL_VOPC
    CL_CARRY
    CL_WIDE
    CL_PERMUTE
    CL_LDS
    CL_GLOBAL

cdef uint8_t _cu_class[256]

cdef struct DInst:
    uint8_t op
    uint8_t dst
    uint8_t src0
    uint8_t src1
    uint8_t src2
    uint8_t status      # CU_OK, CU_ILLEGAL, CU_BAD_REGISTER
    uint32_t imm        # SOPP/ALU imm32
    int64_t off         # MEM signed offset

cdef struct CuFault:
    int code
    uint64_t va         # GpuFault va (unmapped, permission, global misaligned)
    int access          # ACCESS_READ/WRITE/EXEC, -1 when there is no GpuFault
    uint32_t trap_code

cdef struct WaveSt:
    uint32_t exec_
    uint32_t vcc
    uint32_t scc
    int64_t pc
    int state

cdef struct TlbEntry:
    uint64_t page
    uint8_t* host
    uint32_t flags

cdef struct PlanItem:        # compute.resume_plan: workgroups [wg, wg + count) at plan
    uint64_t pos            # positions [pos, pos + count); slot >= 0: restored from the CSA
    uint64_t wg
    uint64_t count
    int slot

cdef struct ChunkLog:
    uint64_t start
    uint64_t inst
    uint64_t lane

cdef struct CuShared:
    uint8_t pad_front[64]   # it lives on the stack of worker 0 (false sharing)
    unordered_map[uint64_t, Pte]* ptes
    shared_mutex* lock
    atomic[uint64_t]* generation
    atomic[int]* stop       # 0, STOP_ABORT or STOP_PREEMPT
    atomic[uint64_t]* next_wg       # the next plan position of the chunks
    atomic[uint64_t]* next_saved    # the next saved workgroup to take (one at a time)
    uint64_t nsaved                 # plan positions [0, nsaved) are saved workgroups
    atomic[uint64_t]* fault_wg
    VgpuL2* l2              # the L2 model (docs/cache.md), NULL when the mount has none
    uint64_t code_va
    DInst* win
    int64_t win_bytes
    int sgprs
    int vgprs
    int lds_bytes
    int nwaves
    uint32_t gx
    uint32_t gy
    uint32_t gz
    uint64_t total          # workgroups of the grid
    uint64_t nwork          # positions of the plan (next_wg counts them)
    uint64_t chunk
    PlanItem* plan          # NULL: a fresh dispatch (position = workgroup index)
    int nplan
    uint8_t* csa            # the context save area (docs/preemption.md)
    int csa_slots
    atomic[uint32_t]* csa_used  # slots holding a workgroup
    uint64_t wave_rec       # bytes of a wave's record in a slot
    bint cooperative        # the code has s_barrier_grid (docs/isa.md 4.1)
    uint8_t* gsa            # the workgroups held at the grid barrier, CSA slot format,
    uint64_t gsa_slot       #   slots of gsa_slot bytes; a workgroup of the first phase
    uint64_t gsa_cap        #   takes the slot of its index, later phases keep theirs
    atomic[uint64_t]* nparked   # workgroups held in this phase; their slots in parked[]
    uint64_t* parked
    uint32_t user_data[16]
    uint32_t* wave_exec     # [nwaves]
    uint32_t* lid           # [nwaves][3][32]
    int lid_rows            # v0 only (1-D blocks), v0-v1 (2-D) or all three: the rest are 0
    int vzero_from          # no instruction of the window writes a VGPR below this one
    uint8_t pad_back[64]

cdef struct CuThread:
    CuShared* sh
    uint32_t* s             # [nwaves][CU_MAX_SGPRS]
    uint32_t* v             # [nwaves][vgprs][32]
    uint8_t* lds
    WaveSt* waves
    TlbEntry tlb[TLB_SIZE]
    uint64_t tlb_gen
    uint64_t cur_wg
    uint64_t inst           # counters of the chunk in progress
    uint64_t lane
    uint64_t op_inst[256]   # performance counters of the whole dispatch: by opcode,
    uint64_t op_lane[256]   # lanes of memory instructions only (dispatch_counters)
    uint64_t tlb_lookups
    uint64_t tlb_misses
    uint64_t walks          # page-table walks besides one per TLB miss (fetches past the
                            # window, the rest of a missed page's block)
    uint64_t l2_key         # the line of this instruction's previous access (l2_at)
    int32_t l2_slot
    VgpuL2Tally l2          # the L2 counters of this thread's work
    uint64_t waves_run      # waves launched (a restored workgroup's are not)
    uint64_t limit          # the chunk stops before instruction `limit` (test trigger)
    uint64_t trigger_left   # instructions left before the test trigger, CU_NO_LIMIT
    uint64_t rest_from      # CU_PREEMPTED: plan positions [rest_from, rest_to) not run
    uint64_t rest_to
    int saved_slot          # CU_PREEMPTED: the slot of the workgroup saved, or -1
    bint fired              # the test trigger preempted the dispatch here
    uint32_t* last_s        # a resumed dispatch: copy of the final workgroup's last wave
    uint32_t* last_v
    WaveSt last_w
    vector[ChunkLog] log
    int stop                # CU_OK, a fault code, CU_ABORTED, CU_PREEMPTED
    uint64_t stop_wg
    int stop_wave
    CuFault fault
    bint has_last           # the final workgroup ran here: last_wave ended last
    int last_wave
    int64_t last_pc
    DInst scratch           # decode of an instruction outside the window
    int vzero_from          # a fresh wave zeroes its VGPRs from here (see run_workgroup)
    int64_t gslot           # the grid-barrier slot the running workgroup came from, or -1
    uint8_t pad[64]         # the next thread's record starts a cache line later


# -- decode (docs/isa.md 2.3) ---------------------------------------------------------------
cdef inline bint kind_ok(int kind, int c) noexcept nogil:
    if kind == K_SDST or kind == K_SMASK:
        return c <= OPR_EXEC
    if kind == K_SDST2 or kind == K_SDST4 or kind == K_SDST8 or kind == K_SDST16 or kind == K_SSRC2 \
            or kind == K_SBASE2:
        return c < CU_MAX_SGPRS
    if kind == K_SSRC:
        return c <= OPR_SCC or c == OPR_LIT
    if kind == K_VDST or kind == K_VREG or kind == K_VREG2 or kind == K_VREG4 or kind == K_GADDR:
        return c >= OPR_VGPR
    if kind == K_VDST_OFF or kind == K_VDST2_OFF:
        return c >= OPR_VGPR or c == OPR_OFF
    if kind == K_VSRC2:
        return c < CU_MAX_SGPRS or c >= OPR_VGPR
    if kind == K_VSRC:
        return c <= OPR_SCC or c >= OPR_LIT
    if kind == K_SBASE:
        return c < CU_MAX_SGPRS or c == OPR_OFF
    return False


cdef inline int kind_width(int kind) noexcept nogil:
    if kind == K_SDST16:
        return 16
    if kind == K_SDST8:
        return 8
    if kind == K_SDST4 or kind == K_VREG4:
        return 4
    if kind == K_SDST2 or kind == K_SSRC2 or kind == K_SBASE2 or kind == K_SBASE \
            or kind == K_VREG2 or kind == K_VSRC2 or kind == K_VDST2_OFF:
        return 2
    return 1


cdef void cu_decode(uint64_t word, int sgprs, int vgprs, DInst* d) noexcept nogil:
    """Split and check one word as compute.validate does; d.status is the outcome."""
    cdef int op = word & 0xFF
    cdef const OpDesc* desc = &_cu_ops[op]
    cdef uint8_t f[4]
    cdef uint64_t rest
    cdef int k, kind, c
    cdef bint any_lit = False
    d.op = op
    d.dst = f[0] = (word >> 8) & 0xFF
    d.src0 = f[1] = (word >> 16) & 0xFF
    d.src1 = f[2] = (word >> 24) & 0xFF
    d.src2 = 0
    d.imm = 0
    d.off = 0
    d.status = CU_ILLEGAL
    if desc.fmt == F_NONE:
        return
    if desc.fmt == F_SOPP or desc.fmt == F_ALU:
        d.imm = <uint32_t>(word >> 32)
        rest = d.imm
    else:
        d.src2 = (word >> 32) & 0xFF
        rest = word >> 40
        if desc.fmt == F_MEM:
            d.off = <int64_t>rest - (<int64_t>1 << 24) if rest & 0x800000 else <int64_t>rest
            if desc.offset2 and rest > 0xFFFF:
                return
    f[3] = d.src2
    for k in range(4):
        kind = desc.kind[k]
        if kind == K_GADDR and d.src1 == OPR_OFF:
            kind = K_VREG2
        c = f[k]
        if kind == K_NONE:
            if c:
                return
            continue
        if not kind_ok(kind, c):
            return
        if c == OPR_LIT:
            if desc.fmt != F_ALU:
                return
            any_lit = True
    if desc.fmt == F_ALU:
        if rest and not any_lit:
            return
    elif desc.fmt == F_VOP3 or (desc.fmt == F_SOPP and not desc.uses_imm):
        if rest:
            return
    d.status = CU_BAD_REGISTER
    for k in range(4):
        kind = desc.kind[k]
        if kind == K_NONE:
            continue
        if kind == K_GADDR and d.src1 == OPR_OFF:
            kind = K_VREG2
        c = f[k]
        if c < CU_MAX_SGPRS:
            if c + kind_width(kind) > sgprs:
                return
        elif c >= OPR_VGPR:
            if c - OPR_VGPR + kind_width(kind) > vgprs:
                return
    d.status = CU_OK


def _cu_fill_op_table():
    """_cu_ops from vgpu/isa.py: format and operand kinds of every opcode."""
    fmts = {_isa.FMT_SOPP: F_SOPP, _isa.FMT_ALU: F_ALU, _isa.FMT_VOP3: F_VOP3,
            _isa.FMT_MEM: F_MEM}
    kinds = {_isa.K_SDST: K_SDST, _isa.K_SDST2: K_SDST2, _isa.K_SDST4: K_SDST4,
             _isa.K_SDST8: K_SDST8, _isa.K_SDST16: K_SDST16,
             _isa.K_SSRC: K_SSRC, _isa.K_SSRC2: K_SSRC2, _isa.K_SMASK: K_SMASK,
             _isa.K_VDST: K_VDST, _isa.K_VDST_OFF: K_VDST_OFF, _isa.K_VSRC: K_VSRC,
             _isa.K_VREG: K_VREG, _isa.K_VREG2: K_VREG2, _isa.K_GADDR: K_GADDR,
             _isa.K_SBASE: K_SBASE, _isa.K_SBASE2: K_SBASE2, _isa.K_VSRC2: K_VSRC2,
             _isa.K_VDST2_OFF: K_VDST2_OFF, _isa.K_VREG4: K_VREG4}
    cdef OpDesc* d
    slot = {"dst": 0, "src0": 1, "src1": 2, "src2": 3}
    memset(_cu_ops, 0, sizeof(_cu_ops))
    memset(_cu_class, 0, sizeof(_cu_class))
    for info in _isa.OPCODES:
        d = &_cu_ops[info.code]
        d.fmt = fmts[info.fmt]
        for attr, kind in _isa.operand_fields(info).items():
            d.kind[slot[attr]] = kinds[kind]
        d.uses_imm = any(f == _isa.FIELD_IMM for f, _ in info.operands)
        d.wide = info.code in _isa.WIDE_CODES
        d.offset2 = any(kind == _isa.K_OFFSET2 for _, kind in info.operands)
        _cu_class[info.code] = _op_class(info.code, info.fmt, d.wide)


def _op_class(int op, fmt, bint wide):
    """run_wave's branch of a defined opcode (the encoding's groups, docs/isa.md 4)."""
    if wide:
        return CL_WIDE
    if op in (OP_V_ADD_CO_U32, OP_V_ADDC_CO_U32, OP_V_SUB_CO_U32):
        return CL_CARRY
    if OP_V_ADD_U32 <= op <= OP_V_MAX_F32:
        return CL_VOP2
    if OP_V_MOV_B32 <= op <= OP_V_TANH_F32:
        return CL_VOP1
    if fmt == _isa.FMT_VOP3:
        return CL_VOP3
    if OP_V_CMP_EQ_I32 <= op <= OP_V_CMP_GE_F32:
        return CL_VOPC
    if op in (OP_DS_BPERMUTE_B32, OP_DS_PERMUTE_B32):
        return CL_PERMUTE
    if op == OP_DS_READ_B128 or op == OP_DS_READ2_B32:
        return CL_LDS
    if op >= OP_GLOBAL_LOAD_DWORD:
        return CL_GLOBAL
    if op >= OP_DS_MIN_I32:
        return CL_LDS
    if op in (OP_V_READFIRSTLANE_B32, OP_V_READLANE_B32, OP_V_WRITELANE_B32):
        return CL_LANE
    if OP_V_FFBL_B32 <= op <= OP_V_BFREV_B32:
        return CL_BITS
    if op >= OP_S_LOAD_DWORD:
        return CL_SLOAD
    if op >= OP_S_CMP_EQ_I32:
        return CL_SCMP
    if op >= OP_S_ADD_U32:
        return CL_SOP2
    if op >= OP_S_MOV_B32:
        return CL_SOP1
    return CL_SOPP


_cu_fill_op_table()


# dispatch_counters' per-opcode table (compute._OP_EFFECTS) for _counters: the class an
# instruction counts in, bytes per lane (per wave for s_load) loaded and stored, flags.
cdef enum:
    CNT_NONE = 0            # not in the table: _counters asks dispatch_counters
    CNT_VALU = 1
    CNT_SALU = 2
    CNT_SMEM = 3
    CNT_VMEM = 4
    CNT_LDS = 5
    CNT_NCLASSES = 6
    CNT_ATOMIC = 1
    CNT_SCALAR = 2
    CNT_BARRIER = 4
cdef uint8_t _cnt_class[256]
cdef uint8_t _cnt_flags[256]
cdef uint64_t _cnt_loaded[256]
cdef uint64_t _cnt_stored[256]


def _cu_fill_counter_table():
    """_cnt_* from compute._OP_EFFECTS; the dict _counters builds has COMPUTE_COUNTERS'
    keys in their order (checked here, so that the two cannot drift apart)."""
    classes = {"valu": CNT_VALU, "salu": CNT_SALU, "smem": CNT_SMEM, "vmem": CNT_VMEM,
               "lds": CNT_LDS}
    if _cu_py.COMPUTE_COUNTERS != ("dispatches", "waves", "instructions", "lane_instructions",
                                   "valu", "salu", "smem", "vmem", "lds", "bytes_loaded",
                                   "bytes_stored", "atomics", "barriers", "tlb_hits",
                                   "tlb_misses", "pt_walks"):
        raise ImportError("kmd.hw.compute.COMPUTE_COUNTERS changed: update _cu.pxi _counters")
    memset(_cnt_class, 0, sizeof(_cnt_class))
    memset(_cnt_flags, 0, sizeof(_cnt_flags))
    memset(_cnt_loaded, 0, sizeof(_cnt_loaded))
    memset(_cnt_stored, 0, sizeof(_cnt_stored))
    for op, (cls, loaded, stored, atomic, scalar) in _cu_py._OP_EFFECTS.items():
        if 0 <= op < 256:
            _cnt_class[op] = classes[cls]
            _cnt_loaded[op], _cnt_stored[op] = loaded, stored
            _cnt_flags[op] = ((CNT_ATOMIC if atomic else 0) | (CNT_SCALAR if scalar else 0)
                              | (CNT_BARRIER if op in (_isa.OP_S_BARRIER, _isa.OP_S_BARRIER_GRID) else 0))


_cu_fill_counter_table()


cdef object cnt_sum(const uint64_t* op_inst, const uint64_t* op_lane, uint64_t waves,
                    uint64_t lanes, uint64_t tlb_hits, uint64_t tlb_misses, uint64_t walks,
                    int dispatches, l2):
    """compute.dispatch_counters(ops, ...) of {op: (op_inst[op], op_lane[op])} (the
    opcodes with instructions), the same dict with its keys in the same order; None
    when one of those opcodes is not in the table (the caller then asks Python)."""
    cdef uint64_t total = 0, loaded = 0, stored = 0, atomics = 0, barriers = 0, per, inst
    cdef uint64_t by_class[CNT_NCLASSES]
    cdef int op
    memset(by_class, 0, sizeof(by_class))
    for op in range(256):
        inst = op_inst[op]
        if inst == 0:
            continue
        if _cnt_class[op] == CNT_NONE:
            return None
        per = inst if _cnt_flags[op] & CNT_SCALAR else op_lane[op]
        total += inst
        by_class[_cnt_class[op]] += inst
        loaded += _cnt_loaded[op] * per
        stored += _cnt_stored[op] * per
        if _cnt_flags[op] & CNT_ATOMIC:
            atomics += op_lane[op]
        if _cnt_flags[op] & CNT_BARRIER:
            barriers += inst
    c = {"dispatches": dispatches, "waves": waves, "instructions": total,
         "lane_instructions": lanes, "valu": by_class[CNT_VALU], "salu": by_class[CNT_SALU],
         "smem": by_class[CNT_SMEM], "vmem": by_class[CNT_VMEM], "lds": by_class[CNT_LDS],
         "bytes_loaded": loaded, "bytes_stored": stored, "atomics": atomics,
         "barriers": barriers, "tlb_hits": tlb_hits, "tlb_misses": tlb_misses,
         "pt_walks": walks}
    if l2 is not None:
        c.update(l2)
    return c


def counters_of(dict ops, *, waves, lane_instructions, tlb_hits=0, tlb_misses=0, walks=0,
                dispatches=1, l2=None):
    """What the engine's counters come to for dispatch_counters' arguments (tests: the C
    table against compute.dispatch_counters); None for an opcode the table lacks."""
    cdef uint64_t op_inst[256]
    cdef uint64_t op_lane[256]
    memset(op_inst, 0, sizeof(op_inst))
    memset(op_lane, 0, sizeof(op_lane))
    for op, (inst, lanes) in ops.items():
        if not 0 <= op < 256:
            raise ValueError(f"counters_of: opcode {op} outside 0..255")
        op_inst[op], op_lane[op] = inst, lanes
    return cnt_sum(op_inst, op_lane, waves, lane_instructions, tlb_hits, tlb_misses, walks,
                   dispatches, l2)


# -- float rules (docs/isa.md 3; kmd/hw/compute.py) ---------------------------------------------
cdef inline uint32_t min_f32(uint32_t a, uint32_t b) noexcept nogil:
    cdef float x = cu_f(a), y = cu_f(b)
    cdef uint32_t r
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x < y else b
    return CANONICAL_NAN if cu_f(r) != cu_f(r) else r


cdef inline uint32_t max_f32(uint32_t a, uint32_t b) noexcept nogil:
    cdef float x = cu_f(a), y = cu_f(b)
    cdef uint32_t r
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x > y else b
    return CANONICAL_NAN if cu_f(r) != cu_f(r) else r


@cython.cdivision(True)
cdef inline uint32_t unary_f32(int op, uint32_t a) noexcept nogil:
    """Conversions, roundings and transcendentals: f32(libm(double(x)))."""
    cdef double x = cu_f(a), r
    if op == OP_V_CVT_F32_I32:
        return cu_u(<float><int32_t>a)
    if op == OP_V_CVT_F32_U32:
        return cu_u(<float>a)
    if op == OP_V_CVT_I32_F32:
        if x != x:
            return 0
        if x >= 2147483648.0:
            return 0x7FFFFFFF
        if x <= -2147483648.0:
            return 0x80000000U
        return <uint32_t><int32_t>x
    if op == OP_V_CVT_U32_F32:
        if x != x or x <= -1.0:
            return 0
        if x >= 4294967296.0:
            return 0xFFFFFFFFU
        return <uint32_t><int64_t>x
    if op <= OP_V_RNDNE_F32:        # floor/ceil/trunc/rndne keep ±0 and ±inf bits
        if x != x:
            return CANONICAL_NAN
        if x == 0 or x - x != 0:
            return a
        if op == OP_V_FLOOR_F32:
            r = floor(x)
        elif op == OP_V_CEIL_F32:
            r = ceil(x)
        elif op == OP_V_TRUNC_F32:
            r = trunc(x)
        else:
            r = rint(x)     # round half to even: Python's round()
        return cu_f32(copysign(r, x))
    if op == OP_V_RCP_F32:
        r = 1.0 / x
    elif op == OP_V_SQRT_F32:
        r = sqrt(x)
    elif op == OP_V_RSQRT_F32:
        r = 1.0 / sqrt(x)
    elif op == OP_V_EXP_F32:
        r = exp(x)
    elif op == OP_V_EXP2_F32:
        r = exp2(x)
    elif op == OP_V_LOG_F32:
        r = log(x)
    elif op == OP_V_LOG2_F32:
        r = log2(x)
    elif op == OP_V_SIN_F32:
        r = sin(x)
    elif op == OP_V_COS_F32:
        r = cos(x)
    else:
        r = tanh(x)
    return cu_f32(r)


@cython.cdivision(True)
cdef inline uint32_t div_i32(uint32_t ua, uint32_t ub) noexcept nogil:
    cdef int32_t a = <int32_t>ua, b = <int32_t>ub
    if b == 0:
        return 0xFFFFFFFFU
    if ua == 0x80000000U and b == -1:
        return ua
    return <uint32_t>(a // b)   # C division truncates toward zero


@cython.cdivision(True)
cdef inline uint32_t rem_i32(uint32_t ua, uint32_t ub) noexcept nogil:
    cdef int32_t a = <int32_t>ua, b = <int32_t>ub
    if b == 0:
        return ua
    if ua == 0x80000000U and b == -1:
        return 0
    return <uint32_t>(a % b)    # sign of the dividend


@cython.cdivision(True)
cdef inline uint32_t atomic_op(int op, uint32_t m, uint32_t d, uint32_t cmp) noexcept nogil:
    """New memory value of a global or LDS atomic (old value m, data d)."""
    if op == OP_GLOBAL_ATOMIC_ADD_U32 or op == OP_DS_ADD_U32:
        return m + d
    if op == OP_GLOBAL_ATOMIC_ADD_F32 or op == OP_DS_ADD_F32:
        return cu_canon(cu_f(m) + cu_f(d))
    if op == OP_GLOBAL_ATOMIC_MAX_I32 or op == OP_DS_MAX_I32:
        return m if <int32_t>m > <int32_t>d else d
    if op == OP_GLOBAL_ATOMIC_MAX_U32 or op == OP_DS_MAX_U32:
        return m if m > d else d
    if op == OP_GLOBAL_ATOMIC_MAX_F32 or op == OP_DS_MAX_F32:
        return max_f32(m, d)
    if op == OP_GLOBAL_ATOMIC_MIN_I32 or op == OP_DS_MIN_I32:
        return m if <int32_t>m < <int32_t>d else d
    if op == OP_GLOBAL_ATOMIC_MIN_U32 or op == OP_DS_MIN_U32:
        return m if m < d else d
    if op == OP_GLOBAL_ATOMIC_MIN_F32 or op == OP_DS_MIN_F32:
        return min_f32(m, d)
    if op == OP_DS_SUB_U32:
        return m - d
    if op == OP_GLOBAL_ATOMIC_XCHG_B32 or op == OP_DS_WRXCHG_RTN_B32:
        return d
    # cmpswap: d = v[data], cmp = v[data + 1]; ds_cmpst: the caller swaps them (GCN's
    # DS_CMPST_B32 takes the compare value first).
    return d if m == cmp else m


cdef inline bint cu_compare(int c, int t, uint32_t a, uint32_t b) noexcept nogil:
    """s_cmp / v_cmp: c eq ne lt le gt ge; t 0 i32, 1 u32, 2 f32 (IEEE: NaN only ne)."""
    cdef double x, y
    if t == 0:
        x, y = <int32_t>a, <int32_t>b
    elif t == 1:
        x, y = a, b
    else:
        x, y = cu_f(a), cu_f(b)
    if c == 0:
        return x == y
    if c == 1:
        return x != y
    if c == 2:
        return x < y
    if c == 3:
        return x <= y
    if c == 4:
        return x > y
    return x >= y


include "_cu_wide.pxi"


# -- the engine ---------------------------------------------------------------------------------
cdef inline uint32_t sread(CuThread* T, uint32_t* s, WaveSt* w, int c,
                           uint32_t imm) noexcept nogil:
    if c < CU_MAX_SGPRS:
        return s[c]
    if c == OPR_VCC:
        return w.vcc
    if c == OPR_EXEC:
        return w.exec_
    if c == OPR_SCC:
        return w.scc
    return imm


cdef inline void swrite(uint32_t* s, WaveSt* w, int c, uint32_t value) noexcept nogil:
    if c < CU_MAX_SGPRS:
        s[c] = value
    elif c == OPR_VCC:
        w.vcc = value
    else:
        w.exec_ = value


cdef inline const uint32_t* vsrc(CuThread* T, uint32_t* s, uint32_t* v, WaveSt* w, int c,
                                 uint32_t imm, uint32_t* tmp) noexcept nogil:
    """Lane values of a vsrc operand: the VGPR row, or a scalar broadcast into tmp."""
    cdef uint32_t x
    cdef int l
    if c >= OPR_VGPR:
        return v + (c - OPR_VGPR) * CU_WAVE
    x = sread(T, s, w, c, imm)
    for l in range(CU_WAVE):
        tmp[l] = x
    return tmp


cdef inline void merge(uint32_t* D, const uint32_t* R, uint32_t m) noexcept nogil:
    """D = R in the lanes of mask m (vectorizes: no branch per lane)."""
    cdef int l
    if m == 0xFFFFFFFFU:
        memcpy(D, R, CU_WAVE * 4)
        return
    for l in range(CU_WAVE):
        D[l] = cu_lane_sel(m, l, D[l], R[l])


cdef inline void issue(CuThread* T, int op, int active, uint64_t* n_inst,
                       uint64_t* n_lane) noexcept nogil:
    """One instruction issued: run_wave's counts of the chunk (n_inst, n_lane: its
    locals, so registers once inlined; see stopped) and the dispatch's counter of op.
    (Lanes per opcode are counted for memory instructions only, by their branch of
    run_wave: one more store per ALU instruction cost saxpy 15 %.)"""
    n_inst[0] += 1
    n_lane[0] += active
    T.op_inst[op] += 1


cdef inline int stopped(CuThread* T, uint64_t n_inst, uint64_t n_lane, int code) noexcept nogil:
    """run_wave stops with code: its counts go to the chunk's (T.inst, T.lane). Kept in
    registers until here, they are two read-modify-writes of T less per instruction
    (7 % of a matmul)."""
    T.inst += n_inst
    T.lane += n_lane
    return code


cdef inline TlbEntry* tlb_slot(CuThread* T, uint64_t page) noexcept nogil:
    # Fibonacci hashing: buffers mapped at large power-of-two VA steps must not share
    # one slot (a + b -> c would refill it on every lane).
    return &T.tlb[(page * <uint64_t>0x9E3779B97F4A7C15ULL) >> (64 - TLB_BITS)]


cdef uint8_t* translate_miss(CuThread* T, uint64_t addr, int access, TlbEntry* e,
                            CuFault* f) noexcept nogil:
    """TLB miss: walk the page table under its shared lock and refill the entry."""
    cdef uint64_t page = addr >> PAGE_SHIFT, nxt
    cdef CuShared* sh = T.sh
    cdef TlbEntry* n
    T.tlb_misses += 1
    sh.lock.lock_shared()
    it = sh.ptes.find(page)
    if it == sh.ptes.end():
        sh.lock.unlock_shared()
        f.code, f.va, f.access = CU_UNMAPPED, addr, access
        return NULL
    e.page = page
    e.host = deref(it).second.host
    e.flags = deref(it).second.flags
    # As a GPU's walker reads a 64-byte line of 8 PTEs: the entries of the rest of the
    # page's 8-page block are filled too, under the same lock (an atomic on a line both
    # workers share). Streams (a[i] over consecutive waves) then miss once per 8 pages.
    nxt = page + 1
    while nxt & (TLB_FILL_PAGES - 1):
        it = sh.ptes.find(nxt)
        if it == sh.ptes.end():
            break
        n = tlb_slot(T, nxt)
        if n != e:
            n.page, n.host, n.flags = nxt, deref(it).second.host, deref(it).second.flags
        nxt += 1
    T.walks += nxt - page - 1     # the block's other pages walked
    sh.lock.unlock_shared()
    if not (e.flags & access_flag(access)):
        f.code, f.va, f.access = CU_PERMISSION, addr, access
        return NULL
    return e.host + (addr & PAGE_MASK)


cdef inline uint8_t* translate(CuThread* T, uint64_t addr, int access,
                               CuFault* f) noexcept nogil:
    """Host address of addr (its access needs the access kind's PTE bit), or NULL + f.
    The TLB hit stays inline; a miss goes to translate_miss."""
    cdef uint64_t page = addr >> PAGE_SHIFT
    cdef TlbEntry* e = tlb_slot(T, page)
    T.tlb_lookups += 1
    if e.page != page:
        return translate_miss(T, addr, access, e, f)
    if not (e.flags & access_flag(access)):
        f.code, f.va, f.access = CU_PERMISSION, addr, access
        return NULL
    return e.host + (addr & PAGE_MASK)


cdef inline void tlb_check(CuThread* T) noexcept nogil:
    """Forget cached translations when the page table changed (map/unmap)."""
    cdef uint64_t gen = T.sh.generation.load()
    cdef int k
    if gen != T.tlb_gen:
        for k in range(TLB_SIZE):
            T.tlb[k].page = <uint64_t>NO_PAGE
        T.tlb_gen = gen


cdef inline void l2_begin(CuThread* T) noexcept nogil:
    """A memory instruction starts with the L2 model on: hold the cache for all its
    lanes (no other thread evicts a line it uses); its first access is a new request."""
    T.sh.l2.lock()
    T.l2_key = <uint64_t>NO_PAGE


cdef inline uint8_t* l2_at(CuThread* T, uint8_t* p, uint64_t addr, uint32_t write_size) noexcept nogil:
    """The cached copy of the byte at host address p (GPU address addr), between
    l2_begin and T.sh.l2.unlock(): a lane in the line of the previous lane rides on
    its request; `write_size` bytes are marked dirty (a store or an atomic)."""
    cdef uint32_t off = addr & (L2_LINE - 1)    # the page offset names the line
    cdef uint64_t key = <uint64_t>p - off
    if key != T.l2_key:
        T.l2_slot = T.sh.l2.lookup(key, True, &T.l2)
        T.l2_key = key
    if write_size:
        T.sh.l2.mark(T.l2_slot, off, write_size)
    return T.sh.l2.line(T.l2_slot) + off


cdef inline uint64_t gaddr(uint32_t* s, uint32_t* v, const DInst* d, int l) noexcept nogil:
    cdef uint64_t base
    if d.src1 == OPR_OFF:
        base = <uint64_t>v[(d.src0 - OPR_VGPR) * CU_WAVE + l] | \
            (<uint64_t>v[(d.src0 - OPR_VGPR + 1) * CU_WAVE + l] << 32)
    else:
        base = (<uint64_t>s[d.src1] | (<uint64_t>s[d.src1 + 1] << 32)) + \
            v[(d.src0 - OPR_VGPR) * CU_WAVE + l]
    return base + <uint64_t>d.off


cdef inline int misaligned(uint64_t addr, uint64_t size, int access, CuFault* f) noexcept nogil:
    if addr & (size - 1):
        f.code, f.va, f.access = CU_MISALIGNED, addr, access
        return 1
    return 0


cdef inline uint32_t half_wave_span(const uint32_t* A) noexcept nogil:
    """64 when each half-wave (lanes 0-15, 16-31) of the address register A holds 16
    consecutive dword addresses, 4 when it holds one address (a 16-wide block's row or
    column of a shared tile), else 0."""
    cdef uint32_t run = 0, same = 0, x
    cdef int l
    for l in range(CU_WAVE):       # branch-free: the C compiler vectorizes it
        x = A[l]
        run |= x ^ (A[l & 16] + 4 * <uint32_t>(l & 15))
        same |= x ^ A[l & 16]
    if run == 0:
        return 64
    return 4 if same == 0 else 0


cdef bint global_half_waves(CuThread* T, uint32_t* s, uint32_t* v, const DInst* d) noexcept nogil:
    """A full wave's global_load/store_dword at SGPR base + VGPR offsets where each
    half-wave (lanes 0-15, 16-31) touches 16 consecutive dwords inside one page (a
    16-wide block's rows of a tile): two translations, then two 64-byte copies, the
    lower half first (lane order: the upper half wins an address both write).  False,
    with nothing done, for any other pattern, an offset run that wraps 2^32, or a
    translation that would fault: the other paths then find the first faulting lane."""
    cdef uint32_t* O = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint64_t base = ((<uint64_t>s[d.src1] | (<uint64_t>s[d.src1 + 1] << 32)) +
                          <uint64_t>d.off)
    cdef uint64_t a0, a1
    cdef uint8_t* p0
    cdef uint8_t* p1
    cdef CuFault scratch
    cdef int access = ACCESS_READ if d.op == OP_GLOBAL_LOAD_DWORD else ACCESS_WRITE
    if half_wave_span(O) != 64 or O[0] > <uint32_t>0xFFFFFFFFU - 60 or \
            O[16] > <uint32_t>0xFFFFFFFFU - 60:
        return False
    a0, a1 = base + O[0], base + O[16]
    if (a0 | a1) & 3 or (a0 & PAGE_MASK) > PAGE_SIZE - 64 or (a1 & PAGE_MASK) > PAGE_SIZE - 64:
        return False
    p0 = translate(T, a0, access, &scratch)
    if p0 == NULL:
        return False
    p1 = translate(T, a1, access, &scratch)
    if p1 == NULL:
        return False
    if access == ACCESS_READ:      # D may be O: both addresses are taken already
        memcpy(v + (d.dst - OPR_VGPR) * CU_WAVE, p0, 64)
        memcpy(v + (d.dst - OPR_VGPR) * CU_WAVE + 16, p1, 64)
    else:
        memmove(p0, v + (d.src2 - OPR_VGPR) * CU_WAVE, 64)
        memmove(p1, v + (d.src2 - OPR_VGPR) * CU_WAVE + 16, 64)
    return True


cdef bint global_two_pages(CuThread* T, uint32_t* s, uint32_t* v, const DInst* d) noexcept nogil:
    """A full wave's global_load/store_dword at SGPR base + VGPR offsets whose aligned
    addresses all lie in at most two pages (a tile's rows, a strided column): one
    translation per page, then the lanes in order.  False, with nothing done, for
    anything else (a wrap, a misaligned lane, an unmapped page...): the lane loop then
    runs and finds the first faulting lane exactly."""
    cdef uint32_t* O = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* D
    cdef uint64_t base = ((<uint64_t>s[d.src1] | (<uint64_t>s[d.src1 + 1] << 32)) +
                          <uint64_t>d.off)
    cdef uint64_t first, last, addr
    cdef uint32_t lo = O[0], hi = O[0], bits = 0, x
    cdef uint8_t* pages[2]
    cdef CuFault scratch
    cdef int l, access = ACCESS_READ if d.op == OP_GLOBAL_LOAD_DWORD else ACCESS_WRITE
    for l in range(CU_WAVE):
        x = O[l]
        bits |= x
        lo = x if x < lo else lo
        hi = x if x > hi else hi
    first, last = base + lo, base + hi + 3
    if (bits | base) & 3 or first < base or last < first or \
            (last >> PAGE_SHIFT) - (first >> PAGE_SHIFT) > 1:
        return False
    pages[0] = translate(T, first, access, &scratch)
    if pages[0] == NULL:
        return False
    pages[0] -= first & PAGE_MASK
    pages[1] = pages[0]
    if (last >> PAGE_SHIFT) != (first >> PAGE_SHIFT):
        pages[1] = translate(T, last & ~(<uint64_t>PAGE_MASK), access, &scratch)
        if pages[1] == NULL:
            return False
    first >>= PAGE_SHIFT
    if access == ACCESS_READ:
        D = v + (d.dst - OPR_VGPR) * CU_WAVE
        for l in range(CU_WAVE):
            addr = base + O[l]
            memcpy(&x, pages[(addr >> PAGE_SHIFT) != first] + (addr & PAGE_MASK), 4)
            D[l] = x        # D may be O: this lane's offset is read already
    else:
        D = v + (d.src2 - OPR_VGPR) * CU_WAVE
        for l in range(CU_WAVE):    # in lane order: the highest lane wins an address
            addr = base + O[l]
            memcpy(pages[(addr >> PAGE_SHIFT) != first] + (addr & PAGE_MASK), &D[l], 4)
    return True


cdef inline int global_run(CuThread* T, uint32_t* s, uint32_t* v, const DInst* d,
                           CuFault* f) noexcept nogil:
    """A full wave's global_load/store_dword (no L2 model) whose 32 lanes touch 32
    consecutive dwords in one page (the common a[i] pattern): one translation and one
    128-byte copy. 0 done, 1 a fault (f), -1 another pattern: global_mem's paths run,
    with the same result and the same first fault. Inline in run_wave: saxpy's three
    memory instructions per wave paid a call and a large frame each."""
    cdef int op = d.op, l
    cdef uint32_t x, a
    cdef uint64_t addr
    cdef uint8_t* p
    cdef uint32_t* D
    if op != OP_GLOBAL_LOAD_DWORD and op != OP_GLOBAL_STORE_DWORD:
        return -1
    tlb_check(T)
    addr = gaddr(s, v, d, 0)
    if addr & 3 or (addr & PAGE_MASK) > PAGE_SIZE - 4 * CU_WAVE:
        return -1
    if d.src1 != OPR_OFF:
        # SGPR base + 32-bit VGPR offset: compare the offsets (branch-free, so the C
        # compiler vectorizes it); no wrap past 2^32 inside the wave.
        D = v + (d.src0 - OPR_VGPR) * CU_WAVE
        x = D[0]
        a = 1 if x <= <uint32_t>0xFFFFFFFFU - 4 * CU_WAVE else 0
        for l in range(1, CU_WAVE):
            a &= D[l] == x + 4 * <uint32_t>l
        if not a:
            return -1
    else:
        for l in range(1, CU_WAVE):
            if gaddr(s, v, d, l) != addr + 4 * <uint64_t>l:
                return -1
    if op == OP_GLOBAL_LOAD_DWORD:
        p = translate(T, addr, ACCESS_READ, f)
        if p == NULL:
            return 1
        # A stream (a[i] over consecutive waves): the host's prefetcher stops at its
        # 4 KiB pages; 16 waves ahead saved 6-7 % of saxpy.
        cu_prefetch(p + PREFETCH_AHEAD)
        cu_prefetch(p + PREFETCH_AHEAD + 64)
        memcpy(v + (d.dst - OPR_VGPR) * CU_WAVE, p, 4 * CU_WAVE)
    else:
        p = translate(T, addr, ACCESS_WRITE, f)
        if p == NULL:
            return 1
        memcpy(p, v + (d.src2 - OPR_VGPR) * CU_WAVE, 4 * CU_WAVE)
    return 0


cdef int global_mem(CuThread* T, uint32_t* s, uint32_t* v, WaveSt* w, const DInst* d,
                    CuFault* f) noexcept nogil:
    """Global loads, stores and atomics, lane by lane in ascending order (docs/isa.md 4.6),
    after global_run (run_wave) found no contiguous full wave."""
    cdef int op = d.op, l
    cdef uint32_t m = w.exec_, x, old, a, b
    cdef uint32_t vals[CU_WAVE]
    cdef uint64_t addr, size, last_page = <uint64_t>NO_PAGE
    cdef uint8_t* last_host = NULL
    cdef uint8_t* p
    cdef uint8_t* q
    cdef uint32_t* D
    tlb_check(T)
    if (op == OP_GLOBAL_LOAD_DWORD or op == OP_GLOBAL_STORE_DWORD) and m == <uint32_t>0xFFFFFFFFU \
            and T.sh.l2 == NULL:
        if d.src1 != OPR_OFF and (global_half_waves(T, s, v, d) or global_two_pages(T, s, v, d)):
            return 0
    if op <= OP_GLOBAL_LOAD_SSHORT:
        size = 4 if op == OP_GLOBAL_LOAD_DWORD else (1 if op <= OP_GLOBAL_LOAD_SBYTE else 2)
        for l in range(CU_WAVE):
            if not (m >> l) & 1:
                continue
            addr = gaddr(s, v, d, l)
            if misaligned(addr, size, ACCESS_READ, f):
                return 1
            if addr >> PAGE_SHIFT == last_page:    # lanes mostly share a page
                p = last_host + (addr & PAGE_MASK)
            else:
                p = translate(T, addr, ACCESS_READ, f)
                if p == NULL:
                    return 1
                last_page, last_host = addr >> PAGE_SHIFT, p - (addr & PAGE_MASK)
            if T.sh.l2 != NULL:
                p = l2_at(T, p, addr, 0)
            if op == OP_GLOBAL_LOAD_DWORD:
                memcpy(&vals[l], p, 4)
            elif op == OP_GLOBAL_LOAD_UBYTE:
                vals[l] = p[0]
            elif op == OP_GLOBAL_LOAD_SBYTE:
                vals[l] = <uint32_t><int32_t>(<int8_t>p[0])
            elif op == OP_GLOBAL_LOAD_USHORT:
                vals[l] = (<uint16_t*>p)[0]
            else:
                vals[l] = <uint32_t><int32_t>(<int16_t*>p)[0]
        merge(v + (d.dst - OPR_VGPR) * CU_WAVE, vals, m)
        return 0
    if op <= OP_GLOBAL_STORE_SHORT:
        size = 4 if op == OP_GLOBAL_STORE_DWORD else (1 if op == OP_GLOBAL_STORE_BYTE else 2)
        D = v + (d.src2 - OPR_VGPR) * CU_WAVE
        for l in range(CU_WAVE):
            if not (m >> l) & 1:
                continue
            addr = gaddr(s, v, d, l)
            if misaligned(addr, size, ACCESS_WRITE, f):
                return 1
            if addr >> PAGE_SHIFT == last_page:
                p = last_host + (addr & PAGE_MASK)
            else:
                p = translate(T, addr, ACCESS_WRITE, f)
                if p == NULL:
                    return 1
                last_page, last_host = addr >> PAGE_SHIFT, p - (addr & PAGE_MASK)
            if T.sh.l2 != NULL:
                p = l2_at(T, p, addr, size)
            x = D[l]
            memcpy(p, &x, size)     # little-endian host: the low bytes
        return 0
    for l in range(CU_WAVE):        # atomics: read access checked first, then write
        if not (m >> l) & 1:
            continue
        addr = gaddr(s, v, d, l)
        if misaligned(addr, 4, ACCESS_READ, f):
            return 1
        p = translate(T, addr, ACCESS_READ, f)
        if p == NULL:
            return 1
        q = translate(T, addr, ACCESS_WRITE, f)
        if q == NULL:
            return 1
        if T.sh.l2 != NULL:         # the atomic is done in the L2, as on hardware
            p = q = l2_at(T, p, addr, 4)
        a = v[(d.src2 - OPR_VGPR) * CU_WAVE + l]
        b = v[(d.src2 - OPR_VGPR + 1) * CU_WAVE + l] if op == OP_GLOBAL_ATOMIC_CMPSWAP_B32 else 0
        old = cu_atomic_load(<uint32_t*>p)
        while not cu_atomic_cas(<uint32_t*>q, &old, atomic_op(op, old, a, b)):
            pass            # old now holds the value the other thread wrote
        if d.dst != OPR_OFF:
            v[(d.dst - OPR_VGPR) * CU_WAVE + l] = old
    return 0


cdef inline void half_wave_read(uint32_t* D, const uint32_t* lds, uint32_t a0, uint32_t a1,
                                uint32_t span) noexcept nogil:
    """D = the half-waves' dwords at byte addresses a0 (lanes 0-15) and a1 (16-31),
    checked by the caller: two copies (span 64) or two fills (span 4)."""
    cdef uint32_t x, y
    cdef int l
    a0 >>= 2
    a1 >>= 2
    if span == 64:
        memmove(D, &lds[a0], 64)
        memmove(D + 16, &lds[a1], 64)
    else:
        x, y = lds[a0], lds[a1]
        for l in range(16):
            D[l] = x
            D[l + 16] = y


cdef bint half_waves(CuThread* T, uint32_t* v, const DInst* d, uint32_t limit) noexcept nogil:
    """A full wave's ds_read/write_b32 where each half-wave (lanes 0-15, 16-31) touches
    16 consecutive dwords or one dword: a 16-wide block's row or column of a shared
    tile.  Two copies (or fills) instead of 32 lanes; False, with nothing done, for any
    other pattern or an address that would fault (the caller's paths then run)."""
    cdef uint32_t* A = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* D
    cdef uint32_t* lds = <uint32_t*>T.lds
    cdef uint32_t a0, a1, span = half_wave_span(A)
    if span == 0:
        return False
    a0, a1 = A[0] + <uint32_t>d.off, A[16] + <uint32_t>d.off
    if (a0 | a1) & 3 or <uint64_t>a0 + span > limit or <uint64_t>a1 + span > limit:
        return False
    if d.op == OP_DS_READ_B32:
        half_wave_read(v + (d.dst - OPR_VGPR) * CU_WAVE, lds, a0, a1, span)
        return True
    # lanes in order: the upper half, and a half's last lane, win
    D = v + (d.src2 - OPR_VGPR) * CU_WAVE
    a0 >>= 2
    a1 >>= 2
    if span == 64:
        memmove(&lds[a0], D, 64)
        memmove(&lds[a1], D + 16, 64)
    else:
        lds[a0] = D[15]
        lds[a1] = D[31]
    return True


cdef int lds_read2_b32(CuThread* T, uint32_t* v, WaveSt* w, const DInst* d,
                       CuFault* f) noexcept nogil:
    """ds_read2_b32 (docs/isa.md 4.5): the dwords at A + 4 * offset0 and A + 4 * offset1
    into v[dst] and v[dst+1], every lane read (both addresses checked in turn, misaligned
    before lds_bounds) before a register is written."""
    cdef uint32_t m = w.exec_, addr, span, top
    cdef uint32_t limit = T.sh.lds_bytes
    cdef uint32_t off[2]
    cdef uint32_t* A = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* D = v + (d.dst - OPR_VGPR) * CU_WAVE
    cdef uint32_t* lds = <uint32_t*>T.lds
    cdef uint32_t vals[2 * CU_WAVE]
    cdef uint32_t a0, a1
    cdef int l, k
    off[0] = (<uint32_t>d.off & 0xFF) * 4
    off[1] = (<uint32_t>d.off >> 8 & 0xFF) * 4
    if m == <uint32_t>0xFFFFFFFFU:
        # A full wave whose half-waves read a tile's row or column (a 16-wide block's
        # B column in a tiled matmul): two copies or fills per offset, the addresses
        # taken before D (which may be A) is written.
        span = half_wave_span(A)
        top = off[0] if off[0] > off[1] else off[1]
        a0, a1 = A[0], A[16]
        if span and (a0 | a1) & 3 == 0 and <uint64_t>a0 + top + span <= limit and \
                <uint64_t>a1 + top + span <= limit:
            for k in range(2):
                half_wave_read(D + k * CU_WAVE, lds, a0 + off[k], a1 + off[k], span)
            return 0
    for l in range(CU_WAVE):
        if not (m >> l) & 1:
            continue
        for k in range(2):
            addr = A[l] + off[k]
            if addr & 3:
                f.code, f.access = CU_MISALIGNED, -1
                return 1
            if <uint64_t>addr + 4 > limit:
                f.code, f.access = CU_LDS_BOUNDS, -1
                return 1
            vals[k * CU_WAVE + l] = lds[addr >> 2]
    for k in range(2):
        merge(D + k * CU_WAVE, vals + k * CU_WAVE, m)
    return 0


cdef int lds_read_b128(CuThread* T, uint32_t* v, WaveSt* w, const DInst* d,
                       CuFault* f) noexcept nogil:
    """ds_read_b128 (docs/isa.md 4.5): four dwords per lane into v[dst:dst+3], every lane
    read (and checked, misaligned before lds_bounds) before a register is written."""
    cdef uint32_t m = w.exec_, addr, same = 0, x, y, a0, a1
    cdef uint32_t limit = T.sh.lds_bytes
    cdef uint32_t* A = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* D = v + (d.dst - OPR_VGPR) * CU_WAVE
    cdef uint32_t* lds = <uint32_t*>T.lds
    cdef uint32_t vals[4 * CU_WAVE]
    cdef int l, k
    if m == <uint32_t>0xFFFFFFFFU:
        # A full wave whose half-waves each read one address (a tile's row, the same for
        # a 16-wide block's row of threads): four fills of each half.
        for l in range(CU_WAVE):
            same |= A[l] ^ A[l & 16]
        a0, a1 = A[0] + <uint32_t>d.off, A[16] + <uint32_t>d.off
        if same == 0 and (a0 | a1) & 3 == 0 and <uint64_t>a0 + 16 <= limit and \
                <uint64_t>a1 + 16 <= limit:
            a0 >>= 2
            a1 >>= 2
            for k in range(4):
                x, y = lds[a0 + k], lds[a1 + k]
                for l in range(16):
                    D[k * CU_WAVE + l] = x
                    D[k * CU_WAVE + l + 16] = y
            return 0
    for l in range(CU_WAVE):
        if not (m >> l) & 1:
            continue
        addr = A[l] + <uint32_t>d.off
        if addr & 3:
            f.code, f.access = CU_MISALIGNED, -1
            return 1
        if <uint64_t>addr + 16 > limit:
            f.code, f.access = CU_LDS_BOUNDS, -1
            return 1
        for k in range(4):
            vals[k * CU_WAVE + l] = lds[(addr >> 2) + k]
    for k in range(4):
        merge(D + k * CU_WAVE, vals + k * CU_WAVE, m)
    return 0


cdef int lds_mem(CuThread* T, uint32_t* v, WaveSt* w, const DInst* d, CuFault* f) noexcept nogil:
    """ds_* (docs/isa.md 4.5): per lane, misaligned before lds_bounds."""
    cdef int op = d.op, l
    cdef uint32_t m = w.exec_, addr, old
    cdef uint32_t vals[CU_WAVE]
    cdef uint32_t* A = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* lds = <uint32_t*>T.lds
    cdef uint32_t limit = T.sh.lds_bytes
    cdef uint32_t addrs[CU_WAVE]
    cdef uint32_t bad = 0
    cdef int32_t top = <int32_t>((limit - 4) ^ <uint32_t>0x80000000U)
    cdef uint32_t* D
    if op == OP_DS_READ_B128:
        return lds_read_b128(T, v, w, d, f)
    if op == OP_DS_READ2_B32:
        return lds_read2_b32(T, v, w, d, f)
    if m == <uint32_t>0xFFFFFFFFU and limit >= 64 and \
            (op == OP_DS_READ_B32 or op == OP_DS_WRITE_B32) and half_waves(T, v, d, limit):
        return 0
    if m == <uint32_t>0xFFFFFFFFU and limit >= 4 and \
            (op == OP_DS_READ_B32 or op == OP_DS_WRITE_B32):
        # Fast path for a full wave: the addresses checked in one branch-free loop the
        # C compiler vectorizes (addr + 4 <= limit as a signed compare with the sign
        # bits flipped); any misaligned or out-of-range one goes to the lane loop
        # below, which finds the first faulting lane.
        for l in range(CU_WAVE):
            addr = A[l] + <uint32_t>d.off
            addrs[l] = addr >> 2
            bad |= (addr & 3) | <uint32_t>(<int32_t>(addr ^ <uint32_t>0x80000000U) > top)
        if bad == 0:
            if op == OP_DS_READ_B32:
                D = v + (d.dst - OPR_VGPR) * CU_WAVE
                for l in range(CU_WAVE):
                    D[l] = lds[addrs[l]]
            else:       # in lane order: the highest lane wins a shared address
                D = v + (d.src2 - OPR_VGPR) * CU_WAVE
                for l in range(CU_WAVE):
                    lds[addrs[l]] = D[l]
            return 0
    for l in range(CU_WAVE):
        if not (m >> l) & 1:
            continue
        addr = A[l] + <uint32_t>d.off
        if addr & 3:
            f.code, f.access = CU_MISALIGNED, -1
            return 1
        if <uint64_t>addr + 4 > limit:
            f.code, f.access = CU_LDS_BOUNDS, -1
            return 1
        if op == OP_DS_READ_B32:
            vals[l] = lds[addr >> 2]
        elif op == OP_DS_WRITE_B32:
            lds[addr >> 2] = v[(d.src2 - OPR_VGPR) * CU_WAVE + l]
        elif op == OP_DS_CMPST_RTN_B32:
            old = lds[addr >> 2]
            lds[addr >> 2] = atomic_op(op, old, v[(d.src2 - OPR_VGPR + 1) * CU_WAVE + l],
                                       v[(d.src2 - OPR_VGPR) * CU_WAVE + l])
            if d.dst != OPR_OFF:
                v[(d.dst - OPR_VGPR) * CU_WAVE + l] = old
        else:
            old = lds[addr >> 2]
            lds[addr >> 2] = atomic_op(op, old, v[(d.src2 - OPR_VGPR) * CU_WAVE + l], 0)
            if d.dst != OPR_OFF:
                v[(d.dst - OPR_VGPR) * CU_WAVE + l] = old
    if op == OP_DS_READ_B32:
        merge(v + (d.dst - OPR_VGPR) * CU_WAVE, vals, m)
    return 0


cdef void lane_permute(uint32_t* v, const DInst* d, uint32_t m) noexcept nogil:
    """ds_bpermute_b32 / ds_permute_b32 (docs/isa.md 4.5): lane (A + offset) / 4 mod 32."""
    cdef uint32_t tmp[CU_WAVE]
    cdef uint32_t* A = v + (d.src0 - OPR_VGPR) * CU_WAVE
    cdef uint32_t* X = v + (d.src2 - OPR_VGPR) * CU_WAVE
    cdef uint32_t lane
    cdef int l
    memset(tmp, 0, sizeof(tmp))
    for l in range(CU_WAVE):
        if not (m >> l) & 1:
            continue
        lane = ((A[l] + <uint32_t>d.off) >> 2) & (CU_WAVE - 1)
        if d.op == OP_DS_PERMUTE_B32:
            tmp[lane] = X[l]            # ascending lanes: the highest writer wins
        elif (m >> lane) & 1:
            tmp[l] = X[lane]            # an inactive source lane reads 0
    merge(v + (d.dst - OPR_VGPR) * CU_WAVE, tmp, m)


cdef inline uint32_t bit_reverse(uint32_t x) noexcept nogil:
    x = ((x >> 1) & 0x55555555U) | ((x & 0x55555555U) << 1)
    x = ((x >> 2) & 0x33333333U) | ((x & 0x33333333U) << 2)
    x = ((x >> 4) & 0x0F0F0F0FU) | ((x & 0x0F0F0F0FU) << 4)
    x = ((x >> 8) & 0x00FF00FFU) | ((x & 0x00FF00FFU) << 8)
    return (x >> 16) | (x << 16)


cdef inline int s_load_dwords(int op) noexcept nogil:
    """Dwords an s_load_dword[xN] reads (the codes are not in width order)."""
    if op == OP_S_LOAD_DWORDX16:
        return 16
    if op == OP_S_LOAD_DWORDX8:
        return 8
    return 1 << (op - OP_S_LOAD_DWORD)


cdef int s_load(CuThread* T, uint32_t* s, const DInst* d, int n, CuFault* f) noexcept nogil:
    """s_load_dword[xN]: all or nothing; a fault names the first dword of the bad page."""
    cdef uint64_t base = (<uint64_t>s[d.src1] | (<uint64_t>s[d.src1 + 1] << 32)) + \
        <uint64_t>d.off
    cdef uint64_t addr
    cdef uint32_t vals[16]
    cdef uint8_t* p
    cdef uint8_t* host = NULL
    cdef int k
    if misaligned(base, 4, ACCESS_READ, f):
        return 1
    tlb_check(T)
    if T.sh.l2 == NULL and (base & PAGE_MASK) + 4 * <uint64_t>n <= PAGE_SIZE:
        # The common case (kernel arguments): one page, no cache model, so one
        # translation and one copy straight into the SGPRs, which nothing can fault
        # once the translation succeeded.
        host = translate(T, base, ACCESS_READ, f)
        if host == NULL:
            return 1
        memcpy(s + d.dst, host, 4 * n)
        return 0
    for k in range(n):
        addr = base + 4 * k
        if addr < base:         # past the top of the VA space: nothing is mapped there
            f.code, f.va, f.access = CU_UNMAPPED, addr, ACCESS_READ
            return 1
        if k == 0 or (addr & PAGE_MASK) == 0:   # one translation per page
            host = translate(T, addr, ACCESS_READ, f)
            if host == NULL:
                return 1
        else:
            host += 4
        p = host
        if T.sh.l2 != NULL:
            p = l2_at(T, p, addr, 0)
        memcpy(&vals[k], p, 4)
    for k in range(n):
        s[d.dst + k] = vals[k]
    return 0


cdef const DInst* fetch(CuThread* T, int64_t pc, CuFault* f) noexcept nogil:
    """The decoded instruction at pc (docs/isa.md 6: fetch needs PTE_EXEC), or NULL + f."""
    cdef CuShared* sh = T.sh
    cdef uint64_t va, word
    cdef uint8_t* p
    if 0 <= pc < sh.win_bytes:
        return &sh.win[pc >> 3]
    if sh.code_va & 7:
        f.code, f.va, f.access = CU_MISALIGNED, sh.code_va, ACCESS_EXEC
        return NULL
    va = sh.code_va + <uint64_t>pc
    if (pc >= 0 and (va < sh.code_va or va > 0xFFFFFFFFFFFFFFF8ULL)) or \
            (pc < 0 and <uint64_t>(-pc) > sh.code_va):
        f.code, f.va, f.access = CU_UNMAPPED, va, ACCESS_EXEC
        return NULL
    T.walks += 1
    sh.lock.lock_shared()
    it = sh.ptes.find(va >> PAGE_SHIFT)
    if it == sh.ptes.end():
        sh.lock.unlock_shared()
        f.code, f.va, f.access = CU_UNMAPPED, va, ACCESS_EXEC
        return NULL
    if not (deref(it).second.flags & C_PTE_EXEC):
        sh.lock.unlock_shared()
        f.code, f.va, f.access = CU_PERMISSION, va, ACCESS_EXEC
        return NULL
    p = deref(it).second.host + (va & PAGE_MASK)
    memcpy(&word, p, 8)
    sh.lock.unlock_shared()
    cu_decode(word, sh.sgprs, sh.vgprs, &T.scratch)
    if T.scratch.dst >= OPR_VGPR and T.scratch.dst - OPR_VGPR < T.vzero_from:
        T.vzero_from = T.scratch.dst - OPR_VGPR     # code past the window wrote lower
    return &T.scratch


cdef int stop_code(CuThread* T) noexcept nogil:
    """Whether run_wave stops before an instruction (CuShared.stop is set): CU_ABORTED,
    CU_PREEMPTED, or CU_OK while the armed test trigger has not reached its count (when
    it does, it preempts the whole dispatch)."""
    cdef int expected = STOP_COUNT
    cdef int stop = T.sh.stop.load()
    if stop == STOP_COUNT:
        if T.inst < T.limit:
            return CU_OK
        T.limit = CU_NO_LIMIT
        T.trigger_left = CU_NO_LIMIT
        T.fired = True
        T.sh.stop.compare_exchange_strong(expected, STOP_PREEMPT)
        stop = T.sh.stop.load()
    return CU_ABORTED if stop == STOP_ABORT else CU_PREEMPTED


@cython.cdivision(True)
cdef int run_wave(CuThread* T, int wi, CuFault* f) noexcept nogil:
    """Run wave wi until s_endpgm (CU_DONE), s_barrier (CU_BARRIER) or a stop code."""
    cdef CuShared* sh = T.sh
    cdef WaveSt* w = &T.waves[wi]
    cdef uint32_t* s = T.s + wi * CU_MAX_SGPRS
    cdef uint32_t* v = T.v + wi * sh.vgprs * CU_WAVE
    cdef const DInst* d
    cdef uint32_t ta[CU_WAVE]
    cdef uint32_t tb[CU_WAVE]
    cdef uint32_t tc[CU_WAVE]
    cdef uint32_t Rbuf[CU_WAVE]
    cdef uint32_t* R
    cdef const uint32_t* A
    cdef const uint32_t* B
    cdef const uint32_t* Cc
    cdef uint32_t* D
    cdef uint32_t a, b, x, m, mask, carry
    cdef uint64_t wide
    cdef int op, cls, l, active, c, t, code
    cdef bint taken
    cdef timespec ts
    cdef uint64_t n_inst = 0, n_lane = 0     # issue(), stopped()
    while True:
        if sh.stop.load():
            stopped(T, n_inst, n_lane, 0)     # stop_code reads T.inst
            n_inst = n_lane = 0
            code = stop_code(T)
            if code != CU_OK:
                return stopped(T, n_inst, n_lane, code)
        if 0 <= w.pc < sh.win_bytes:    # the decoded window (fetch() for the rest)
            d = &sh.win[w.pc >> 3]
        else:
            d = fetch(T, w.pc, f)
            if d == NULL:
                return stopped(T, n_inst, n_lane, f.code)
        if d.status != CU_OK:
            f.code, f.access = d.status, -1
            return stopped(T, n_inst, n_lane, d.status)
        op = d.op
        m = w.exec_
        active = CU_WAVE if m == <uint32_t>0xFFFFFFFFU else cu_popcount(m)
        R = Rbuf
        code = CU_OK
        cls = _cu_class[op]
        if cls == CL_VOP2:
            # VOP2: R = A op B on every lane (vectorized), merged under EXEC.
            A = vsrc(T, s, v, w, d.src0, d.imm, ta)
            B = vsrc(T, s, v, w, d.src1, d.imm, tb)
            D = v + (d.dst - OPR_VGPR) * CU_WAVE
            if m == <uint32_t>0xFFFFFFFFU:
                R = D       # a full wave: straight into the destination (lane-wise ops)
            if op == OP_V_ADD_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] + B[l]
            elif op == OP_V_SUB_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] - B[l]
            elif op == OP_V_MUL_LO_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] * B[l]
            elif op == OP_V_MUL_HI_U32:
                for l in range(CU_WAVE):
                    R[l] = (<uint64_t>A[l] * B[l]) >> 32
            elif op == OP_V_MUL_HI_I32:
                for l in range(CU_WAVE):
                    R[l] = <uint32_t>((<int64_t><int32_t>A[l] * <int32_t>B[l]) >> 32)
            elif op == OP_V_AND_B32:
                for l in range(CU_WAVE):
                    R[l] = A[l] & B[l]
            elif op == OP_V_OR_B32:
                for l in range(CU_WAVE):
                    R[l] = A[l] | B[l]
            elif op == OP_V_XOR_B32:
                for l in range(CU_WAVE):
                    R[l] = A[l] ^ B[l]
            elif op == OP_V_LSHL_B32:
                if B == tb:     # a scalar count: one shift for every lane (vectorizes)
                    x = tb[0] & 31
                    for l in range(CU_WAVE):
                        R[l] = A[l] << x
                else:
                    for l in range(CU_WAVE):
                        R[l] = A[l] << (B[l] & 31)
            elif op == OP_V_LSHR_B32:
                if B == tb:
                    x = tb[0] & 31
                    for l in range(CU_WAVE):
                        R[l] = A[l] >> x
                else:
                    for l in range(CU_WAVE):
                        R[l] = A[l] >> (B[l] & 31)
            elif op == OP_V_ASHR_I32:
                if B == tb:
                    x = tb[0] & 31
                    for l in range(CU_WAVE):
                        R[l] = <uint32_t>(<int32_t>A[l] >> x)
                else:
                    for l in range(CU_WAVE):
                        R[l] = <uint32_t>(<int32_t>A[l] >> (B[l] & 31))
            elif op == OP_V_MIN_I32:
                for l in range(CU_WAVE):
                    R[l] = A[l] if <int32_t>A[l] < <int32_t>B[l] else B[l]
            elif op == OP_V_MAX_I32:
                for l in range(CU_WAVE):
                    R[l] = A[l] if <int32_t>A[l] > <int32_t>B[l] else B[l]
            elif op == OP_V_MIN_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] if A[l] < B[l] else B[l]
            elif op == OP_V_MAX_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] if A[l] > B[l] else B[l]
            elif op == OP_V_DIV_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] // B[l] if B[l] else 0xFFFFFFFFU
            elif op == OP_V_REM_U32:
                for l in range(CU_WAVE):
                    R[l] = A[l] % B[l] if B[l] else A[l]
            elif op == OP_V_DIV_I32:
                for l in range(CU_WAVE):
                    R[l] = div_i32(A[l], B[l])
            elif op == OP_V_REM_I32:
                for l in range(CU_WAVE):
                    R[l] = rem_i32(A[l], B[l])
            elif op == OP_V_ADD_F32:    # binary32 ops equal f32(double op double)
                for l in range(CU_WAVE):
                    R[l] = cu_canon(cu_f(A[l]) + cu_f(B[l]))
            elif op == OP_V_SUB_F32:
                for l in range(CU_WAVE):
                    R[l] = cu_canon(cu_f(A[l]) - cu_f(B[l]))
            elif op == OP_V_MUL_F32:
                for l in range(CU_WAVE):
                    R[l] = cu_canon(cu_f(A[l]) * cu_f(B[l]))
            elif op == OP_V_DIV_F32:
                for l in range(CU_WAVE):
                    R[l] = cu_canon(cu_f(A[l]) / cu_f(B[l]))
            elif op == OP_V_MIN_F32:
                for l in range(CU_WAVE):
                    R[l] = min_f32(A[l], B[l])
            elif op == OP_V_MAX_F32:
                for l in range(CU_WAVE):
                    R[l] = max_f32(A[l], B[l])
            elif op == OP_V_MBCNT_LO_U32_B32:
                for l in range(CU_WAVE):
                    R[l] = cu_popcount(A[l] & ((<uint32_t>1 << l) - 1)) + B[l]
            else:                                       # v_bcnt_u32_b32
                for l in range(CU_WAVE):
                    R[l] = cu_popcount(A[l]) + B[l]
            if R != D:
                merge(D, R, m)
        elif cls == CL_VOP1:
            A = vsrc(T, s, v, w, d.src0, d.imm, ta)
            D = v + (d.dst - OPR_VGPR) * CU_WAVE
            if op == OP_V_MOV_B32:
                merge(D, A, m)
            elif op == OP_V_NOT_B32:
                for l in range(CU_WAVE):
                    R[l] = ~A[l]
                merge(D, R, m)
            else:
                for l in range(CU_WAVE):
                    if (m >> l) & 1:
                        D[l] = unary_f32(op, A[l])
        elif cls == CL_VOP3 and op == OP_V_MAD_U32 and d.src0 < OPR_VGPR and d.src1 < OPR_VGPR:
            # Two scalar factors (block_idx.x * block_dim.x + thread_idx.x, once per wave
            # in nearly every kernel): one product, then a vector add.
            x = sread(T, s, w, d.src0, 0) * sread(T, s, w, d.src1, 0)
            Cc = vsrc(T, s, v, w, d.src2, 0, tc)
            D = v + (d.dst - OPR_VGPR) * CU_WAVE
            if m == <uint32_t>0xFFFFFFFFU:
                R = D
            for l in range(CU_WAVE):
                R[l] = x + Cc[l]
            if R != D:
                merge(D, R, m)
        elif cls == CL_VOP3:
            A = vsrc(T, s, v, w, d.src0, 0, ta)
            B = vsrc(T, s, v, w, d.src1, 0, tb)
            D = v + (d.dst - OPR_VGPR) * CU_WAVE
            if m == <uint32_t>0xFFFFFFFFU:
                R = D       # lane-wise: each lane reads its sources before its write
            if op == OP_V_CNDMASK_B32:
                mask = sread(T, s, w, d.src2, 0)
                for l in range(CU_WAVE):
                    R[l] = cu_lane_sel(mask, l, A[l], B[l])
            else:
                Cc = vsrc(T, s, v, w, d.src2, 0, tc)
                if op == OP_V_MAD_F32:  # two binary32 roundings (-ffp-contract=off: no fma)
                    for l in range(CU_WAVE):
                        R[l] = cu_canon(cu_f(A[l]) * cu_f(B[l]) + cu_f(Cc[l]))
                elif op == OP_V_FMA_F32:  # the product is exact in double; one rounding after
                    for l in range(CU_WAVE):
                        R[l] = cu_f32(<double>cu_f(A[l]) * <double>cu_f(B[l]) +
                                      <double>cu_f(Cc[l]))
                else:
                    for l in range(CU_WAVE):
                        R[l] = A[l] * B[l] + Cc[l]
            if R != D:
                merge(D, R, m)
        elif cls == CL_VOPC:
            A = vsrc(T, s, v, w, d.src0, d.imm, ta)
            B = vsrc(T, s, v, w, d.src1, d.imm, tb)
            c, t = (op - OP_V_CMP_EQ_I32) % 6, (op - OP_V_CMP_EQ_I32) // 6
            mask = 0
            if t == 2:
                # Float compares, branch-free too (C's float compares are IEEE's: NaN is
                # unordered, only ne holds), the same results as cu_compare.
                if c == 0:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) == cu_f(B[l])
                elif c == 1:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) != cu_f(B[l])
                elif c == 2:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) < cu_f(B[l])
                elif c == 3:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) <= cu_f(B[l])
                elif c == 4:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) > cu_f(B[l])
                else:
                    for l in range(CU_WAVE):
                        R[l] = cu_f(A[l]) >= cu_f(B[l])
                mask = cu_lane_mask(R) & m
            else:
                # Integer compares, one branch-free loop per condition (same results as
                # cu_compare): signed order is unsigned order with the sign bit flipped.
                x = <uint32_t>0x80000000U if t == 0 else 0
                if c == 0:
                    for l in range(CU_WAVE):
                        R[l] = A[l] == B[l]
                elif c == 1:
                    for l in range(CU_WAVE):
                        R[l] = A[l] != B[l]
                elif c == 2:
                    for l in range(CU_WAVE):
                        R[l] = (A[l] ^ x) < (B[l] ^ x)
                elif c == 3:
                    for l in range(CU_WAVE):
                        R[l] = (A[l] ^ x) <= (B[l] ^ x)
                elif c == 4:
                    for l in range(CU_WAVE):
                        R[l] = (A[l] ^ x) > (B[l] ^ x)
                else:
                    for l in range(CU_WAVE):
                        R[l] = (A[l] ^ x) >= (B[l] ^ x)
                mask = cu_lane_mask(R) & m
            swrite(s, w, d.dst, mask)
        elif cls == CL_CARRY:
            A = vsrc(T, s, v, w, d.src0, d.imm, ta)
            B = vsrc(T, s, v, w, d.src1, d.imm, tb)
            D = v + (d.dst - OPR_VGPR) * CU_WAVE
            mask = 0
            for l in range(CU_WAVE):
                if not (m >> l) & 1:
                    continue
                if op == OP_V_SUB_CO_U32:     # D may be A or B: the borrow first
                    carry = A[l] < B[l]
                    D[l] = A[l] - B[l]
                else:
                    wide = <uint64_t>A[l] + B[l] + \
                        (((w.vcc >> l) & 1) if op == OP_V_ADDC_CO_U32 else 0)
                    D[l] = <uint32_t>wide
                    carry = (wide >> 32) != 0
                mask |= carry << l
            w.vcc = mask
        elif cls == CL_WIDE:
            if op == OP_GLOBAL_LOAD_DWORDX2 or op == OP_GLOBAL_STORE_DWORDX2 or \
                    op == OP_GLOBAL_ATOMIC_ADD_U64 or op == OP_GLOBAL_ATOMIC_ADD_F64 or \
                    OP_GLOBAL_ATOMIC_MAX_I64 <= op <= OP_GLOBAL_ATOMIC_CMPSWAP_B64:
                if m and T.sh.l2 != NULL:
                    l2_begin(T)
                    code = wide_mem(T, s, v, w, d, f)
                    T.sh.l2.unlock()
                    if code:
                        return stopped(T, n_inst, n_lane, f.code)
                elif m and wide_mem(T, s, v, w, d, f):
                    return stopped(T, n_inst, n_lane, f.code)
                T.op_lane[op] += active
            else:
                wide_alu(T, s, v, w, d)
        elif cls == CL_PERMUTE:
            lane_permute(v, d, m)
        elif cls == CL_GLOBAL:
            if m and T.sh.l2 != NULL:
                l2_begin(T)
                code = global_mem(T, s, v, w, d, f)
                T.sh.l2.unlock()
                if code:
                    return stopped(T, n_inst, n_lane, f.code)
            elif m:
                code = global_run(T, s, v, d, f) if m == <uint32_t>0xFFFFFFFFU else -1
                if code < 0:
                    code = global_mem(T, s, v, w, d, f)
                if code:
                    return stopped(T, n_inst, n_lane, f.code)
            T.op_lane[op] += active
        elif cls == CL_LDS:
            if m and lds_mem(T, v, w, d, f):
                return stopped(T, n_inst, n_lane, f.code)
            T.op_lane[op] += active
        elif cls == CL_LANE:
            if op == OP_V_READFIRSTLANE_B32:
                swrite(s, w, d.dst, v[(d.src0 - OPR_VGPR) * CU_WAVE + (cu_ctz(m) if m else 0)])
            elif op == OP_V_READLANE_B32:
                l = sread(T, s, w, d.src1, d.imm) & 31
                swrite(s, w, d.dst, v[(d.src0 - OPR_VGPR) * CU_WAVE + l])
            else:                                       # v_writelane_b32
                a = sread(T, s, w, d.src0, d.imm)
                l = sread(T, s, w, d.src1, d.imm) & 31
                v[(d.dst - OPR_VGPR) * CU_WAVE + l] = a
        elif cls == CL_BITS:
            A = vsrc(T, s, v, w, d.src0, d.imm, ta)
            for l in range(CU_WAVE):
                x = A[l]
                if op == OP_V_BFREV_B32:
                    R[l] = bit_reverse(x)
                elif x == 0:
                    R[l] = 0xFFFFFFFFU
                elif op == OP_V_FFBL_B32:
                    R[l] = cu_ctz(x)
                else:
                    R[l] = cu_ctz(bit_reverse(x))    # leading zeros
            merge(v + (d.dst - OPR_VGPR) * CU_WAVE, R, m)
        elif cls == CL_SLOAD:
            if T.sh.l2 != NULL:
                l2_begin(T)
                code = s_load(T, s, d, s_load_dwords(op), f)
                T.sh.l2.unlock()
                if code:
                    return stopped(T, n_inst, n_lane, f.code)
            elif s_load(T, s, d, s_load_dwords(op), f):
                return stopped(T, n_inst, n_lane, f.code)
        elif cls == CL_SCMP:
            a, b = sread(T, s, w, d.src0, d.imm), sread(T, s, w, d.src1, d.imm)
            w.scc = cu_compare((op - OP_S_CMP_EQ_I32) % 6, (op - OP_S_CMP_EQ_I32) // 6, a, b)
        elif cls == CL_SOP2:
            a, b = sread(T, s, w, d.src0, d.imm), sread(T, s, w, d.src1, d.imm)
            if op == OP_S_ADD_U32 or op == OP_S_ADDC_U32:
                wide = <uint64_t>a + b + (w.scc if op == OP_S_ADDC_U32 else 0)
                swrite(s, w, d.dst, <uint32_t>wide)
                w.scc = (wide >> 32) != 0
            elif op == OP_S_SUB_U32:
                swrite(s, w, d.dst, a - b)
                w.scc = a < b
            elif op == OP_S_SUBB_U32:
                swrite(s, w, d.dst, a - b - w.scc)
                w.scc = <uint64_t>a < <uint64_t>b + w.scc
            elif op == OP_S_MUL_I32:
                swrite(s, w, d.dst, a * b)
            elif op == OP_S_MUL_HI_U32:
                swrite(s, w, d.dst, <uint32_t>((<uint64_t>a * b) >> 32))
            elif op == OP_S_MIN_I32:
                swrite(s, w, d.dst, a if <int32_t>a < <int32_t>b else b)
            elif op == OP_S_MIN_U32:
                swrite(s, w, d.dst, a if a < b else b)
            elif op == OP_S_MAX_I32:
                swrite(s, w, d.dst, a if <int32_t>a > <int32_t>b else b)
            elif op == OP_S_MAX_U32:
                swrite(s, w, d.dst, a if a > b else b)
            elif op == OP_S_CSELECT_B32:
                swrite(s, w, d.dst, a if w.scc else b)
            else:
                if op == OP_S_AND_B32:
                    x = a & b
                elif op == OP_S_OR_B32:
                    x = a | b
                elif op == OP_S_XOR_B32:
                    x = a ^ b
                elif op == OP_S_ANDN2_B32:
                    x = a & ~b
                elif op == OP_S_ORN2_B32:
                    x = a | ~b
                elif op == OP_S_LSHL_B32:
                    x = a << (b & 31)
                elif op == OP_S_LSHR_B32:
                    x = a >> (b & 31)
                else:
                    x = <uint32_t>(<int32_t>a >> (b & 31))
                swrite(s, w, d.dst, x)
                w.scc = x != 0
        elif cls == CL_SOP1:
            if op == OP_S_MOV_B64:
                a, b = s[d.src0], s[d.src0 + 1]
                s[d.dst], s[d.dst + 1] = a, b
            elif op == OP_S_MEMTIME:
                clock_gettime(CLOCK_MONOTONIC, &ts)
                wide = <uint64_t>ts.tv_sec * 1000000000 + <uint64_t>ts.tv_nsec
                s[d.dst], s[d.dst + 1] = <uint32_t>wide, <uint32_t>(wide >> 32)
            elif op == OP_S_AND_SAVEEXEC_B32 or op == OP_S_OR_SAVEEXEC_B32:
                a = sread(T, s, w, d.src0, d.imm)
                x = w.exec_
                w.exec_ = (a & x) if op == OP_S_AND_SAVEEXEC_B32 else (a | x)
                swrite(s, w, d.dst, x)      # a dst of exec: the saved value wins
                w.scc = w.exec_ != 0
            else:
                a = sread(T, s, w, d.src0, d.imm)
                if op == OP_S_MOV_B32:
                    swrite(s, w, d.dst, a)
                elif op == OP_S_NOT_B32:
                    swrite(s, w, d.dst, ~a)
                    w.scc = ~a != 0
                elif op == OP_S_BCNT1_I32:
                    swrite(s, w, d.dst, cu_popcount(a))
                    w.scc = a != 0
                else:
                    swrite(s, w, d.dst, cu_ctz(a) if a else 0xFFFFFFFFU)
        else:                                           # SOPP
            if op == OP_S_ENDPGM:
                w.state = W_DONE
                issue(T, op, active, &n_inst, &n_lane)
                return stopped(T, n_inst, n_lane, CU_DONE)
            if op == OP_S_BARRIER:
                w.state = W_BARRIER
                w.pc += 8
                issue(T, op, active, &n_inst, &n_lane)
                return stopped(T, n_inst, n_lane, CU_BARRIER)
            if op == OP_S_BARRIER_GRID:
                w.state = W_GRID
                w.pc += 8
                issue(T, op, active, &n_inst, &n_lane)
                return stopped(T, n_inst, n_lane, CU_GRID)
            if op == OP_S_TRAP:
                f.code, f.access, f.trap_code = CU_TRAP, -1, d.imm
                return stopped(T, n_inst, n_lane, CU_TRAP)
            if op != OP_S_NOP:
                if op == OP_S_BRANCH:
                    taken = True
                elif op == OP_S_CBRANCH_SCC0:
                    taken = w.scc == 0
                elif op == OP_S_CBRANCH_SCC1:
                    taken = w.scc == 1
                elif op == OP_S_CBRANCH_VCCZ:
                    taken = w.vcc == 0
                elif op == OP_S_CBRANCH_VCCNZ:
                    taken = w.vcc != 0
                elif op == OP_S_CBRANCH_EXECZ:
                    taken = m == 0
                else:
                    taken = m != 0
                if taken:
                    if d.imm & 7:
                        f.code, f.access = CU_ILLEGAL, -1
                        return stopped(T, n_inst, n_lane, CU_ILLEGAL)
                    issue(T, op, active, &n_inst, &n_lane)
                    w.pc += 8 + <int64_t><int32_t>d.imm
                    # A lower workgroup faulted: this one is not part of the result, and
                    # it may loop forever.
                    if sh.fault_wg.load() < T.cur_wg:
                        return stopped(T, n_inst, n_lane, CU_CANCELLED)
                    continue
        issue(T, op, active, &n_inst, &n_lane)
        w.pc += 8


# -- context save area (docs/preemption.md; kmd/hw/compute.py CSA_*) -------------------------
cdef void csa_save(CuThread* T, uint64_t index, uint32_t* xyz, int slot) noexcept nogil:
    """The workgroup running on T (its waves, LDS and barrier states) into CSA `slot`."""
    wg_save(T, T.sh.csa + <uint64_t>slot * CU_CSA_SLOT_BYTES, index, xyz)


cdef void wg_save(CuThread* T, uint8_t* p, uint64_t index, uint32_t* xyz) noexcept nogil:
    """The workgroup running on T into the slot at p (a CSA's or the grid barrier's)."""
    cdef CuShared* sh = T.sh
    cdef uint32_t head[6]
    cdef uint32_t wave[4]
    cdef int wi
    head[0], head[1], head[2], head[3], head[4], head[5] = CU_CSA_MAGIC, sh.nwaves, sh.sgprs, \
        sh.vgprs, sh.lds_bytes, 0
    memcpy(p, head, 24)
    memcpy(p + 24, &index, 8)
    memcpy(p + 32, xyz, 12)
    p += CU_CSA_SLOT_HEADER
    for wi in range(sh.nwaves):
        wave[0], wave[1], wave[2], wave[3] = T.waves[wi].exec_, T.waves[wi].vcc, \
            T.waves[wi].scc, T.waves[wi].state
        memcpy(p, &T.waves[wi].pc, 8)
        memcpy(p + 8, wave, 16)
        memset(p + 24, 0, 8)
        memcpy(p + CU_CSA_WAVE_HEADER, T.s + wi * CU_MAX_SGPRS, sh.sgprs * 4)
        memcpy(p + CU_CSA_WAVE_HEADER + sh.sgprs * 4, T.v + wi * sh.vgprs * CU_WAVE,
               sh.vgprs * CU_WAVE * 4)
        p += sh.wave_rec
    memcpy(p, T.lds, sh.lds_bytes)


cdef void csa_restore(CuThread* T, int slot) noexcept nogil:
    """The inverse of csa_save; the slot is free again afterwards."""
    wg_restore(T, T.sh.csa + <uint64_t>slot * CU_CSA_SLOT_BYTES)
    T.sh.csa_used.fetch_and(~(<uint32_t>1 << slot))


cdef void wg_restore(CuThread* T, const uint8_t* p) noexcept nogil:
    """The inverse of wg_save."""
    cdef CuShared* sh = T.sh
    cdef uint32_t wave[4]
    cdef int wi
    p += CU_CSA_SLOT_HEADER
    for wi in range(sh.nwaves):
        memcpy(&T.waves[wi].pc, p, 8)
        memcpy(wave, p + 8, 16)
        T.waves[wi].exec_, T.waves[wi].vcc, T.waves[wi].scc = wave[0], wave[1], wave[2]
        T.waves[wi].state = wave[3] if wave[3] <= W_DONE else W_DONE
        memcpy(T.s + wi * CU_MAX_SGPRS, p + CU_CSA_WAVE_HEADER, sh.sgprs * 4)
        memcpy(T.v + wi * sh.vgprs * CU_WAVE, p + CU_CSA_WAVE_HEADER + sh.sgprs * 4,
               sh.vgprs * CU_WAVE * 4)
        p += sh.wave_rec
    T.vzero_from = 0        # the saved rows need not be zero: later waves zero them all
    memcpy(T.lds, p, sh.lds_bytes)


cdef int csa_claim(CuShared* sh) noexcept nogil:
    """A free slot, marked used. There is always one: a dispatch holds at most one
    workgroup per worker, saved or running, and the CSA has a slot per worker."""
    cdef uint32_t used = sh.csa_used.load()
    cdef int slot
    while True:
        slot = 0
        while slot < sh.csa_slots and used >> slot & 1:
            slot += 1
        if sh.csa_used.compare_exchange_weak(used, used | (<uint32_t>1 << slot)):
            return slot


cdef inline uint64_t plan_wg(CuShared* sh, uint64_t pos, int* slot) noexcept nogil:
    """The workgroup at plan position `pos` (and its CSA slot, or -1)."""
    cdef int lo = 0, hi = sh.nplan - 1, mid
    slot[0] = -1
    if sh.plan == NULL:
        return pos
    while lo < hi:                  # the last item starting at or before pos
        mid = (lo + hi + 1) // 2
        if sh.plan[mid].pos <= pos:
            lo = mid
        else:
            hi = mid - 1
    slot[0] = sh.plan[lo].slot
    return sh.plan[lo].wg + (pos - sh.plan[lo].pos)


@cython.cdivision(True)
cdef int run_workgroup(CuThread* T, uint64_t index, int slot, CuFault* f) noexcept nogil:
    """One workgroup (docs/isa.md 1.2 order), fresh or (slot >= 0) restored from the CSA,
    (slot <= -2) from grid-barrier slot -2 - slot: CU_OK, CU_PARKED (held at the grid
    barrier), or the code that stopped it (CU_PREEMPTED: saved, T.saved_slot)."""
    cdef CuShared* sh = T.sh
    cdef uint32_t xyz[3]
    cdef int wi, d, code, first
    cdef bint live, opened, grid
    cdef uint64_t gslot
    cdef uint32_t* s
    cdef uint32_t* v
    cdef const uint32_t* lid
    cdef int l
    xyz[0] = index % sh.gx
    xyz[1] = (index // sh.gx) % sh.gy
    xyz[2] = index // (<uint64_t>sh.gx * sh.gy)
    T.cur_wg = index
    T.gslot = -1
    if slot >= 0:
        csa_restore(T, slot)
    elif slot <= -2:
        T.gslot = -2 - slot
        wg_restore(T, sh.gsa + <uint64_t>T.gslot * sh.gsa_slot)
    else:
        T.waves_run += sh.nwaves
        if sh.lds_bytes:
            memset(T.lds, 0, sh.lds_bytes)
        for wi in range(sh.nwaves):
            # Only the registers the kernel declares: decode refuses any other (bad_register).
            s = T.s + wi * CU_MAX_SGPRS
            v = T.v + wi * sh.vgprs * CU_WAVE
            memset(s, 0, sh.sgprs * 4)
            memcpy(s, sh.user_data, USER_SGPRS * 4)
            memcpy(s + SGPR_WORKGROUP_ID, xyz, 12)
            # The local ids: v0 lane by lane (a fixed 128-byte copy the C compiler turns
            # into vector moves; memcpy of all three rows was a `rep movsq`, 5 % of
            # saxpy), v1/v2 only where the block has a y/z extent, zeros otherwise.
            lid = sh.lid + wi * 3 * CU_WAVE
            for l in range(CU_WAVE):
                v[l] = lid[l]
            if sh.lid_rows > 1:
                memcpy(v + CU_WAVE, lid + CU_WAVE, (sh.lid_rows - 1) * CU_WAVE * 4)
            # The ISA's zeros (docs/isa.md): only the rows this dispatch's code may
            # write; the rows below vzero_from are still zero from the allocation.
            l = T.vzero_from if T.vzero_from > sh.lid_rows else sh.lid_rows
            if l < sh.vgprs:
                memset(v + l * CU_WAVE, 0, (sh.vgprs - l) * CU_WAVE * 4)
            T.waves[wi].exec_ = sh.wave_exec[wi]
            T.waves[wi].vcc = 0
            T.waves[wi].scc = 0
            T.waves[wi].pc = 0
            T.waves[wi].state = W_RUN
    while True:
        for wi in range(sh.nwaves):
            if T.waves[wi].state != W_RUN:
                continue
            code = run_wave(T, wi, f)
            if code == CU_DONE:
                T.last_wave = wi
                T.last_pc = T.waves[wi].pc
            elif code != CU_BARRIER and code != CU_GRID:
                T.stop_wave = wi
                if code == CU_PREEMPTED:
                    T.saved_slot = csa_claim(sh)
                    csa_save(T, index, xyz, T.saved_slot)
                return code
        # Every live wave waits: the workgroup barrier opens for those at s_barrier;
        # when all wait at s_barrier_grid the workgroup is held at the grid barrier.
        opened = grid = False
        for wi in range(sh.nwaves):
            if T.waves[wi].state == W_BARRIER:
                T.waves[wi].state = W_RUN
                opened = True
            elif T.waves[wi].state == W_GRID:
                grid = True
        if opened:
            continue
        if not grid:
            return CU_OK
        first = -1
        for wi in range(sh.nwaves):
            if T.waves[wi].state == W_GRID:
                T.waves[wi].state = W_RUN      # they continue when the grid barrier opens
                if first < 0:
                    first = wi
        gslot = <uint64_t>T.gslot if T.gslot >= 0 else index
        if gslot >= sh.gsa_cap:
            # Past what the compute units hold (compute.grid_barrier_capacity): the
            # barrier could never open, so the dispatch faults there instead of hanging.
            T.waves[first].pc -= 8
            T.stop_wave = first
            f.code, f.access = CU_ILLEGAL, -1
            return CU_ILLEGAL
        wg_save(T, sh.gsa + gslot * sh.gsa_slot, index, xyz)
        sh.parked[sh.nparked.fetch_add(1)] = gslot
        return CU_PARKED


cdef inline void atomic_min(atomic[uint64_t]* a, uint64_t value) noexcept nogil:
    cdef uint64_t cur = a.load()
    while value < cur and not a.compare_exchange_weak(cur, value):
        pass


@cython.cdivision(True)
cdef void* cu_worker(void* arg) noexcept nogil:
    """One thread: take chunks of plan positions until none are left or the dispatch
    stops. Positions map to workgroups in ascending order (plan_wg), so the fault
    rules hold in workgroup order."""
    cdef CuThread* T = <CuThread*>arg
    cdef CuShared* sh = T.sh
    cdef uint64_t start, end, pos, index = 0
    cdef ChunkLog entry
    cdef int code, slot
    while True:
        if sh.stop.load() == STOP_PREEMPT:
            return NULL             # waves not yet launched stay unlaunched
        # Saved workgroups first, one per claim: a worker then holds at most one
        # workgroup of the CSA, so a preemption always finds a free slot (csa_claim).
        start = sh.next_saved.fetch_add(1) if sh.next_saved.load() < sh.nsaved else sh.nsaved
        if start < sh.nsaved:
            end = start + 1
        else:
            start = sh.next_wg.fetch_add(sh.chunk)
            if start >= sh.nwork:
                return NULL
            end = start + sh.chunk
            if end > sh.nwork or end < start:
                end = sh.nwork
        if plan_wg(sh, start, &slot) > sh.fault_wg.load():
            return NULL
        T.inst = 0
        T.lane = 0
        T.limit = T.trigger_left
        code = CU_OK
        pos = start
        while pos < end:
            index = plan_wg(sh, pos, &slot)
            if index > sh.fault_wg.load():
                break
            if sh.stop.load() == STOP_PREEMPT:
                code = CU_PREEMPTED
                T.saved_slot = -1
                break
            code = run_workgroup(T, index, slot, &T.fault)
            if code == CU_PARKED:
                code = CU_OK
            elif code != CU_OK:
                break
            elif index == sh.total - 1:
                T.has_last = True
                if sh.plan != NULL or sh.cooperative:   # more may run here: keep its last wave
                    T.last_w = T.waves[T.last_wave]
                    memcpy(T.last_s, T.s + T.last_wave * CU_MAX_SGPRS, sh.sgprs * 4)
                    memcpy(T.last_v, T.v + T.last_wave * sh.vgprs * CU_WAVE,
                           sh.vgprs * CU_WAVE * 4)
            pos += 1
        if T.trigger_left != CU_NO_LIMIT:
            T.trigger_left -= T.inst
        entry.start, entry.inst, entry.lane = plan_wg(sh, start, &slot), T.inst, T.lane
        T.log.push_back(entry)
        if code == CU_CANCELLED:
            return NULL
        if code == CU_PREEMPTED:
            T.stop, T.stop_wg = code, index
            T.rest_from, T.rest_to = pos + (T.saved_slot >= 0), end
            return NULL
        if code != CU_OK:
            T.stop, T.stop_wg = code, index
            if code != CU_ABORTED:
                atomic_min(sh.fault_wg, index)
            return NULL
        if pos < end:           # a lower workgroup faulted
            return NULL


cdef class ComputeEngine:
    """One compute unit (comp_0.0 ...): dispatch() runs one grid to completion.

    Same API and results as kmd.hw.cu_ref.ComputeEngine (docs/isa.md 7); workgroups
    run on `threads` threads without the GIL. `l2`: the device's L2Cache when the
    mount models one (docs/cache.md): global and scalar memory then go through it.
    """

    cdef readonly str name
    cdef readonly object ih
    cdef readonly int threads
    cdef readonly L2Cache l2
    cdef atomic[int] _stop
    cdef atomic[uint64_t] _next_wg
    cdef atomic[uint64_t] _next_saved
    cdef atomic[uint64_t] _fault_wg
    cdef atomic[uint32_t] _csa_used
    cdef atomic[uint64_t] _nparked
    cdef bint _running
    cdef bint _cooperative
    cdef object _trigger
    cdef object _spare_csa      # the save area of dispatches given none (kept: see dispatch)
    cdef uint8_t* _spare_csa_ptr    # its address and size once taken (_dispatch), or NULL
    cdef Py_ssize_t _spare_csa_len
    cdef tuple _checked_given   # the last dispatch's arguments as given, and as checked
    cdef tuple _checked_key
    # The decoded code window of the last dispatch (a launch of the same kernel reuses
    # it when the code bytes are unchanged): raw words, their DInst records and what
    # _dispatch derives from them.
    cdef uint64_t* _win_raw
    cdef DInst* _win
    cdef int64_t _win_bytes
    cdef int _win_sgprs
    cdef int _win_vgprs
    cdef int _win_vzero
    cdef bint _win_coop

    def __init__(self, str name, ih, int threads=2, L2Cache l2=None):
        if not 1 <= threads <= _cu_py.CSA_MAX_SLOTS:
            raise ValueError(f"ComputeEngine: threads must be 1..{_cu_py.CSA_MAX_SLOTS}, "
                             f"not {threads}")
        self.l2 = l2
        self.name = name
        self.ih = ih
        self.threads = threads
        self._stop.store(0)
        self._running = False
        self._cooperative = False
        self._trigger = None
        self._spare_csa = None
        self._spare_csa_ptr = NULL
        self._win_raw = <uint64_t*>malloc(CU_WINDOW)
        self._win = <DInst*>malloc(sizeof(DInst) * (CU_WINDOW // 8))
        self._win_bytes = -1
        if self._win_raw == NULL or self._win == NULL:
            raise MemoryError

    def __dealloc__(self):
        free(self._win_raw)
        free(self._win)

    def abort(self):
        """Stop the dispatch in progress before its next instruction (from another thread).

        Returns False (and does nothing) when no dispatch is running.
        """
        if not self._running:
            return False
        self._stop.store(STOP_ABORT)
        return True

    def preempt(self):
        """Preempt the dispatch in progress before each running wave's next instruction
        (from another thread): the workgroups running are saved to the CSA, those not
        started stay so, and the result is 'preempted' with its resume. Returns False
        (and does nothing) when no dispatch is running, or when it is cooperative (its
        code has s_barrier_grid: the workgroups held there are not in the CSA)."""
        cdef int cur = self._stop.load()
        if not self._running or self._cooperative:
            return False
        while cur != STOP_ABORT and cur != STOP_PREEMPT:    # 0 or STOP_COUNT
            if self._stop.compare_exchange_weak(cur, STOP_PREEMPT):
                break
        return True

    @property
    def cooperative(self):
        """True while a cooperative dispatch (s_barrier_grid) runs: preempt() refuses it."""
        return self._cooperative

    def preempt_after(self, n):
        """Test trigger: the next dispatch in which a worker thread reaches `n`
        instructions is preempted there (each worker counts its own); armed until it
        fires. None disarms it."""
        if n is not None and n < 0:
            raise ValueError(f"preempt_after: negative count {n}")
        self._trigger = n

    def dispatch(self, PageTable pt not None, code_va, *, sgprs, vgprs, lds_bytes, grid,
                 block, user_data, ctx_id=0, ring_id=0, resume=None, csa=None):
        # The checks are pure: a relaunch with the same shape (its user data, the
        # kernarg address, changes every time) reuses their outcome.
        given = (code_va, sgprs, vgprs, lds_bytes, tuple(grid), tuple(block), len(user_data))
        if given == self._checked_given:
            grid, block, nud = self._checked_key
            user_data = [int(u) & 0xFFFFFFFF for u in user_data] + [0] * (USER_SGPRS - nud)
        else:
            grid, block, user_data = _cu_py.check_dispatch(code_va, sgprs, vgprs, lds_bytes,
                                                           grid, block, user_data)
            self._checked_given, self._checked_key = given, (grid, block, given[6])
        key = (code_va, sgprs, vgprs, lds_bytes, grid, block, tuple(user_data))
        own = csa is None
        if own and getattr(resume, "own_csa", None) is None:     # (check_resume checks resume)
            # A save area is only written when the dispatch is preempted: one kept
            # buffer serves every dispatch that is not (allocating megabytes per
            # dispatch cost a mmap and munmap each, tiny kernels included).
            if self._spare_csa is None:
                self._spare_csa = np.zeros(_cu_py.csa_bytes(self.threads), np.uint8)
            csa = self._spare_csa
        if resume is None and csa is self._spare_csa:
            area = csa                  # made here: what check_resume would accept
        else:
            area = _cu_py.check_resume(resume, key, csa, self.threads)
        self._stop.store(0 if self._trigger is None else STOP_COUNT)
        self._running = True
        pin = pt.pin()
        try:
            result = self._dispatch(pt, code_va, sgprs, vgprs, lds_bytes, grid, block,
                                    user_data, resume, area)
        finally:
            self._running = False
            self._cooperative = False
            self._stop.store(0)
            pin.release()
        if result.status == "preempted":
            result.resume.key = key
            if own:
                result.resume.own_csa = area
                if area is self._spare_csa:      # the resume keeps it now
                    self._spare_csa = None
                    self._spare_csa_ptr = NULL
        if result.status == "fault":
            src, data = _cu_py.ih_entry(result.reason, result.fault, result.pc)
            self.ih.push(src, ring_id, ctx_id, data)
        return result

    cdef _dispatch(self, PageTable pt, uint64_t code_va, int sgprs, int vgprs, int lds_bytes,
                   grid, block, list user_data, resume, area):
        cdef CuShared sh
        cdef vector[CuThread] threads
        cdef vector[pthread_t] tids
        cdef uint64_t word, total, nwork
        cdef int64_t k, nwin, page_end
        cdef int i, nthreads, wi, lane
        cdef uint32_t bx, by, bz, nthr, t
        cdef bint ok = True
        cdef uint8_t[::1] csa_view
        cdef uint8_t* csa_ptr
        cdef Py_ssize_t csa_len
        cdef PlanItem* coop_plan = NULL
        cdef uint64_t n, a, b, wg_a, wg_b, cap
        cdef int expect
        memset(&sh, 0, sizeof(sh))
        total = min(grid[0] * grid[1] * grid[2], (1 << 64) - 1)
        if total == 0:
            return _cu_py.ComputeResult("ok", None, None, 0)
        if resume is None:                      # compute.resume_plan of a fresh dispatch
            plan, nwork = [(0, total, -1)], total
        else:
            plan = _cu_py.resume_plan(resume, total)
            nwork = sum(count for _, count, _ in plan)
        # A memoryview per dispatch costs more than a tiny kernel's run: the kept spare
        # save area's address is taken once (dispatch() forgets it when a resume takes it).
        if area is self._spare_csa and self._spare_csa_ptr != NULL:
            csa_ptr, csa_len = self._spare_csa_ptr, self._spare_csa_len
        else:
            csa_view = area
            csa_ptr, csa_len = &csa_view[0], csa_view.shape[0]
            if area is self._spare_csa:
                self._spare_csa_ptr, self._spare_csa_len = csa_ptr, csa_len
        bx, by, bz = block
        nthr = bx * by * bz
        sh.ptes, sh.lock, sh.generation = &pt.ptes, &pt.lock, &pt.generation
        sh.stop, sh.next_wg, sh.fault_wg = &self._stop, &self._next_wg, &self._fault_wg
        sh.next_saved = &self._next_saved
        sh.nsaved = len(resume.saved) if resume is not None else 0
        sh.l2 = self.l2.c if self.l2 is not None else NULL
        sh.code_va, sh.sgprs, sh.vgprs, sh.lds_bytes = code_va, sgprs, vgprs, lds_bytes
        sh.gx, sh.gy, sh.gz, sh.total, sh.nwork = grid[0], grid[1], grid[2], total, nwork
        sh.nwaves = (nthr + CU_WAVE - 1) // CU_WAVE
        sh.csa = csa_ptr
        sh.csa_slots = min(csa_len // _CSA_SLOT_BYTES, _CSA_MAX_SLOTS)
        sh.csa_used = &self._csa_used
        sh.wave_rec = _cu_py.csa_wave_bytes(sgprs, vgprs)
        sh.nparked = &self._nparked
        self._nparked.store(0)
        with nogil:
            self._decode_window(pt, code_va, sgprs, vgprs, &sh)
        cap = min(_cu_py.grid_barrier_capacity(block, sgprs, vgprs, lds_bytes, self.threads), total) \
            if sh.cooperative else 0
        sh.gsa_slot = (_CSA_SLOT_HEADER_BYTES + sh.nwaves * sh.wave_rec + lds_bytes + 7) // 8 * 8
        used = 0
        for _, slot in (resume.saved if resume is not None else ()):
            used |= 1 << slot
        self._csa_used.store(used)
        for i in range(USER_SGPRS):
            sh.user_data[i] = user_data[i]
        nthreads = self.threads if <uint64_t>self.threads < nwork else nwork
        # Small grids: one workgroup at a time; big ones: chunks that keep the log short.
        sh.chunk = 1 if nwork <= 1024 else min(64, nwork // (nthreads * 16))
        self._next_wg.store(sh.nsaved)
        self._next_saved.store(0)
        self._fault_wg.store(0xFFFFFFFFFFFFFFFFULL)
        threads.resize(nthreads)
        tids.resize(nthreads)
        trigger = CU_NO_LIMIT if self._trigger is None else self._trigger
        try:
            if resume is not None:
                sh.nplan = len(plan)
                sh.plan = <PlanItem*>calloc(sh.nplan, sizeof(PlanItem))
                if sh.plan == NULL:
                    raise MemoryError
                k = 0
                for i, (first, count, slot) in enumerate(plan):
                    sh.plan[i].pos, sh.plan[i].wg, sh.plan[i].count, sh.plan[i].slot = \
                        k, first, count, slot
                    k += count
            sh.wave_exec = <uint32_t*>calloc(sh.nwaves, 4)
            sh.lid = <uint32_t*>calloc(sh.nwaves * 3 * CU_WAVE, 4)
            sh.win = self._win
            if sh.wave_exec == NULL or sh.lid == NULL:
                raise MemoryError
            # Each wave's initial EXEC and its lanes' local ids, as compute.wave_layout.
            sh.lid_rows = 1 if by * bz == 1 else (2 if bz == 1 else 3)
            for t in range(nthr):
                wi, lane = t // CU_WAVE, t % CU_WAVE
                sh.wave_exec[wi] |= (<uint32_t>1) << lane
                sh.lid[(wi * 3) * CU_WAVE + lane] = t % bx
                sh.lid[(wi * 3 + 1) * CU_WAVE + lane] = t // bx % by
                sh.lid[(wi * 3 + 2) * CU_WAVE + lane] = t // (bx * by)
            for i in range(nthreads):
                threads[i].sh = &sh
                threads[i].s = <uint32_t*>cu_zalloc(sh.nwaves * CU_MAX_SGPRS * 4)
                threads[i].v = <uint32_t*>cu_zalloc(sh.nwaves * vgprs * CU_WAVE * 4)
                threads[i].lds = <uint8_t*>cu_zalloc(lds_bytes + 4)
                threads[i].waves = <WaveSt*>cu_zalloc(sh.nwaves * sizeof(WaveSt))
                threads[i].tlb_gen = <uint64_t>NO_PAGE    # first tlb_check clears the cache
                threads[i].trigger_left = trigger
                threads[i].saved_slot = -1
                if threads[i].s == NULL or threads[i].v == NULL or threads[i].lds == NULL \
                        or threads[i].waves == NULL:
                    raise MemoryError
                threads[i].gslot = -1
                if resume is not None or sh.cooperative:
                    threads[i].last_s = <uint32_t*>cu_zalloc(sgprs * 4)
                    threads[i].last_v = <uint32_t*>cu_zalloc(vgprs * CU_WAVE * 4)
                    if threads[i].last_s == NULL or threads[i].last_v == NULL:
                        raise MemoryError
            with nogil:
                for i in range(nthreads):
                    threads[i].vzero_from = sh.vzero_from
                if sh.cooperative and cap:
                    sh.gsa = <uint8_t*>malloc(cap * sh.gsa_slot)
                    sh.parked = <uint64_t*>malloc(cap * 8)
                    coop_plan = <PlanItem*>malloc(cap * sizeof(PlanItem))
                    if sh.gsa != NULL and sh.parked != NULL and coop_plan != NULL:
                        sh.gsa_cap = cap
                if sh.cooperative:
                    with gil:
                        self._cooperative = True
                        expect = STOP_PREEMPT      # a request that came before this: refused
                        self._stop.compare_exchange_strong(expect, 0)
                        expect = STOP_COUNT        # nor is the test trigger armed for it
                        self._stop.compare_exchange_strong(expect, 0)
                    for i in range(nthreads):
                        threads[i].trigger_left = CU_NO_LIMIT
                for i in range(1, nthreads):
                    if pthread_create(&tids[i], NULL, cu_worker, &threads[i]) != 0:
                        nthreads = i        # run with the threads we have
                        break
                cu_worker(&threads[0])
                for i in range(1, nthreads):
                    pthread_join(tids[i], NULL)
                # The grid barrier opens when every workgroup has ended or waits at it:
                # the held ones run again, in ascending order, up to the next one.
                while sh.nparked.load() and sh.fault_wg.load() == 0xFFFFFFFFFFFFFFFFULL \
                        and sh.stop.load() != STOP_ABORT:
                    n = sh.nparked.load()
                    for a in range(1, n):           # insertion sort by workgroup index
                        b = a
                        while b > 0:
                            memcpy(&wg_a, sh.gsa + sh.parked[b - 1] * sh.gsa_slot + 24, 8)
                            memcpy(&wg_b, sh.gsa + sh.parked[b] * sh.gsa_slot + 24, 8)
                            if wg_a <= wg_b:
                                break
                            sh.parked[b - 1], sh.parked[b] = sh.parked[b], sh.parked[b - 1]
                            b -= 1
                    for a in range(n):
                        memcpy(&wg_a, sh.gsa + sh.parked[a] * sh.gsa_slot + 24, 8)
                        coop_plan[a].pos, coop_plan[a].wg, coop_plan[a].count = a, wg_a, 1
                        coop_plan[a].slot = -2 - <int>sh.parked[a]
                    sh.plan, sh.nplan, sh.nwork, sh.nsaved, sh.chunk = coop_plan, n, n, 0, 1
                    sh.next_wg.store(0)
                    sh.next_saved.store(0)
                    sh.nparked.store(0)
                    for i in range(1, nthreads):
                        if pthread_create(&tids[i], NULL, cu_worker, &threads[i]) != 0:
                            nthreads = i
                            break
                    cu_worker(&threads[0])
                    for i in range(1, nthreads):
                        pthread_join(tids[i], NULL)
            for i in range(nthreads):
                if threads[i].fired:
                    self._trigger = None
            return self._result(&sh, threads, resume, plan)
        finally:
            for i in range(<int>threads.size()):
                free(threads[i].s)
                free(threads[i].v)
                free(threads[i].lds)
                free(threads[i].waves)
                free(threads[i].last_s)
                free(threads[i].last_v)
            if sh.plan != coop_plan:
                free(sh.plan)
            free(coop_plan)
            free(sh.gsa)
            free(sh.parked)
            free(sh.wave_exec)
            free(sh.lid)

    cdef void _decode_window(self, PageTable pt, uint64_t code_va, int sgprs, int vgprs,
                             CuShared* sh) noexcept nogil:
        """sh.win, win_bytes, vzero_from and cooperative of the code at code_va: the
        exec-mapped pages from there, at most CU_WINDOW bytes (docs/hw.md), decoded
        once per dispatch, or taken from the last dispatch when its bytes and register
        counts are the same (the bytes are compared each time, so code the CPU
        rewrote between launches is decoded anew)."""
        cdef int64_t nwin = 0, page_end, i
        cdef uint8_t* host
        cdef uint8_t* raw = <uint8_t*>self._win_raw
        cdef bint same = sgprs == self._win_sgprs and vgprs == self._win_vgprs
        if code_va & 7 == 0:
            pt.lock.lock_shared()
            while nwin < CU_WINDOW and code_va + <uint64_t>nwin >= code_va:
                it = pt.ptes.find((code_va + nwin) >> PAGE_SHIFT)
                if it == pt.ptes.end() or not (deref(it).second.flags & C_PTE_EXEC):
                    break
                page_end = nwin + PAGE_SIZE - ((code_va + nwin) & PAGE_MASK)
                if page_end > CU_WINDOW:
                    page_end = CU_WINDOW
                host = deref(it).second.host + ((code_va + nwin) & PAGE_MASK)
                if same and (page_end > self._win_bytes
                             or memcmp(raw + nwin, host, page_end - nwin) != 0):
                    same = False
                if not same:
                    memcpy(raw + nwin, host, page_end - nwin)
                nwin = page_end
            pt.lock.unlock_shared()
        sh.win = self._win
        sh.win_bytes = nwin
        if same and nwin == self._win_bytes:
            sh.vzero_from, sh.cooperative = self._win_vzero, self._win_coop
            return
        # (a window that matched a prefix of the cached one left those bytes in place)
        for i in range(nwin >> 3):
            cu_decode(self._win_raw[i], sgprs, vgprs, &self._win[i])
        # The lowest VGPR an instruction of the window may write (a bad or unused dst
        # field only lowers it): run_workgroup zeroes from there.
        sh.vzero_from = vgprs
        sh.cooperative = False
        for i in range(nwin >> 3):
            if self._win[i].status == CU_OK and self._win[i].dst >= OPR_VGPR and \
                    self._win[i].dst - OPR_VGPR < sh.vzero_from:
                sh.vzero_from = self._win[i].dst - OPR_VGPR
            # A cooperative dispatch (docs/isa.md 4.1): room for the workgroups held at
            # the grid barrier, and no preemption (preempt() refuses it).
            if self._win[i].status == CU_OK and self._win[i].op == OP_S_BARRIER_GRID:
                sh.cooperative = True
        self._win_bytes, self._win_sgprs, self._win_vgprs = nwin, sgprs, vgprs
        self._win_vzero, self._win_coop = sh.vzero_from, sh.cooperative

    cdef _result(self, CuShared* sh, vector[CuThread]& threads, resume, plan):
        """ComputeResult of the run: the lowest faulting workgroup, else an abort, else a
        preemption (with its resume), else ok."""
        cdef uint64_t fault_wg = sh.fault_wg.load(), inst = 0, lane = 0
        cdef uint64_t best = 0xFFFFFFFFFFFFFFFFULL
        cdef CuThread* T
        cdef CuThread* pick = NULL
        cdef CuThread* last_T = NULL        # an ok result's last wave, left packed
        cdef WaveSt* w
        cdef CuFault f
        cdef size_t i, j
        for i in range(threads.size()):        # an abort below the first fault wins
            T = &threads[i]
            if T.stop == CU_ABORTED and T.stop_wg < fault_wg and T.stop_wg < best:
                best, pick = T.stop_wg, T
        status = "aborted"
        if pick == NULL and fault_wg != 0xFFFFFFFFFFFFFFFFULL:
            status = "fault"
            for i in range(threads.size()):
                if threads[i].stop not in (CU_OK, CU_ABORTED, CU_PREEMPTED) \
                        and threads[i].stop_wg == fault_wg:
                    pick = &threads[i]
        left = []
        if pick == NULL and not self._all_ran(sh, threads):    # a preemption left work for later
            for i in range(threads.size()):
                T = &threads[i]
                if T.stop == CU_PREEMPTED:
                    left.append((T.rest_from, T.rest_to))
                    if T.saved_slot >= 0 and T.stop_wg < best:
                        best, pick = T.stop_wg, T
            left.append((min(sh.next_saved.load(), sh.nsaved), sh.nsaved))
            left.append((min(sh.next_wg.load(), sh.nwork), sh.nwork))
            saved, pending = _cu_py.plan_left(plan, left)
            for i in range(threads.size()):
                if threads[i].stop == CU_PREEMPTED and threads[i].saved_slot >= 0:
                    saved.append((threads[i].stop_wg, threads[i].saved_slot))
            if saved or pending:
                status = "preempted"
        for i in range(threads.size()):
            for j in range(threads[i].log.size()):
                if status != "fault" or threads[i].log[j].start <= fault_wg:
                    inst += threads[i].log[j].inst
                    lane += threads[i].log[j].lane
        counters = self._counters(sh, threads, resume is None)
        last = resume.last if resume is not None else None
        for i in range(threads.size()):
            if threads[i].has_last:
                T = &threads[i]
                if sh.plan != NULL or sh.cooperative:
                    last = self._wave_state({"pc": T.last_w.pc}, sh, &T.last_w, T.last_s,
                                            T.last_v, sh.total - 1, T.last_wave)
                elif pick == NULL and status != "preempted":
                    last, last_T = None, T
                else:
                    last = self._wave_state({"pc": T.last_pc}, sh, &T.waves[T.last_wave],
                                            T.s + T.last_wave * CU_MAX_SGPRS,
                                            T.v + T.last_wave * sh.vgprs * CU_WAVE,
                                            sh.total - 1, T.last_wave)
        if status == "preempted":
            r = _cu_py.ComputeResult("preempted", None, None, 0, instructions=inst,
                                     lane_instructions=lane, counters=counters)
            r.resume = _cu_py.DispatchResume(None, sorted(saved), pending, last)
            if pick == NULL:
                return r
            T = pick
            r.pc = T.waves[T.stop_wave].pc
            return self._thread_wave(r, sh, T, T.stop_wg, T.stop_wave)
        if pick == NULL:
            if last_T != NULL:
                T = last_T
                if _OK_FIELDS is not None:
                    r = _new_result(_ComputeResult)
                    d = r.__dict__
                    d.update(_OK_FIELDS)
                    d["instructions"], d["lane_instructions"], d["counters"] = inst, lane, counters
                else:
                    r = _cu_py.ComputeResult("ok", None, None, 0, instructions=inst,
                                             lane_instructions=lane, counters=counters)
                    d = r.__dict__
                    del d["sgprs"], d["vgprs"]
                self._packed_wave(r, sh, &T.waves[T.last_wave], T.s + T.last_wave * CU_MAX_SGPRS,
                                  T.v + T.last_wave * sh.vgprs * CU_WAVE, sh.total - 1,
                                  T.last_wave, T.last_pc)
                return r
            r = _cu_py.ComputeResult("ok", None, None, 0, instructions=inst,
                                     lane_instructions=lane, counters=counters)
            for name, value in (last or {}).items():
                setattr(r, name, value)
            return r
        T = pick
        w = &T.waves[T.stop_wave]
        if status == "aborted":
            r = _cu_py.ComputeResult("aborted", None, None, w.pc, instructions=inst,
                                     lane_instructions=lane, counters=counters)
        else:
            f = T.fault
            gpu_fault = None
            if f.access >= 0:
                gpu_fault = GpuFault(f.va, ACCESS_KINDS[f.access],
                                     "misaligned" if f.code == CU_MISALIGNED else
                                     FAULT_REASONS[f.code - CU_UNMAPPED])
            r = _cu_py.ComputeResult("fault", _CU_REASONS[f.code], gpu_fault, w.pc,
                                     instructions=inst, lane_instructions=lane,
                                     trap_code=f.trap_code, counters=counters)
        return self._thread_wave(r, sh, T, T.stop_wg, T.stop_wave)

    cdef bint _all_ran(self, CuShared* sh, vector[CuThread]& threads):
        """Whether every position of the plan was handed out and none was preempted
        (the usual end of a dispatch: nothing for plan_left to find)."""
        cdef size_t i
        for i in range(threads.size()):
            if threads[i].stop == CU_PREEMPTED:
                return False
        return sh.next_saved.load() >= sh.nsaved and sh.next_wg.load() >= sh.nwork

    cdef dict _counters(self, CuShared* sh, vector[CuThread]& threads, bint first_part):
        """The dispatch's performance counters (kmd/hw/compute.py dispatch_counters),
        from the per-thread tallies: the work the units did, cancelled work included."""
        cdef uint64_t lookups = 0, misses = 0, walks = 0, waves = 0, lanes = 0
        cdef uint64_t op_inst[256]
        cdef uint64_t op_lane[256]
        cdef uint64_t window_pages = 0
        cdef VgpuL2Tally t
        cdef size_t i, j
        cdef int op
        memset(op_inst, 0, sizeof(op_inst))
        memset(op_lane, 0, sizeof(op_lane))
        for i in range(threads.size()):
            for op in range(256):
                op_inst[op] += threads[i].op_inst[op]
                op_lane[op] += threads[i].op_lane[op]
            lookups += threads[i].tlb_lookups
            misses += threads[i].tlb_misses
            walks += threads[i].walks
            waves += threads[i].waves_run
            for j in range(threads[i].log.size()):
                lanes += threads[i].log[j].lane
        if sh.win_bytes > 0:                    # compute.pages_spanned
            window_pages = ((sh.code_va + <uint64_t>sh.win_bytes - 1) >> 12) - (sh.code_va >> 12) + 1
        l2 = None
        if sh.l2 != NULL:
            l2 = dict.fromkeys(L2_COUNTERS, 0)
            for i in range(threads.size()):
                t = threads[i].l2
                for name, value in zip(L2_COUNTERS, (t.hits, t.misses, t.writebacks, t.evictions,
                                                     t.invalidations)):
                    l2[name] += value
        c = cnt_sum(op_inst, op_lane, waves, lanes, lookups - misses, misses,
                    walks + misses + window_pages, 1 if first_part else 0, l2)
        if c is not None:
            return c
        ops = {op: (op_inst[op], op_lane[op]) for op in range(256) if op_inst[op]}
        return _cu_py.dispatch_counters(ops, waves=waves, lane_instructions=lanes,
                                        tlb_hits=lookups - misses, tlb_misses=misses,
                                        walks=walks + misses + window_pages,
                                        dispatches=1 if first_part else 0, l2=l2)

    cdef _thread_wave(self, r, CuShared* sh, CuThread* T, uint64_t index, int wi):
        """r with the state of wave wi of the workgroup running on T."""
        state = self._wave_state({}, sh, &T.waves[wi], T.s + wi * CU_MAX_SGPRS,
                                 T.v + wi * sh.vgprs * CU_WAVE, index, wi)
        for name, value in state.items():
            setattr(r, name, value)
        return r

    @cython.cdivision(True)
    cdef _packed_wave(self, r, CuShared* sh, WaveSt* w, uint32_t* s, uint32_t* v,
                      uint64_t index, int wi, int64_t pc):
        """r (an ok ComputeResult made from _OK_FIELDS) with pc and what _wave_state
        gives, but its sgprs and vgprs left as bytes (compute.PACKED_REGS): they are
        decoded when first read."""
        d = r.__dict__
        d["pc"] = pc
        d["workgroup"] = (index % sh.gx, (index // sh.gx) % sh.gy,
                          index // (<uint64_t>sh.gx * sh.gy))
        d["wave"] = wi
        d["exec"], d["vcc"], d["scc"] = w.exec_, w.vcc, w.scc
        d[_PACKED_REGS] = ((<char*>s)[:sh.sgprs * 4], (<char*>v)[:sh.vgprs * CU_WAVE * 4])

    @cython.cdivision(True)
    cdef dict _wave_state(self, dict out, CuShared* sh, WaveSt* w, uint32_t* s, uint32_t* v,
                          uint64_t index, int wi):
        """out plus the ComputeResult fields of one wave: workgroup, wave, exec, vcc,
        scc, sgprs, vgprs."""
        cdef int k, l
        out["workgroup"] = (index % sh.gx, (index // sh.gx) % sh.gy,
                            index // (<uint64_t>sh.gx * sh.gy))
        out["wave"] = wi
        out["exec"], out["vcc"], out["scc"] = w.exec_, w.vcc, w.scc
        out["sgprs"] = [s[k] for k in range(sh.sgprs)]
        out["vgprs"] = [[v[k * CU_WAVE + l] for l in range(CU_WAVE)] for k in range(sh.vgprs)]
        return out
