"""The on-chip memories a GEM_CREATE can name besides VRAM and GTT: GDS (global data
share, in bytes), GWS (global wave sync, in entries) and OA (ordered append, in
entries), each a small heap of its own, as amdgpu_ttm.c sets them up with
amdgpu_ttm_init_on_chip() (a range manager per domain, sized from adev->gds).

vgpu reports an Arcturus (MI100) part, so the sizes are gfx_v9_0.c's
gfx_v9_0_set_gds_init() for GC 9.4.1: GDS 4 KiB, 64 GWS entries, 16 OA entries.
Sizes and alignments follow amdgpu_bo_create() (amdgpu_object.c): a GDS BO's size
and alignment are rounded up to 4 bytes; GWS and OA take any size and alignment.

These BOs have no bytes a CPU or an engine can reach in vgpu (the compute units
have no GDS/GWS/OA instructions): they are accounted, listed and freed like any
BO, have no BO file, and cannot be mapped by the CPU (amdgpu_gem_create_ioctl
makes them NO_CPU_ACCESS, so GEM_MMAP answers EPERM) or into a GPU VM.
"""
from __future__ import annotations

from dataclasses import dataclass

from vgpu import uapi

# gfx_v9_0_set_gds_init(), IP_VERSION(9, 4, 1) (Arcturus).
GDS_SIZE = 0x1000       # bytes
GWS_SIZE = 64           # entries
OA_SIZE = 16            # entries

ON_CHIP_DOMAINS = uapi.AMDGPU_GEM_DOMAIN_GDS | uapi.AMDGPU_GEM_DOMAIN_GWS | uapi.AMDGPU_GEM_DOMAIN_OA
# amdgpu_bo_placement_from_domain() tries the domains in this order.
PLACEMENT_ORDER = (uapi.AMDGPU_GEM_DOMAIN_GDS, uapi.AMDGPU_GEM_DOMAIN_GWS, uapi.AMDGPU_GEM_DOMAIN_OA)
NAMES = {uapi.AMDGPU_GEM_DOMAIN_GDS: "GDS", uapi.AMDGPU_GEM_DOMAIN_GWS: "GWS",
         uapi.AMDGPU_GEM_DOMAIN_OA: "OA"}


def units(domains: int, size: int, alignment: int) -> tuple[int, int]:
    """(size, alignment) in the domain's units, as amdgpu_bo_create() rounds them:
    GWS and OA as given (alignment at least 1), GDS both up to a multiple of 4."""
    if domains & (uapi.AMDGPU_GEM_DOMAIN_GWS | uapi.AMDGPU_GEM_DOMAIN_OA):
        return size, max(alignment, 1)
    return -(-size // 4) * 4, -(-max(alignment, 1) // 4) * 4


@dataclass
class OnChipBlock:
    """A range [offset, offset + size) of one on-chip heap, in its units; `size` is
    what the placement occupies (Placement.block.size, like a VramAllocation)."""

    offset: int
    size: int


class OnChipHeap:
    """First-fit allocator over [0, size) (the drm_mm range manager's default)."""

    def __init__(self, domain: int, size: int):
        self.domain, self.size = domain, size
        self.name = NAMES[domain]
        self._blocks: dict[int, int] = {}        # offset -> size

    @property
    def used(self) -> int:
        return sum(self._blocks.values())

    def alloc(self, size: int, alignment: int) -> OnChipBlock:
        """A block of `size` units at a multiple of `alignment`. MemoryError if none fits."""
        if size <= 0:
            raise ValueError(f"{self.name} allocation of {size}")
        offset = 0
        for start in sorted(self._blocks):
            if offset + size <= start:
                break
            offset = -(-(start + self._blocks[start]) // alignment) * alignment
        if offset + size > self.size:
            raise MemoryError(f"{self.name} has no free range of {size} (of {self.size}, {self.used} used)")
        self._blocks[offset] = size
        return OnChipBlock(offset, size)

    def free(self, block: OnChipBlock) -> None:
        del self._blocks[block.offset]

    def check(self) -> None:
        end = 0
        for start in sorted(self._blocks):
            assert start >= end, f"{self.name} blocks overlap at {start}"
            end = start + self._blocks[start]
        assert end <= self.size, f"{self.name} block past the end"


class OnChipMemory:
    """The device's GDS, GWS and OA heaps."""

    def __init__(self):
        self.heaps = {uapi.AMDGPU_GEM_DOMAIN_GDS: OnChipHeap(uapi.AMDGPU_GEM_DOMAIN_GDS, GDS_SIZE),
                      uapi.AMDGPU_GEM_DOMAIN_GWS: OnChipHeap(uapi.AMDGPU_GEM_DOMAIN_GWS, GWS_SIZE),
                      uapi.AMDGPU_GEM_DOMAIN_OA: OnChipHeap(uapi.AMDGPU_GEM_DOMAIN_OA, OA_SIZE)}

    def alloc(self, domains: int, size: int, alignment: int) -> tuple[int, OnChipBlock]:
        """Place `size` units in the first of the on-chip `domains` with room (GDS,
        GWS, OA order). Returns (domain, block); MemoryError when none fits."""
        why = []
        for domain in PLACEMENT_ORDER:
            if domains & domain:
                try:
                    return domain, self.heaps[domain].alloc(size, alignment)
                except MemoryError as e:
                    why.append(str(e))
        raise MemoryError("; ".join(why) or "no on-chip domain")

    def free(self, domain: int, block: OnChipBlock) -> None:
        self.heaps[domain].free(block)

    def check(self) -> None:
        for heap in self.heaps.values():
            heap.check()
