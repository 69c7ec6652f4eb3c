"""DeviceArray: an n-dimensional array in device memory that interoperates with numpy.

    a = umd.to_device(np.arange(10, dtype=np.float32))
    b = umd.empty_like(a); umd.memcpy_dtod(b.ptr, a.ptr, a.nbytes)
    print(b.copy_to_host())

An array made here is C-contiguous (or Fortran-ordered when asked: ``order="F"``,
Numba's device_array argument); ``ptr`` is the GPU VA of element 0 (what a
kernel's pointer argument takes). Indexing with integers, slices and ``...`` gives a
view of the same memory, as numpy's and Numba's device arrays do (``d[2:10]``,
``d[:, 1]``, ``d[::2]``, ``d.T``); an index of integers only copies that element to
the host. A view that is not C-contiguous copies to and from the host through the
bytes it spans, and is staged through a contiguous copy when passed to a kernel
(docs/umd.md, "Views"). The memory comes from the device's caching pool and goes back
to it when the array (and every view of it) is freed or garbage-collected.
"""
from __future__ import annotations

import numpy as np

from . import copy as _copy
from . import debug
from .debug import DebugFlag
from .device import Device, get_device
from .errors import UMDError
from .stream import Stream, default_stream

#: dtypes kernels know (umd.types): float32, int32, uint32, the 64-bit float64, int64,
#: uint64 and the element-only uint8, int8, uint16, int16, bool; others copy fine too.
KERNEL_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.int32, np.uint32, np.float64, np.int64,
                                            np.uint64, np.uint8, np.int8, np.uint16, np.int16,
                                            np.bool_))


def _shape(shape) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


