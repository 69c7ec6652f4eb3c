"""`umd.vectorize`: Numba's `@vectorize([...], target='cuda')`, a GPU ufunc
(numba/cuda/vectorizers.py, numba/np/ufunc/deviceufunc.py `UFuncMechanism.call`).

    @umd.vectorize(['float32(float32, float32)', 'float64(float64, float64)'], target='cuda')
    def rel_diff(x, y):
        return 2 * (x - y) / (x + y)

    rel_diff(a, b)              # numpy in -> numpy out; a DeviceArray in -> a DeviceArray out
    rel_diff(da, db, out=dout, stream=s)

Signatures are Numba's strings (`'float32(float32, float32)'`; Numba's type names:
`f4`, `float64`, `i4`, `int64`, `u8` = uint64...), umd's types called as Numba's are
(`f32(f32, f32)`, a `umd.types.Signature`), or, with no list, the function's
annotations (`def f(x: f32, y: f32) -> f32`). Each becomes a generated kernel
(umd/kernel_source.py) that computes `out[k] = fn(a[k], b[k])` for every element: the
function inlined as its expression when it is one (unrolled 8 times when cheap), else
called as a device function; each block maps one segment of the elements
(docs/umd.md, "Numba's host helpers").

The call follows Numba's: the signature whose argument types equal the array
arguments' dtypes exactly (numpy's casting='no'), Python scalars taking the type of
the only signature that fits them (a TypeError when none or several fit); arrays
broadcast against each other as numpy's do (multi-dimensional ones go through the
kernel flat); a scalar goes to the kernel as a scalar argument. The result is a
DeviceArray when any argument is one, else a numpy array; `out=` (a DeviceArray or a
numpy array of the result's shape and type) receives it and is returned; `stream=`
is the stream of the copies and launches. A DeviceArray that must be broadcast to a
larger shape is broadcast through the host (umd's arrays have no zero strides).
"""
from __future__ import annotations

import inspect
import re

import numpy as np

from .kernel_source import (KERNEL_TYPES, cheap_expression, define, device_function, function_namespace,
                            inline_expression, kernel_globals, offset_views, shadowed_builtins)
from .types import PtrType, ScalarType, Signature, split_type_list

# Numba's type names (numba/core/types/__init__.py) as numpy dtypes.
NUMBA_TYPES = {
    "float32": "float32", "f4": "float32", "float64": "float64", "f8": "float64", "double": "float64",
    "int32": "int32", "i4": "int32", "uint32": "uint32", "u4": "uint32", "int64": "int64", "i8": "int64",
    "uint64": "uint64", "u8": "uint64", "intp": "int64", "uintp": "uint64", "int8": "int8", "i1": "int8",
    "uint8": "uint8", "u1": "uint8", "int16": "int16", "i2": "int16", "uint16": "uint16", "u2": "uint16",
    "boolean": "bool", "b1": "bool", "bool_": "bool",
}
_SIG = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$")
_ARG = re.compile(r"^\s*(\w+)\s*(?:\[(.*)\])?\s*$")


def parse_type(text, what: str) -> tuple[np.dtype, int]:
    """One argument type -> (dtype, ndim): ``'float32'``, ``'f4[:]'``, ``'float64[:, :]'``,
    a umd type (``f32``, ``f32[:]``) or a numpy dtype."""
    if isinstance(text, ScalarType):
        return text.dtype, 0
    if isinstance(text, PtrType):
        return text.elem.dtype, max(text.ndim, 1)
    if not isinstance(text, str):
        try:
            return np.dtype(text), 0
        except TypeError:
            raise TypeError(f"{what}: {text!r} is not a type") from None
    m = _ARG.match(text)
    if not m or m.group(1) not in NUMBA_TYPES:
        raise TypeError(f"{what}: unknown type {text!r} (Numba's names: {', '.join(NUMBA_TYPES)})")
    dims = [] if m.group(2) is None else [d.strip() for d in m.group(2).split(",")]
    if any(d not in (":", "::1") for d in dims):
        raise TypeError(f"{what}: {text!r}: array types are written float32[:], float32[:, :]...")
    ndim = len(dims)
    return np.dtype(NUMBA_TYPES[m.group(1)]), ndim


