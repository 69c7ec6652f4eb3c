"""VramAllocator: a buddy allocator over the VRAM aperture (after Linux drm_buddy).

Blocks are 4 KiB << order and naturally aligned to their size, so an alignment
request is honoured by choosing a large enough order. Allocations are contiguous:
the block found is trimmed to the size asked for (drm_buddy's "contiguous +
trim"), and the unused tail goes back to the free lists. Freed blocks coalesce
with their buddy whenever the buddy is free too.
"""
from dataclasses import dataclass, field

PAGE_SIZE = 4096


@dataclass
class VramAllocation:
    """A contiguous range [offset, offset + size) made of buddy blocks."""

    offset: int
    size: int
    blocks: list[tuple[int, int]] = field(default_factory=list)  # (offset, order)


class VramAllocator:
    """Buddy allocator. `alloc` raises MemoryError when no block fits."""

    def __init__(self, size: int):
        if size < PAGE_SIZE or size % PAGE_SIZE:
            raise ValueError("VRAM size must be a nonzero multiple of 4 KiB")
        self.size = size
        self.used = 0
        self.max_order = (size // PAGE_SIZE).bit_length() - 1
        self._free: list[set[int]] = [set() for _ in range(self.max_order + 1)]
        # Cover a size that is not a power of two with naturally aligned top blocks.
        offset = 0
        for order in range(self.max_order, -1, -1):
            if size - offset >= PAGE_SIZE << order:
                self._free[order].add(offset)
                offset += PAGE_SIZE << order
        self._roots = self._block_map()

    def _block_map(self) -> dict[int, int]:
        return {off: order for order, offs in enumerate(self._free) for off in offs}

    def alloc(self, size: int, alignment: int = PAGE_SIZE) -> VramAllocation:
        """Allocate `size` bytes (rounded up to 4 KiB) aligned to `alignment`
        (a power of two). Raises ValueError on bad arguments, MemoryError when full."""
        if size <= 0 or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError("size must be positive and alignment a power of two")
        pages = -(-size // PAGE_SIZE)
        order = max((pages - 1).bit_length(), (max(alignment, PAGE_SIZE) // PAGE_SIZE).bit_length() - 1)
        if order > self.max_order:
            raise MemoryError(f"no block of {PAGE_SIZE << order} bytes exists")
        found = next((o for o in range(order, self.max_order + 1) if self._free[o]), None)
        if found is None:
            raise MemoryError(f"no free block of {PAGE_SIZE << order} bytes")
        offset = min(self._free[found])
        self._free[found].discard(offset)
        while found > order:  # split down, the upper half stays free
            found -= 1
            self._free[found].add(offset + (PAGE_SIZE << found))
        blocks: list[tuple[int, int]] = []
        self._trim(offset, order, pages, blocks)
        self.used += pages * PAGE_SIZE
        return VramAllocation(offset, pages * PAGE_SIZE, blocks)

    def _trim(self, offset: int, order: int, pages: int, keep: list) -> None:
        """Keep the first `pages` pages of block (offset, order); free the rest."""
        if pages == 1 << order:
            keep.append((offset, order))
            return
        half = 1 << (order - 1)
        upper = offset + half * PAGE_SIZE
        if pages <= half:
            self._free[order - 1].add(upper)
            self._trim(offset, order - 1, pages, keep)
        else:
            keep.append((offset, order - 1))
            self._trim(upper, order - 1, pages - half, keep)

    def free(self, allocation: VramAllocation) -> None:
        """Return every block of `allocation`, coalescing buddies."""
        for offset, order in allocation.blocks:
            self._free_block(offset, order)
        self.used -= allocation.size
        allocation.blocks = []

    def _free_block(self, offset: int, order: int) -> None:
        while order < self.max_order:
            buddy = offset ^ (PAGE_SIZE << order)
            if buddy not in self._free[order] or self._roots.get(offset) == order:
                break  # a root block has no buddy to merge with
            self._free[order].discard(buddy)
            offset = min(offset, buddy)
            order += 1
        self._free[order].add(offset)

    @property
    def free_bytes(self) -> int:
        return self.size - self.used

    def largest_free_block(self) -> int:
        return max((PAGE_SIZE << o for o, s in enumerate(self._free) if s), default=0)

    def check(self) -> None:
        """Assert the allocator invariants (used by tests and the fuzzer):
        free blocks are aligned, disjoint, inside VRAM, no two free buddies coexist,
        and free + used covers VRAM exactly."""
        spans = []
        for order, offs in enumerate(self._free):
            for off in offs:
                size = PAGE_SIZE << order
                assert off % size == 0, f"free block {off:#x} order {order} misaligned"
                assert off + size <= self.size, "free block outside VRAM"
                buddy = off ^ size
                if self._roots.get(off) != order and self._roots.get(buddy) != order:
                    assert buddy not in offs, f"buddies {off:#x}/{buddy:#x} not coalesced"
                spans.append((off, off + size))
        spans.sort()
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            assert a1 <= b0, "free blocks overlap"
        assert sum(b - a for a, b in spans) + self.used == self.size, "free + used != size"