class DeviceArray:
    """An array in device memory. Make one with :func:`empty`, :func:`zeros`,
    :func:`full` or :func:`to_device` (C-contiguous), or by indexing one (a view).

    The array keeps its device: ``device``, else ``stream``'s, else the current one.
    Its copies and fills run on ``stream`` when given (here or per call), else on
    that device's default stream."""

    _offset = 0                 # a view: bytes from its allocation's start to element 0
    _strides: tuple[int, ...] | None = None     # a view's strides; None: C order

    def __init__(self, shape, dtype=np.float32, device: Device | None = None, stream: Stream | None = None,
                 strides=None, order: str = "C"):
        stream = stream or None             # Numba's stream=0: the default stream
        if device is None:
            device = stream.device if stream is not None else get_device()
        self.device = device
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.stream = stream
        layout = layout_strides(self.shape, self.dtype.itemsize, strides, order)
        if layout != _c_strides(self.shape, self.dtype.itemsize):
            self._strides = layout
        self._alloc = self.device.pool.alloc(max(self.nbytes, 1), self)
        debug.log(DebugFlag.API, f"DeviceArray(shape={self.shape}, dtype={self.dtype}) at {self.ptr:#x}")

    @property
    def ptr(self) -> int:
        """GPU virtual address of the first element."""
        if self._alloc.block is None:
            self.device.pool.used_after_free(self._alloc, self)
        return self._alloc.ptr + self._offset

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between neighbours along each dimension (C order unless a view says
        otherwise), as numpy's."""
        return self._strides if self._strides is not None else _c_strides(self.shape, self.itemsize)

    def is_c_contiguous(self) -> bool:
        """Whether the elements are one C-order run (Numba's DeviceNDArray method)."""
        if self._strides is None:       # C strides by construction (the launch's common case)
            return True
        return all(s == c for s, c, n in zip(self.strides, _c_strides(self.shape, self.itemsize),
                                             self.shape) if n > 1)

    def is_f_contiguous(self) -> bool:
        return all(s == c for s, c, n in zip(self.strides[::-1],
                                             _c_strides(self.shape[::-1], self.itemsize), self.shape[::-1])
                   if n > 1)

    # -- views ----------------------------------------------------------------------------
    def _strided(self, base: np.ndarray) -> np.ndarray:
        """`base` (one element of this dtype) seen with this array's shape and strides:
        numpy works out what an index does to them."""
        return np.lib.stride_tricks.as_strided(base, self.shape, self.strides)

    def _view(self, key) -> "DeviceArray":
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is None or isinstance(k, (list, np.ndarray)) or
               (hasattr(k, "dtype") and not np.issubdtype(k.dtype, np.integer)) for k in key):
            raise IndexError("DeviceArray indexes with integers, slices and ... (views); "
                             "fancy and boolean indexing and np.newaxis are not supported")
        base = np.zeros(1, self.dtype)
        probe = self._strided(base)[key]
        if not isinstance(probe, np.ndarray):       # every dimension indexed: a 0-d view
            probe = self._strided(base)[key + (Ellipsis,)]
        view = object.__new__(DeviceArray)
        view.__dict__.update(self.__dict__)
        view.shape = tuple(probe.shape)
        view._strides = tuple(probe.strides)
        view.size = int(probe.size)
        view.nbytes = view.size * self.itemsize
        view._offset = self._offset + (probe.__array_interface__["data"][0]
                                       - base.__array_interface__["data"][0])
        view._base = self._base_array()
        return view

    def _base_array(self) -> "DeviceArray":
        base = self.__dict__.get("_base")
        return self if base is None else base

    def __getitem__(self, key):
        """A view for slices (``d[2:10]``, ``d[:, 1]``, ``d[::2]``); the element itself,
        copied to the host, when every dimension has an integer index (as Numba's)."""
        view = self._view(key)
        if view.shape == () and not any(k is Ellipsis for k in (key if isinstance(key, tuple) else (key,))):
            return view.copy_to_host()[()]
        return view

    def __setitem__(self, key, value) -> None:
        """Write ``value`` (broadcast as numpy does) into the elements ``key`` selects."""
        view = self._view(key)
        view.copy_from_host(np.broadcast_to(np.asarray(value, self.dtype), view.shape))

    @property
    def T(self) -> "DeviceArray":
        return self.transpose()

    def transpose(self, axes=None) -> "DeviceArray":
        """A view with the dimensions reversed (or in ``axes`` order)."""
        axes = tuple(reversed(range(self.ndim))) if axes is None else tuple(axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"transpose: axes {axes} are not a permutation of {self.ndim} dimensions")
        view = self._view(Ellipsis)
        view.shape = tuple(self.shape[a] for a in axes)
        view._strides = tuple(self.strides[a] for a in axes)
        return view

    def _span(self) -> tuple[int, int]:
        """(first, end) byte offsets from ``ptr`` of the memory the elements cover."""
        lo = sum(s * (n - 1) for s, n in zip(self.strides, self.shape) if s < 0 and n)
        hi = sum(s * (n - 1) for s, n in zip(self.strides, self.shape) if s > 0 and n)
        return lo, hi + self.itemsize

    def _span_host(self, stream) -> tuple[np.ndarray, int]:
        """The bytes this view spans, on the host, and the offset of element 0 in them."""
        lo, hi = self._span()
        raw = np.empty(hi - lo, np.uint8)
        _copy.memcpy_dtoh(raw, self.ptr + lo, hi - lo, stream)
        return raw, -lo

    def _host_view(self, raw: np.ndarray, at: int) -> np.ndarray:
        """The elements inside a host copy of the span (numpy checks they fit)."""
        return np.ndarray(self.shape, self.dtype, buffer=raw, offset=at, strides=self.strides)

    def copy(self, stream=None) -> "DeviceArray":
        """A C-contiguous device copy (of a view: of the elements it sees)."""
        out = DeviceArray(self.shape, self.dtype, self.device, self.stream)
        if self.is_c_contiguous():
            return out.copy_to_device(self, stream)
        return out.copy_from_host(self.copy_to_host(stream=stream), stream)

    @property
    def __cuda_array_interface__(self) -> dict:
        """Numba's CUDA array interface, version 3: ``data`` is (device address, False),
        ``strides`` None when C-contiguous, ``stream`` None (umd's streams are no CUDA
        streams to hand over: a consumer in this process orders its work itself)."""
        return cuda_array_interface(self.ptr, self.shape, self.strides, self.dtype, self.is_c_contiguous())

    @property
    def bo(self):
        return self._alloc.bo

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    # -- data movement ------------------------------------------------------------------
    def _stream(self, stream: Stream | None) -> Stream:
        """The stream a copy or fill of this array runs on (see the class docstring)."""
        if stream:                              # None, or Numba's 0: the array's own
            return stream
        return self.stream if self.stream is not None else default_stream(self.device)

    def copy_from_host(self, host, stream=None) -> "DeviceArray":
        """Upload ``host`` (same number of bytes, taken in C order) into this array. A
        Fortran-ordered array takes one copy of the transposed bytes; into a view that
        is neither: the bytes it spans are read, its elements replaced and the span
        written back (after the stream's earlier work)."""
        src = np.ascontiguousarray(host, dtype=self.dtype)
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy_from_host: {src.nbytes} bytes into an array of {self.nbytes}")
        if not self.nbytes:
            return self
        s = self._stream(stream)
        if self.is_c_contiguous():
            _copy.memcpy_htod(self.ptr, src, self.nbytes, s)
        elif self._dense_fortran():
            _copy.memcpy_htod(self.ptr, np.ascontiguousarray(src.reshape(self.shape).T), self.nbytes, s)
        else:
            raw, at = self._span_host(s)
            self._host_view(raw, at)[...] = src.reshape(self.shape)
            _copy.memcpy_htod(self.ptr - at, raw, raw.nbytes, s)
        return self

    def copy_to_host(self, ary: np.ndarray | None = None, stream=None, *,
                     out: np.ndarray | None = None) -> np.ndarray:
        """The array's contents as a new numpy array (in the array's order, C or F),
        or into ``ary`` (Numba's name; also ``out``) and returned; waits for the
        stream's earlier work. ``ary`` is an array of this shape and dtype in any
        layout, or a C-contiguous one of as many bytes."""
        out = ary if ary is not None else out
        if out is None:
            out = np.empty(self.shape, self.dtype, order="F" if self._dense_fortran() else "C")
        if not out.flags.writeable:
            raise ValueError("copy_to_host: the host array is read-only")
        if tuple(out.shape) == self.shape and out.dtype == self.dtype:
            target = out
        elif out.flags.c_contiguous and out.nbytes == self.nbytes:
            # reshape first: a 0-d array (a kernel's r[()]) cannot change its dtype
            target = out.reshape(-1).view(np.uint8).view(self.dtype).reshape(self.shape)
        else:
            raise ValueError(f"copy_to_host: into a {out.dtype} array of shape {out.shape}; give one of "
                             f"shape {self.shape} and dtype {self.dtype}, or a C-contiguous one of "
                             f"{self.nbytes} bytes")
        if not self.nbytes:
            return out
        s = self._stream(stream)
        if self.is_c_contiguous() and target.flags.c_contiguous:
            _copy.memcpy_dtoh(target, self.ptr, self.nbytes, s)
        elif self._dense_fortran() and target.flags.f_contiguous:
            _copy.memcpy_dtoh(target.T, self.ptr, self.nbytes, s)
        else:                                   # the span, then the elements out of it
            raw, at = self._span_host(s)
            target[...] = self._host_view(raw, at)
        return out

    def copy_to_device(self, ary, stream=None) -> "DeviceArray":
        """Copy ``ary`` into this array, as Numba's: a DeviceArray (or anything with
        ``__cuda_array_interface__``) device to device on the stream, a host array
        (anything np.asarray takes) as :meth:`copy_from_host`. Same number of bytes."""
        if is_cuda_array(ary) and not isinstance(ary, np.ndarray):
            src = as_cuda_array(ary)
        elif isinstance(ary, np.ndarray) or not hasattr(ary, "ptr"):
            host = np.asarray(ary)
            if host.nbytes != self.nbytes:
                raise ValueError(f"copy_to_device: {host.nbytes} bytes into an array of {self.nbytes}")
            return self.copy_from_host(host if host.shape == self.shape else host.reshape(self.shape),
                                       stream)
        else:
            src = ary
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy_to_device: {src.nbytes} bytes into an array of {self.nbytes}")
        if src.is_c_contiguous() and self.is_c_contiguous():
            _copy.memcpy_dtod(self.ptr, src.ptr, self.nbytes, self._stream(stream))
        elif self.nbytes:                       # a strided side: through the host
            self.copy_from_host(src.copy_to_host(stream=stream).reshape(self.shape), stream)
        return self

    def _dense_fortran(self) -> bool:
        """Fortran-ordered and not C-ordered: its bytes are the transpose's C order."""
        return self.is_f_contiguous() and not self.is_c_contiguous()

    def fill(self, value, stream=None) -> "DeviceArray":
        """Set every element to ``value`` (SDMA CONSTANT_FILL)."""
        cell = np.array(value, dtype=self.dtype)
        s = self._stream(stream)
        if self.nbytes == 0:
            return self
        if not self.is_c_contiguous():
            return self.copy_from_host(np.full(self.shape, value, self.dtype), s)
        raw = cell.tobytes()
        if len(set(raw)) == 1:
            _copy.memset(self.ptr, raw[0], self.nbytes, s)
        elif self.dtype.itemsize == 4:
            _copy.memset_d32(self.ptr, int.from_bytes(raw, "little"), self.size, s)
        else:
            self.copy_from_host(np.full(self.shape, value, self.dtype), s)
        return self

    def __array__(self, dtype=None, copy=None):
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype)

    def reshape(self, *shape) -> "DeviceArray":
        """A view with another shape (same memory)."""
        shape = _shape(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1]))
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        if not self.is_c_contiguous():
            raise ValueError("reshape of a view that is not C-contiguous: take d.copy() first "
                             "(Numba raises NotImplementedError here)")
        view = self._view(Ellipsis)
        view.shape = shape
        view._strides = None
        return view

    def ravel(self, order: str = "C", stream=None) -> "DeviceArray":
        """A 1-D view of a C-contiguous array (Numba's; it raises for one it would
        have to copy, here a ValueError as :meth:`reshape`)."""
        if order != "C":
            raise ValueError(f"ravel: order {order!r}; umd ravels in C order")
        return self.reshape(self.size)

    def split(self, section: int, stream=None) -> list["DeviceArray"]:
        """Views of ``section`` elements each (the last may be shorter) of a 1-D
        array with unit stride, as Numba's DeviceNDArray.split."""
        if self.ndim != 1:
            raise ValueError("split: only 1-D arrays can be split (as Numba's)")
        if self.strides[0] != self.itemsize:
            raise ValueError("split: only arrays of unit stride can be split (as Numba's)")
        if section < 1:
            raise ValueError(f"split: section {section} must be at least 1")
        return [self[i:i + section] for i in range(0, self.size, section)]

    def free(self) -> None:
        """Return the memory to the pool now (the array is unusable afterwards; a
        second free does nothing, or is reported by memcheck)."""
        if self.__dict__.get("_base") is not None:
            return
        if self._alloc.block is None:
            self.device.pool.freed_again(self._alloc, self)
        else:
            self._alloc.free()

    def __del__(self):
        try:
            if self.__dict__.get("_base") is None:
                self._alloc.free()
        except Exception:
            pass

    def __repr__(self) -> str:
        where = f"{self._alloc.ptr:#x}" if self._alloc.block is not None else "freed"
        return f"<DeviceArray shape={self.shape} dtype={self.dtype} at {where}>"


