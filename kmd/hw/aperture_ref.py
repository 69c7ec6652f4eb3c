"""Pure-Python twin of kmd.hw._aperture (selected with VGPU_HW=ref), through ctypes.

Same contract: a fixed window of host address space, BO files mapped into it with
MAP_FIXED, zero pages put back on release; numpy views it through ``view()``.
One difference: Python cannot repair a SIGBUS, so under the twin a client that
truncates its own mapped BO file kills the daemon at the next access (the Cython
core maps a zero page there instead; docs/memory.md).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MAP_FIXED = 0x10
_MAP_NORESERVE = 0x4000
_PAGE_MASK = 4095


def _mmap(addr, length: int, flags: int, fd: int, what: str) -> int:
    p = _libc.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, 0)
    if p == _MAP_FAILED:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return p


def bus_repairs() -> tuple[int, int]:
    """Always (0, 0): the twin repairs nothing (see the module docstring)."""
    return 0, 0


class Aperture:
    """``size`` bytes of host address space, page aligned, zero until a file is mapped."""

    def __init__(self, size: int):
        if size <= 0 or size & _PAGE_MASK:
            raise ValueError("aperture size must be a nonzero multiple of 4 KiB")
        self.size = size
        self.address = _mmap(None, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1,
                             f"reserving {size} bytes of address space")
        self._array = (ctypes.c_uint8 * size).from_address(self.address)

    def __del__(self):
        if getattr(self, "address", None):
            _libc.munmap(self.address, self.size)

    def _check(self, offset: int, length: int) -> None:
        if (offset | length) & _PAGE_MASK or length <= 0 or offset < 0 or offset + length > self.size:
            raise ValueError(f"range {offset:#x}+{length:#x} is not page aligned inside the "
                             f"{self.size:#x}-byte aperture")

    def map_file(self, offset: int, length: int, fd: int) -> None:
        self._check(offset, length)
        _mmap(self.address + offset, length, mmap.MAP_SHARED | _MAP_FIXED, fd,
              f"mapping a BO file at aperture offset {offset:#x}")

    def zero(self, offset: int, length: int) -> None:
        self._check(offset, length)
        _mmap(self.address + offset, length,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE | _MAP_FIXED, -1,
              f"clearing aperture range {offset:#x}+{length:#x}")

    def __buffer__(self, flags: int) -> memoryview:  # Python 3.12+
        return memoryview(self._array).cast("B")

    def view(self) -> memoryview:
        return memoryview(self._array).cast("B")
