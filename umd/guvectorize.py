"""`umd.guvectorize`: Numba's `@guvectorize([...], layout, target='cuda')`, a generalized
GPU ufunc (numba/cuda/vectorizers.py `CUDAGeneralizedUFunc`, numba/np/ufunc/deviceufunc.py).

    @umd.guvectorize(['void(float32[:], float32[:], float32[:])'], '(n),(n)->()', target='cuda')
    def dot(x, y, r):
        s = 0.0
        for i in range(len(x)):
            s += x[i] * y[i]
        r[0] = s

    dot(a, b)                   # a, b of shape (rows, n) -> shape (rows,)
    dot(da, db, dout)           # the outputs given positionally (or out=), as in Numba

The layout names each argument's core dimensions; the leading ones, the loop
dimensions, are the same for every argument (an input with none is broadcast), and
one thread runs the function for each loop index, on row views of the arrays
(`fn(a[i], b[i], r[i])`, docs/umd-compiler.md 3.2). A `()` argument whose signature
type is a scalar is passed as a scalar; typed `float32[:]` (how Numba writes a scalar
output) it is a view of one element. Outputs are allocated from the layout when not
given; the signature is chosen by the inputs' dtypes exactly, as for vectorize.
Device inputs give device outputs, host inputs numpy ones; several outputs come back as
a tuple.
"""
from __future__ import annotations

import inspect
import re

import numpy as np

from .kernel_source import define, device_function, kernel_globals
from .vectorize import _check_options, _check_target, _is_device, _tname, parse_signature, resolve

_LAYOUT_ARG = re.compile(r"\(([^()]*)\)")


