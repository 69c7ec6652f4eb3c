"""Built-ins of the kernel language (docs/umd-compiler.md 3).

Thread geometry (`thread_idx`, `block_idx`, `block_dim`, `grid_dim`, each with
.x/.y/.z, also under CUDA's names `threadIdx`, `blockIdx`, `blockDim`, `gridDim`),
`grid(ndim)` and `gridsize(ndim)`, `shared_array` / `shared.array`, `local.array`,
`syncthreads`, the atomics (`atomic.add`, `.sub`, `.min`, `.max`, `.nanmin`,
`.nanmax`, `.exch`, `.cas`, `.compare_and_swap`, and the older `atomic_add`,
`atomic_max`, `atomic_cas`), `fma`, the `math` namespace, the warp intrinsics
(`shfl_sync`, `shfl_up_sync`, `shfl_down_sync`, `shfl_xor_sync`, `ballot_sync`,
`any_sync`, `all_sync`, `activemask`, `syncwarp`, `laneid`, `warpsize`) and the bit
functions (`popc`, `ffs`, `clz`, `brev`), cooperative groups (`cg.this_grid()`).
Numba's spellings
(`cuda.X` -> `umd.X`) are the ones given here. They are compile-time markers: the
compiler recognises them inside a @umd.kernel; touching them from plain Python raises
`RuntimeError` saying so.
"""
from __future__ import annotations

from vgpu.isa import WAVE_SIZE

_OUTSIDE = "is only meaningful inside a @umd.kernel function (it is compiled, not run)"


class Dim3Marker:
    """`thread_idx` / `block_idx` / `block_dim` / `grid_dim`: `.x`, `.y`, `.z` in a kernel."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __getattr__(self, attr):
        raise RuntimeError(f"umd.{self.name}.{attr} {_OUTSIDE}")

    def __repr__(self) -> str:
        return f"umd.{self.name}"


class LaneIdMarker:
    """`laneid`: the thread's lane in its wave (0..warpsize-1), a value in a kernel."""

    def __int__(self):
        raise RuntimeError(f"umd.laneid {_OUTSIDE}")

    def __repr__(self) -> str:
        return "umd.laneid"


class Intrinsic:
    """A function the compiler lowers to instructions (`name` is its IR operation)."""

    def __init__(self, name: str, qualname: str) -> None:
        self.name, self.qualname = name, qualname

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.qualname}() {_OUTSIDE}")

    def __repr__(self) -> str:
        return self.qualname


class Namespace:
    """`umd.math`, `umd.atomic`, `umd.shared`, `umd.local`: intrinsics by attribute."""

    def __init__(self, qualname: str, prefix: str, names) -> None:
        self._qualname = qualname
        for name in names:
            setattr(self, name, Intrinsic(f"{prefix}.{name}", f"{qualname}.{name}"))

    def __repr__(self) -> str:
        return self._qualname


class MathNamespace(Namespace):
    """`umd.math`: float32 functions (CUDA's float ones: `floor`, `ceil`, `trunc` return
    f32 here, where Python's `math.floor` returns an integer). Most are one vISA
    instruction; `pow` and `log10` are short sequences (docs/umd-compiler.md 3)."""

    FUNCTIONS = ("exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tanh",
                 "fabs", "fmin", "fmax", "floor", "ceil", "trunc", "pow", "copysign", "isnan",
                 "isinf", "isfinite", "tan", "atan", "atan2", "asin", "acos", "sinh", "cosh",
                 "asinh", "acosh", "atanh", "hypot", "expm1", "log1p", "radians", "degrees",
                 "erf", "erfc", "gamma", "lgamma", "fmod", "cbrt", "frexp", "ldexp")

    def __init__(self) -> None:
        super().__init__("umd.math", "math", self.FUNCTIONS)


thread_idx = Dim3Marker("thread_idx")
block_idx = Dim3Marker("block_idx")
block_dim = Dim3Marker("block_dim")
grid_dim = Dim3Marker("grid_dim")
threadIdx, blockIdx, blockDim, gridDim = thread_idx, block_idx, block_dim, grid_dim   # CUDA's names

grid = Intrinsic("grid", "umd.grid")                # grid(ndim): the thread's absolute position
gridsize = Intrinsic("gridsize", "umd.gridsize")    # gridsize(ndim): the grid's shape in threads
shared_array = Intrinsic("shared_array", "umd.shared_array")    # shared_array(f32, N) / (shape=, dtype=)
shared = Namespace("umd.shared", "shared", ("array",))          # shared.array(shape, dtype)
const = Namespace("umd.const", "const", ("array_like",))        # const.array_like(ndarray)
local = Namespace("umd.local", "local", ("array",))             # local.array(shape, dtype)
# Cooperative groups (Numba's cuda.cg): g = cg.this_grid(); g.sync(), g.size, g.thread_rank()
cg = Namespace("umd.cg", "cg", ("this_grid",))


class GridGroup:
    """The type of ``umd.cg.this_grid()`` in a kernel (Numba's ``cuda.cg.GridGroup``):
    ``g.sync()``, ``g.size``, ``g.thread_rank()``, compiled by the kernel compiler. It
    exists on the host only to be named; a grid group is made in kernels."""

    sync = Intrinsic("cg.sync", "umd.cg.GridGroup.sync")


