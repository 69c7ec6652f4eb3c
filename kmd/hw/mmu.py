"""MMU definitions shared by both hardware implementations: PTE flags and GpuFault.

The page-table walkers themselves live in `_core.pyx` (Cython) and `ref.py`.
"""
from __future__ import annotations

PAGE_SHIFT = 12
PAGE_SIZE = 1 << PAGE_SHIFT
PAGE_MASK = PAGE_SIZE - 1

# PTE permission bits (valid is implied by presence in the table).  Same bit
# positions as amdgpu's AMDGPU_PTE_READABLE/WRITEABLE/EXECUTABLE (amdgpu_vm.h).
PTE_READ = 1 << 1
PTE_WRITE = 1 << 2
PTE_EXEC = 1 << 3
PTE_FLAGS = PTE_READ | PTE_WRITE | PTE_EXEC

# The access kind each permission guards; index order is the one _core uses.
ACCESS_KINDS = ("read", "write", "exec")
ACCESS_FLAG = {"read": PTE_READ, "write": PTE_WRITE, "exec": PTE_EXEC}
FAULT_REASONS = ("unmapped", "permission")


class GpuFault(Exception):
    """A GPU page fault: `va` is the first faulting address of the access.

    `access` is 'read', 'write' or 'exec'; `reason` is 'unmapped' (no PTE) or
    'permission' (PTE present, permission bit missing).  Two faults compare
    equal when the three fields do, so results of both implementations can be
    compared directly.
    """

    def __init__(self, va: int, access: str, reason: str) -> None:
        super().__init__(va, access, reason)
        self.va = va
        self.access = access
        self.reason = reason

    def __str__(self) -> str:
        return f"GPU page fault ({self.reason}) on {self.access} at VA {self.va:#x}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GpuFault):
            return NotImplemented
        return (self.va, self.access, self.reason) == (other.va, other.access, other.reason)

    def __hash__(self) -> int:
        return hash((self.va, self.access, self.reason))

    def __reduce__(self):
        return (GpuFault, (self.va, self.access, self.reason))


class PinnedBuffers:
    """What `PageTable.pin()` returns: holds every buffer mapped at pin time.

    A running job keeps one so that memory unmapped under it stays valid (the
    engine may still hold raw host pointers into it) until the job ends.
    """

    __slots__ = ("buffers",)

    def __init__(self, buffers: tuple) -> None:
        self.buffers = buffers

    def __len__(self) -> int:
        return len(self.buffers)

    def release(self) -> None:
        self.buffers = ()


def check_map_args(va: int, buf, buf_offset: int, size: int, flags: int) -> None:
    """Argument checks shared by both PageTable.map implementations."""
    if va < 0 or size <= 0 or (va | size) & PAGE_MASK:
        raise ValueError(f"map: va {va:#x} and size {size:#x} must be page aligned, size > 0")
    if va + size > 1 << 64:
        raise ValueError(f"map: range {va:#x}+{size:#x} is outside the 64-bit VA space")
    if flags & ~PTE_FLAGS:
        raise ValueError(f"map: unknown PTE flags {flags:#x}")
    dtype = getattr(buf, "dtype", None)
    if dtype is None or dtype.itemsize != 1 or dtype.kind != "u" or buf.ndim != 1:
        raise TypeError("map: buf must be a 1-D uint8 numpy array")
    if not (buf.flags.c_contiguous and buf.flags.writeable):
        raise ValueError("map: buf must be C-contiguous and writeable")
    if buf_offset < 0 or buf_offset + size > buf.nbytes:
        raise ValueError(f"map: offset {buf_offset:#x} + size {size:#x} exceeds the buffer "
                         f"({buf.nbytes:#x} bytes)")


def check_unmap_args(va: int, size: int) -> None:
    if va < 0 or size <= 0 or (va | size) & PAGE_MASK or va + size > 1 << 64:
        raise ValueError(f"unmap: va {va:#x} and size {size:#x} must be page aligned, size > 0")
