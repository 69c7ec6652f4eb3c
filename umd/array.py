"""DeviceArray: an n-dimensional array in device memory that interoperates with numpy.

    a = umd.to_device(np.arange(10, dtype=np.float32))
    b = umd.empty_like(a); umd.memcpy_dtod(b.ptr, a.ptr, a.nbytes)
    print(b.copy_to_host())

Arrays are C-contiguous; ``ptr`` is the GPU VA of element 0 (what a kernel's
pointer argument takes). The memory comes from the device's caching pool and goes
back to it when the array is freed or garbage-collected.
"""
from __future__ import annotations

import numpy as np

from . import copy as _copy
from . import debug
from .debug import DebugFlag
from .device import Device, get_device
from .stream import Stream, default_stream

#: dtypes kernels know (umd.types): float32, int32, uint32 and the 64-bit float64, int64,
#: uint64; others copy fine too.
KERNEL_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.int32, np.uint32, np.float64, np.int64,
                                            np.uint64))


def _shape(shape) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return shape


class DeviceArray:
    """A C-contiguous array in device memory. Make one with :func:`empty`,
    :func:`zeros`, :func:`full` or :func:`to_device`.

    The array keeps its device: ``device``, else ``stream``'s, else the current one.
    Its copies and fills run on ``stream`` when given (here or per call), else on
    that device's default stream."""

    def __init__(self, shape, dtype=np.float32, device: Device | None = None, stream: Stream | None = None):
        if device is None:
            device = stream.device if stream is not None else get_device()
        self.device = device
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self.stream = stream
        self._alloc = self.device.pool.alloc(max(self.nbytes, 1), self)
        debug.log(DebugFlag.API, f"DeviceArray(shape={self.shape}, dtype={self.dtype}) at {self.ptr:#x}")

    @property
    def ptr(self) -> int:
        """GPU virtual address of the first element."""
        if self._alloc.block is None:
            self.device.pool.used_after_free(self._alloc, self)
        return self._alloc.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between neighbours along each dimension (C order, as numpy's)."""
        out, step = [], self.dtype.itemsize
        for extent in reversed(self.shape):
            out.append(step)
            step *= extent
        return tuple(reversed(out))

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
        if stream is not None:
            return stream
        return self.stream if self.stream is not None else default_stream(self.device)

    def copy_from_host(self, host, stream=None) -> "DeviceArray":
        """Upload ``host`` (same number of bytes) into this array."""
        src = np.ascontiguousarray(host, dtype=self.dtype)
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy_from_host: {src.nbytes} bytes into an array of {self.nbytes}")
        if self.nbytes:
            _copy.memcpy_htod(self.ptr, src, self.nbytes, self._stream(stream))
        return self

    def copy_to_host(self, out: np.ndarray | None = None, stream=None) -> np.ndarray:
        """The array's contents as a new numpy array (or into ``out``); waits for
        the stream's earlier work."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.nbytes != self.nbytes or not out.flags.c_contiguous:
            raise ValueError(f"copy_to_host: out must be C-contiguous with {self.nbytes} bytes")
        if self.nbytes:
            _copy.memcpy_dtoh(out, self.ptr, self.nbytes, self._stream(stream))
        return out

    def copy_to_device(self, other: "DeviceArray", stream=None) -> "DeviceArray":
        """Copy this array into ``other`` (device to device)."""
        if other.nbytes != self.nbytes:
            raise ValueError(f"copy_to_device: {self.nbytes} bytes into an array of {other.nbytes}")
        _copy.memcpy_dtod(other.ptr, self.ptr, self.nbytes, self._stream(stream))
        return other

    def fill(self, value, stream=None) -> "DeviceArray":
        """Set every element to ``value`` (SDMA CONSTANT_FILL)."""
        cell = np.array(value, dtype=self.dtype)
        s = self._stream(stream)
        if self.nbytes == 0:
            return self
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
        view = object.__new__(DeviceArray)
        view.__dict__.update(self.__dict__)
        view.shape = shape
        view._base = self          # keeps the memory alive
        return view

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


def empty(shape, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    """An uninitialised device array (pool memory may hold old data)."""
    return DeviceArray(shape, dtype, device, stream)


def zeros(shape, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    return DeviceArray(shape, dtype, device, stream).fill(0)


def full(shape, value, dtype=np.float32, device=None, stream=None) -> DeviceArray:
    return DeviceArray(shape, dtype, device, stream).fill(value)


def empty_like(a, device=None, stream=None) -> DeviceArray:
    return DeviceArray(a.shape, a.dtype, device, stream)


def to_device(host, device=None, stream=None, dtype=None) -> DeviceArray:
    """A device copy of a numpy array (or anything np.asarray takes)."""
    src = np.ascontiguousarray(host, dtype=dtype)
    debug.log(DebugFlag.API, f"to_device(shape={src.shape}, dtype={src.dtype})")
    return DeviceArray(src.shape, src.dtype, device, stream).copy_from_host(src)
