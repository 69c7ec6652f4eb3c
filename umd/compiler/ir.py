"""The typed IR: structured control flow over mutable virtual registers.

A kernel is a `Function`: arguments, shared arrays and a body, a list of statements.
Straight-line work is `Inst` (three-address: `dst = op(args...)`); control flow stays
structured (`If`, `Loop`, `Break`, `Continue`, `Return`, and `Region` / `Exit` for the
body of an inlined device function and its `return`s) because the vISA has no
structured-control instructions and the code generator saves and restores EXEC around
each construct (docs/isa.md 5).  Variables are not SSA: a Python local is one `Var`
assigned wherever the source assigns it; expression temporaries are `Var`s assigned
once.  The uniformity pass sets each `Var.cls` ('s' scalar, 'v' vector), register
allocation its `reg`.
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np

from umd.types import PtrType, ScalarType, bool_, f32, f64, i32, i64, u32, u64

# Operations.  Pure ones may be folded or deleted when their result is unused.
BINARY = {"add", "sub", "mul", "div", "idiv", "rem", "and", "or", "xor", "shl", "shr",
          "min", "max"}
UNARY = {"neg", "not", "lnot", "fabs", "floor", "ceil", "trunc", "rndne", "exp", "exp2", "log",
         "log2", "sqrt", "rsqrt", "sin", "cos", "tanh"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
CONVERT = {"cvt"}                 # dst type from dst.type, source type from args[0]
BITCAST = {"bitcast"}             # the same 32 bits as another type (f32 <-> u32)
# fma(a, b, c); mad(a, b, c): a * b rounded, + c (contract.py); select(cond, if_true, if_false)
TERNARY = {"fma", "mad", "select"}
# Bit counting: popc, ffs (1 + lowest set bit, 0 for 0), clz, brev (docs/umd-compiler.md 3.9).
BITS = {"popc", "ffs", "clz", "brev"}
# Wave operations: their value depends on the other lanes and on EXEC (which lanes run
# them), so an optimisation may delete an unused one but never merge two or move one
# into other control flow.  laneid(); activemask(); ballot(pred) -> the mask of the
# active lanes where pred holds; shfl(byte_address, value) -> value of lane address / 4.
WAVE = {"laneid", "activemask", "ballot", "shfl"}
PURE = BINARY | UNARY | COMPARE | CONVERT | BITCAST | TERNARY | BITS | WAVE | {"mov", "load"}
SIDE_EFFECTS = {"store", "atomic", "barrier", "grid_barrier", "trap"}


@dataclasses.dataclass(eq=False)
class Var:
    name: str
    type: ScalarType | PtrType
    id: int
    local: bool = False           # a named Python variable (may be assigned many times)
    arg: "ArgSpec | None" = None  # set for kernel arguments (defined by the prologue)
    cls: str = "s"                # 's' (SGPR) or 'v' (VGPR), set by uniformity analysis
    reg: int | None = None        # register number, set by register allocation

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclasses.dataclass(frozen=True)
class Const:
    """A constant of `type`. A Python float literal is f32 (`value` rounded to binary32)
    and keeps its double in `exact`, which it takes when an f64 operand promotes it."""

    value: int | float | bool
    type: ScalarType
    exact: float | None = dataclasses.field(default=None, compare=False)

    def bits(self) -> int:
        """The register bits: 32, or 64 for a 64-bit type."""
        if self.type == f32:
            return struct.unpack("<I", struct.pack("<f", float(self.value)))[0]
        if self.type == f64:
            return struct.unpack("<Q", struct.pack("<d", float(self.value)))[0]
        return int(self.value) & (0xFFFFFFFFFFFFFFFF if self.type.wide else 0xFFFFFFFF)

    def __repr__(self) -> str:
        if self.type.is_float:
            return f"{float(self.value)!r}" + ("" if self.type == f32 else ":f64")
        return f"{int(self.value)}:{self.type.kind}"


@dataclasses.dataclass(frozen=True)
class Special:
    """A hardware value: 'thread_idx.x' (v0..v2) or 'block_idx.x' (s16..s18)."""

    name: str
    type: ScalarType = u32

    @property
    def cls(self) -> str:
        return "v" if self.name.startswith("thread_idx") else "s"

    def __repr__(self) -> str:
        return f"@{self.name}"


@dataclasses.dataclass
class SharedArray:
    name: str
    elem: ScalarType
    count: int
    offset: int                   # byte offset in LDS
    storage: ScalarType | None = None   # a small type (u8...) held one per LDS word in elem

    def __repr__(self) -> str:
        return f"lds:{self.name}"


@dataclasses.dataclass(frozen=True)
class VecType:
    """`n` consecutive registers of `elem`: the result of an LDS quad or pair load
    (lds_quads.py, lds_pairs.py)."""

    elem: ScalarType
    n: int
    wide = False
    is_float = False

    def __repr__(self) -> str:
        return f"{self.elem!r}x{self.n}"


@dataclasses.dataclass(frozen=True)
class Part:
    """Register `k` of the vector `var` read as a scalar operand (lds_quads.py,
    lds_pairs.py)."""

    var: Var
    k: int

    @property
    def type(self) -> ScalarType:
        return self.var.type.elem

    @property
    def cls(self) -> str:
        return self.var.cls

    def __repr__(self) -> str:
        return f"{self.var!r}[{self.k}]"


Operand = Var | Const | Special | Part


def wrap32(value: int, t: ScalarType) -> int:
    """``value`` as the 32-bit register holds it: two's complement for i32, modulo 2^32
    otherwise."""
    value &= 0xFFFFFFFF
    if t == i32 and value & 0x80000000:
        value -= 1 << 32
    return value


def wrap64(value: int, t: ScalarType) -> int:
    """``value`` as a register pair holds it: two's complement for i64, modulo 2^64 for u64."""
    value &= 0xFFFFFFFFFFFFFFFF
    if t == i64 and value >> 63:
        value -= 1 << 64
    return value


