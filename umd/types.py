"""Type markers of the kernel language (docs/umd-compiler.md 2).

    from umd import f32, i32, u32, Ptr

    @umd.kernel
    def scale(n: u32, a: f32, x: Ptr[f32]): ...

`f32`, `i32` and `u32` annotate scalar arguments and, called inside a kernel, convert
(`f32(i)`, `i32(x)`); `Ptr[T]` is a device pointer to elements of T (a device array is
passed directly). They are compile-time markers: the compiler reads them, nothing
else does.
"""
from __future__ import annotations


class ScalarType:
    """A 32-bit scalar type: `kind` is 'i32', 'u32', 'f32' or 'bool'."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @property
    def is_float(self) -> bool:
        return self.kind == "f32"

    @property
    def is_int(self) -> bool:
        return self.kind in ("i32", "u32", "bool")

    @property
    def signed(self) -> bool:
        return self.kind == "i32"

    def __eq__(self, other) -> bool:
        return isinstance(other, ScalarType) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return self.kind

    def __call__(self, value=None):
        raise TypeError(f"umd.{self.kind}(...) converts values inside a @umd.kernel only; "
                        "use numpy (np.float32, np.int32, np.uint32) in host code")


class PtrType:
    """`Ptr[elem]`: a 64-bit device address of `elem` elements (4 bytes each)."""

    __slots__ = ("elem",)

    def __init__(self, elem: ScalarType) -> None:
        self.elem = elem

    kind = "ptr"
    is_float = is_int = False

    def __eq__(self, other) -> bool:
        return isinstance(other, PtrType) and other.elem == self.elem

    def __hash__(self) -> int:
        return hash(("ptr", self.elem))

    def __repr__(self) -> str:
        return f"Ptr[{self.elem!r}]"


class _PtrFactory:
    def __getitem__(self, elem) -> PtrType:
        if not isinstance(elem, ScalarType) or elem.kind == "bool":
            raise TypeError(f"Ptr[...] takes f32, i32 or u32, not {elem!r}")
        return PtrType(elem)

    def __repr__(self) -> str:
        return "Ptr"


f32 = ScalarType("f32")
i32 = ScalarType("i32")
u32 = ScalarType("u32")
bool_ = ScalarType("bool")      # comparisons and boolean logic; not an argument type
Ptr = _PtrFactory()

__all__ = ["f32", "i32", "u32", "Ptr", "ScalarType", "PtrType"]