def parse_layout(layout: str, what: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """'(m,n),(n)->(m)' -> ([('m', 'n'), ('n',)], [('m',)])."""
    if not isinstance(layout, str) or "->" not in layout:
        raise TypeError(f"{what}: the layout is a string such as '(n),(n)->(n)', not {layout!r}")
    ins, outs = layout.split("->")

    def dims(text):
        groups = _LAYOUT_ARG.findall(text)
        if _LAYOUT_ARG.sub("", text).replace(",", "").strip():
            raise TypeError(f"{what}: cannot read the layout {layout!r}")
        return [tuple(d.strip() for d in g.split(",") if d.strip()) for g in groups]
    return dims(ins), dims(outs)


_GU_SOURCE = """
def {name}({params}, loops: i32):
    i = umd.grid(1)
    if i < loops:
        fn({reads})
"""


def gufunc_kernel(fn, arg_types):
    """The generated kernel: argument k is an array of ``arg_types[k] = (dtype, ndim)``,
    the loop dimension first, passed to fn as ``a[i]``: a row view when ndim > 1, else
    the element (an argument the signature types as a scalar)."""
    from .kernel import Kernel
    params, reads = [], []
    for k, (dt, ndim) in enumerate(arg_types):
        params.append(f"a{k}: {_tname(dt)}[{', '.join([':'] * ndim)}]")
        reads.append(f"a{k}[i]")
    name = f"guvectorize_{fn.__name__}_{'_'.join(_tname(d) for d, _ in arg_types)}"
    source = _GU_SOURCE.format(name=name, params=", ".join(params), reads=", ".join(reads))
    pyfn = define(source, name, f"umd.guvectorize {name}", kernel_globals(fn))
    return Kernel(pyfn, {}, {})


class CUDAGUFunc:
    """A generalized GPU ufunc: ``f(*inputs[, *outputs], out=None, stream=0)``."""

    def __init__(self, fn, signatures, layout: str) -> None:
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        what = self._what = f"umd.guvectorize {fn.__name__}"
        self._fn = device_function(fn, what)
        self.in_dims, self.out_dims = parse_layout(layout, what)
        self.nin, self.nout = len(self.in_dims), len(self.out_dims)
        nargs = len(inspect.signature(self._fn.fn).parameters)
        if nargs != self.nin + self.nout:
            raise TypeError(f"{what}: the layout {layout!r} has {self.nin + self.nout} arguments, "
                            f"{fn.__name__} takes {nargs}")
        self.sigs = []
        for sig in signatures:
            args, ret = parse_signature(sig, what)
            if ret is not None:
                raise TypeError(f"{what}: {sig!r}: a gufunc returns nothing (void(...)); it writes its outputs")
            if len(args) != nargs:
                raise TypeError(f"{what}: {sig!r} has {len(args)} arguments, the layout {layout!r} "
                                f"{nargs}")
            for (dt, nd), core in zip(args, self.in_dims + self.out_dims):
                if nd < len(core) or nd > max(len(core), 1):
                    raise TypeError(f"{what}: {sig!r}: an argument of layout ({','.join(core)}) "
                                    f"cannot be a {nd}-D type")
                _tname(dt)
            for (dt, nd) in args[self.nin:]:
                if nd == 0:
                    raise TypeError(f"{what}: {sig!r}: outputs are arrays (write float32[:] for "
                                    "a () output, as Numba does)")
            self.sigs.append(args)
        self.types = [tuple(dt for dt, _ in a[:self.nin]) for a in self.sigs]
        self._kernels: dict = {}

    def __call__(self, *args, out=None, stream=0, **kws):
        from .array import DeviceArray, as_cuda_array, empty, to_device
        from .stream import current_stream
        what = self._what
        if kws:
            raise TypeError(f"{what}: unknown keyword arguments {sorted(kws)} (out=, stream=)")
        if out is not None and len(args) > self.nin:
            raise ValueError(f"{what}: outputs given both positionally and as out=")
        if len(args) not in (self.nin, self.nin + self.nout):
            raise TypeError(f"{what} takes {self.nin} inputs, or {self.nin + self.nout} arguments "
                            f"with the outputs; got {len(args)}")
        outs = list(args[self.nin:]) or (list(out) if isinstance(out, (tuple, list))
                                         else [out] * self.nout if out is not None else [None] * self.nout)
        ins = [as_cuda_array(a) if _is_device(a) and not isinstance(a, DeviceArray) else a
               for a in args[:self.nin]]
        ins = [a if isinstance(a, (np.ndarray, DeviceArray)) else np.asarray(a) for a in ins]
        index = resolve(self.types, ins, what)
        sig = self.sigs[index]
        s = current_stream(stream or None)
        any_device = any(isinstance(a, DeviceArray) for a in ins)
        sizes: dict[str, int] = {}
        loop_shapes = []
        for a, core in zip(ins, self.in_dims):
            shape = tuple(a.shape)
            if len(shape) < len(core):
                raise ValueError(f"{what}: an input of shape {shape} has fewer dimensions than its "
                                 f"layout ({','.join(core)})")
            for name, extent in zip(core, shape[len(shape) - len(core):]):
                if sizes.setdefault(name, extent) != extent:
                    raise ValueError(f"{what}: dimension {name} is {sizes[name]} and {extent}")
            loop_shapes.append(shape[:len(shape) - len(core)])
        loop = np.broadcast_shapes(*loop_shapes)
        loops = int(np.prod(loop, dtype=np.int64))
        values = []
        for a, core, (dt, nd) in zip(ins, self.in_dims, sig[:self.nin]):
            full = loop + tuple(sizes[d] for d in core)
            if tuple(a.shape) != full:
                host = a.copy_to_host(stream=s) if isinstance(a, DeviceArray) else a
                a = np.ascontiguousarray(np.broadcast_to(host, full))
            kshape = (loops,) + tuple(sizes[d] for d in core) + ((1,) if nd > len(core) else ())
            if isinstance(a, DeviceArray):
                a = (a if a.is_c_contiguous() else a.copy(s)).reshape(kshape)
            else:
                a = to_device(np.ascontiguousarray(a).reshape(kshape), stream=s)
            values.append(a)
        results, give_back = [], []
        for o, core, (dt, nd) in zip(outs, self.out_dims, sig[self.nin:]):
            missing = [d for d in core if d not in sizes]
            if missing and o is None:
                raise ValueError(f"{what}: output dimension {missing[0]} is in no input: give the output")
            full = loop + tuple(sizes.get(d, 0) for d in core)
            kshape = (loops,) + tuple(sizes.get(d, 0) for d in core) + ((1,) if nd > len(core) else ())
            if o is not None:
                if _is_device(o) and not isinstance(o, DeviceArray):
                    o = as_cuda_array(o)
                if np.dtype(o.dtype) != dt or (not missing and tuple(o.shape) != full):
                    raise ValueError(f"{what}: an output is a {np.dtype(o.dtype).name} array of shape "
                                     f"{tuple(o.shape)}; the signature gives {dt.name} of shape {full}")
                full = tuple(o.shape)
                kshape = (loops,) + full[len(loop):] + ((1,) if nd > len(core) else ())
            if isinstance(o, DeviceArray) and o.is_c_contiguous():
                dev = o.reshape(kshape)
            else:
                dev = empty(kshape, dt, stream=s)
            values.append(dev)
            results.append((o, dev, full))
        if loops:
            key = (index, tuple(nd_of(v) for v in values))
            if key not in self._kernels:
                self._kernels[key] = gufunc_kernel(self._fn, [(np.dtype(v.dtype), nd_of(v)) for v in values])
            self._kernels[key].forall(loops, stream=s)(*values, loops)
        returned = []
        for o, dev, full in results:
            if isinstance(o, DeviceArray):
                if dev.ptr != o.ptr:
                    o.copy_from_host(dev.copy_to_host(stream=s).reshape(full), s)
                returned.append(o)
            elif o is not None:
                o[...] = dev.copy_to_host(stream=s).reshape(full)
                returned.append(o)
            elif any_device:
                returned.append(dev.reshape(full))
            else:
                returned.append(dev.copy_to_host(stream=s).reshape(full))
        return returned[0] if self.nout == 1 else tuple(returned)

    def __repr__(self) -> str:
        return f"<umd.guvectorize {self.__name__}>"


def nd_of(array) -> int:
    return len(array.shape)


def guvectorize(signatures, layout: str, target: str = "cuda", **options):
    """Decorator: ``@umd.guvectorize(['void(float32[:], float32[:], float32[:])'],
    '(n),(n)->(n)', target='cuda')``."""
    _check_target(target, "umd.guvectorize")
    _check_options(options, "umd.guvectorize")
    if isinstance(signatures, str) or not isinstance(signatures, (list, tuple)) or (
            signatures and not isinstance(signatures[0], (str, list, tuple)) and
            not hasattr(signatures[0], "return_type")):
        signatures = [signatures]
    return lambda fn: CUDAGUFunc(fn, list(signatures), layout)
