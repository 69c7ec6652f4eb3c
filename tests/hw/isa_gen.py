"""vISA test support: a dispatch rig and a seeded generator of valid, race-free programs.

Used by tests/hw/test_cu_ref.py and by the differential test of the Cython executor:

    rig = Rig(cu_ref.ComputeEngine, ref.PageTable)
    prog = random_program(seed)                  # -> Program (text, grid, block, ...)
    result = rig.run_program(prog)               # memory in rig.mem, rig.ih entries
"""
from __future__ import annotations

import dataclasses
import random
import struct

import numpy as np

from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import PTE_EXEC, PTE_READ, PTE_WRITE
from vgpu import isa as I
from vgpu.asm import CodeObject, assemble

CODE_VA = 0x10_0000
KARG_VA = 0x20_0000
MEM_VA = 0x100_0000
CODE_SIZE = 16 * 4096
MEM_SIZE = 256 * 4096


class Rig:
    """One VM: code (R+X), kernargs (R), one data arena (RW) at MEM_VA; one engine."""

    def __init__(self, engine_cls, page_table_cls, mem_size: int = MEM_SIZE) -> None:
        self.pt = page_table_cls()
        self.ih = InterruptRing()
        self.engine = engine_cls("comp_1.0.0", self.ih)
        self.code = np.zeros(CODE_SIZE, np.uint8)
        self.karg = np.zeros(4096, np.uint8)
        self.mem = np.zeros(mem_size, np.uint8)
        self.pt.map(CODE_VA, self.code, 0, CODE_SIZE, PTE_READ | PTE_EXEC)
        self.pt.map(KARG_VA, self.karg, 0, 4096, PTE_READ)
        self.pt.map(MEM_VA, self.mem, 0, mem_size, PTE_READ | PTE_WRITE)

    def load(self, obj: CodeObject | str) -> CodeObject:
        if isinstance(obj, str):
            obj = assemble(obj)
        self.code[:] = 0
        self.code[:len(obj.code)] = np.frombuffer(obj.code, np.uint8)
        return obj

    def kernargs(self, obj: CodeObject, values: dict) -> None:
        """Write kernel arguments by name: ptr args take a MEM offset (or an absolute VA
        with `va=`), f32 floats, u32/i32 ints."""
        for arg in obj.args:
            v = values[arg.name]
            if arg.kind == "ptr":
                raw = struct.pack("<Q", v)
            elif arg.kind == "f32":
                raw = struct.pack("<f", v)
            else:
                raw = struct.pack("<I", v & 0xFFFFFFFF)
            self.karg[arg.offset:arg.offset + arg.size] = np.frombuffer(raw, np.uint8)

    def run(self, obj: CodeObject | str, grid, block, args: dict | None = None,
            user_data: list[int] | None = None, **kw):
        obj = self.load(obj)
        if args:
            self.kernargs(obj, args)
        if user_data is None:
            user_data = [KARG_VA & 0xFFFFFFFF, KARG_VA >> 32]
        kw.setdefault("sgprs", obj.sgprs)
        kw.setdefault("vgprs", obj.vgprs)
        kw.setdefault("lds_bytes", obj.lds_bytes)
        return self.engine.dispatch(self.pt, CODE_VA + obj.entry, grid=tuple(grid),
                                    block=tuple(block), user_data=user_data, **kw)

    def run_program(self, prog: Program):
        self.mem[:] = 0
        self.mem[:len(prog.mem_init)] = np.frombuffer(prog.mem_init, np.uint8)
        return self.run(prog.text, prog.grid, prog.block,
                        {"inp": MEM_VA, "out": MEM_VA + OUT_OFF, "cnt": MEM_VA + CNT_OFF},
                        user_data=program_user_data(prog))

    def f32(self, off: int, n: int) -> np.ndarray:
        return self.mem[off:off + 4 * n].view(np.float32).copy()

    def u32(self, off: int, n: int) -> np.ndarray:
        return self.mem[off:off + 4 * n].view(np.uint32).copy()

    def put(self, off: int, array: np.ndarray) -> None:
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        self.mem[off:off + raw.nbytes] = raw


# -- random programs ------------------------------------------------------------------------
# Memory layout of a generated program: INP_WORDS random input words at MEM_VA (read
# only), then per thread OUT_SLOTS dwords of output, then a few atomic counters.
INP_WORDS = 1024
CNT_OFF = INP_WORDS * 4
OUT_OFF = CNT_OFF + 4096
OUT_SLOTS = 16
POOL_V = list(range(4, 4 + OUT_SLOTS - 4))        # v4..v15: random values
POOL_S = list(range(24, 36))                       # s24..s35: uniform random values
ATOMIC_COUNTERS = 4
LDS_COUNTER_OFF = 4096                             # above the LDS exchange area
LDS_COUNTERS = 16

