"""Type markers of the kernel language (docs/umd-compiler.md 2).

    from umd import f32, i32, u32, Ptr

    @umd.kernel
    def scale(n: u32, a: f32, x: Ptr[f32], m: f32[:, :]): ...

`f32`, `i32`, `u32` and the 64-bit `f64`, `i64`, `u64` annotate scalar arguments and,
called inside a kernel, convert (`f32(i)`, `i64(x)`); `float32`, `int32`, `uint32`,
`float64`, `int64` and `uint64` are the same markers under Numba's names. The small
types `u8`, `i8`, `u16`, `i16` and `b1` (numpy's uint8, int8, uint16, int16, bool;
also named `uint8`, `int8`, `uint16`, `int16`, `boolean`) are array element types only:
a loaded element is an int32 (a b1 one a bool), a stored value wraps to the element's
width (docs/umd-compiler.md 2). `Ptr[T]` is a device pointer to elements of T, any array of T seen
flat (a device array is passed directly); `T[:]`, `T[:, :]`, `T[:, :, :]` (Numba's
spelling) are C-contiguous arrays of exactly 1, 2 or 3 dimensions, indexed `m[i, j]`
row-major. They are compile-time markers: the compiler reads them, and the launch
checks each array argument's dtype (and dimensions) against them.
"""
from __future__ import annotations


class ScalarType:
    """A scalar type: `kind` is 'i32', 'u32', 'f32', 'bool' (32 bits), 'i64', 'u64',
    'f64' (64 bits: a register pair) or the element-only 'u8', 'i8', 'u16', 'i16', 'b1'
    (1 or 2 bytes in memory, held widened in a 32-bit register: `register`)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @property
    def is_float(self) -> bool:
        return self.kind in ("f32", "f64")

    @property
    def is_int(self) -> bool:
        return self.kind in ("i32", "u32", "bool", "i64", "u64") or self.small

    @property
    def signed(self) -> bool:
        return self.kind in ("i32", "i64", "i8", "i16")

    @property
    def small(self) -> bool:
        """An 8- or 16-bit (or boolean) element type: memory only, never a register's."""
        return self.kind in SMALL_BYTES

    @property
    def register(self) -> "ScalarType":
        """The type a loaded element has: i32 for u8/i8/u16/i16, bool for b1, else itself."""
        if not self.small:
            return self
        return bool_ if self.kind == "b1" else i32

    @property
    def wide(self) -> bool:
        """A 64-bit type (held in a register pair)."""
        return self.kind in ("i64", "u64", "f64")

    @property
    def itemsize(self) -> int:
        return 8 if self.wide else SMALL_BYTES.get(self.kind, 4)

    def __eq__(self, other) -> bool:
        return isinstance(other, ScalarType) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return self.kind

    def narrow(self, value) -> int:
        """An 8- or 16-bit (or bool) argument's value as its 32-bit kernarg slot holds it:
        wrapped to the width as numpy's astype wraps (300 -> 44 for u8, 200 -> -56 for
        i8) and sign- or zero-extended; a b1 is 0 or 1 (Python's truth)."""
        if self.kind == "b1":
            return int(bool(value))
        bits = 8 * SMALL_BYTES[self.kind]
        v = int(value) & ((1 << bits) - 1)
        return v - (1 << bits) if self.signed and v >> (bits - 1) else v

    def __call__(self, *args):
        if args and all(isinstance(a, (ScalarType, PtrType)) for a in args):
            return Signature(self, args)        # Numba's float32(float32, float32)
        raise TypeError(f"umd.{self.kind}(...) converts values inside a @umd.kernel only; "
                        "use numpy (np.float32, np.int32, np.uint32) in host code")

    @property
    def dtype(self):
        """The numpy dtype of this element type."""
        import numpy as np
        return np.dtype(NUMPY_NAMES[self.kind])

    def __getitem__(self, dims) -> "PtrType":
        """`f32[:]`, `f32[:, :]`, `f32[:, :, :]`: an array type of 1-3 dimensions."""
        dims = dims if isinstance(dims, tuple) else (dims,)
        if self.kind == "bool" or not 1 <= len(dims) <= 3 or not all(
                isinstance(d, slice) and d.start is None and d.stop is None and d.step in (None, 1)
                for d in dims):
            raise TypeError(f"array types are f32[:], f32[:, :] or f32[:, :, :] (f32, i32, u32, "
                            f"f64, i64, u64, u8, i8, u16, i16 or b1), not {self!r}[{dims!r}]")
        return PtrType(self, len(dims))


