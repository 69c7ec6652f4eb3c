"""`umd.reduce` (also `umd.Reduce`): Numba's `@cuda.reduce` (numba/cuda/kernels/reduction.py).

    @umd.reduce
    def sum_reduce(a, b):
        return a + b

    total = sum_reduce(x)                     # a host or device 1-D array -> a numpy scalar
    sum_reduce(dx, res=dres, init=1.0, stream=s)   # the result into dres[0], nothing copied back

The binary function becomes a device function (the host may still call it as Python)
and is compiled, once per element type, into a generated kernel (umd/kernel_source.py):

1. Each block (one wave) takes one segment of the array (at most MAX_BLOCKS of them)
   and each of its threads folds every BLOCK-th element of it into one value (its first element,
   then `fn(acc, x)`); the block folds its threads' values in LDS as a tree
   (`fn(buf[t], buf[t + s])` with s halving; a thread past the end takes no part,
   so no identity element is needed), and thread 0 writes the block's value.
2. One block then folds the partial values the same way; it writes `fn(r, init)` into
   the result (`res[0]`, or a one-element array copied back).

`init` is folded in once, as Numba does (`reduce_op(partials[0], init)`), and is
converted to the array's dtype first; the reduction of an empty array (or `size=0`)
returns `init` without launching anything (and leaves `res` as it is), as Numba's
does. The order of the folds is not sequential: `fn` must be associative and
commutative, as for Numba. Returns None when `res` is given, else the result as a
numpy scalar of the array's dtype (the call then waits for the kernels).
"""
from __future__ import annotations

import numpy as np

from .kernel_source import (SCALAR_TYPES, cheap_expression, define, device_function, function_namespace,
                            inline_expression, kernel_globals, kernel_type, offset_views, shadowed_builtins)

BLOCK = 32                     # threads per block: one wave (vgpu.isa.WAVE_SIZE), see below
MAX_BLOCKS = 32                # of the first pass: enough to keep the CUs' workers busy, and
                               # at most BLOCK, so the one pass-2 block's segment (the kernel
                               # computes it with MAX_BLOCKS) holds every partial value
UNROLL = 32                    # block-strides per iteration of the main loop (cheap functions)
CHUNK = BLOCK * UNROLL

# Block b folds the segment [b * seg, min((b + 1) * seg, n)) (seg: plan()): its threads
# read it a block-width apart, so a wave's loads stay in one page (a grid-wide stride would take
# a TLB miss per load). A block is one wave because an engine worker runs a workgroup's
# waves one after another up to a barrier: with 8 waves each walked the whole segment and
# took its own TLB miss for every page (8x the misses: half of a 16M first pass's time in
# a mount's daemon); one wave walks each page once. The main loop's counter is uniform (one
# scalar compare per iteration) and its steps constants; its unrolled loads read `src` and
# the views s1, s2... of it that start 1, 2... block-widths later at one index, so all of
# them share one byte offset (one add and one shift per iteration: the vISA's loads take no
# constant offset from the compiler, docs/umd-compiler.md 11): a load and fn per element.
_SOURCE = """
def reduce_{T}(src: {T}[:], {views}out: Ptr[{T}], init: {T}, use_init: i32):
    buf = umd.shared.array({B}, {T})
    t = umd.threadIdx.x
    n = src.size
    seg = ((n + {G} - 1) // {G} + {B} - 1) // {B} * {B}     # plan(): built from the extent, so
    start = umd.blockIdx.x * seg                           # the compiler sees indices >= 0
    end = min(start + seg, n)
    m = end - start
    acc = src[start + t if t < m else start]        # an idle thread's value is never read
    for base in range(start + {B}, end - {C} + 1, {C}):
{loads}
    for j in range(start + {B} + max(m - {B}, 0) // {C} * {C} + t, end, {B}):
        x = src[j]
        acc = {tail}
    buf[t] = acc
    umd.syncthreads()
    count = min({B}, m)
    s = {B} // 2
    while s > 0:
        if t < s and t + s < count:
            y = buf[t]
            z = buf[t + s]
            buf[t] = {tree}
        umd.syncthreads()
        count = min(count, s)
        s //= 2
    if t == 0:
        r = buf[0]
        if use_init != 0:
            r = {last}
        out[umd.blockIdx.x] = r
"""
_LOCALS = ("src", "k", "n", "seg", "out", "init", "use_init", "buf", "t", "start", "end", "m", "acc", "base", "x", "j",
           "count", "s", "y", "z", "r", "umd", "fn")


def _call(fn, taken: set, a: str, b: str) -> str:
    """``fn(a, b)`` in the kernel's text: its expression when it is one, else a call."""
    return inline_expression(fn, [a, b], taken) or f"fn({a}, {b})"


def kernel_names(fn) -> dict:
    """The generated kernel's globals: the function's own names (for an inlined
    expression), then umd, the types and the function."""
    return kernel_globals(fn)


