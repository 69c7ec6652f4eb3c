"""Device memory: GPU buffers, the caching allocator, and the runtime's own GTT
buffers (IB buffers for streams, timestamp cells for events).

Every device allocation is a VRAM BO mapped at a VA from libvgpu's VA manager, and
mapped for the CPU too the first time a host copy touches it (GpuBuffer.host_array;
the map lives as long as the block's BO). The pool hands out blocks of a few size
classes and keeps freed blocks for reuse, as PyTorch's CUDA caching allocator does,
because GEM_CREATE + GEM_VA are two ioctls and a fresh BO is zeroed by the KMD:

- up to 2 MiB: powers of two from 4 KiB (4K, 8K, ... 1M, 2M);
- above: the request rounded up to a multiple of 2 MiB (BO and VA 2 MiB aligned).

A freed block may still be in use by work queued on a stream; it remembers each
stream's position at the free, and is reused only after that work is done.

The runtime's GTT buffers are CPU-mapped at once and recycled the same way: an IB
buffer once the submission that used it retired (umd/stream.py), an event's cell
once its stream passed the timestamp write (umd/event.py). They live here, with the
Device that owns them (umd/device.py), so that the device needs neither the stream
nor the event module.
"""
from __future__ import annotations

import bisect
import contextlib
from dataclasses import dataclass, field

import numpy as np

import libvgpu
from vgpu import uapi

from . import debug
from .debug import DebugFlag
from .errors import OutOfMemory

PAGE = 4096
MIN_BLOCK = 4096
LARGE_BLOCK = 2 << 20


def size_class(nbytes: int) -> int:
    """The block size the pool uses for ``nbytes``."""
    if nbytes <= MIN_BLOCK:
        return MIN_BLOCK
    if nbytes <= LARGE_BLOCK:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // LARGE_BLOCK) * LARGE_BLOCK


class GpuBuffer:
    """A BO with a VA mapping and a CPU map: made at once with ``cpu=True`` (IB and
    event buffers), or on the first :meth:`host_array` (pool blocks, for host copies).
    The map is the BO's shared pages (libvgpu/bo.py), kept until :meth:`free`.
    With ``guard``, the VA range has ``guard`` unmapped bytes on each side of the BO
    (memcheck). Half-done allocation is undone."""

    def __init__(self, dev: libvgpu.Device, size: int, domain: int, *, cpu: bool = False,
                 alignment: int = PAGE, flags: int = 0, guard: int = 0):
        self.size = size
        self.bo = libvgpu.bo_alloc(dev, size, alignment, domain)
        self.va = self.cpu = self._array = None
        try:
            self.va = libvgpu.va_range_alloc(dev, size + 2 * guard, alignment)
            libvgpu.bo_va_op(self.bo, 0, size, self.va.address + guard, flags)
            self.cpu = self.bo.cpu_map() if cpu else None
        except BaseException:
            if self.va is not None:
                self.va.free()
            self.bo.free()
            raise
        self.address = self.va.address + guard

    def host_array(self) -> np.ndarray:
        """A flat uint8 numpy view of the whole BO through its CPU map, mapped on the
        first call and kept until :meth:`free`."""
        if self._array is None:
            if self.bo is None:
                raise ValueError(f"{self!r} was freed")
            if self.cpu is None:
                self.cpu = self.bo.cpu_map()
                debug.log(DebugFlag.MEM, f"CPU map of the {self.size:#x} BO at {self.address:#x}")
            self._array = np.frombuffer(self.cpu, np.uint8)
        return self._array

    def free(self, keep_va: bool = False):
        """Unmap and free the BO and its VA range; with ``keep_va`` the VA range stays
        reserved and is returned (memcheck's quarantine frees it later)."""
        if self.bo is None:
            return None
        bo, self.bo = self.bo, None
        try:
            if self.cpu is not None:
                self._array = self.cpu = None    # no view left, so the unmap is immediate
                bo.cpu_unmap()
            if bo.dev.fd >= 0:
                libvgpu.bo_va_op(bo, 0, self.size, self.address, 0, uapi.AMDGPU_VA_OP_UNMAP)
        finally:
            if not keep_va:
                self.va.free()
            bo.free()
        return self.va

    def __repr__(self) -> str:
        return f"<GpuBuffer {self.size:#x} at {self.address:#x}>"


@dataclass(eq=False)
class Block:
    """One pool block: a VRAM buffer of a size class (with its CPU map once a host
    copy used it: ``buf.host_array()``)."""
    buf: GpuBuffer
    size: int
    release_marks: list = field(default_factory=list)   # [(stream, mark)] at the last free

    @property
    def ptr(self) -> int:
        return self.buf.address