NUMPY_NAMES = {"f32": "float32", "i32": "int32", "u32": "uint32", "f64": "float64",
               "i64": "int64", "u64": "uint64", "u8": "uint8", "i8": "int8", "u16": "uint16",
               "i16": "int16", "b1": "bool"}
SMALL_BYTES = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "b1": 1}


class PtrType:
    """A 64-bit device address of `elem` elements (elem.itemsize bytes each). `ndim` 0 is `Ptr[T]`
    (any array of T, seen flat); 1-3 is `T[:]`, `T[:, :]`, `T[:, :, :]` (exactly that
    many dimensions, C order)."""

    __slots__ = ("elem", "ndim")

    def __init__(self, elem: ScalarType, ndim: int = 0) -> None:
        self.elem = elem
        self.ndim = ndim

    kind = "ptr"
    is_float = is_int = False

    def __eq__(self, other) -> bool:
        return isinstance(other, PtrType) and other.elem == self.elem and other.ndim == self.ndim

    def __hash__(self) -> int:
        return hash(("ptr", self.elem, self.ndim))

    def __repr__(self) -> str:
        if self.ndim:
            return f"{self.elem!r}[{', '.join([':'] * self.ndim)}]"
        return f"Ptr[{self.elem!r}]"


class Signature:
    """A function signature written as Numba writes one with its types, ``f32(f32, f32)``
    (umd.vectorize, umd.guvectorize take it): ``return_type`` and the ``args`` types."""

    __slots__ = ("return_type", "args")

    def __init__(self, return_type, args) -> None:
        self.return_type, self.args = return_type, tuple(args)

    def __repr__(self) -> str:
        return f"{self.return_type!r}({', '.join(map(repr, self.args))})"


class _PtrFactory:
    def __getitem__(self, elem) -> PtrType:
        if not isinstance(elem, ScalarType) or elem.kind == "bool":
            raise TypeError(f"Ptr[...] takes f32, i32, u32, f64, i64, u64, u8, i8, u16, i16 or b1, "
                            f"not {elem!r}")
        return PtrType(elem)

    def __repr__(self) -> str:
        return "Ptr"


f32 = ScalarType("f32")
i32 = ScalarType("i32")
u32 = ScalarType("u32")
f64 = ScalarType("f64")
i64 = ScalarType("i64")
u64 = ScalarType("u64")
u8 = ScalarType("u8")
i8 = ScalarType("i8")
u16 = ScalarType("u16")
i16 = ScalarType("i16")
b1 = ScalarType("b1")           # a np.bool_ element (one byte, 0 or 1)
bool_ = ScalarType("bool")      # comparisons and boolean logic; not an argument type
Ptr = _PtrFactory()
float32, int32, uint32 = f32, i32, u32      # Numba's names
float64, int64, uint64 = f64, i64, u64
uint8, int8, uint16, int16, boolean = u8, i8, u16, i16, b1

__all__ = ["f32", "i32", "u32", "f64", "i64", "u64", "float32", "int32", "uint32", "float64",
           "int64", "uint64", "u8", "i8", "u16", "i16", "b1", "uint8", "int8", "uint16", "int16", "boolean",
           "Ptr", "ScalarType", "PtrType", "Signature"]


def split_type_list(text: str) -> list[str]:
    """The types of a signature's argument list, 'float32[:, :], int32' ->
    ['float32[:, :]', ' int32']: split at the commas outside brackets (Numba's
    signature strings, umd.vectorize and umd.declare_device)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out
