"""GPU virtual addresses: a user-space VA allocator and GEM_VA.

As in libdrm (``amdgpu_vamgr.c``), user space picks GPU virtual addresses
itself, inside the range DEV_INFO reports, and the KMD only maps what it is
told (AMDGPU_GEM_VA). Two managers like libdrm's: one for the low 4 GiB
(``VA_RANGE_32_BIT``) and one for the rest; a device whose whole range lies
below 4 GiB gets one manager serving both.
"""

from __future__ import annotations

import bisect
import errno
import threading

from vgpu import uapi

from .errors import error_for
from .handle import Handle

#: libdrm's AMDGPU_VA_RANGE_32_BIT / _HIGH (amdgpu.h), flags of va_range_alloc.
VA_RANGE_32_BIT = 0x1
VA_RANGE_HIGH = 0x2

PAGE_SIZE = 4096
_4GIB = 1 << 32
_RWX = uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE | uapi.AMDGPU_VM_PAGE_EXECUTABLE


def _align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class VaManager:
    """First-fit allocator of ``[start, end)`` in units of ``alignment`` bytes.

    Holes are kept sorted by address and merged on free, as libdrm's
    amdgpu_vamgr keeps its hole list.
    """

    def __init__(self, start: int, end: int, alignment: int = PAGE_SIZE):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"VA alignment {alignment} is not a power of two")
        start = _align_up(start, alignment)
        end = end // alignment * alignment
        if end < start:
            end = start
        self.start, self.end, self.alignment = start, end, alignment
        self._holes: list[tuple[int, int]] = [(start, end - start)] if end > start else []
        self._lock = threading.Lock()

    @classmethod
    def from_dev_info(cls, info) -> tuple["VaManager", "VaManager"]:
        """(general, 32-bit) managers for DEV_INFO's virtual_address_offset/max/alignment."""
        alignment = max(info.virtual_address_alignment, PAGE_SIZE)
        start, end = info.virtual_address_offset, info.virtual_address_max
        if end <= start:
            raise error_for(errno.EINVAL, f"DEV_INFO reports an empty VA range "
                                          f"[{start:#x}, {end:#x})")
        if end <= _4GIB or start >= _4GIB:
            one = cls(start, end, alignment)
            return one, one
        return cls(_4GIB, end, alignment), cls(start, _4GIB, alignment)

    def alloc(self, size: int, alignment: int = 0, base_required: int = 0) -> int:
        """Reserve ``size`` bytes (rounded up to the manager's alignment) and
        return the address; ``base_required`` asks for that exact address.
        Raises VgpuOutOfMemory (ENOMEM) when no hole fits."""
        if size <= 0:
            raise error_for(errno.EINVAL, f"va_range_alloc: size {size}")
        alignment = max(alignment, self.alignment)
        if alignment & (alignment - 1):
            raise error_for(errno.EINVAL, f"va_range_alloc: alignment {alignment:#x} not a power of two")
        size = _align_up(size, self.alignment)
        with self._lock:
            for i, (hole, hole_size) in enumerate(self._holes):
                hole_end = hole + hole_size
                if base_required:
                    if base_required % self.alignment or not (hole <= base_required
                                                              and base_required + size <= hole_end):
                        continue
                    addr = base_required
                else:
                    addr = _align_up(hole, alignment)
                    if addr + size > hole_end:
                        continue
                replacement = []
                if addr > hole:
                    replacement.append((hole, addr - hole))
                if addr + size < hole_end:
                    replacement.append((addr + size, hole_end - addr - size))
                self._holes[i:i + 1] = replacement
                return addr
        where = f" at {base_required:#x}" if base_required else ""
        raise error_for(errno.ENOMEM, f"va_range_alloc: no free VA range of {size:#x} bytes{where}")

    def free(self, addr: int, size: int) -> None:
        """Return a range given by :meth:`alloc`; merges with neighbouring holes."""
        size = _align_up(size, self.alignment)
        with self._lock:
            i = bisect.bisect_left(self._holes, (addr, 0))
            prev = self._holes[i - 1] if i > 0 else None
            nxt = self._holes[i] if i < len(self._holes) else None
            if (prev and prev[0] + prev[1] > addr) or (nxt and addr + size > nxt[0]) \
                    or addr < self.start or addr + size > self.end:
                raise error_for(errno.EINVAL, f"va_range_free: [{addr:#x}, +{size:#x}) is not allocated")
            start, end = addr, addr + size
            lo, hi = i, i
            if prev and prev[0] + prev[1] == addr:
                start, lo = prev[0], i - 1
            if nxt and nxt[0] == end:
                end, hi = nxt[0] + nxt[1], i + 1
            self._holes[lo:hi] = [(start, end - start)]

    def free_bytes(self) -> int:
        with self._lock:
            return sum(size for _, size in self._holes)


class VaRange(Handle):
    """An allocated GPU VA range (libdrm's amdgpu_va_handle); a context manager."""

    _repr_fields = (("address", "#x"), ("size", "#x"))

    def __init__(self, manager: VaManager, address: int, size: int):
        self._manager = manager
        self.address = address
        self.size = size

    def free(self) -> None:
        va_range_free(self)


def va_range_alloc(dev, size: int, alignment: int = 0, base_required: int = 0,
                   flags: int = 0) -> VaRange:
    """Reserve a GPU VA range (amdgpu_va_range_alloc). No ioctl: user space owns
    the layout; map BOs into it with :func:`bo_va_op`."""
    manager = dev.vamgr_32 if flags & VA_RANGE_32_BIT else dev.vamgr
    address = manager.alloc(size, alignment, base_required)
    return VaRange(manager, address, _align_up(size, manager.alignment))


def va_range_free(va_range: VaRange) -> None:
    """Release a VA range (amdgpu_va_range_free). Idempotent."""
    if va_range._manager is not None:
        manager, va_range._manager = va_range._manager, None
        manager.free(va_range.address, va_range.size)


def bo_va_op_raw(dev, bo, offset: int, size: int, va: int, flags: int, op: int) -> None:
    """AMDGPU_GEM_VA as given (amdgpu_bo_va_op_raw). ``bo`` may be None for
    AMDGPU_VA_OP_CLEAR, which unmaps every mapping in ``[va, va + size)``."""
    req = uapi.drm_amdgpu_gem_va(handle=bo.handle if bo is not None else 0, operation=op,
                                 flags=flags, va_address=va, offset_in_bo=offset, map_size=size)
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, req)


def bo_va_op(bo, offset: int, size: int, va: int, flags: int = 0,
             op: int = uapi.AMDGPU_VA_OP_MAP) -> None:
    """Map, unmap or replace ``size`` bytes of ``bo`` from ``offset`` at GPU
    address ``va`` (amdgpu_bo_va_op); ``size`` is rounded up to the page size.

    ``flags`` are AMDGPU_VM_PAGE_*; 0 means readable|writeable|executable,
    which is what libdrm always passes (it ignores its flags argument).
    """
    if op not in (uapi.AMDGPU_VA_OP_MAP, uapi.AMDGPU_VA_OP_UNMAP, uapi.AMDGPU_VA_OP_REPLACE):
        raise error_for(errno.EINVAL, f"bo_va_op: operation {op} (use bo_va_op_raw for CLEAR)")
    bo_va_op_raw(bo.dev, bo, offset, _align_up(size, PAGE_SIZE), va, flags or _RWX, op)