def layout_strides(shape, itemsize: int, strides=None, order: str = "C") -> tuple[int, ...]:
    """The strides of a dense array of ``shape`` in ``order`` ("C" or "F"), or
    ``strides`` when given and one of those two layouts (ValueError otherwise)."""
    if order not in ("C", "F"):
        raise ValueError(f"order {order!r}: give 'C' or 'F'")
    c = _c_strides(shape, itemsize)
    f = tuple(reversed(_c_strides(tuple(reversed(shape)), itemsize)))
    if strides is None:
        return c if order == "C" else f
    strides = tuple(int(x) for x in strides)
    if strides not in (c, f):
        raise ValueError(f"strides {strides} for shape {shape}: umd allocates C-ordered {c} or "
                         f"Fortran-ordered {f} arrays (make another layout as a view)")
    return strides


def cuda_array_interface(ptr: int, shape, strides, dtype, c_contiguous: bool) -> dict:
    """``__cuda_array_interface__`` version 3 for an array at device address ``ptr``."""
    return {"shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, False),
            "strides": None if c_contiguous else tuple(strides), "version": 3, "stream": None}


def _c_strides(shape, itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def empty(shape, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    """An uninitialised device array (pool memory may hold old data)."""
    return DeviceArray(shape, dtype, device, stream)


def zeros(shape, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    return DeviceArray(shape, dtype, device, stream).fill(0)


def full(shape, value, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    return DeviceArray(shape, dtype, device, stream).fill(value)


def empty_like(a, device=None, stream=None) -> DeviceArray:
    return DeviceArray(a.shape, a.dtype, device, stream)


def _order_of(a) -> str:
    """"F" for a Fortran-ordered (and not C-ordered) array, else "C"."""
    flags = getattr(a, "flags", None)
    if flags is not None:
        return "F" if flags["F_CONTIGUOUS"] and not flags["C_CONTIGUOUS"] else "C"
    return "F" if isinstance(a, DeviceArray) and a._dense_fortran() else "C"


def device_array(shape, dtype=np.float64, strides=None, order="C", stream=None, device=None) -> DeviceArray:
    """Numba's cuda.device_array: uninitialised, float64 by default (umd.empty's
    default is float32), C or Fortran order."""
    return DeviceArray(shape, dtype, device, stream, strides, order)


def device_array_like(ary, stream=None, device=None) -> DeviceArray:
    """Numba's cuda.device_array_like: the shape, dtype and order (C or F) of ``ary``."""
    return DeviceArray(ary.shape, ary.dtype, device, stream, order=_order_of(ary))


def to_device(obj, stream=None, copy: bool = True, to: DeviceArray | None = None, device=None,
              dtype=None) -> DeviceArray:
    """A device copy of ``obj`` (a numpy array, or anything np.asarray takes), in its
    order (C or F), on ``stream``; Numba's arguments: ``copy=False`` only allocates,
    ``to`` copies into that existing array (same number of bytes) and returns it."""
    src = np.asarray(obj, dtype=dtype)
    debug.log(DebugFlag.API, f"to_device(shape={src.shape}, dtype={src.dtype})")
    if to is not None:
        return to.copy_to_device(src, stream)
    order = _order_of(src)
    out = DeviceArray(src.shape, src.dtype, device, stream, order=order)
    if copy:
        out.copy_from_host(src)
    return out


def is_cuda_array(obj) -> bool:
    """Whether ``obj`` exposes ``__cuda_array_interface__`` (Numba's is_cuda_array)."""
    return hasattr(obj, "__cuda_array_interface__")


class _Borrowed:
    """The allocation of a DeviceArray made over memory it does not own
    (:func:`as_cuda_array`): the pool block that holds the memory; never freed here."""

    def __init__(self, block):
        self.block, self.ptr = block, block.ptr

    @property
    def bo(self):
        return self.block.buf.bo

    def free(self) -> None:
        pass


def as_cuda_array(obj, sync: bool = True, device=None) -> DeviceArray:
    """A DeviceArray over the memory ``obj`` describes by ``__cuda_array_interface__``
    (no copy; ``obj`` is kept alive by it), as Numba's as_cuda_array. The memory must
    be umd device memory of ``device`` (default: the current one): UMDError otherwise;
    TypeError when ``obj`` has no interface."""
    if isinstance(obj, DeviceArray):
        return obj
    if not is_cuda_array(obj):
        raise TypeError(f"as_cuda_array: a {type(obj).__name__} has no __cuda_array_interface__")
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise TypeError("as_cuda_array: masked arrays are not supported (as in Numba)")
    ptr, _readonly = cai["data"]
    dtype = np.dtype(cai["typestr"])
    shape = _shape(cai["shape"])
    dev = device or get_device()
    block = dev.pool.lookup(ptr)
    if block is None:
        raise UMDError(f"as_cuda_array: address {ptr:#x} is not device memory umd allocated on "
                       f"{dev.mount} (mapped host memory is passed to kernels as it is)")
    view = object.__new__(DeviceArray)
    view.device, view.stream, view.shape, view.dtype = dev, None, shape, dtype
    view.size = int(np.prod(shape, dtype=np.int64))
    view.nbytes = view.size * dtype.itemsize
    view._alloc = _Borrowed(block)
    view._offset = ptr - block.ptr
    view._strides = tuple(cai["strides"]) if cai.get("strides") is not None else None
    view._base = obj
    lo, hi = view._span()
    if view._offset + lo < 0 or view._offset + hi > block.size:
        raise UMDError(f"as_cuda_array: {view.nbytes} bytes at {ptr:#x} run past the allocation "
                       f"that holds them ({block.size} bytes at {block.ptr:#x})")
    return view