_SPECIAL_BITS = [0, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
                 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x4B000000, 0x3F000000, 0xFFFFFFFF,
                 0x7FFFFFFF, 0x80000001, 0x4F800000, 0xCF000000]

_NARROW = [o for o in I.OPCODES if o.code not in I.WIDE_CODES]
_VALU2 = [o.name for o in _NARROW if o.fmt == I.FMT_ALU and o.name.startswith("v_") and
          len(o.operands) == 3 and o.operands[0][1] == I.K_VDST and
          o.name not in ("v_writelane_b32",)]
_VALU1 = [o.name for o in _NARROW if o.fmt == I.FMT_ALU and o.name.startswith("v_") and
          len(o.operands) == 2 and o.operands[0][1] == I.K_VDST]
_VCMP = [o.name for o in _NARROW if o.name.startswith("v_cmp_")]
_SALU2 = [o.name for o in I.OPCODES if o.fmt == I.FMT_ALU and o.name.startswith("s_") and
          len(o.operands) == 3]
_SALU1 = ["s_mov_b32", "s_not_b32", "s_bcnt1_i32", "s_ff1_i32"]
_SCMP = [o.name for o in I.OPCODES if o.name.startswith("s_cmp_")]
# The 64-bit operations (docs/isa.md 4.8), by operand shape.
_WIDE = [o for o in I.OPCODES if o.code in I.WIDE_CODES and o.fmt != I.FMT_MEM]
_F64_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e300, -1e-300, 5e-324, float("inf"),
                float("-inf"), float("nan"), 2.0 ** 63, -2.0 ** 63, 2.0 ** 64, 4503599627370497.5,
                9007199254740993.0, 1.7976931348623157e308, 2.0 ** -1022, 3.0e9, -1.5]
_I64_SPECIAL = [0, 1, (1 << 64) - 1, 1 << 63, (1 << 63) - 1, 1 << 32, (1 << 32) - 1, 1 << 24,
                (1 << 53) + 1, (1 << 24) + 1, 0x8000_0080_0000_0001]
_LDS_ATOMIC = [o.name for o in I.OPCODES if o.name.startswith("ds_") and
               o.operands[0][1] == I.K_VDST_OFF]


@dataclasses.dataclass
class Program:
    text: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    mem_init: bytes
    seed: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def mem_size(self) -> int:
        groups = self.grid[0] * self.grid[1] * self.grid[2]
        return OUT_OFF + groups * self.threads * OUT_SLOTS * 4


