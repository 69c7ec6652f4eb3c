"""Built-ins of the kernel language (docs/umd-compiler.md 3).

Thread geometry (`thread_idx`, `block_idx`, `block_dim`, `grid_dim`, each with
.x/.y/.z), `shared_array`, `syncthreads`, the atomics and the `math` namespace. They are
compile-time markers: the compiler recognises them inside a @umd.kernel; touching them
from plain Python raises `RuntimeError` saying so.
"""
from __future__ import annotations

_OUTSIDE = "is only meaningful inside a @umd.kernel function (it is compiled, not run)"


class Dim3Marker:
    """`thread_idx` / `block_idx` / `block_dim` / `grid_dim`: `.x`, `.y`, `.z` in a kernel."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __getattr__(self, attr):
        raise RuntimeError(f"umd.{self.name}.{attr} {_OUTSIDE}")

    def __repr__(self) -> str:
        return f"umd.{self.name}"


class Intrinsic:
    """A function the compiler lowers to instructions (`name` is its IR operation)."""

    def __init__(self, name: str, qualname: str) -> None:
        self.name, self.qualname = name, qualname

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.qualname}() {_OUTSIDE}")

    def __repr__(self) -> str:
        return self.qualname


class MathNamespace:
    """`umd.math`: float32 functions, one vISA instruction each (fmin/fmax: IEEE-style
    NaN handling of v_min_f32/v_max_f32, docs/isa.md 3)."""

    FUNCTIONS = ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "fabs", "fmin",
                 "fmax", "floor")

    def __init__(self) -> None:
        for fn in self.FUNCTIONS:
            setattr(self, fn, Intrinsic(f"math.{fn}", f"umd.math.{fn}"))

    def __repr__(self) -> str:
        return "umd.math"


thread_idx = Dim3Marker("thread_idx")
block_idx = Dim3Marker("block_idx")
block_dim = Dim3Marker("block_dim")
grid_dim = Dim3Marker("grid_dim")

shared_array = Intrinsic("shared_array", "umd.shared_array")    # shared_array(f32, N)
syncthreads = Intrinsic("syncthreads", "umd.syncthreads")
atomic_add = Intrinsic("atomic_add", "umd.atomic_add")          # (array, index, value) -> old
atomic_max = Intrinsic("atomic_max", "umd.atomic_max")          # (array, index, value) -> old
atomic_cas = Intrinsic("atomic_cas", "umd.atomic_cas")          # (array, index, cmp, value) -> old
math = MathNamespace()

__all__ = ["thread_idx", "block_idx", "block_dim", "grid_dim", "shared_array",
           "syncthreads", "atomic_add", "atomic_max", "atomic_cas", "math"]