def reduce_kernel(fn, dtype):
    """The generated kernel that reduces arrays of ``dtype`` with device function ``fn``
    (launched as in :meth:`Reduce.__call__`; tests run it on the executors directly)."""
    from .kernel import Kernel
    T = kernel_type(dtype, "umd.reduce")
    if T not in SCALAR_TYPES:
        raise TypeError(f"umd.reduce: arrays of {np.dtype(dtype).name} are not reduced (kernels "
                        f"compute in {', '.join(SCALAR_TYPES)}); convert the array first")
    names = kernel_names(fn)
    taken = set(_LOCALS) | {k for k in names if k not in function_namespace(fn)} | shadowed_builtins(fn)
    unroll = UNROLL if cheap_expression(inline_expression(fn, ["acc", "x"], taken)) else 1
    views = "".join(f"s{u}: Ptr[{T}], " for u in range(1, unroll))
    taken |= {f"s{u}" for u in range(1, unroll)}
    loads = ["        k = base + t"] + [
        f"        x = {'src' if u == 0 else f's{u}'}[k]\n        acc = {_call(fn, taken, 'acc', 'x')}"
        for u in range(unroll)]
    source = _SOURCE.format(T=T, B=BLOCK, G=MAX_BLOCKS, C=BLOCK * unroll, loads="\n".join(loads), views=views,
                            tail=_call(fn, taken, "acc", "x"), tree=_call(fn, taken, "y", "z"),
                            last=_call(fn, taken, "r", "init"))
    pyfn = define(source, f"reduce_{T}", f"umd.reduce {fn.__name__} {T}", names)
    kernel = Kernel(pyfn, {}, {})
    kernel.unroll = unroll
    return kernel


def source_views(kernel, arr) -> list:
    """The arrays a reduce kernel reads: ``arr``, then the views of it that start 1, 2...
    block-widths in (``arr`` itself where it is too short for the main loop, which then
    never runs)."""
    if arr.size < BLOCK * kernel.unroll:
        return [arr] + offset_views(arr, 0, kernel.unroll - 1)
    return [arr] + offset_views(arr, BLOCK, kernel.unroll - 1)


def plan(n: int) -> tuple[int, int]:
    """(blocks, segment length) of the first pass over ``n`` elements, as the kernel
    computes the segment: n / MAX_BLOCKS rounded up to a multiple of BLOCK, so at most
    MAX_BLOCKS blocks, none of them empty."""
    seg = -(-(-(-n // MAX_BLOCKS)) // BLOCK) * BLOCK
    return -(-n // seg), seg


class Reduce:
    """A reduction by a binary function, compiled once per element type and kept."""

    def __init__(self, functor) -> None:
        self._functor = device_function(functor, "umd.reduce")
        self._kernels: dict = {}
        self.__name__ = getattr(functor, "__name__", "reduce")
        self.__doc__ = getattr(functor, "__doc__", None)

    def _compile(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self._kernels:
            self._kernels[dtype] = reduce_kernel(self._functor, dtype)
        return self._kernels[dtype]

    def __call__(self, arr, size=None, res=None, init=0, stream=0):
        """Reduce the 1-D host or device array ``arr`` (its first ``size`` elements);
        see the module docstring."""
        from .array import DeviceArray, to_device
        from .stream import current_stream, default_stream
        if not hasattr(arr, "ndim") or not hasattr(arr, "dtype"):
            arr = np.asarray(arr)
        if arr.ndim != 1:
            raise TypeError(f"umd.reduce: only 1-D arrays are reduced (Numba's rule), got {arr.ndim}-D")
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
                raise ValueError(f"umd.reduce: size must be an int >= 0, not {size!r}")
            arr = arr[:size]
        init = np.dtype(arr.dtype).type(init)
        if arr.size < 1:
            return init
        kernel = self._compile(arr.dtype)
        if stream:
            s = current_stream(stream)
        elif isinstance(arr, DeviceArray):
            s = arr.stream if arr.stream is not None else default_stream(arr.device)
        else:
            s = current_stream()
        if res is not None and np.dtype(res.dtype) != np.dtype(arr.dtype):
            raise TypeError(f"umd.reduce: res is a {np.dtype(res.dtype).name} array, the reduction "
                            f"of a {np.dtype(arr.dtype).name} array gives {np.dtype(arr.dtype).name}")
        if not isinstance(arr, DeviceArray):
            arr = to_device(np.ascontiguousarray(arr), stream=s)
        elif not arr.is_c_contiguous():
            arr = arr.copy(s)
        out = res if res is not None else _result_array(arr.dtype, s)
        n = arr.size
        blocks, _ = plan(n)
        if blocks == 1:
            kernel[1, BLOCK, s](*source_views(kernel, arr), out, init, 1)
        else:
            from .array import empty
            partials = empty(blocks, arr.dtype, stream=s)
            kernel[blocks, BLOCK, s](*source_views(kernel, arr), partials, init, 0)
            kernel[1, BLOCK, s](*source_views(kernel, partials), out, init, 1)
        if res is not None:
            return None
        return out.copy_to_host(stream=s)[0]

    def __repr__(self) -> str:
        return f"<umd.reduce {self.__name__}>"


def _result_array(dtype, stream):
    from .array import empty
    return empty(1, dtype, stream=stream)
