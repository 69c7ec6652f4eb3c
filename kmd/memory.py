"""Backing store of the emulated device: the VRAM aperture and GTT pages.

VRAM is one anonymous mapping (page aligned, zero pages until touched) carved up by
the buddy allocator; a GTT BO gets its own page-aligned host buffer. Both are handed
to the hardware as uint8 numpy arrays, which the MMU maps page by page.
"""
import mmap

import numpy as np

from .vram import PAGE_SIZE, VramAllocator


def host_pages(size: int) -> np.ndarray:
    """A zeroed, page-aligned uint8 array of `size` bytes (anonymous mmap)."""
    return np.frombuffer(mmap.mmap(-1, max(size, PAGE_SIZE)), dtype=np.uint8)[:size]


class DeviceMemory:
    """VRAM (buddy-allocated) and GTT (host memory, accounted against a limit)."""

    def __init__(self, vram_size: int, gtt_size: int):
        self.vram = host_pages(vram_size)
        self.vram_allocator = VramAllocator(vram_size)
        self.gtt_size = gtt_size
        self.gtt_used = 0

    def alloc_gtt(self, size: int) -> np.ndarray:
        if self.gtt_used + size > self.gtt_size:
            raise MemoryError(f"GTT full ({self.gtt_used} of {self.gtt_size} bytes used)")
        self.gtt_used += size
        return host_pages(size)

    def free_gtt(self, size: int) -> None:
        self.gtt_used -= size
