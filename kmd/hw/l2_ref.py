"""The reference GPU L2 cache (`VGPU_HW=ref`): plain Python, the twin of the Cython
core's L2Cache (kmd/hw/_l2.pxi). docs/cache.md describes the model.

A write-back, write-allocate, fully associative cache of LINE-byte lines with LRU
replacement. A line is named by the host address of its first byte (the physical
memory behind the GPU VA, so two VAs of one BO share lines and two clients' VMs
never do); it is LINE bytes at a LINE-aligned offset of a 4 KiB page, so it never
leaves the page its PTE maps. Each line keeps a byte mask of what compute wrote:
a write-back stores those bytes only, so CPU or SDMA writes to the other bytes of
the line survive it.

The compute units make one *request* per run of consecutive lanes that touch the
same line (a wave's coalesced access): through an `L2Port`, `begin()` starts an
instruction, and a hit is counted only when an access's line differs from the
previous access's (a miss always is: another engine may have evicted the line).
"""
from __future__ import annotations

import collections
import ctypes
import threading

from vgpu.pm4 import L2_INVALIDATE, L2_WRITEBACK

LINE = 128                          # bytes: one wave's 32 dwords
DEFAULT_SIZE = 4 << 20              # bytes: Vega 10's L2
L2_COUNTERS = ("l2_hits", "l2_misses", "l2_writebacks", "l2_evictions", "l2_invalidations")


class _Line:
    __slots__ = ("data", "dirty")

    def __init__(self, data: bytearray) -> None:
        self.data = data
        self.dirty = 0              # bit b: byte b was written by compute


def write_dirty(host: int, data, dirty: int) -> None:
    """Store the bytes of `data` whose bit is set in `dirty` to memory at `host`."""
    b = 0
    while dirty >> b:
        if not dirty >> b & 1:
            b += 1
            continue
        e = b
        while dirty >> e & 1:
            e += 1
        ctypes.memmove(host + b, bytes(data[b:e]), e - b)
        b = e


class L2Port:
    """One compute engine's access to the L2: its request tracking and the counters
    of its dispatch in progress. Each access runs under the cache's lock."""

    def __init__(self, l2: L2Cache) -> None:
        self.l2 = l2
        self._key = None            # the line of this instruction's previous access
        self.tally = dict.fromkeys(L2_COUNTERS, 0)

    def begin(self) -> None:
        """A new instruction: its first access is a new request."""
        self._key = None

    def load(self, host: int, va: int, n: int) -> bytes:
        """`n` bytes at `host` (GPU address `va`) through the cache; the bytes lie in
        one line (accesses are naturally aligned, at most 8 bytes)."""
        with self.l2._lock:
            line, off = self._at(host, va)
            return bytes(line.data[off:off + n])

    def store(self, host: int, va: int, data: bytes) -> None:
        """Write `data` at `host` into the cache (write-allocate), bytes marked dirty."""
        with self.l2._lock:
            line, off = self._at(host, va)
            line.data[off:off + len(data)] = data
            line.dirty |= ((1 << len(data)) - 1) << off

    def _at(self, host: int, va: int):
        off = va & (LINE - 1)       # the page offset names the line (docs/cache.md)
        key = host - off
        line = self.l2._lines.get(key)
        if line is None:
            line = self.l2._fill(key, self.tally)
        else:
            self.l2._lines.move_to_end(key)
            if key != self._key:
                self.l2._count(self.tally, "l2_hits")
        self._key = key
        return line, off

    def take_tally(self) -> dict[str, int]:
        """The counters since the last call (a dispatch's), and start again."""
        out, self.tally = self.tally, dict.fromkeys(L2_COUNTERS, 0)
        return out


class L2Cache:
    """One device's L2, shared by its compute engines. `size` bytes (a positive
    multiple of LINE)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < LINE or size % LINE:
            raise ValueError(f"L2Cache: size {size} is not a positive multiple of {LINE}")
        self.size = size
        self.capacity = size // LINE
        self._lines: collections.OrderedDict[int, _Line] = collections.OrderedDict()  # LRU first
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(L2_COUNTERS, 0)

    def port(self) -> L2Port:
        return L2Port(self)

    def _count(self, tally: dict, name: str, n: int = 1) -> None:
        self._totals[name] += n
        tally[name] += n

    def _fill(self, key: int, tally: dict) -> _Line:
        """A miss (under the lock): evict the least recently used line when full
        (writing its dirty bytes back), then read the line from memory."""
        self._count(tally, "l2_misses")
        if len(self._lines) >= self.capacity:
            victim_key, victim = self._lines.popitem(last=False)
            self._count(tally, "l2_evictions")
            if victim.dirty:
                write_dirty(victim_key, victim.data, victim.dirty)
                self._count(tally, "l2_writebacks")
        line = self._lines[key] = _Line(bytearray(ctypes.string_at(key, LINE)))
        return line

    # -- the command processor's side ---------------------------------------------------
    def sync(self, actions: int) -> dict[str, int]:
        """Do the cache actions of a RELEASE_MEM / ACQUIRE_MEM (vgpu.pm4 L2_* flags):
        L2_WRITEBACK stores every dirty line's written bytes (the line stays, clean);
        L2_INVALIDATE drops every clean line (dirty ones stay: an invalidate never
        loses a write); both: everything written back, then the cache is empty.
        Returns {'l2_writebacks': lines written, 'l2_invalidations': lines dropped}."""
        wb = inv = 0
        with self._lock:
            if actions & L2_WRITEBACK:
                for key, line in self._lines.items():
                    if line.dirty:
                        write_dirty(key, line.data, line.dirty)
                        line.dirty = 0
                        wb += 1
            if actions & L2_INVALIDATE:
                for key in [k for k, line in self._lines.items() if not line.dirty]:
                    del self._lines[key]
                    inv += 1
            self._totals["l2_writebacks"] += wb
            self._totals["l2_invalidations"] += inv
        return {"l2_writebacks": wb, "l2_invalidations": inv}

    # -- inspection (tests, debugfs) ----------------------------------------------------
    def counters(self) -> dict[str, int]:
        """The device's totals since it was made."""
        with self._lock:
            return dict(self._totals)

    def lines(self) -> list[tuple[int, bytes, int]]:
        """(host address, data, dirty byte mask) of each line, least recently used first."""
        with self._lock:
            return [(key, bytes(line.data), line.dirty) for key, line in self._lines.items()]
