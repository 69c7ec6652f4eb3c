"""Device memory: the VRAM and GTT apertures, their allocators, and the BO files.

Each domain is one aperture (kmd.hw.Aperture), a fixed window of the daemon's
address space, carved up by a buddy allocator whose offsets are the BOs' "physical"
addresses. A BO's bytes are a file of the ShmemStore mapped into its domain's
window at that address, so the engines (which translate GPU VAs to host pointers
into the window) and every CPU mapping of the file share one copy (docs/memory.md).
Freed ranges get zero pages back. Both allocators give 4 KiB blocks and honour
alignments up to the window size; GTT is buddy-managed too, so its accounting
is exact and a GTT BO has a physical address like a VRAM one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from vgpu import uapi

from . import hw
from .onchip import OnChipMemory
from .shmem import ShmemStore
from .vram import PAGE_SIZE, VramAllocation, VramAllocator


# Where an evicted BO goes when GTT has no room: its file only, reachable by the CPU
# (every mapping of the file) but by no engine (TTM_PL_SYSTEM, amdgpu's CPU domain).
SYSTEM = uapi.AMDGPU_GEM_DOMAIN_CPU


@dataclass
class Placement:
    """Where one BO lives: its domain, its block of that domain's aperture (None in
    SYSTEM), its file."""

    domain: int
    block: VramAllocation | None
    path: str

    @property
    def offset(self) -> int:
        return self.block.offset if self.block is not None else 0


class Heap:
    """One domain: an aperture and the buddy allocator over it."""

    def __init__(self, domain: int, size: int):
        self.domain = domain
        self.allocator = VramAllocator(size)
        self.aperture = hw.Aperture(size)
        self.window = np.frombuffer(self.aperture.view(), dtype=np.uint8)

    @property
    def size(self) -> int:
        return self.allocator.size

    @property
    def used(self) -> int:
        return self.allocator.used


class DeviceMemory:
    """VRAM and GTT of one device, backed by one ShmemStore: its own, or `store`,
    the one the partitions of a GPU share (kmd/partition.py), which its owner closes;
    a partition may then hold 1/`share` of the BOs the store allows."""

    def __init__(self, vram_size: int, gtt_size: int, shm_dir: str | None = None,
                 huge_pages: bool = False, store: ShmemStore | None = None, share: int = 1):
        self._own_store = store is None
        self.store = ShmemStore(vram_size + gtt_size, shm_dir, huge=huge_pages) if store is None else store
        self._share = share
        self.vram = Heap(uapi.AMDGPU_GEM_DOMAIN_VRAM, vram_size)
        self.gtt = Heap(uapi.AMDGPU_GEM_DOMAIN_GTT, gtt_size)
        self.heaps = {h.domain: h for h in (self.vram, self.gtt)}
        # GDS, GWS and OA: no aperture, no BO file, not counted in bo_count (kmd/onchip.py).
        self.onchip = OnChipMemory()
        self.bo_count = 0

    @property
    def max_bos(self) -> int:
        """The BO files this device may hold (vm.max_map_count bounds the store's)."""
        return self.store.max_bos // self._share

    # Names the sysfs/INFO code and the tests read.
    @property
    def vram_allocator(self) -> VramAllocator:
        return self.vram.allocator

    @property
    def gtt_size(self) -> int:
        return self.gtt.size

    @property
    def gtt_used(self) -> int:
        return self.gtt.used

    def alloc(self, domain: int, size: int, alignment: int, uid: int) -> Placement:
        """Allocate ``size`` bytes (a multiple of 4 KiB) in ``domain`` and give them a
        zero-filled file owned by ``uid``. Raises MemoryError when the domain is full
        or the BO limit is reached, OSError when the file cannot be made or mapped;
        nothing is left allocated on failure."""
        if self.bo_count >= self.max_bos:
            raise MemoryError(f"the device holds {self.bo_count} BOs, its limit "
                              f"(vm.max_map_count allows {self.max_bos})")
        heap = self.heaps[domain]
        block = heap.allocator.alloc(size, max(alignment, PAGE_SIZE))
        try:
            path, fd = self.store.create(size, uid)
            try:
                heap.aperture.map_file(block.offset, size, fd)
            except BaseException:
                self.store.remove(path)
                raise
            finally:
                os.close(fd)
        except BaseException:
            heap.allocator.free(block)
            raise
        self.bo_count += 1
        return Placement(domain, block, path)

    def storage(self, p: Placement) -> np.ndarray | None:
        """The uint8 view of a placement's bytes in its aperture (what the MMU maps);
        None in SYSTEM, where no engine reaches them."""
        if p.domain == SYSTEM:
            return None
        return self.heaps[p.domain].window[p.offset: p.offset + p.block.size]

    def move(self, p: Placement, domain: int, size: int, alignment: int) -> Placement:
        """The same file (`size` bytes) placed in `domain` instead: mapped over a new
        block (aligned to `alignment`) of that aperture (VRAM, GTT) or in no aperture (SYSTEM); the old range
        gets zero pages back and its block is freed. No byte is copied: the file is
        the BO's only copy, so every CPU mapping of it sees the same pages before and
        after. Raises MemoryError when `domain` has no room, OSError when the file
        cannot be mapped; `p` is untouched then."""
        block = None
        if domain != SYSTEM:
            heap = self.heaps[domain]
            block = heap.allocator.alloc(size, max(alignment, PAGE_SIZE))
            try:
                fd = os.open(p.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    heap.aperture.map_file(block.offset, size, fd)
                finally:
                    os.close(fd)
            except BaseException:
                heap.allocator.free(block)
                raise
        self._release_range(p)
        return Placement(domain, block, p.path)

    def _release_range(self, p: Placement) -> None:
        if p.domain != SYSTEM:
            heap = self.heaps[p.domain]
            heap.aperture.zero(p.offset, p.block.size)
            heap.allocator.free(p.block)

    def free(self, p: Placement) -> None:
        """Zero pages back over the range, the file unlinked, the block freed (an
        on-chip placement only gives its block back)."""
        if p.domain in self.onchip.heaps:
            self.onchip.free(p.domain, p.block)
            return
        self._release_range(p)
        self.store.remove(p.path)
        self.bo_count -= 1

    def check(self) -> None:
        for heap in self.heaps.values():
            heap.allocator.check()
        self.onchip.check()

    def close(self) -> None:
        """Remove every BO file (daemon exit) of a store of its own. The apertures stay
        mapped while views of them live; they are released with the last one."""
        if self._own_store:
            self.store.close()