class Allocation:
    """``nbytes`` of device memory at GPU VA ``ptr`` (a pool block). ``free()``
    returns it to the pool; so does garbage collection."""

    def __init__(self, pool: "MemoryPool", block: Block, nbytes: int):
        self.pool, self.block, self.nbytes, self.ptr = pool, block, nbytes, block.ptr

    @property
    def bo(self) -> libvgpu.Bo:
        return self.block.buf.bo

    def free(self) -> None:
        if self.block is None:
            return
        if self.pool.deferred is not None:     # inside umd.defer_cleanup(): at its end
            self.pool.deferred.append(self)
        else:
            self.pool.free(self)

    def __del__(self):
        try:
            self.free()
        except Exception:   # interpreter shutdown, closed device
            pass

    def __repr__(self) -> str:
        return f"<Allocation {self.nbytes} bytes at {self.ptr:#x}>"


class MemoryPool:
    """The caching allocator of one Device (see the module docstring)."""

    def __init__(self, device):
        self.device = device
        self._free: dict[int, list[Block]] = {}     # size class -> cached blocks
        self._live: dict[int, Block] = {}           # ptr -> block handed out
        self._starts: list[int] = []                # sorted ptrs of every block (lookup)
        self._blocks: dict[int, Block] = {}         # ptr -> every block the pool owns
        self.in_use = self.cached = self.peak = 0
        self.allocs = self.hits = self.misses = self.frees = 0
        self.deferred: list[Allocation] | None = None   # frees held by defer_cleanup()
        self._defer_depth = 0

    # -- allocation -----------------------------------------------------------------
    def alloc(self, nbytes: int, what=None) -> Allocation:
        """A block of at least ``nbytes`` (> 0) for ``what`` (the DeviceArray being
        made; memcheck's pool describes it). Raises :class:`OutOfMemory`."""
        if nbytes <= 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        size = size_class(nbytes)
        cached = self._free.get(size)
        if cached:
            block = cached.pop()
            self.cached -= size
            self.hits += 1
            for stream, mark in block.release_marks:   # work that used the block must be done
                stream.wait_mark(mark)
            block.release_marks = []
            debug.log(DebugFlag.MEM, f"alloc {nbytes} -> cached {size:#x} block at {block.ptr:#x}")
        else:
            block = self._new_block(size, nbytes)
            self.misses += 1
            debug.log(DebugFlag.MEM, f"alloc {nbytes} -> new {size:#x} block at {block.ptr:#x}")
        self._live[block.ptr] = block
        self.allocs += 1
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return Allocation(self, block, nbytes)

    def _new_block(self, size: int, nbytes: int) -> Block:
        alignment = LARGE_BLOCK if size >= LARGE_BLOCK else PAGE
        try:
            buf = GpuBuffer(self.device.lv, size, uapi.AMDGPU_GEM_DOMAIN_VRAM, alignment=alignment)
        except libvgpu.VgpuOutOfMemory:
            if not self.cached:
                raise self._oom(nbytes, size) from None
            debug.log(DebugFlag.MEM, f"VRAM full for {size:#x}: releasing {self.cached} cached bytes")
            self.empty_cache()
            try:
                buf = GpuBuffer(self.device.lv, size, uapi.AMDGPU_GEM_DOMAIN_VRAM, alignment=alignment)
            except libvgpu.VgpuOutOfMemory as e:
                raise self._oom(nbytes, size) from e
        block = Block(buf, size)
        self._blocks[block.ptr] = block
        bisect.insort(self._starts, block.ptr)
        return block

    def _oom(self, nbytes: int, size: int) -> OutOfMemory:
        try:
            heap = libvgpu.query_heap_info(self.device.lv, uapi.AMDGPU_GEM_DOMAIN_VRAM)
            device = f"; the device has {heap.heap_usage} of {heap.total_heap_size} bytes of VRAM in use"
        except OSError:
            device = ""
        return OutOfMemory(f"cannot allocate {nbytes} bytes ({size} with rounding) of VRAM: this process "
                           f"holds {self.in_use} bytes{device}. Free arrays you no longer need, or mount "
                           f"with a larger --vram")

    def _detach(self, allocation: Allocation) -> Block | None:
        """Take a live allocation's block out of use and count the free; None when the
        allocation was already freed (a second free does nothing)."""
        block, allocation.block = allocation.block, None
        if block is None or self._live.pop(block.ptr, None) is None:
            return None
        self.frees += 1
        self.in_use -= block.size
        return block

    def free(self, allocation: Allocation) -> None:
        """Return an allocation's block to the cache."""
        block = self._detach(allocation)
        if block is None:
            return
        block.release_marks = [(s, m) for s in list(self.device.streams) if (m := s.busy_mark()) is not None]
        self._free.setdefault(block.size, []).append(block)
        self.cached += block.size
        debug.log(DebugFlag.MEM, f"free {block.size:#x} block at {block.ptr:#x} (cached)")

    @contextlib.contextmanager
    def defer_cleanup(self):
        """Hold every free until the outermost ``with`` ends (Numba's
        defer_cleanup): memory freed inside is not reused inside."""
        if self._defer_depth == 0:
            self.deferred = []
        self._defer_depth += 1
        try:
            yield
        finally:
            self._defer_depth -= 1
            if self._defer_depth == 0:
                held, self.deferred = self.deferred, None
                for allocation in held:
                    allocation.free()

    def empty_cache(self) -> None:
        """Free every cached block's BO (after the work that used them)."""
        released = self.cached
        for blocks in self._free.values():
            for block in blocks:
                for stream, mark in block.release_marks:
                    stream.wait_mark(mark)
                self._release(block)
        self._free.clear()
        self.cached = 0
        debug.log(DebugFlag.MEM, f"empty_cache: released {released} bytes")

    def _release(self, block: Block) -> None:
        del self._blocks[block.ptr]
        self._starts.remove(block.ptr)
        block.buf.free()

    def release_all(self) -> None:
        """At device close: free every BO, live or cached."""
        for block in list(self._blocks.values()):
            block.buf.free()
        self._blocks.clear()
        self._starts.clear()
        self._free.clear()
        self._live.clear()
        self.in_use = self.cached = 0

    # -- misuse (umd/memcheck.py's pool reports these) -------------------------------
    def freed_again(self, allocation: Allocation, owner) -> None:
        """``owner`` (a DeviceArray) freed ``allocation`` a second time: nothing to do."""

    def used_after_free(self, allocation: Allocation, owner) -> None:
        raise ValueError(f"{type(owner).__name__} was freed")

    def explain_fault(self, compiled, dump_text, pc, line, errno, **fields):
        """A memcheck report for a kernel's page fault, or None (always, here)."""
        return None

    # -- queries ----------------------------------------------------------------------
    def lookup(self, ptr: int) -> Block | None:
        """The block that contains device address ``ptr``, if the pool owns one."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i >= 0:
            block = self._blocks[self._starts[i]]
            if ptr < block.ptr + block.size:
                return block
        return None

    def stats(self) -> dict:
        """Bytes in use, cached and peak (block sizes), plus call counters."""
        return {"in_use": self.in_use, "cached": self.cached, "peak": self.peak,
                "reserved": self.in_use + self.cached, "allocs": self.allocs, "frees": self.frees,
                "cache_hits": self.hits, "cache_misses": self.misses}

    def reset_peak(self) -> None:
        self.peak = self.in_use


# -- the runtime's GTT buffers ----------------------------------------------------------
IB_BYTES = 64 * 1024       # one IB buffer: packets from the bottom, kernargs from the top
SLOT_BYTES = 8             # one event timestamp (u64 ns)
SLOTS_PAGE = 4096


class IbBuffer:
    """A GTT buffer the CPU writes IBs (from the bottom) and kernargs (from the top) into."""

    def __init__(self, lv: libvgpu.Device):
        self.buf = GpuBuffer(lv, IB_BYTES, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True,
                             flags=uapi.AMDGPU_VM_PAGE_READABLE)
        self.va, self.cpu, self.bo = self.buf.address, self.buf.cpu, self.buf.bo


class IbPool:
    """The IB buffers of a device. The stream gives one back when the submission that
    used it retired; it is reused from then on."""

    def __init__(self, lv: libvgpu.Device):
        self.lv, self._free, self._all = lv, [], []

    def acquire(self) -> IbBuffer:
        if self._free:
            return self._free.pop()
        ib = IbBuffer(self.lv)
        self._all.append(ib)
        return ib

    def release(self, ib: IbBuffer) -> None:
        self._free.append(ib)

    def free(self) -> None:
        for ib in self._all:
            ib.buf.free()
        self._all.clear()
        self._free.clear()


class EventSlots:
    """8-byte timestamp cells in GTT pages (grown a page at a time). A cell whose
    timestamp write may still be queued is reused only once its stream passed it."""

    def __init__(self, lv: libvgpu.Device):
        self.lv = lv
        self._pages: list[GpuBuffer] = []
        self._free: list[tuple[GpuBuffer, int]] = []
        self._deferred: list[tuple[tuple[GpuBuffer, int], object, int]] = []   # (slot, stream, mark)

    def acquire(self) -> tuple[GpuBuffer, int]:
        """A free cell: (its page, its byte offset in the page)."""
        if not self._free and self._deferred:
            still = []
            for slot, stream, mark in self._deferred:
                if stream.completed_mark >= mark:
                    self._free.append(slot)
                else:
                    still.append((slot, stream, mark))
            self._deferred = still
        if not self._free:
            page = GpuBuffer(self.lv, SLOTS_PAGE, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
            self._pages.append(page)
            self._free = [(page, off) for off in range(SLOTS_PAGE - SLOT_BYTES, -1, -SLOT_BYTES)]
        return self._free.pop()

    def release(self, slot, stream=None, mark: int = 0) -> None:
        """Give a cell back; with (stream, mark), once the stream is past mark.
        Never waits: it runs from Event.__del__, i.e. at any allocation."""
        if stream is not None and stream.completed_mark < mark:
            self._deferred.append((slot, stream, mark))
        else:
            self._free.append(slot)

    def free(self) -> None:
        for page in self._pages:
            page.free()
        self._pages.clear()
        self._free.clear()