def width(t) -> int:
    """Registers a value of type ``t`` takes: 2 for pointers and 64-bit types, n for a
    VecType."""
    if isinstance(t, VecType):
        return t.n
    return 2 if isinstance(t, PtrType) or t.wide else 1


def to_f32(value: float) -> float:
    """``value`` rounded to binary32 (round to nearest even), as a Python float."""
    with np.errstate(over="ignore"):        # past FLT_MAX: inf, as the hardware rounds
        return float(np.float32(value))


def const(value, t: ScalarType) -> Const:
    """The IR constant of type ``t`` for a Python number: f32 rounded to binary32,
    bool as 0/1, integers wrapped to 32 bits (:func:`wrap32`). The frontend makes
    literals with it and the optimiser the results it folds, so both agree bit for bit."""
    if t == f32:
        return Const(to_f32(float(value)), f32)
    if t == f64:
        return Const(float(value), f64)
    if t == bool_:
        return Const(int(bool(value)), bool_)
    if t.wide:
        return Const(wrap64(int(value), t), t)
    return Const(wrap32(int(value), t), t)


def float_literal(value: float) -> Const:
    """A Python float in kernel code: f32, remembering its double (see Const)."""
    return Const(to_f32(value), f32, exact=float(value))


@dataclasses.dataclass
class ArgSpec:
    """One entry of the kernarg segment (the contract with umd.launch)."""

    name: str
    kind: str                     # 'i32' | 'u32' | 'f32' | 'i64' | 'u64' | 'f64' | 'ptr'
    offset: int
    size: int
    dtype: str = ""               # ptr: the element type ('f32', 'i32', 'u64'...); '' = unchecked
    ndim: int = 0                 # ptr: 1-3 for T[:], T[:, :], T[:, :, :]; 0 for Ptr[T] (any, flat)


@dataclasses.dataclass(eq=False)
class Inst:
    op: str
    dst: Var | None
    args: list
    line: int
    array: Var | SharedArray | None = None   # load/store/atomic
    kind: str = ""                            # atomic: add/max/cas
    # load/store/atomic after address lowering (compiler/addressing.py): args[0] is the
    # byte offset (index * 4) instead of the element index, plus `offset` bytes (LDS only)
    scaled: bool = False
    offset: int = 0
    offset1: int = 0                          # a pair load (lds_pairs.py): the second's

    def uses(self) -> list[Var]:
        out = [a.var if isinstance(a, Part) else a for a in self.args if isinstance(a, (Var, Part))]
        if isinstance(self.array, Var):
            out.append(self.array)
        return out


@dataclasses.dataclass(eq=False)
class If:
    cond: Operand
    then: list
    else_: list
    line: int


@dataclasses.dataclass(eq=False)
class Loop:
    """`header` runs first each iteration and computes `cond`; the loop leaves when it
    is false; then `body`; `continue` jumps to `latch` (a for-range's increment)."""

    header: list
    cond: Operand
    body: list
    latch: list
    line: int
    divergent: bool = False       # set by uniformity analysis


@dataclasses.dataclass(eq=False)
class Break:
    line: int


@dataclasses.dataclass(eq=False)
class Continue:
    line: int


@dataclasses.dataclass(eq=False)
class Return:
    line: int


@dataclasses.dataclass(eq=False)
class Region:
    """A block that `Exit(region)` leaves from anywhere inside it, through nested loops:
    the body of an inlined device function, whose `return`s are Exits."""

    body: list
    line: int
    name: str = ""
    divergent: bool = False       # set by uniformity analysis: an Exit under a vector condition


@dataclasses.dataclass(eq=False)
class Exit:
    region: Region
    line: int


Stmt = Inst | If | Loop | Break | Continue | Return | Region | Exit


@dataclasses.dataclass
class Function:
    name: str
    args: list[Var]
    body: list
    shared: list[SharedArray]
    source_file: str
    first_line: int
    lds_bytes: int = 0