def parse_signature(sig, what: str) -> tuple[list[tuple[np.dtype, int]], tuple[np.dtype, int] | None]:
    """A signature -> ([(dtype, ndim) per argument], (dtype, ndim) of the result or
    None for ``void``). Takes a string, a umd.types.Signature or a tuple of argument types."""
    if isinstance(sig, Signature):
        ret = None if sig.return_type is None else parse_type(sig.return_type, what)
        return [parse_type(a, what) for a in sig.args], ret
    if isinstance(sig, (tuple, list)):
        return [parse_type(a, what) for a in sig], None
    if not isinstance(sig, str):
        raise TypeError(f"{what}: a signature is a string such as 'float32(float32, float32)', "
                        f"not {sig!r}")
    m = _SIG.match(sig)
    if not m:
        raise TypeError(f"{what}: cannot read the signature {sig!r} (write 'float32(float32, float32)')")
    ret = None if m.group(1) in ("void", "none") else parse_type(m.group(1), what)
    return [parse_type(a, what) for a in split_type_list(m.group(2))], ret


def annotated_signature(fn, what: str):
    """The signature a function's annotations give (every argument and the return)."""
    params = list(inspect.signature(fn).parameters)
    ann = dict(getattr(fn, "__annotations__", {}))
    if not params or any(p not in ann for p in params) or "return" not in ann:
        raise TypeError(f"{what}: give signatures (['float32(float32, float32)']) or annotate every "
                        f"argument and the return of {fn.__name__} (def {fn.__name__}(x: f32, y: f32) -> f32)")
    return Signature(ann["return"], tuple(ann[p] for p in params))


def _tname(dtype: np.dtype) -> str:
    return KERNEL_TYPES[np.dtype(dtype).name]


BLOCK = 32                      # threads per block: one wave (see below)
UNROLL = 8                      # block-strides per iteration of the main loop (cheap functions)
CHUNK = BLOCK * UNROLL
MAX_BLOCKS = 256

# Block b maps the segment [b * seg, min((b + 1) * seg, n)) (seg: launch_blocks()),
# its threads a block-width apart: a wave's accesses stay in one page, and the loop's
# counter is uniform with constant steps. A block is one wave, as reduce's (umd/reduce.py):
# an engine worker runs a workgroup's waves in turn, so 8 waves each walked the whole
# segment and took a TLB miss per page each (8x the misses, 4x the engine's time over
# 16M floats in a mount). Its unrolled copies read (and write) the
# arrays and views of them that start 1, 2... block-widths later (a0, a0_1, a0_2...) at
# one index, so every access shares one byte offset: an element costs its loads, its
# store and the function, plus an add and a shift per iteration (the vISA's loads take
# no constant offset from the compiler, docs/umd-compiler.md 11).
_VEC_SOURCE = """
def {name}({params}, out: {R}[:]{out_views}):
    t = umd.threadIdx.x
    n = out.size
    seg = ((n + {G} - 1) // {G} + {C} - 1) // {C} * {C}
    start = umd.blockIdx.x * seg
    end = min(start + seg, n)
    for base in range(start, end - {CU} + 1, {CU}):
        k = base + t
{body}
    for j in range(start + max(end - start, 0) // {CU} * {CU} + t, end, {B}):
{tail}
"""
_LOCALS = ("t", "n", "seg", "start", "end", "base", "k", "j", "out", *(f"out_{u}" for u in range(UNROLL)), "umd",
           "fn")


