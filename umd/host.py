"""Host memory the device reaches: Numba's mapped_array, pinned_array and pinned.

- ``mapped_array(shape, dtype)``: a numpy array whose memory is a GTT BO, mapped for
  the CPU and at a GPU VA (cuMemHostAlloc with DEVICEMAP). Kernels read and write it
  in place (it is passed by its device address, never copied); the host sees a
  kernel's stores once the stream has passed the kernel (synchronize first, as in
  CUDA). The BO is in the CS's BO list of every launch that takes the array.
- ``pinned_array(shape, dtype)``: the same memory as a plain numpy array: host
  memory allocated through the KMD, as cuMemHostAlloc's page-locked memory is.
- ``pinned(*arrays)``: registers each array's pages with the KMD for the block
  (AMDGPU_GEM_USERPTR with REGISTER | VALIDATE, amdgpu_create_bo_from_user_mem, as
  cuMemHostRegister) and releases them at its end.

Every BO is CPU-mapped shared memory here and host copies are CPU copies
(umd/copy.py), so pinned memory makes no copy faster; these exist so that programs
written for Numba run, and mapped arrays give kernels host memory without a copy.

A mapped buffer is freed when the last array on it is garbage-collected, after the
work queued on the device's streams at that moment (the pool's rule for device
memory, umd/memory.py), or when the device closes.
"""
from __future__ import annotations

import contextlib
import weakref

import numpy as np

import libvgpu
from vgpu import uapi

from .array import cuda_array_interface, layout_strides
from .device import Device, get_device
from .errors import UMDError
from .memory import PAGE, GpuBuffer


class MappedBuffer:
    """A CPU- and GPU-mapped GTT buffer of ``device``; freed (after the work queued
    on the device's streams) when the last array on it is gone."""

    def __init__(self, device: Device, nbytes: int):
        self.device = device
        size = max(-(-nbytes // PAGE) * PAGE, PAGE)
        try:
            self.buf = GpuBuffer(device.lv, size, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
        except libvgpu.VgpuOutOfMemory as e:
            raise UMDError(f"cannot allocate {nbytes} bytes of mapped host memory (GTT): {e}; "
                           "mount with a larger --gtt") from e
        self.host = np.frombuffer(self.buf.cpu, np.uint8)
        self.host_address = self.host.ctypes.data
        weakref.finalize(self, _release, device, self.buf)


def _release(device: Device, buf: GpuBuffer) -> None:
    if device.closed:
        return                      # the KMD freed the BO with the file
    marks = [(s, m) for s in list(device.streams) if (m := s.busy_mark()) is not None]
    device.deferred_buffers.append((buf, marks))


class MappedArray(np.ndarray):
    """A numpy array in a :class:`MappedBuffer`; ``ptr`` is its device address (what a
    kernel gets), ``bo`` its BO, and it has ``__cuda_array_interface__``. Views
    (slices) are mapped arrays too."""

    _mapped: MappedBuffer | None = None

    def __array_finalize__(self, obj) -> None:
        self._mapped = getattr(obj, "_mapped", None)

    @property
    def ptr(self) -> int:
        if self._mapped is None:
            raise UMDError("this array is not in mapped memory")
        return self._mapped.buf.address + (self.ctypes.data - self._mapped.host_address)

    @property
    def bo(self):
        return self._mapped.buf.bo if self._mapped is not None else None

    @property
    def device(self) -> Device:
        return self._mapped.device

    @property
    def __cuda_array_interface__(self) -> dict:
        return cuda_array_interface(self.ptr, self.shape, self.strides, self.dtype, self.flags.c_contiguous)


def _host_array(shape, dtype, strides, order, device) -> MappedArray:
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    strides = layout_strides(shape, dtype.itemsize, strides, order)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    dev = device or get_device()
    _reap(dev)
    mapped = MappedBuffer(dev, nbytes)
    out = np.ndarray(shape, dtype, buffer=mapped.host, strides=strides).view(MappedArray)
    out._mapped = mapped
    return out


def _reap(device: Device) -> None:
    """Free the mapped buffers whose last array went and whose work is done."""
    still = []
    for buf, marks in device.deferred_buffers:
        if all(s.completed_mark >= m for s, m in marks):
            buf.free()
        else:
            still.append((buf, marks))
    device.deferred_buffers[:] = still


def mapped_array(shape, dtype=np.float64, strides=None, order="C", stream=0, portable=False,
                 wc=False, device: Device | None = None) -> MappedArray:
    """Numba's cuda.mapped_array: host memory (GTT) kernels use in place. ``portable``
    and ``wc`` (write-combined) change nothing here: every process and device maps
    the BO alike, and the CPU map is ordinary cached memory."""
    return _host_array(shape, dtype, strides, order, device)


def pinned_array(shape, dtype=np.float64, strides=None, order="C",
                 device: Device | None = None) -> np.ndarray:
    """Numba's cuda.pinned_array: a numpy array in host memory allocated through the
    KMD (a GTT BO)."""
    return _host_array(shape, dtype, strides, order, device).view(np.ndarray)


@contextlib.contextmanager
def pinned(*arrays, device: Device | None = None):
    """Numba's ``with cuda.pinned(*arrays):``: each array's pages are registered with
    the KMD (a GEM_USERPTR BO over them) for the block. An array must be C-contiguous
    and writable (ValueError otherwise)."""
    dev = device or get_device()
    with contextlib.ExitStack() as stack:
        for a in arrays:
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError("umd.pinned takes writable C-contiguous numpy arrays; got "
                                 f"{type(a).__name__} {getattr(a, 'shape', '')}")
            start = a.ctypes.data // PAGE * PAGE
            end = -(-(a.ctypes.data + max(a.nbytes, 1)) // PAGE) * PAGE
            try:
                bo = libvgpu.create_bo_from_user_mem(dev.lv, start, end - start)
            except OSError as e:
                raise UMDError(f"umd.pinned: the KMD refused to register {end - start} bytes at "
                               f"{start:#x}: {e}") from e
            stack.callback(bo.free)
        yield arrays[0] if len(arrays) == 1 else arrays