def sub_blocks(st) -> tuple:
    """The statement lists nested in ``st``, in program order (none for a plain
    statement): what a pass that only recurses visits."""
    if isinstance(st, If):
        return st.then, st.else_
    if isinstance(st, Loop):
        return st.header, st.body, st.latch
    if isinstance(st, Region):
        return (st.body,)
    return ()


def own_lists(block: list):
    """``block`` and the statement lists of its ifs and regions, nested ones too, but
    not those of its loops: the code of one loop iteration, for the loop passes."""
    yield block
    for st in block:
        if isinstance(st, (If, Region)):
            for sub in sub_blocks(st):
                yield from own_lists(sub)


def _is_pair(v) -> bool:
    return isinstance(v, Var) and isinstance(v.type, VecType) and v.type.n == 2


def walk(block: list):
    """Every statement, depth first, in program order."""
    for st in block:
        yield st
        for sub in sub_blocks(st):
            yield from walk(sub)


def def_counts(block: list) -> dict:
    """How many instructions assign each Var in ``block`` (nested blocks included)."""
    counts: dict = {}
    for st in walk(block):
        if isinstance(st, Inst) and st.dst is not None:
            counts[st.dst] = counts.get(st.dst, 0) + 1
    return counts


def stable_vars(fn: Function) -> set:
    """Vars that hold one value from their definition on, wherever they are read: the
    kernel arguments the body never assigns, temporaries assigned once, and locals
    assigned once at the top level of the body (outside every branch and loop).  The
    optimisations that reuse or move a computation (cse.py, licm.py) rely on this."""
    counts = def_counts(fn.body)
    top = {st.dst for st in fn.body if isinstance(st, Inst) and st.dst is not None}
    out = {a for a in fn.args if counts.get(a, 0) == 0}
    for v, n in counts.items():
        if n == 1 and v.arg is None and (not v.local or v in top):
            out.add(v)
    return out


def next_var_id(fn: Function) -> int:
    """An id above every Var's in ``fn`` (for the Vars a pass creates)."""
    ids = [a.id for a in fn.args]
    for st in walk(fn.body):
        if isinstance(st, Inst):
            ids.extend(v.id for v in st.uses())
            if st.dst is not None:
                ids.append(st.dst.id)
    return max(ids, default=0) + 1


def format_function(fn: Function) -> str:
    """The IR as text (the `shaders` debug dump)."""
    lines = [f"kernel {fn.name}(" + ", ".join(
        f"{a!r}: {a.type!r}" + (f" [{a.cls}{a.reg}]" if a.reg is not None else "")
        for a in fn.args) + ")"]
    for sa in fn.shared:
        lines.append(f"  shared {sa.name}: {sa.elem!r}[{sa.count}] @ lds+{sa.offset}")

    def var(v):
        if isinstance(v, Var) and v.reg is not None:
            return f"{v!r}.{v.type!r}[{v.cls}{v.reg}]"
        if isinstance(v, Var):
            return f"{v!r}.{v.type!r}"
        return repr(v)

    def emit(block, depth):
        pad = "  " * depth
        for st in block:
            if isinstance(st, Inst):
                lhs = f"{var(st.dst)} = " if st.dst is not None else ""
                extra = f"{st.array!r}, " if st.array is not None else ""
                if st.scaled and _is_pair(st.dst):
                    extra += f"bytes+{st.offset}/{st.offset1} "
                elif st.scaled:
                    extra += f"bytes+{st.offset} " if st.offset else "bytes "
                op = st.op + (f".{st.kind}" if st.kind else "")
                lines.append(f"{pad}{lhs}{op} {extra}" + ", ".join(var(a) for a in st.args)
                             + f"    ; line {st.line}")
            elif isinstance(st, If):
                lines.append(f"{pad}if {var(st.cond)}:")
                emit(st.then, depth + 1)
                if st.else_:
                    lines.append(f"{pad}else:")
                    emit(st.else_, depth + 1)
            elif isinstance(st, Loop):
                lines.append(f"{pad}loop{' (divergent)' if st.divergent else ''}:")
                emit(st.header, depth + 1)
                lines.append(f"{pad}  while {var(st.cond)}")
                emit(st.body, depth + 1)
                if st.latch:
                    lines.append(f"{pad}  latch:")
                    emit(st.latch, depth + 2)
            elif isinstance(st, Region):
                lines.append(f"{pad}region {st.name}{' (divergent)' if st.divergent else ''}:")
                emit(st.body, depth + 1)
            elif isinstance(st, Exit):
                lines.append(f"{pad}exit {st.region.name}")
            else:
                lines.append(f"{pad}{type(st).__name__.lower()}")

    emit(fn.body, 1)
    return "\n".join(lines) + "\n"


__all__ = ["Var", "Const", "Special", "SharedArray", "ArgSpec", "Inst", "If", "Loop",
           "Break", "Continue", "Return", "Region", "Exit", "Function", "walk", "def_counts",
           "stable_vars", "next_var_id", "format_function",
           "bool_", "f32", "i32", "u32", "f64", "i64", "u64", "width", "float_literal"]
