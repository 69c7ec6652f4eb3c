"""What both compute executors share: the dispatch result, argument checks, decode-time
validation, wave layout and the float rules of docs/isa.md 3.

The executors themselves are kmd/hw/cu_ref.py (pure Python) and the Cython core.
"""
from __future__ import annotations

import array
import ctypes
import dataclasses
import math
import struct

import numpy as np

from kmd.hw.ih import IH_SRC_ILLEGAL_INST, IH_SRC_PAGE_FAULT, IH_SRC_PROT_FAULT
from kmd.hw.mmu import GpuFault
from vgpu import isa as I

# Fault reasons (docs/isa.md 6).
REASON_ILLEGAL = "illegal_instruction"
REASON_BAD_REGISTER = "bad_register"
REASON_UNMAPPED = "unmapped"
REASON_PERMISSION = "permission"
REASON_MISALIGNED = "misaligned"
REASON_LDS_BOUNDS = "lds_bounds"
REASON_TRAP = "trap"


@dataclasses.dataclass
class ComputeResult:
    """The outcome of one dispatch and the state of the wave it stopped in.

    `pc` is a byte offset from code_va: of the faulting instruction, of the last
    wave's s_endpgm when ok, of the next instruction of the running wave when aborted
    or preempted.
    `vgprs[r][lane]`; `lane_instructions` sums popcount(EXEC) at issue over the
    `instructions` completed (the faulting one is not counted).
    """

    status: str                                 # 'ok' | 'fault' | 'aborted' | 'preempted'
    reason: str | None = None
    fault: GpuFault | None = None
    pc: int = 0
    workgroup: tuple[int, int, int] = (0, 0, 0)
    wave: int = 0
    exec: int = 0
    vcc: int = 0
    scc: int = 0
    sgprs: list[int] = dataclasses.field(default_factory=list)
    vgprs: list[list[int]] = dataclasses.field(default_factory=list)
    trap_code: int = 0
    instructions: int = 0
    lane_instructions: int = 0
    # Performance counters (dispatch_counters): what the units did, cancelled work
    # included; the TLB counters are the Cython core's (the reference has no TLB).
    counters: dict = dataclasses.field(default_factory=dict, compare=False)
    # status 'preempted': the DispatchResume to pass back to dispatch() (resume=).
    resume: object = dataclasses.field(default=None, compare=False, repr=False)

    def __getattr__(self, name):
        # Only reached for an attribute missing from the instance. The Cython core's ok
        # result leaves the last wave's registers packed (PACKED_REGS: its SGPRs, then
        # its VGPRs row by row, as native uint32 bytes) instead of sgprs / vgprs, as
        # almost every ok result is dropped unread: the lists are made on first read.
        if name not in ("sgprs", "vgprs"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        d = self.__dict__
        packed = d.get(PACKED_REGS)
        if packed is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        s_raw, v_raw = packed
        if name == "sgprs":
            d["sgprs"] = array.array("I", s_raw).tolist()
        else:
            flat = array.array("I", v_raw).tolist()
            d["vgprs"] = [flat[k:k + I.WAVE_SIZE] for k in range(0, len(flat), I.WAVE_SIZE)]
        return d[name]


# The instance attribute that holds an ok result's packed registers (ComputeResult.__getattr__).
PACKED_REGS = "_packed_regs"


# -- performance counters (docs/observability.md) -------------------------------------------
# A dispatch's counters, in print order. Instruction classes count wave instructions;
# lane_instructions sums popcount(EXEC) at issue; bytes and atomics count per lane.
COMPUTE_COUNTERS = ("dispatches", "waves", "instructions", "lane_instructions", "valu",
                    "salu", "smem", "vmem", "lds", "bytes_loaded", "bytes_stored",
                    "atomics", "barriers", "tlb_hits", "tlb_misses", "pt_walks")
_ACCESS_BYTES = {"dword": 4, "dwordx2": 8, "dwordx4": 16, "dwordx8": 32, "dwordx16": 64, "ubyte": 1, "sbyte": 1, "byte": 1,
                 "ushort": 2, "sshort": 2, "short": 2}


def op_class(name: str) -> str:
    """The counter class of an instruction: valu, salu, smem, vmem or lds."""
    if name.startswith("v_"):
        return "valu"
    if name.startswith("s_load"):
        return "smem"
    if name.startswith("global_"):
        return "vmem"
    if name.startswith("ds_"):
        return "lds"
    return "salu"


# The LDS reads and writes that are not atomics (no read-modify-write).
LDS_MOVES = frozenset({"ds_read_b32", "ds_read_b128", "ds_read2_b32", "ds_write_b32"})


def _memory_effect(name: str) -> tuple[int, int, bool]:
    """(bytes loaded, bytes stored, is an atomic) per lane (per wave for s_load)."""
    if "atomic" in name:
        size = 8 if name.endswith("64") else 4
        return size, size, True
    if name.startswith(("global_load_", "s_load_")):
        return _ACCESS_BYTES[name.rsplit("_", 1)[1]], 0, False
    if name.startswith("global_store_"):
        return 0, _ACCESS_BYTES[name.rsplit("_", 1)[1]], False
    if name.startswith("ds_") and name not in LDS_MOVES and "permute" not in name:
        return 0, 0, True       # an LDS atomic: on-chip, no memory bytes (permutes move lanes)
    return 0, 0, False


def _op_effects() -> dict[int, tuple[str, int, int, bool, bool]]:
    out = {}
    for info in I.OPCODES:
        loaded, stored, atomic = _memory_effect(info.name)
        out[info.code] = (op_class(info.name), loaded, stored, atomic,
                          info.name.startswith("s_load"))
    return out


_OP_EFFECTS = _op_effects()


def pages_spanned(va: int, n: int) -> int:
    """Pages of 4 KiB that [va, va + n) touches."""
    return ((va + n - 1) >> 12) - (va >> 12) + 1 if n > 0 else 0


def dispatch_counters(ops: dict[int, tuple[int, int]], *, waves: int, lane_instructions: int,
                      tlb_hits: int = 0, tlb_misses: int = 0, walks: int = 0,
                      dispatches: int = 1, l2: dict | None = None) -> dict[str, int]:
    """COMPUTE_COUNTERS of one dispatch from {opcode: (instructions, active lanes)}
    (the lanes are needed, and read, for the vmem and lds opcodes only). A resumed
    part of a preempted dispatch counts no dispatch and only the waves it launched,
    so the parts add up to the dispatch. `l2`: the L2 model's counters of the
    dispatch when the engine has one (docs/cache.md)."""
    c = dict.fromkeys(COMPUTE_COUNTERS, 0)
    c.update(dispatches=dispatches, waves=waves, lane_instructions=lane_instructions, tlb_hits=tlb_hits,
             tlb_misses=tlb_misses, pt_walks=walks)
    for op, (inst, lanes) in ops.items():
        cls, loaded, stored, atomic, scalar = _OP_EFFECTS[op]
        per = inst if scalar else lanes
        c["instructions"] += inst
        c[cls] += inst
        c["bytes_loaded"] += loaded * per
        c["bytes_stored"] += stored * per
        c["atomics"] += lanes if atomic else 0
        c["barriers"] += inst if op in (I.OP_S_BARRIER, I.OP_S_BARRIER_GRID) else 0
    if l2 is not None:
        c.update(l2)
    return c


# -- preemption and the context save area (docs/preemption.md) ---------------------------
# A preempted dispatch leaves each workgroup it was running in one slot of the context
# save area (CSA): a slot header, one record per wave (header, SGPRs, VGPRs), then the
# workgroup's LDS. Little-endian, dense for the dispatch's declared register counts;
# slots have the room of the largest workgroup, so a slot's offset is fixed.
CSA_MAGIC = 0x31535743                  # "CWS1"
CSA_SLOT_HEADER = struct.Struct("<6IQ3I20x")   # magic, nwaves, sgprs, vgprs, lds_bytes,
                                        # reserved, workgroup index, workgroup x, y, z
CSA_WAVE_HEADER = struct.Struct("<q4I8x")     # pc, exec, vcc, scc, state (WAVE_STATES)
WAVE_STATES = ("run", "barrier", "done")
MAX_WAVES = I.MAX_BLOCK_THREADS // I.WAVE_SIZE


def csa_wave_bytes(sgprs: int, vgprs: int) -> int:
    """Bytes of one wave's record in a CSA slot."""
    return CSA_WAVE_HEADER.size + 4 * sgprs + 4 * I.WAVE_SIZE * vgprs


CSA_SLOT_BYTES = -(-(CSA_SLOT_HEADER.size + MAX_WAVES * csa_wave_bytes(I.MAX_SGPRS, I.MAX_VGPRS)
                     + I.MAX_LDS_BYTES) // 4096) * 4096
CSA_MAX_SLOTS = 32


def csa_bytes(slots: int) -> int:
    """Size of a CSA with `slots` workgroup slots: an engine of N worker threads needs N."""
    return slots * CSA_SLOT_BYTES


def csa_slot_header(csa, slot: int) -> dict:
    """The header of CSA slot `slot` as a dict (magic, nwaves, sgprs, vgprs, lds_bytes,
    workgroup, xyz)."""
    f = CSA_SLOT_HEADER.unpack_from(csa, slot * CSA_SLOT_BYTES)
    return {"magic": f[0], "nwaves": f[1], "sgprs": f[2], "vgprs": f[3], "lds_bytes": f[4],
            "workgroup": f[6], "xyz": f[7:10]}


@dataclasses.dataclass
class DispatchResume:
    """What a preempted dispatch still has to do (opaque to the KMD).

    key: the dispatch's arguments (a resume must come with the same ones);
    saved: [(workgroup index, CSA slot)] of the workgroups stopped mid-way;
    pending: [(first, count)] of workgroups not started, ascending; last: the state
    of the final workgroup's last wave when an earlier part ran it (the ok result
    reports it); own_csa: the save area the engine kept when it was given none.
    """

    key: tuple
    saved: list
    pending: list
    last: dict | None = None
    own_csa: object = None


def resume_plan(resume: DispatchResume | None, total: int) -> list[tuple[int, int, int]]:
    """The work of a dispatch (part) in the order it is handed out: [(first workgroup,
    count, CSA slot or -1)]. Saved workgroups come first, one each; then the pending
    ranges in ascending order (the fault rules rely on that order)."""
    if resume is None:
        return [(0, total, -1)]
    return ([(wg, 1, slot) for wg, slot in sorted(resume.saved)]
            + [(first, count, -1) for first, count in resume.pending])


def plan_left(plan, intervals) -> tuple[list, list]:
    """(saved, pending) of a DispatchResume from the plan's positions not run:
    `intervals` are [start, end) in the plan's order (its workgroups laid end to end);
    a saved workgroup that was not taken stays in its slot."""
    saved, pending = [], []
    for start, end in intervals:
        pos = 0
        for first, count, slot in plan:
            lo, hi = max(start, pos), min(end, pos + count)
            if lo < hi:
                if slot >= 0:
                    saved.append((first, slot))
                else:
                    pending.append((first + lo - pos, hi - lo))
            pos += count
    pending.sort()
    merged = []
    for first, count in pending:
        if merged and merged[-1][0] + merged[-1][1] == first:
            merged[-1] = (merged[-1][0], merged[-1][1] + count)
        else:
            merged.append((first, count))
    return sorted(saved), merged


def check_resume(resume, key: tuple, csa, slots: int):
    """Argument checks of dispatch(resume=, csa=): returns the CSA buffer to use (the
    engine's own when csa is None), a writable uint8 array of at least `slots` slots."""
    if resume is not None:
        if not isinstance(resume, DispatchResume):
            raise TypeError("dispatch: resume must be the DispatchResume of a preempted result")
        if resume.key != key:
            raise ValueError("dispatch: resume belongs to another dispatch")
    if csa is None:
        if resume is not None and resume.own_csa is not None:
            return resume.own_csa
        return np.zeros(csa_bytes(slots), np.uint8)
    if not (isinstance(csa, np.ndarray) and csa.dtype == np.uint8 and csa.ndim == 1
            and csa.flags.c_contiguous and csa.flags.writeable):
        raise TypeError("dispatch: csa must be a writable 1-D C-contiguous uint8 array")
    if csa.size < csa_bytes(slots):
        raise ValueError(f"dispatch: csa of {csa.size} bytes, {slots} slots need {csa_bytes(slots)}")
    if resume is not None:
        for wg, slot in resume.saved:
            h = csa_slot_header(csa, slot)
            if h["magic"] != CSA_MAGIC or h["workgroup"] != wg or h["sgprs"] != key[1] \
                    or h["vgprs"] != key[2] or h["lds_bytes"] != key[3]:
                raise ValueError(f"dispatch: CSA slot {slot} does not hold workgroup {wg}")
    return csa


class WaveFault(Exception):
    """Raised inside an executor: stops the dispatch with `reason` (and a GpuFault)."""

    def __init__(self, reason: str, fault: GpuFault | None = None, trap_code: int = 0) -> None:
        super().__init__(reason, fault)
        self.reason = reason
        self.fault = fault
        self.trap_code = trap_code


def ih_entry(reason: str, fault: GpuFault | None, pc: int) -> tuple[int, int]:
    """(src_id, data) of the IH entry a fault pushes (docs/isa.md 6)."""
    if reason == REASON_UNMAPPED:
        return IH_SRC_PAGE_FAULT, fault.va
    if reason == REASON_PERMISSION:
        return IH_SRC_PROT_FAULT, fault.va
    return IH_SRC_ILLEGAL_INST, pc & 0xFFFFFFFFFFFFFFFF


def check_dispatch(code_va: int, sgprs: int, vgprs: int, lds_bytes: int, grid, block,
                   user_data) -> tuple[tuple[int, int, int], tuple[int, int, int], list[int]]:
    """Argument checks of ComputeEngine.dispatch; returns (grid, block, user_data[16])."""
    if not 0 <= code_va < 1 << 64:
        raise ValueError(f"dispatch: code_va {code_va:#x} outside the 64-bit VA space")
    if not I.MIN_SGPRS <= sgprs <= I.MAX_SGPRS:
        raise ValueError(f"dispatch: sgprs {sgprs} outside {I.MIN_SGPRS}..{I.MAX_SGPRS}")
    if not I.MIN_VGPRS <= vgprs <= I.MAX_VGPRS:
        raise ValueError(f"dispatch: vgprs {vgprs} outside {I.MIN_VGPRS}..{I.MAX_VGPRS}")
    if not 0 <= lds_bytes <= I.MAX_LDS_BYTES:
        raise ValueError(f"dispatch: lds_bytes {lds_bytes} outside 0..{I.MAX_LDS_BYTES}")
    grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
    if len(grid) != 3 or any(not 0 <= g < 1 << 32 for g in grid):
        raise ValueError(f"dispatch: grid {grid} must be three counts in 0..2^32-1")
    if len(block) != 3 or any(b < 1 for b in block) or \
            block[0] * block[1] * block[2] > I.MAX_BLOCK_THREADS:
        raise ValueError(f"dispatch: block {block} must be three sizes >= 1 with at most "
                         f"{I.MAX_BLOCK_THREADS} threads")
    user_data = [int(u) & 0xFFFFFFFF for u in user_data]
    if len(user_data) > I.USER_SGPRS:
        raise ValueError(f"dispatch: {len(user_data)} user data values, at most {I.USER_SGPRS}")
    return grid, block, user_data + [0] * (I.USER_SGPRS - len(user_data))


def wave_layout(block: tuple[int, int, int]) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """Per wave of a workgroup: (initial EXEC, local ids (x, y, z) of lanes 0..n-1)."""
    bx, by, bz = block
    n = bx * by * bz
    waves = []
    for first in range(0, n, I.WAVE_SIZE):
        count = min(I.WAVE_SIZE, n - first)
        ids = [(t % bx, t // bx % by, t // (bx * by)) for t in range(first, first + count)]
        waves.append(((1 << count) - 1, ids))
    return waves


GRID_WINDOW_BYTES = 65536       # the code a dispatch decodes up front (docs/hw.md)


def grid_barrier_capacity(block: tuple[int, int, int], sgprs: int, vgprs: int, lds_bytes: int,
                          cus: int) -> int:
    """How many workgroups of a cooperative dispatch (one whose code has s_barrier_grid)
    the engine holds at a grid barrier: what `cus` compute units hold resident at once
    (vgpu.isa.max_resident_workgroups; docs/isa.md 4.1). A workgroup of index this or
    above that reaches the barrier faults (illegal_instruction) instead of deadlocking."""
    return cus * I.max_resident_workgroups(block[0] * block[1] * block[2], sgprs, vgprs, lds_bytes)


def window_has_grid_barrier(pt, code_va: int) -> bool:
    """Whether the exec-mapped code from `code_va` (the decode window) holds an
    s_barrier_grid word: the dispatch is cooperative and is not preempted."""
    if code_va % I.INST_BYTES:
        return False
    off = 0
    while off < GRID_WINDOW_BYTES:
        host, flags = pt.translate(code_va + off)
        if host is None or not flags & 8:               # PTE_EXEC
            return False
        page_left = 4096 - ((code_va + off) & 4095)
        n = min(page_left, GRID_WINDOW_BYTES - off)
        words = np.frombuffer(ctypes.string_at(host, n), np.uint64)
        if np.any(words == I.OP_S_BARRIER_GRID):       # the only valid spelling
            return True
        off += n
    return False


# -- decode-time validation (docs/isa.md 2.3) ---------------------------------------------
def validate(word: int, sgprs: int, vgprs: int) -> tuple[I.OpInfo, I.Inst]:
    """Decode one word and check it (docs/isa.md 2.3); raises WaveFault."""
    inst = I.decode(word)
    info = I.BY_CODE.get(inst.op)
    if info is None or I.check_fields(info, inst) is not None:
        raise WaveFault(REASON_ILLEGAL)
    for is_vgpr, index, width in I.registers(info, inst):
        if index + width > (vgprs if is_vgpr else sgprs):
            raise WaveFault(REASON_BAD_REGISTER)
    return info, inst


# -- float rules (docs/isa.md 3) -----------------------------------------------------------
_F = struct.Struct("<f")
_U = struct.Struct("<I")
_FLT_MAX = 3.4028234663852886e38


def f32_bits(x: float) -> int:
    """Round a double to binary32 (nearest even, overflow to inf); NaN canonical."""
    if x != x:
        return I.CANONICAL_NAN
    try:
        return _U.unpack(_F.pack(x))[0]
    except OverflowError:       # struct refuses values that round past FLT_MAX
        return 0x7F800000 if x > 0 else 0xFF800000


def bits_f32(u: int) -> float:
    return _F.unpack(_U.pack(u & 0xFFFFFFFF))[0]


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _exp2(x: float) -> float:
    try:
        return math.exp2(x)
    except OverflowError:
        return math.inf


def _log(fn):
    def f(x: float) -> float:
        if x != x or x < 0:
            return math.nan
        if x == 0:
            return -math.inf
        return fn(x)
    return f


def _sqrt(x: float) -> float:
    if x != x or x < 0:
        return math.nan
    return math.sqrt(x)


def _rsqrt(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    if x != x or x < 0:
        return math.nan
    return 1.0 / math.sqrt(x)


def _rcp(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _trig(fn):
    def f(x: float) -> float:
        return math.nan if math.isinf(x) or x != x else fn(x)
    return f


# name -> double function, applied as f32(fn(double(x))).
UNARY_F64 = {
    "v_rcp_f32": _rcp, "v_sqrt_f32": _sqrt, "v_rsqrt_f32": _rsqrt,
    "v_exp_f32": _exp, "v_exp2_f32": _exp2, "v_log_f32": _log(math.log),
    "v_log2_f32": _log(math.log2), "v_sin_f32": _trig(math.sin), "v_cos_f32": _trig(math.cos),
    "v_tanh_f32": math.tanh,
}


def unary_f32(name: str, a: int) -> int:
    return f32_bits(UNARY_F64[name](bits_f32(a)))


def round_f32(name: str, a: int) -> int:
    """v_floor/ceil/trunc/rndne_f32 on bits."""
    x = bits_f32(a)
    if x != x:
        return I.CANONICAL_NAN
    if math.isinf(x) or x == 0:
        return a
    r = {"v_floor_f32": math.floor, "v_ceil_f32": math.ceil, "v_trunc_f32": math.trunc,
         "v_rndne_f32": round}[name](x)
    return f32_bits(math.copysign(float(r), x))      # keeps -0.0 for -0.5 -> -0


def cvt_i32_f32(a: int) -> int:
    x = bits_f32(a)
    if x != x:
        return 0
    if x >= 2147483648.0:
        return 0x7FFFFFFF
    if x <= -2147483648.0:
        return 0x80000000
    return int(x) & 0xFFFFFFFF


def cvt_u32_f32(a: int) -> int:
    x = bits_f32(a)
    if x != x or x <= -1.0:
        return 0
    if x >= 4294967296.0:
        return 0xFFFFFFFF
    return int(x) & 0xFFFFFFFF


def min_f32(a: int, b: int) -> int:
    x, y = bits_f32(a), bits_f32(b)
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x < y else b
    return I.CANONICAL_NAN if bits_f32(r) != bits_f32(r) else r


def max_f32(a: int, b: int) -> int:
    x, y = bits_f32(a), bits_f32(b)
    if x != x:
        r = b
    elif y != y:
        r = a
    else:
        r = a if x > y else b
    return I.CANONICAL_NAN if bits_f32(r) != bits_f32(r) else r


def binary_f32(name: str, a: int, b: int) -> int:
    """v_add/sub/mul/div_f32: f32(double(a) op double(b)) with IEEE special cases."""
    x, y = bits_f32(a), bits_f32(b)
    if name == "v_add_f32":
        r = x + y
    elif name == "v_sub_f32":
        r = x - y
    elif name == "v_mul_f32":
        r = x * y
    else:
        if y == 0:
            r = math.nan if x == 0 or x != x else math.copysign(math.inf, x) * \
                math.copysign(1.0, y)
        else:
            r = x / y
    return f32_bits(r)


def fma_f32(a: int, b: int, c: int) -> int:
    return f32_bits(bits_f32(a) * bits_f32(b) + bits_f32(c))


def mad_f32(a: int, b: int, c: int) -> int:
    """v_mad_f32: v_mul_f32 then v_add_f32, each rounded (docs/isa.md 3)."""
    return binary_f32("v_add_f32", binary_f32("v_mul_f32", a, b), c)


def s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x