def launch_blocks(n: int) -> int:
    """Blocks of the launch over ``n`` elements, as the kernel cuts its segments."""
    seg = -(-(-(-n // MAX_BLOCKS)) // CHUNK) * CHUNK
    return max(1, -(-n // seg))


def _view(name: str, u: int) -> str:
    return name if u == 0 else f"{name}_{u}"


def _element(fn, u: int, nargs: int, scalars, taken: set, indent: str, k: str = "k") -> str:
    """The statements of unrolled copy ``u`` (element ``k`` of the views starting u
    block-widths in): argument reads into x0, x1..., then the store of fn's value."""
    lines, names = [], []
    for a in range(nargs):
        if scalars[a]:
            names.append(f"a{a}")
        else:
            lines.append(f"x{a} = {_view(f'a{a}', u)}[{k}]")
            names.append(f"x{a}")
    value = inline_expression(fn, names, taken) or f"fn({', '.join(names)})"
    lines.append(f"{_view('out', u)}[{k}] = {value}")
    return "\n".join(indent + ln for ln in lines)


def ufunc_kernel(fn, in_types, ret_type, scalars: tuple[bool, ...]):
    """The generated kernel of one signature; ``scalars[k]`` makes argument k a scalar
    argument instead of an array. Its arguments are :func:`ufunc_args`' (``.unroll``
    views of each array)."""
    from .kernel import Kernel
    names = kernel_globals(fn)
    nargs = len(in_types)
    taken = set(_LOCALS) | {f"x{k}" for k in range(nargs)} | {k for k in names if k not in function_namespace(fn)} \
        | shadowed_builtins(fn) | {_view(f"a{a}", u) for a in range(nargs) for u in range(UNROLL)}
    args = [f"a{a}" if scalars[a] else f"x{a}" for a in range(nargs)]
    unroll = UNROLL if cheap_expression(inline_expression(fn, args, taken)) else 1
    params = []
    for k, (dt, scalar) in enumerate(zip(in_types, scalars)):
        T = _tname(dt)
        params.append(f"a{k}: {T}" if scalar else f"a{k}: {T}[:]")
        if not scalar:
            params += [f"{_view(f'a{k}', u)}: Ptr[{T}]" for u in range(1, unroll)]
    R = _tname(ret_type)
    out_views = "".join(f", {_view('out', u)}: Ptr[{R}]" for u in range(1, unroll))
    body = "\n".join(_element(fn, u, nargs, scalars, taken, " " * 8) for u in range(unroll))
    tail = _element(fn, 0, nargs, scalars, taken, " " * 8, "j")
    name = f"vectorize_{fn.__name__}_{'_'.join(_tname(d) for d in in_types)}"
    source = _VEC_SOURCE.format(name=name, params=", ".join(params), R=R, out_views=out_views, G=MAX_BLOCKS,
                                C=CHUNK, CU=BLOCK * unroll, B=BLOCK, body=body, tail=tail)
    pyfn = define(source, name, f"umd.vectorize {name}", names)
    kernel = Kernel(pyfn, {}, {})
    kernel.unroll = unroll
    return kernel


def ufunc_args(kernel, values: list, scalars, out) -> list:
    """The arguments of a ufunc kernel: each array argument (1-D, of the result's
    size) followed by its views 1, 2... block-widths in, the scalars, then the result
    and its views (the arrays themselves when too short for the main loop, which then
    never runs)."""
    def views(a):
        if kernel.unroll == 1:
            return []
        if out.size < BLOCK * kernel.unroll:
            return offset_views(a, 0, kernel.unroll - 1)
        return offset_views(a, BLOCK, kernel.unroll - 1)
    args = []
    for v, scalar in zip(values, scalars):
        args.append(v)
        if not scalar:
            args += views(v)
    return args + [out] + views(out)


def _is_device(obj) -> bool:
    from .array import DeviceArray, is_cuda_array
    return isinstance(obj, DeviceArray) or (not isinstance(obj, np.ndarray) and is_cuda_array(obj))


def resolve(types: list[tuple], args, what: str) -> int:
    """Index of the signature the arguments select (Numba's UFuncMechanism._resolve_signature)."""
    actual = [np.dtype(a.dtype) if (isinstance(a, np.ndarray) or _is_device(a)) else None for a in args]
    scalars = [k for k, t in enumerate(actual) if t is None]
    matches = []
    if scalars:         # scalars typed as numpy types them first (np.float32(1) is float32)
        matches = [i for i, sig in enumerate(types)
                   if all(sig[k] == (t if t is not None else np.asarray(args[k]).dtype)
                          for k, t in enumerate(actual))]
    if not matches:
        matches = [i for i, sig in enumerate(types)
                   if all(t is None or sig[k] == t for k, t in enumerate(actual))]
    given = ", ".join(t.name if t is not None else f"scalar {type(args[k]).__name__}"
                      for k, t in enumerate(actual))
    known = "; ".join("(" + ", ".join(d.name for d in sig) + ")" for sig in types)
    if not matches:
        raise TypeError(f"{what}: no signature takes ({given}): array arguments must have exactly "
                        f"the types of one signature (numpy's casting='no', as Numba's GPU ufuncs); "
                        f"known: {known}")
    if len(matches) > 1:
        raise TypeError(f"{what}: ({given}) fits several signatures ({known}): give the scalars "
                        "a numpy type (np.float32(2.0))")
    return matches[0]


class CUDAUFunc:
    """A GPU ufunc: ``f(*arrays, out=None, stream=0)``; see the module docstring."""

    def __init__(self, fn, signatures) -> None:
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        what = f"umd.vectorize {fn.__name__}"
        self._what = what
        self._fn = device_function(fn, what)
        self.types, self.results = [], []
        nargs = len(inspect.signature(getattr(self._fn, "fn", fn)).parameters)
        for sig in signatures:
            args, ret = parse_signature(sig, what)
            if ret is None or any(nd for _, nd in args) or ret[1]:
                raise TypeError(f"{what}: {sig!r}: vectorize signatures take and return scalars "
                                "(use umd.guvectorize for arrays)")
            if len(args) != nargs:
                raise TypeError(f"{what}: {sig!r} has {len(args)} arguments, {fn.__name__} takes {nargs}")
            for dt, _ in args + [ret]:
                if dt.name not in ("float32", "float64", "int32", "uint32", "int64", "uint64"):
                    raise TypeError(f"{what}: {sig!r}: {dt.name} is not a kernel scalar type "
                                    "(float32, float64, int32, uint32, int64, uint64)")
            self.types.append(tuple(dt for dt, _ in args))
            self.results.append(ret[0])
        self.nin, self.nout = nargs, 1
        self._kernels: dict = {}

    def _kernel(self, index: int, scalars: tuple[bool, ...]):
        key = (index, scalars)
        if key not in self._kernels:
            self._kernels[key] = ufunc_kernel(self._fn, self.types[index], self.results[index], scalars)
        return self._kernels[key]

    def __call__(self, *args, out=None, stream=0, **kws):
        from .array import DeviceArray, as_cuda_array, empty, to_device
        from .stream import current_stream
        what = self._what
        if kws:
            raise TypeError(f"{what}: unknown keyword arguments {sorted(kws)} (out=, stream=)")
        if len(args) != self.nin:
            raise TypeError(f"{what} takes {self.nin} arguments, got {len(args)}")
        args = [as_cuda_array(a) if _is_device(a) and not isinstance(a, DeviceArray) else a for a in args]
        index = resolve(self.types, args, what)
        types, rtype = self.types[index], self.results[index]
        any_device = any(isinstance(a, DeviceArray) for a in args)
        s = current_stream(stream or None)
        arrays = [k for k, a in enumerate(args) if isinstance(a, (np.ndarray, DeviceArray))]
        shape = np.broadcast_shapes(*[tuple(args[k].shape) for k in arrays]) if arrays else (1,)
        n = int(np.prod(shape, dtype=np.int64))
        values, scalars = [], []
        for k, a in enumerate(args):
            if k not in arrays:
                values.append(types[k].type(a))
                scalars.append(True)
                continue
            if tuple(a.shape) != shape:
                host = a.copy_to_host(stream=s) if isinstance(a, DeviceArray) else a
                a = np.broadcast_to(host, shape)
            if isinstance(a, DeviceArray):
                a = (a if a.is_c_contiguous() else a.copy(s)).ravel()
            else:
                a = to_device(np.ascontiguousarray(a).reshape(-1), stream=s)
            values.append(a)
            scalars.append(False)
        dev_out = None
        if out is not None:
            if _is_device(out) and not isinstance(out, DeviceArray):
                out = as_cuda_array(out)
            if tuple(out.shape) != shape or np.dtype(out.dtype) != rtype:
                raise ValueError(f"{what}: out= is a {np.dtype(out.dtype).name} array of shape "
                                 f"{tuple(out.shape)}; the result is {rtype.name} of shape {shape}")
            if isinstance(out, DeviceArray) and out.is_c_contiguous():
                dev_out = out.ravel()
        if dev_out is None:
            dev_out = empty(n, rtype, stream=s)
        if n:
            kernel = self._kernel(index, tuple(scalars))
            kernel[launch_blocks(n), BLOCK, s](*ufunc_args(kernel, values, scalars, dev_out))
        if isinstance(out, DeviceArray):
            if dev_out.ptr != out.ptr or not out.is_c_contiguous():
                out.copy_from_host(dev_out.copy_to_host(stream=s).reshape(shape), s)
            return out
        if out is not None:
            out[...] = dev_out.copy_to_host(stream=s).reshape(shape)
            return out
        if any_device:
            return dev_out.reshape(shape)
        return dev_out.copy_to_host(stream=s).reshape(shape)

    def __repr__(self) -> str:
        return f"<umd.vectorize {self.__name__}>"


def vectorize(signatures=None, target: str = "cuda", **options):
    """Decorator: ``@umd.vectorize(['float32(float32, float32)'], target='cuda')``; bare
    ``@umd.vectorize`` or a call without signatures takes them from the annotations."""
    if callable(signatures) and not isinstance(signatures, (str, Signature)):
        return vectorize()(signatures)
    _check_target(target, "umd.vectorize")
    _check_options(options, "umd.vectorize")
    if isinstance(signatures, (str, Signature)):
        signatures = [signatures]

    def wrap(fn):
        pyfn = getattr(fn, "fn", fn)
        sigs = list(signatures) if signatures else [annotated_signature(pyfn, "umd.vectorize")]
        return CUDAUFunc(fn, sigs)
    return wrap


def _check_target(target, what: str) -> None:
    if target not in ("cuda", "gpu"):
        raise ValueError(f"{what}: target={target!r}: umd builds GPU ufuncs only (target='cuda'); "
                         "for a CPU ufunc use numpy or numba")


def _check_options(options: dict, what: str) -> None:
    # Numba's options that change nothing here; anything else is refused.
    known = {"identity", "nopython", "cache", "fastmath", "writable_args", "is_dynamic"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{what}: unknown option {unknown[0]!r} (accepted, with no effect: "
                        f"{', '.join(sorted(known))})")
