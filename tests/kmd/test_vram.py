"""The buddy allocator: alignment, trimming, coalescing, exhaustion."""
import random

import pytest

from kmd.vram import PAGE_SIZE, VramAllocator

MiB = 1 << 20


def test_min_block_and_alignment():
    v = VramAllocator(16 * MiB)
    a = v.alloc(1)
    assert a.size == PAGE_SIZE and a.offset % PAGE_SIZE == 0
    b = v.alloc(4096, 64 * 1024)
    c = v.alloc(4096, 2 * MiB)
    assert b.offset % (64 * 1024) == 0 and c.offset % (2 * MiB) == 0
    for x in (a, b, c):
        v.free(x)
    v.check()
    assert v.used == 0 and v.largest_free_block() == 16 * MiB


def test_trim_returns_tail():
    v = VramAllocator(16 * MiB)
    a = v.alloc(6 * MiB)  # 8 MiB block trimmed to 6 MiB: 2 MiB goes back
    assert a.size == 6 * MiB
    assert v.free_bytes == 10 * MiB
    b = v.alloc(2 * MiB)
    assert b.offset == 6 * MiB
    v.free(a)
    v.free(b)
    v.check()
    assert v.largest_free_block() == 16 * MiB


def test_coalesce_after_fragmentation():
    v = VramAllocator(1 * MiB)
    blocks = [v.alloc(PAGE_SIZE) for _ in range(256)]
    with pytest.raises(MemoryError):
        v.alloc(PAGE_SIZE)
    for b in blocks[::2]:
        v.free(b)
    with pytest.raises(MemoryError):
        v.alloc(2 * PAGE_SIZE)  # only isolated 4 KiB holes
    for b in blocks[1::2]:
        v.free(b)
    v.check()
    assert v.alloc(1 * MiB).offset == 0


def test_non_power_of_two_size():
    v = VramAllocator(96 * MiB)
    a = v.alloc(64 * MiB)
    b = v.alloc(32 * MiB)
    with pytest.raises(MemoryError):
        v.alloc(PAGE_SIZE)
    v.free(a)
    v.free(b)
    v.check()


def test_bad_arguments():
    v = VramAllocator(MiB)
    with pytest.raises(ValueError):
        v.alloc(0)
    with pytest.raises(ValueError):
        v.alloc(4096, 3000)
    with pytest.raises(MemoryError):
        v.alloc(2 * MiB)


def test_random_workload_keeps_invariants():
    v = VramAllocator(64 * MiB)
    rng = random.Random(7)
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            v.free(live.pop(rng.randrange(len(live))))
        else:
            try:
                a = v.alloc(rng.choice([4096, 5000, 65536, MiB, 3 * MiB]), rng.choice([4096, 65536, 2 * MiB]))
                live.append(a)
            except MemoryError:
                pass
        v.check()
    spans = sorted((a.offset, a.offset + a.size) for a in live)
    assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:]))
    for a in live:
        v.free(a)
    v.check()
    assert v.used == 0 and v.largest_free_block() == 64 * MiB