class _Gen:
    def __init__(self, seed: int, wide: bool = False) -> None:
        self.r = random.Random(seed)
        self.lines: list[str] = []
        self.labels = 0
        self.wide = wide

    def emit(self, s: str) -> None:
        self.lines.append("    " + s)

    def label(self) -> str:
        self.labels += 1
        return f"L{self.labels}"

    def lit(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.4:
            return str(r.randint(-64, 64))
        if k < 0.7:
            return f"{r.choice(_SPECIAL_BITS):#x}"
        if k < 0.85:
            return repr(float(np.float32(r.uniform(-100, 100))))
        return f"{r.getrandbits(32):#x}"

    def vsrc(self) -> str:
        k = self.r.random()
        if k < 0.6:
            return f"v{self.r.choice(POOL_V + [0, 1, 2])}"
        if k < 0.8:
            return f"s{self.r.choice(POOL_S)}"
        if k < 0.83:
            return self.r.choice(["vcc", "exec", "scc"])
        return self.lit()

    def ssrc(self) -> str:
        k = self.r.random()
        if k < 0.7:
            return f"s{self.r.choice(POOL_S + [16, 17, 18])}"
        if k < 0.75:
            return self.r.choice(["vcc", "exec", "scc"])
        return self.lit()

    def vdst(self) -> str:
        return f"v{self.r.choice(POOL_V)}"

    def sdst(self) -> str:
        return f"s{self.r.choice(POOL_S)}"

    def one_src_literal(self, srcs: list[str]) -> list[str]:
        """At most one distinct literal per instruction."""
        seen = None
        out = []
        for s in srcs:
            if s[0] in "-0123456789." or s in ("inf", "-inf"):
                if seen is None:
                    seen = s
                s = seen
            out.append(s)
        return out

    def pair(self, scalar_ok: bool = True) -> str:
        """A 64-bit operand: a VGPR pair of the pool, or (sources) an SGPR pair."""
        r = self.r
        if scalar_ok and r.random() < 0.2:
            n = r.choice(POOL_S[:-1])
            return f"s[{n}:{n + 1}]"
        n = r.choice(POOL_V[:-1])
        return f"v[{n}:{n + 1}]"

    def set_pair(self) -> None:
        """Put a special 64-bit value (a double or an integer edge) into a pool pair."""
        r = self.r
        if r.random() < 0.6:
            bits = struct.unpack("<Q", struct.pack("<d", r.choice(_F64_SPECIAL)))[0]
        else:
            bits = r.choice(_I64_SPECIAL)
        n = r.choice(POOL_V[:-1])
        self.emit(f"v_mov_b32 v{n}, {bits & 0xFFFFFFFF:#x}")
        self.emit(f"v_mov_b32 v{n + 1}, {bits >> 32:#x}")

    def wide_alu(self) -> None:
        r = self.r
        if r.random() < 0.25:
            return self.set_pair()
        if r.random() < 0.1:                    # a 64-bit load from the input, 8-aligned
            self.emit(f"v_and_b32 v3, v{r.choice(POOL_V)}, {INP_WORDS - 16}")
            self.emit("v_lshl_b32 v3, v3, 2")
            self.emit(f"global_load_dwordx2 {self.pair(False)}, v3, s[20:21], {8 * r.randint(0, 3)}")
            return
        info = r.choice(_WIDE)
        ops = []
        for _, kind in info.operands:
            if kind == I.K_VREG2:
                ops.append(self.pair(False))
            elif kind == I.K_VSRC2:
                ops.append(self.pair())
            elif kind == I.K_VDST:
                ops.append(self.vdst())
            elif kind == I.K_SDST:
                ops.append(r.choice(["vcc", self.sdst()]))
            else:                               # K_VSRC: a 32-bit source (shift amount, f32)
                ops.append(self.vsrc())
        self.emit(f"{info.name} {', '.join(ops)}")

    def alu(self) -> None:
        r = self.r
        if self.wide and r.random() < 0.45:
            return self.wide_alu()
        k = r.random()
        if k < 0.45:
            a, b = self.one_src_literal([self.vsrc(), self.vsrc()])
            self.emit(f"{r.choice(_VALU2)} {self.vdst()}, {a}, {b}")
        elif k < 0.6:
            self.emit(f"{r.choice(_VALU1)} {self.vdst()}, {self.vsrc()}")
        elif k < 0.68:
            name = r.choice(["v_fma_f32", "v_mad_f32", "v_mad_u32"])
            srcs = [f"v{r.choice(POOL_V)}" if r.random() < 0.7 else f"s{r.choice(POOL_S)}"
                    for _ in range(3)]
            self.emit(f"{name} {self.vdst()}, {', '.join(srcs)}")
        elif k < 0.72:
            mask = r.choice(["vcc", f"s{r.choice(POOL_S)}"])
            self.emit(f"v_cndmask_b32 {self.vdst()}, v{r.choice(POOL_V)}, v{r.choice(POOL_V)}, "
                      f"{mask}")
        elif k < 0.8:
            a, b = self.one_src_literal([self.ssrc(), self.ssrc()])
            self.emit(f"{r.choice(_SALU2)} {self.sdst()}, {a}, {b}")
        elif k < 0.84:
            self.emit(f"{r.choice(_SALU1)} {self.sdst()}, {self.ssrc()}")
        elif k < 0.88:
            a, b = self.one_src_literal([self.ssrc(), self.ssrc()])
            self.emit(f"{r.choice(_SCMP)} {a}, {b}")
        elif k < 0.92:
            a, b = self.one_src_literal([self.vsrc(), self.vsrc()])
            self.emit(f"{r.choice(_VCMP)} {r.choice(['vcc', self.sdst()])}, {a}, {b}")
        elif k < 0.95:
            self.emit(f"v_readfirstlane_b32 {self.sdst()}, v{r.choice(POOL_V)}")
        elif k < 0.97:
            self.emit(f"v_readlane_b32 {self.sdst()}, v{r.choice(POOL_V)}, {self.ssrc()}")  # noqa
        else:
            a, b = self.one_src_literal([self.ssrc(), self.ssrc()])
            self.emit(f"v_writelane_b32 {self.vdst()}, {a}, {b}")

    def load(self) -> None:
        # Index into the read-only input: (v & 1023) * 4 (+ a small dword offset, in range).
        r = self.r
        if r.random() < 0.15:
            self.scalar_load()
            return
        v = r.choice(POOL_V)
        self.emit(f"v_and_b32 v3, v{v}, {INP_WORDS - 8}")
        self.emit("v_lshl_b32 v3, v3, 2")
        op = r.choice(["global_load_dword", "global_load_ubyte", "global_load_sbyte",
                       "global_load_ushort", "global_load_sshort"])
        self.emit(f"{op} {self.vdst()}, v3, s[20:21], {4 * r.randint(0, 7)}")

    def scalar_load(self) -> None:
        # s_load_dword[xN] of the input at a random dword offset: into the uniform pool
        # (s24..s35), or for x16 into s48..s63, which only these loads write.
        r = self.r
        n = r.choice([1, 2, 4, 8, 16])
        first = 48 if n == 16 else r.choice([k for k in POOL_S if k + n - 1 <= POOL_S[-1]])
        dst = f"s{first}" if n == 1 else f"s[{first}:{first + n - 1}]"
        name = "s_load_dword" if n == 1 else f"s_load_dwordx{n}"
        self.emit(f"{name} {dst}, s[20:21], {4 * r.randint(0, INP_WORDS - n)}")

    def cross_lane(self) -> None:
        # A permute from random lane addresses (any bits: the low two and those above the
        # lane number are ignored), with an offset.
        r = self.r
        op = r.choice(["ds_bpermute_b32", "ds_permute_b32"])
        self.emit(f"{op} {self.vdst()}, v{r.choice(POOL_V + [0, 18])}, v{r.choice(POOL_V)}, "
                  f"{4 * r.randint(-40, 40)}")

    def lds_atomic(self) -> None:
        # Returning LDS atomics on LDS_COUNTERS dwords above the exchange area: waves of
        # a workgroup run in a fixed order (docs/isa.md 1.2), so the old values are too.
        r = self.r
        self.emit(f"v_and_b32 v17, v{r.choice(POOL_V)}, {4 * (LDS_COUNTERS - 1)}")
        op = r.choice(_LDS_ATOMIC)
        dst = r.choice([self.vdst(), "off"])
        if op == "ds_cmpst_rtn_b32":
            k = r.choice(POOL_V[:-1])
            data = f"v[{k}:{k + 1}]"
        else:
            data = f"v{r.choice(POOL_V)}"
        self.emit(f"{op} {dst}, v17, {data}, {LDS_COUNTER_OFF}")

    def block(self, depth: int) -> None:
        for _ in range(self.r.randint(3, 10)):
            k = self.r.random()
            if k < 0.7 or depth >= 2:
                k = self.r.random()
                if k < 0.78:
                    self.alu()
                elif k < 0.86:
                    self.load()
                elif k < 0.93:
                    self.cross_lane()
                else:
                    self.lds_atomic()
            elif k < 0.85:
                self.if_else(depth)
            else:
                self.loop(depth)

    def if_else(self, depth: int) -> None:
        save = f"s{40 + depth}"
        a, b = self.one_src_literal([self.vsrc(), self.vsrc()])
        els, end = self.label(), self.label()
        self.emit(f"{self.r.choice(_VCMP)} vcc, {a}, {b}")
        self.emit(f"s_and_saveexec_b32 {save}, vcc")
        self.emit(f"s_cbranch_execz {els}")
        self.block(depth + 1)
        self.lines.append(f"{els}:")
        self.emit(f"s_andn2_b32 exec, {save}, exec")
        self.emit(f"s_cbranch_execz {end}")
        self.block(depth + 1)
        self.lines.append(f"{end}:")
        self.emit(f"s_mov_b32 exec, {save}")

    def loop(self, depth: int) -> None:
        counter = f"s{44 + depth}"
        top = self.label()
        self.emit(f"s_mov_b32 {counter}, {self.r.randint(1, 4)}")
        self.lines.append(f"{top}:")
        self.block(depth + 1)
        self.emit(f"s_sub_u32 {counter}, {counter}, 1")
        self.emit(f"s_cmp_gt_u32 {counter}, 0")
        self.emit(f"s_cbranch_scc1 {top}")

    def program(self) -> str:
        r = self.r
        head = [".kernel random", ".arg inp ptr", ".arg out ptr", ".arg cnt ptr",
                ".sgprs 64", ".vgprs 20",
                f".lds {LDS_COUNTER_OFF + 4 * LDS_COUNTERS}"]
        e = self.emit
        e("s_load_dwordx4 s[20:23], s[0:1]")           # inp, out
        e("s_load_dwordx2 s[38:39], s[0:1], 16")       # cnt
        for s in POOL_S:
            e(f"s_mov_b32 s{s}, {self.lit()}")
        # thread slot: ((wg linear) * threads + local linear) * OUT_SLOTS * 4 -> v19
        e("s_mul_i32 s36, s18, s2")                     # s2 = gy, s3 = gx, s4 = threads
        e("s_add_u32 s36, s36, s17")
        e("s_mul_i32 s36, s36, s3")
        e("s_add_u32 s36, s36, s16")
        e("s_mul_i32 s36, s36, s4")
        e("v_mul_lo_u32 v19, v2, s6")                   # s5 = bx, s6 = bx*by
        e("v_mad_u32 v19, v1, s5, v19")
        e("v_add_u32 v19, v19, v0")
        e("v_mov_b32 v18, v19")                         # local linear id
        e("v_add_u32 v19, v19, s36")
        e(f"v_mul_lo_u32 v19, v19, {OUT_SLOTS * 4}")
        for v in POOL_V:
            e(f"v_mov_b32 v{v}, {self.lit()}")
            e(f"v_xor_b32 v{v}, v{v}, v{r.choice([0, 1, 2, 18])}")
        self.block(0)
        # LDS exchange: each lane writes its slot, barrier, reads its neighbour's.
        e("v_lshl_b32 v16, v18, 2")
        e(f"ds_write_b32 v16, v{r.choice(POOL_V)}")
        e("s_barrier")
        e("v_add_u32 v17, v18, 1")
        e("v_rem_u32 v17, v17, s4")
        e("v_lshl_b32 v17, v17, 2")
        e(f"ds_read_b32 v{r.choice(POOL_V)}, v17")
        if r.random() < 0.5:        # a quad: the slot and the next three (in the LDS)
            e("v_and_b32 v17, v17, 0xfc")
            q = r.choice(POOL_V[:-3])
            e(f"ds_read_b128 v[{q}:{q + 3}], v17")
        if r.random() < 0.5:        # a pair: two dwords up to 255 apart, in either order
            p = r.choice(POOL_V[:-1])
            e(f"ds_read2_b32 v[{p}:{p + 1}], v17 offset0:{r.randint(0, 255)} "
              f"offset1:{r.randint(0, 255)}")
        e("s_barrier")
        self.block(0)
        # Commutative atomics on shared counters (no return values).
        e(f"v_mov_b32 v17, {4 * r.randint(0, ATOMIC_COUNTERS - 1)}")
        e(f"global_atomic_add_u32 off, v17, v{r.choice(POOL_V)}, s[38:39]")
        if self.wide:               # 64-bit counters (integer adds, min and max commute)
            e("v_mov_b32 v17, 32")
            e(f"global_atomic_add_u64 off, v17, {self.pair(False)}, s[38:39]")
            k = r.randint(0, 3)
            e(f"v_mov_b32 v17, {40 + 8 * k}")
            e(f"global_atomic_{('max_i64', 'max_u64', 'min_i64', 'min_u64')[k]} off, v17, "
              f"{self.pair(False)}, s[38:39]")
        # Store every pool register and a few scalars in the thread's slots.
        for k, v in enumerate(POOL_V):
            e(f"global_store_dword v19, v{v}, s[22:23], {4 * k}")
        for k in range(len(POOL_V), OUT_SLOTS):
            e(f"v_mov_b32 v17, s{r.choice(POOL_S)}")
            e(f"global_store_dword v19, v17, s[22:23], {4 * k}")
        if self.wide:
            e(f"global_store_dwordx2 v19, {self.pair(False)}, s[22:23], {4 * OUT_SLOTS - 8}")
        e("s_endpgm")
        return "\n".join(head + self.lines) + "\n"


def random_program(seed: int, wide: bool = False) -> Program:
    """A valid, race-free program: same memory result in any workgroup order.  `wide`
    mixes in the 64-bit operations (docs/isa.md 4.8)."""
    r = random.Random(seed ^ 0x5EED)
    grid = (r.randint(1, 3), r.randint(1, 2), 1)
    bx = r.choice([1, 7, 32, 33, 64, 96])
    block = (bx, r.choice([1, 1, 2]) if bx <= 48 else 1, 1)
    text = _Gen(seed, wide).program()
    mem = np.random.default_rng(seed).integers(0, 1 << 32, INP_WORDS, dtype=np.uint32)
    prog = Program(text, grid, block, mem.tobytes(), seed)
    return prog


def program_user_data(prog: Program) -> list[int]:
    """user_data of a generated program: kernargs, grid and block sizes (see program())."""
    gx, gy, _ = prog.grid
    bx, by, _ = prog.block
    return [KARG_VA & 0xFFFFFFFF, KARG_VA >> 32, gy, gx, prog.threads, bx, bx * by]