cg.GridGroup = GridGroup
syncthreads = Intrinsic("syncthreads", "umd.syncthreads")
# (pred) -> i32: a barrier that also counts / ands / ors a predicate over the block
syncthreads_count = Intrinsic("syncthreads_count", "umd.syncthreads_count")
syncthreads_and = Intrinsic("syncthreads_and", "umd.syncthreads_and")
syncthreads_or = Intrinsic("syncthreads_or", "umd.syncthreads_or")
# memory fences: every access is performed in order and visible at once (docs/umd-compiler.md 3.8)
threadfence = Intrinsic("threadfence", "umd.threadfence")
threadfence_block = Intrinsic("threadfence_block", "umd.threadfence_block")
threadfence_system = Intrinsic("threadfence_system", "umd.threadfence_system")
fma = Intrinsic("math.fma", "umd.fma")                          # fma(a, b, c): v_fma_f32
cbrt = Intrinsic("math.cbrt", "umd.cbrt")                       # cbrt(x): the real cube root
selp = Intrinsic("selp", "umd.selp")                            # selp(pred, a, b): a if pred else b
atomic = Namespace("umd.atomic", "atomic", ("add", "sub", "min", "max", "nanmin", "nanmax",
                                             "exch", "cas", "compare_and_swap", "and_", "or_",
                                             "xor", "inc", "dec"))
atomic_add = Intrinsic("atomic.add", "umd.atomic_add")          # (array, index, value) -> old
atomic_max = Intrinsic("atomic.max", "umd.atomic_max")          # (array, index, value) -> old
atomic_cas = Intrinsic("atomic.cas", "umd.atomic_cas")          # (array, index, cmp, value) -> old
math = MathNamespace()

# Warp (wave) intrinsics, Numba's names.  The wave is the ISA's: warpsize lanes.
warpsize = WAVE_SIZE                                            # a constant, also on the host
laneid = LaneIdMarker()
shfl_sync = Intrinsic("warp.shfl_sync", "umd.shfl_sync")        # (mask, value, src_lane)
shfl_up_sync = Intrinsic("warp.shfl_up_sync", "umd.shfl_up_sync")        # (mask, value, delta)
shfl_down_sync = Intrinsic("warp.shfl_down_sync", "umd.shfl_down_sync")  # (mask, value, delta)
shfl_xor_sync = Intrinsic("warp.shfl_xor_sync", "umd.shfl_xor_sync")     # (mask, value, lane_mask)
ballot_sync = Intrinsic("warp.ballot_sync", "umd.ballot_sync")  # (mask, predicate) -> u32
any_sync = Intrinsic("warp.any_sync", "umd.any_sync")           # (mask, predicate) -> bool
all_sync = Intrinsic("warp.all_sync", "umd.all_sync")           # (mask, predicate) -> bool
match_any_sync = Intrinsic("warp.match_any_sync", "umd.match_any_sync")   # (mask, value) -> u32
match_all_sync = Intrinsic("warp.match_all_sync", "umd.match_all_sync")   # -> (u32, bool)
activemask = Intrinsic("warp.activemask", "umd.activemask")     # () -> u32
lanemask_lt = Intrinsic("warp.lanemask_lt", "umd.lanemask_lt")  # () -> u32: the lanes below
syncwarp = Intrinsic("warp.syncwarp", "umd.syncwarp")           # (mask=0xffffffff)
popc = Intrinsic("bit.popc", "umd.popc")                        # set bits
ffs = Intrinsic("bit.ffs", "umd.ffs")                           # 1 + lowest set bit, 0 for 0
clz = Intrinsic("bit.clz", "umd.clz")                           # leading zeros (32 for 0)
brev = Intrinsic("bit.brev", "umd.brev")                        # bits reversed

# Used by the compiler's own library (umd/compiler/libdevice.py), not documented for kernels.
_bits = Intrinsic("bits", "umd.intrinsics._bits")               # f32 -> its bits as u32
_from_bits = Intrinsic("from_bits", "umd.intrinsics._from_bits")    # u32 bits -> f32
_rint = Intrinsic("math.rndne", "umd.intrinsics._rint")         # round to nearest even (f32, f64)
_bits64 = Intrinsic("bits64", "umd.intrinsics._bits64")         # f64 -> its bits as u64
_from_bits64 = Intrinsic("from_bits64", "umd.intrinsics._from_bits64")  # u64 bits -> f64

__all__ = ["thread_idx", "block_idx", "block_dim", "grid_dim", "threadIdx", "blockIdx", "blockDim",
           "gridDim", "grid", "gridsize", "shared_array", "shared", "const", "local", "cg", "syncthreads",
           "syncthreads_count", "syncthreads_and", "syncthreads_or", "threadfence", "threadfence_block",
           "threadfence_system", "fma", "cbrt", "selp",
           "atomic", "atomic_add", "atomic_max", "atomic_cas", "math", "warpsize", "laneid",
           "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "ballot_sync",
           "any_sync", "all_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt",
           "syncwarp", "popc", "ffs", "clz", "brev"]
