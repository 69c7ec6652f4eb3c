# cython: language_level=3
"""Cython core of the emulated hardware: page table walker, SDMA engine, compute unit.

Same API and byte-for-byte behaviour as kmd/hw/ref.py (the reference); see
docs/hw.md for the rules.  Hot paths (translation, memmove/memset over runs of
host-contiguous pages, POLL_REGMEM sleeps) run without the GIL; a small SDMA IB of
bounded work (held_ib, SDMA_HELD_IB_DW in kmd/hw/sdma.py) runs with it held.
"""
from cython.operator cimport dereference as deref
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove, memset
from libcpp.atomic cimport atomic
from libcpp.shared_mutex cimport shared_mutex
from libcpp.unordered_map cimport unordered_map
from libcpp.vector cimport vector
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.unistd cimport usleep

from kmd.hw.ih import InterruptRing
from kmd.hw.mmu import (ACCESS_KINDS, FAULT_REASONS, PTE_EXEC, PTE_READ, PTE_WRITE, GpuFault,
                        PinnedBuffers, check_map_args, check_unmap_args)
from kmd.hw.sdma import (REASON_ILLEGAL_OPCODE, REASON_TRUNCATED, SdmaResult, SdmaResume,
                         check_resume as sdma_check_resume)

# Generated at build time from the Python definitions (kmd/hw/gen_defs.py);
# it also defines COMPILED_DEFS, the compiled values by name.
include "_sdma_defs.pxi"

__all__ = ["PageTable", "SdmaEngine", "ComputeEngine", "L2Cache", "InterruptRing", "GpuFault", "PTE_READ", "PTE_WRITE",
           "PTE_EXEC", "userq_wait", "userq_done"]

# Large copies bypass the cache with streaming (non-temporal) stores, as glibc's
# memmove does past its own threshold, which a 64 MiB numpy copy reaches but a 4 MiB
# SDMA packet does not: stores that overwrite whole cache lines then cost no
# read-for-ownership (64 MiB in 3.5 ms instead of 4.6 ms here). Overlapping copies
# stay one memmove. The dword fill is one `rep stosq` per host run (vgpu_fill64).
cdef extern from *:
    """
    #include <cstdint>
    #include <cstring>
    #if defined(__x86_64__)
    #include <emmintrin.h>
    #endif
    static uint64_t VGPU_STREAM_BYTES = 1u << 20;

    /* n is a multiple of 8, p 8-byte aligned. On x86-64, `rep stosq`: with ERMS the
       CPU writes whole lines without reading them first, which a store loop does not
       get (64 MiB into a BO's shared pages: 2.35-2.45 ms against 2.45-2.8 ms for the
       loop and 2.4-2.5 ms for streaming stores, same machine). Splitting a fill
       between two host threads was measured too: a little faster on an idle
       machine, about 30 % slower on a loaded one. */
    static void vgpu_fill64(uint8_t* p, uint64_t n, uint64_t v) {
    #if defined(__x86_64__)
        uint64_t count = n / 8;
        __asm__ volatile("rep stosq" : "+D"(p), "+c"(count) : "a"(v) : "memory");
    #else
        uint64_t* q = (uint64_t*)p;
        for (uint64_t i = 0; i < n / 8; i++) q[i] = v;
    #endif
    }

    static void vgpu_move(uint8_t* d, const uint8_t* s, uint64_t n) {
    #if defined(__x86_64__)
        if (n >= VGPU_STREAM_BYTES && (d + n <= s || s + n <= d)) {
            while (n && ((uintptr_t)d & 15)) { *d++ = *s++; n--; }
            for (; n >= 64; n -= 64, d += 64, s += 64) {
                __m128i a = _mm_loadu_si128((const __m128i*)s);
                __m128i b = _mm_loadu_si128((const __m128i*)(s + 16));
                __m128i c = _mm_loadu_si128((const __m128i*)(s + 32));
                __m128i e = _mm_loadu_si128((const __m128i*)(s + 48));
                _mm_stream_si128((__m128i*)d, a);
                _mm_stream_si128((__m128i*)(d + 16), b);
                _mm_stream_si128((__m128i*)(d + 32), c);
                _mm_stream_si128((__m128i*)(d + 48), e);
            }
            _mm_sfence();
            memcpy(d, s, n);
            return;
        }
    #endif
        memmove(d, s, n);
    }
    """
    void vgpu_fill64(uint8_t* p, uint64_t n, uint64_t v) noexcept nogil
    void vgpu_move(uint8_t* d, const uint8_t* s, uint64_t n) noexcept nogil
    uint64_t VGPU_STREAM_BYTES


def set_stream_bytes(uint64_t n):
    """Copies of at least `n` bytes use streaming stores (tests, benchmarks)."""
    global VGPU_STREAM_BYTES
    VGPU_STREAM_BYTES = n


DEF PAGE_SHIFT = 12
DEF PAGE_SIZE = 4096
DEF PAGE_MASK = 4095

cdef enum Access:
    ACCESS_READ = 0
    ACCESS_WRITE = 1
    ACCESS_EXEC = 2

cdef enum Reason:
    REASON_UNMAPPED = 0
    REASON_PERMISSION = 1

cdef struct Pte:
    uint8_t* host       # host address of the page's first byte
    uint32_t flags
    uint32_t slot       # which mapped buffer it points into (keeps it alive)

cdef struct Run:
    uint8_t* host
    uint64_t length

cdef struct Fault:
    uint64_t va
    int access
    int reason


cdef object make_fault(const Fault* f):
    return GpuFault(f.va, ACCESS_KINDS[f.access], FAULT_REASONS[f.reason])


cdef inline uint32_t access_flag(int access) noexcept nogil:
    if access == ACCESS_READ:
        return C_PTE_READ
    if access == ACCESS_WRITE:
        return C_PTE_WRITE
    return C_PTE_EXEC


cdef void fill_run(uint8_t* p, uint64_t n, uint32_t value, uint64_t phase,
                   int elem_size) noexcept nogil:
    """Fill n bytes; for dwords, byte i holds byte (phase + i) % 4 of value (LE)."""
    cdef uint64_t v64
    cdef uint32_t rot
    cdef int shift
    if elem_size == 1:
        value = (value & 0xFF) * <uint32_t>0x01010101   # every byte the same: any phase
    while n and (<uint64_t>p & 7):   # head: bytes up to 8-byte alignment
        p[0] = (value >> (8 * (phase & 3))) & 0xFF
        p += 1
        phase += 1
        n -= 1
    shift = 8 * (phase & 3)
    rot = (value >> shift) | (value << ((32 - shift) & 31)) if shift else value
    v64 = <uint64_t>rot | (<uint64_t>rot << 32)
    vgpu_fill64(p, n & ~(<uint64_t>7), v64)
    p += n & ~(<uint64_t>7)
    phase += n & ~(<uint64_t>7)
    n &= 7
    while n:
        p[0] = (value >> (8 * (phase & 3))) & 0xFF
        p += 1
        phase += 1
        n -= 1


cdef class PageTable:
    """A per-file GPU VM: 4 KiB pages of host numpy buffers (see docs/hw.md)."""

    cdef unordered_map[uint64_t, Pte] ptes
    cdef unordered_map[uint32_t, int64_t] slot_pages
    cdef shared_mutex lock
    cdef atomic[uint64_t] generation    # bumped by map/unmap: compute TLBs refill
    cdef dict _slots        # slot -> buffer
    cdef dict _slot_of      # id(buffer) -> slot
    cdef uint32_t _next_slot
    cdef object _pinned

    def __cinit__(self):
        self._slots = {}
        self._slot_of = {}
        self._next_slot = 1
        self._pinned = None

    # -- mapping -----------------------------------------------------------
    def map(self, va, buf, buf_offset, size, flags):
        check_map_args(va, buf, buf_offset, size, flags)
        cdef uint8_t[::1] mv = buf
        cdef uint8_t* base = &mv[0] + <uint64_t>buf_offset
        cdef uint64_t page = <uint64_t>va >> PAGE_SHIFT
        cdef uint64_t npages = <uint64_t>size >> PAGE_SHIFT
        cdef uint32_t pflags = flags
        cdef uint32_t slot
        cdef vector[uint32_t] freed
        key = id(buf)
        if key in self._slot_of:
            slot = self._slot_of[key]
        else:
            slot = self._next_slot
            self._next_slot += 1
            self._slot_of[key] = slot
            self._slots[slot] = buf
        with nogil:
            self.lock.lock()
            self._set_range(page, npages, base, pflags, slot, &freed)
            self.generation.fetch_add(1)
            self.lock.unlock()
        self._drop_slots(freed)

    def unmap(self, va, size):
        check_unmap_args(va, size)
        cdef uint64_t page = <uint64_t>va >> PAGE_SHIFT
        cdef uint64_t npages = <uint64_t>size >> PAGE_SHIFT
        cdef vector[uint32_t] freed
        with nogil:
            self.lock.lock()
            self._set_range(page, npages, NULL, 0, 0, &freed)
            self.generation.fetch_add(1)
            self.lock.unlock()
        self._drop_slots(freed)

    cdef void _set_range(self, uint64_t page, uint64_t npages, uint8_t* base, uint32_t flags,
                         uint32_t slot, vector[uint32_t]* freed) noexcept nogil:
        """Replace (base != NULL) or remove PTEs; caller holds the lock exclusively."""
        cdef uint64_t i
        cdef Pte pte
        for i in range(npages):
            it = self.ptes.find(page + i)
            if it != self.ptes.end():
                self.slot_pages[deref(it).second.slot] -= 1
                if self.slot_pages[deref(it).second.slot] == 0:
                    freed.push_back(deref(it).second.slot)
                if base == NULL:
                    self.ptes.erase(it)
            if base != NULL:
                pte.host = base + (i << PAGE_SHIFT)
                pte.flags = flags
                pte.slot = slot
                self.ptes[page + i] = pte
                self.slot_pages[slot] += 1
        # A slot can drop to zero and come back within one call (remapping the
        # same buffer), so only drop slots that are still empty now.
        cdef size_t k = 0
        cdef size_t j
        for j in range(freed.size()):
            if self.slot_pages[deref(freed)[j]] == 0:
                self.slot_pages.erase(deref(freed)[j])
                deref(freed)[k] = deref(freed)[j]
                k += 1
        freed.resize(k)

    cdef _drop_slots(self, vector[uint32_t]& freed):
        for slot in freed:
            buf = self._slots.pop(slot, None)
            if buf is not None:
                self._slot_of.pop(id(buf), None)
        self._pinned = None

    def translate(self, uint64_t va):
        """(host address of va, PTE flags), or (None, 0) when unmapped."""
        cdef Pte pte
        cdef bint found = False
        with nogil:
            self.lock.lock_shared()
            it = self.ptes.find(va >> PAGE_SHIFT)
            if it != self.ptes.end():
                pte = deref(it).second
                found = True
            self.lock.unlock_shared()
        if not found:
            return None, 0
        return <uint64_t>pte.host + (va & PAGE_MASK), pte.flags

    def mapped_pages(self):
        return self.ptes.size()

    def pin(self):
        if self._pinned is None:
            self._pinned = tuple(self._slots.values())
        return PinnedBuffers(self._pinned)

    # -- walking (nogil) ---------------------------------------------------
    cdef uint64_t _walk(self, uint64_t va, uint64_t n, int access, vector[Run]* runs,
                        Fault* fault) noexcept nogil:
        """Coalesced host runs for [va, va+n) up to the first bad page.

        Returns the op offset of the fault (fault filled in), or n when none.
        """
        cdef uint32_t need = access_flag(access)
        cdef uint64_t done = 0, cur, length
        cdef uint8_t* host
        cdef Run run
        cdef Run* last
        runs.clear()
        self.lock.lock_shared()
        while done < n:
            cur = va + done
            length = PAGE_SIZE - (cur & PAGE_MASK)
            if length > n - done:
                length = n - done
            it = self.ptes.find(cur >> PAGE_SHIFT)
            # cur < va: wrapped past the top of the VA space, where nothing is mapped.
            if cur < va or it == self.ptes.end() or not (deref(it).second.flags & need):
                fault.va = cur
                fault.access = access
                fault.reason = REASON_PERMISSION if (cur >= va and it != self.ptes.end()) \
                    else REASON_UNMAPPED
                self.lock.unlock_shared()
                return done
            host = deref(it).second.host + (cur & PAGE_MASK)
            if not runs.empty() and runs.back().host + runs.back().length == host:
                last = &deref(runs)[runs.size() - 1]    # in place: back() would copy
                last.length += length
            else:
                run.host = host
                run.length = length
                runs.push_back(run)
            done += length
        self.lock.unlock_shared()
        return n

    cdef int _copy(self, uint64_t dst, uint64_t src, uint64_t n, Fault* fault) noexcept nogil:
        cdef vector[Run] sruns, druns
        cdef Fault sf, df
        cdef uint64_t slimit = self._walk(src, n, ACCESS_READ, &sruns, &sf)
        cdef uint64_t dlimit = self._walk(dst, n, ACCESS_WRITE, &druns, &df)
        cdef uint64_t limit = slimit if slimit < dlimit else dlimit
        cdef size_t i = 0, j = 0
        cdef uint64_t doff = 0, soff = 0, done = 0, c
        while done < limit:
            c = druns[i].length - doff
            if sruns[j].length - soff < c:
                c = sruns[j].length - soff
            if limit - done < c:
                c = limit - done
            vgpu_move(druns[i].host + doff, sruns[j].host + soff, c)
            done += c
            doff += c
            soff += c
            if doff == druns[i].length:
                i += 1
                doff = 0
            if soff == sruns[j].length:
                j += 1
                soff = 0
        if slimit < n and slimit <= dlimit:
            fault[0] = sf
            return 1
        if dlimit < n:
            fault[0] = df
            return 1
        return 0

    cdef int _fill(self, uint64_t dst, uint32_t value, uint64_t n, int elem_size,
                   Fault* fault) noexcept nogil:
        cdef vector[Run] runs
        cdef uint64_t limit = self._walk(dst, n, ACCESS_WRITE, &runs, fault)
        cdef uint64_t done = 0, c
        cdef size_t i
        for i in range(runs.size()):
            c = runs[i].length
            if c > limit - done:
                c = limit - done
            fill_run(runs[i].host, c, value, done, elem_size)
            done += c
        return limit < n

    cdef int _write(self, uint64_t dst, const uint8_t* data, uint64_t n,
                    Fault* fault) noexcept nogil:
        cdef vector[Run] runs
        cdef uint64_t limit = self._walk(dst, n, ACCESS_WRITE, &runs, fault)
        cdef uint64_t done = 0
        cdef size_t i
        for i in range(runs.size()):
            memcpy(runs[i].host, data + done, runs[i].length)
            done += runs[i].length
        return limit < n

    cdef int _read(self, uint64_t src, uint8_t* out, uint64_t n, Fault* fault) noexcept nogil:
        cdef vector[Run] runs
        cdef uint64_t limit = self._walk(src, n, ACCESS_READ, &runs, fault)
        cdef uint64_t done = 0
        cdef size_t i
        if limit < n:
            return 1
        for i in range(runs.size()):
            memcpy(out + done, runs[i].host, runs[i].length)
            done += runs[i].length
        return 0

    # -- accesses (Python API) ---------------------------------------------
    def read(self, uint64_t va, uint64_t n):
        cdef Fault fault
        cdef int bad
        out = bytearray(n)
        cdef uint8_t[::1] mv
        pin = self.pin()    # buffers stay alive while the GIL is released
        if n == 0:
            return b""
        mv = out
        with nogil:
            bad = self._read(va, &mv[0], n, &fault)
        if bad:
            raise make_fault(&fault)
        return bytes(out)

    cdef bytes _read_held(self, uint64_t va, uint64_t n):
        """read() without releasing the GIL, for a few bytes (the caller pinned the
        buffers). The walk takes the table's lock shared; its holders release it
        without the GIL, so holding the GIL here cannot deadlock."""
        cdef Fault fault
        out = bytearray(n)
        cdef uint8_t[::1] mv
        if n == 0:
            return b""
        mv = out
        if self._read(va, &mv[0], n, &fault):
            raise make_fault(&fault)
        return bytes(out)

    def write(self, uint64_t va, data):
        cdef Fault fault
        cdef int bad
        cdef const uint8_t[::1] mv
        try:
            mv = memoryview(data).cast("B")
        except (TypeError, ValueError):
            mv = bytes(data)
        if mv.shape[0] == 0:
            return
        pin = self.pin()
        with nogil:
            bad = self._write(va, &mv[0], mv.shape[0], &fault)
        if bad:
            raise make_fault(&fault)

    def copy(self, uint64_t dst_va, uint64_t src_va, uint64_t n):
        cdef Fault fault
        cdef int bad
        pin = self.pin()
        with nogil:
            bad = self._copy(dst_va, src_va, n, &fault)
        if bad:
            raise make_fault(&fault)

    def fill(self, uint64_t dst_va, value, uint64_t n, int elem_size=4):
        cdef Fault fault
        cdef int bad
        cdef uint32_t v = value & 0xFFFFFFFF
        if elem_size != 1 and elem_size != 4:
            raise ValueError(f"fill: elem_size must be 1 or 4, not {elem_size}")
        pin = self.pin()
        with nogil:
            bad = self._fill(dst_va, v, n, elem_size, &fault)
        if bad:
            raise make_fault(&fault)


# -- SDMA engine -----------------------------------------------------------

cdef enum ExecCode:
    EXEC_DONE = 0
    EXEC_TRAP = 1
    EXEC_PAGE_FAULT = 2
    EXEC_ILLEGAL = 3
    EXEC_TRUNCATED = 4
    EXEC_ABORTED = 5
    EXEC_PREEMPTED = 6

# SdmaEngine._stop: what abort() / preempt() ask (an abort overrides a preemption).
DEF SDMA_STOP_ABORT = 1
DEF SDMA_STOP_PREEMPT = 2

cdef struct ExecState:
    uint64_t pos        # dword index of the current packet
    uint64_t done       # bytes of it done (a COPY / FILL stopped between two chunks)
    uint64_t steps      # preemption points passed (test trigger)
    int64_t trigger     # preempted at this many points, -1: no trigger
    uint64_t last       # dword index of the last completed packet
    int op
    int last_op
    uint64_t packets
    uint64_t moved
    uint64_t read           # performance counters (kmd/hw/sdma.py SdmaResult)
    uint64_t written
    uint64_t walks
    uint64_t ops[16]        # packets completed by opcode (every valid opcode is < 16)
    uint32_t trap_context
    Fault fault


cdef inline uint64_t addr64(const uint32_t* p) noexcept nogil:
    return <uint64_t>p[0] | (<uint64_t>p[1] << 32)


cdef inline uint64_t pages(uint64_t va, uint64_t n) noexcept nogil:
    """Pages of [va, va + n): the page-table walks of an access (SDMA has no TLB)."""
    return ((va + n - 1) >> PAGE_SHIFT) - (va >> PAGE_SHIFT) + 1 if n else 0


cdef inline bint compare(int func, uint32_t a, uint32_t b) noexcept nogil:
    if func == 0:
        return True
    if func == 1:
        return a < b
    if func == 2:
        return a <= b
    if func == 3:
        return a == b
    if func == 4:
        return a != b
    if func == 5:
        return a >= b
    return a > b


cdef int packet_length(const uint32_t* ib, uint64_t pos, uint64_t n,
                       uint64_t* length) noexcept nogil:
    """Same rules as ref.packet_length: EXEC_ILLEGAL / EXEC_TRUNCATED or 0."""
    cdef uint32_t hdr = ib[pos]
    cdef uint32_t op = hdr & 0xFF, sub = (hdr >> 8) & 0xFF
    if op == SDMA_OP_NOP:
        length[0] = 1 + ((hdr >> 16) & SDMA_NOP_COUNT_MASK)
    elif op == SDMA_OP_COPY and sub == SDMA_SUBOP_COPY_LINEAR:
        length[0] = 7
    elif op == SDMA_OP_WRITE and sub == SDMA_SUBOP_WRITE_LINEAR:
        if pos + 4 > n:
            return EXEC_TRUNCATED
        length[0] = 5 + (ib[pos + 3] & SDMA_WRITE_COUNT_MASK)
    elif op == SDMA_OP_FENCE:
        length[0] = 4
    elif op == SDMA_OP_TRAP:
        length[0] = 2
    elif op == SDMA_OP_POLL_REGMEM and ((hdr >> 28) & 7) != 7:
        length[0] = 6
    elif op == SDMA_OP_CONST_FILL and ((hdr >> 30) == SDMA_FILLSIZE_BYTE
                                       or (hdr >> 30) == SDMA_FILLSIZE_DWORD):
        length[0] = 5
    elif op == SDMA_OP_TIMESTAMP and sub == SDMA_SUBOP_TIMESTAMP_GET_GLOBAL:
        length[0] = 3
    else:
        return EXEC_ILLEGAL
    if pos + length[0] > n:
        return EXEC_TRUNCATED
    return 0


cdef bint held_ib(const uint32_t* ib, uint64_t n) noexcept nogil:
    """Whether an IB runs with the GIL held (SDMA_HELD_IB_DW, kmd/hw/sdma.py): at most
    SDMA_HELD_IB_DW dwords, and no packet whose work is not bounded by the IB's own
    size (COPY_LINEAR, CONSTANT_FILL) or that sleeps (POLL_REGMEM). A bad packet ends
    the scan: the run stops there."""
    cdef uint64_t pos = 0, length
    cdef uint32_t op
    if n > SDMA_HELD_IB_DW:
        return False
    while pos < n:
        if packet_length(ib, pos, n, &length):
            return True
        op = ib[pos] & 0xFF
        if op == SDMA_OP_COPY or op == SDMA_OP_CONST_FILL or op == SDMA_OP_POLL_REGMEM:
            return False
        pos += length
    return True


cdef class SdmaEngine:
    """One SDMA engine (sdma0, sdma1...).  run() executes one IB to completion, or
    until preempt() (docs/preemption.md)."""

    cdef readonly str name
    cdef readonly object ih
    cdef atomic[int] _stop
    cdef bint _running
    cdef object _trigger
    cdef object _on_wait
    cdef bint _has_on_wait

    def __init__(self, str name, ih):
        self.name = name
        self.ih = ih
        self._stop.store(0)
        self._running = False
        self._trigger = None
        self._on_wait = None
        self._has_on_wait = False

    @property
    def on_wait(self):
        """Called with the dword position of a POLL_REGMEM whose first read did not
        satisfy it (the packets before it are done): a user queue publishes its rptr
        there (kmd/userq_worker.py). None: nobody is told."""
        return self._on_wait

    @on_wait.setter
    def on_wait(self, fn):
        self._on_wait = fn
        self._has_on_wait = fn is not None

    def abort(self):
        """Stop the run in progress at its next packet boundary or poll step.

        Returns False (and does nothing) when no run is in progress.
        """
        if not self._running:
            return False
        self._stop.store(SDMA_STOP_ABORT)
        return True

    def preempt(self):
        """Preempt the run in progress at its next packet or chunk boundary, or poll
        step (from another thread). False (nothing done) when no run is in progress."""
        cdef int expected = 0
        if not self._running:
            return False
        self._stop.compare_exchange_strong(expected, SDMA_STOP_PREEMPT)
        return True

    def preempt_after(self, n):
        """Test trigger: the next run that has passed n boundaries (packet starts and
        chunk starts) is preempted at the next one; fires once. None disarms it."""
        if n is not None and n < 0:
            raise ValueError(f"preempt_after: negative count {n}")
        self._trigger = n

    def bounded(self, PageTable pt not None, uint64_t ib_va, uint64_t ib_size_dw):
        """Whether the IB of `ib_size_dw` dwords at `ib_va` does only bounded work
        (held_ib), what a direct run asks (kmd/direct_run.py): read onto the stack, no
        object made. False when it is longer than SDMA_HELD_IB_DW or cannot be read
        (its run reports the fault)."""
        cdef uint32_t ib[SDMA_HELD_IB_DW]
        cdef Fault fault
        cdef int bad
        if ib_size_dw > SDMA_HELD_IB_DW:
            return False
        if ib_size_dw == 0:
            return True
        pin = pt.pin()
        try:
            bad = pt._read(ib_va, <uint8_t*> ib, ib_size_dw * 4, &fault)
        finally:
            pin.release()
        return not bad and held_ib(ib, ib_size_dw)

    def run(self, PageTable pt not None, uint64_t ib_va, int64_t ib_size_dw,
            int ctx_id=0, int ring_id=0, resume=None, csa=None):
        """Run one IB; with `resume` (a preempted result's), continue it. `csa` is
        accepted for the ring's sake: SDMA has no wave state to save."""
        if ib_size_dw < 0:
            raise ValueError(f"run: negative IB size {ib_size_dw}")
        sdma_check_resume(resume, ib_size_dw)
        self._stop.store(0)
        self._running = True
        pin = pt.pin()
        try:
            return self._run(pt, ib_va, ib_size_dw, ctx_id, ring_id, resume)
        finally:
            self._running = False
            self._stop.store(0)
            pin.release()

    cdef _run(self, PageTable pt, uint64_t ib_va, uint64_t ib_size_dw, int ctx_id, int ring_id,
              resume):
        cdef ExecState st
        cdef const uint8_t[::1] raw
        cdef const uint32_t* ib = NULL
        cdef int code
        cdef bint held
        memset(&st, 0, sizeof(st))
        if resume is not None:
            ib_bytes = resume.ib
            st.pos, st.done = resume.pos, resume.done
        else:
            try:
                if ib_size_dw <= SDMA_HELD_IB_DW:   # a few bytes: no GIL hand-off
                    ib_bytes = pt._read_held(ib_va, ib_size_dw * 4)
                else:
                    ib_bytes = pt.read(ib_va, ib_size_dw * 4)
            except GpuFault as fault:
                self._push_fault(fault, ring_id, ctx_id)
                return SdmaResult("fault", fault, fault.reason)
            st.walks = pages(ib_va, ib_size_dw * 4)
        if ib_size_dw:
            raw = ib_bytes
            ib = <const uint32_t*>&raw[0]
        st.trigger = -1 if self._trigger is None else self._trigger
        st.last_op = -1
        held = held_ib(ib, ib_size_dw)
        while True:
            if held:
                code = self._execute(pt, ib, ib_size_dw, &st)
            else:
                with nogil:
                    code = self._execute(pt, ib, ib_size_dw, &st)
            if code != EXEC_TRAP:
                break
            self.ih.push(IH_SRC_TRAP, ring_id, ctx_id, st.trap_context)
        if st.trigger >= 0 and st.steps == <uint64_t>st.trigger:
            self._trigger = None        # fired
        if code == EXEC_DONE:
            r = SdmaResult("ok", None, None, st.last, st.last_op, st.packets, st.moved)
        elif code == EXEC_PAGE_FAULT:
            fault = make_fault(&st.fault)
            self._push_fault(fault, ring_id, ctx_id)
            r = SdmaResult("fault", fault, fault.reason, st.pos, st.op, st.packets, st.moved)
        elif code == EXEC_ABORTED:
            r = SdmaResult("aborted", None, None, st.pos, st.op, st.packets, st.moved)
        elif code == EXEC_PREEMPTED:
            r = SdmaResult("preempted", None, None, st.pos, st.op, st.packets, st.moved)
            r.resume = SdmaResume(bytes(ib_bytes), st.pos, st.done)
        else:
            self.ih.push(IH_SRC_ILLEGAL_INST, ring_id, ctx_id, st.pos)
            reason = REASON_ILLEGAL_OPCODE if code == EXEC_ILLEGAL else REASON_TRUNCATED
            r = SdmaResult("fault", None, reason, st.pos, st.op, st.packets, st.moved)
        r.bytes_read, r.bytes_written, r.pt_walks = st.read, st.written, st.walks
        r.packet_ops = {op: st.ops[op] for op in range(16) if st.ops[op]}
        return r

    def _push_fault(self, fault, int ring_id, int ctx_id):
        src = IH_SRC_PAGE_FAULT if fault.reason == "unmapped" else IH_SRC_PROT_FAULT
        self.ih.push(src, ring_id, ctx_id, fault.va)

    cdef inline int _boundary(self, ExecState* st) noexcept nogil:
        """A preemption point: EXEC_ABORTED / EXEC_PREEMPTED when asked to stop, else 0."""
        cdef int stop = self._stop.load()
        if stop == SDMA_STOP_ABORT:
            return EXEC_ABORTED
        if stop == SDMA_STOP_PREEMPT or st.steps == <uint64_t>st.trigger:
            return EXEC_PREEMPTED
        st.steps += 1
        return 0

    cdef int _chunks(self, PageTable pt, const uint32_t* pkt, int op, uint64_t count,
                     ExecState* st) noexcept nogil:
        """A COPY_LINEAR (without overlap) or CONSTANT_FILL in SDMA_CHUNK_BYTES pieces
        from st.done, a preemption point between two (st.done records the progress)."""
        cdef uint64_t k, src = addr64(pkt + 3), dst
        cdef int code, elem = 1 if (pkt[0] >> 30) == SDMA_FILLSIZE_BYTE else 4
        dst = addr64(pkt + (5 if op == SDMA_OP_COPY else 1))
        while st.done < count:
            if st.done:
                code = self._boundary(st)
                if code:
                    return code
            k = count - st.done
            if k > SDMA_CHUNK_BYTES:
                k = SDMA_CHUNK_BYTES
            if op == SDMA_OP_COPY:
                if pt._copy(dst + st.done, src + st.done, k, &st.fault):
                    return EXEC_PAGE_FAULT
            # Chunks are a multiple of 4 bytes: each starts at byte 0 of the pattern.
            elif pt._fill(dst + st.done, pkt[3], k, elem, &st.fault):
                return EXEC_PAGE_FAULT
            st.done += k
        return 0

    cdef int _execute(self, PageTable pt, const uint32_t* ib, uint64_t n,
                      ExecState* st) noexcept nogil:
        """Run packets from st.pos until the IB ends or Python must step in."""
        cdef uint64_t pos, length, count, moved, src, dst
        cdef uint32_t hdr, op, word
        cdef uint64_t stamp
        cdef timespec ts
        cdef int code
        while st.pos < n:
            pos = st.pos
            hdr = ib[pos]
            op = hdr & 0xFF
            st.op = op
            if not st.done:         # a packet continued between chunks starts there
                code = self._boundary(st)
                if code:
                    return code
            code = packet_length(ib, pos, n, &length)
            if code:
                return code
            moved = 0
            if op == SDMA_OP_COPY:
                count = (ib[pos + 1] & SDMA_COPY_COUNT_MASK) + 1
                src, dst = addr64(ib + pos + 3), addr64(ib + pos + 5)
                if count > SDMA_CHUNK_BYTES and (src + count <= dst or dst + count <= src):
                    code = self._chunks(pt, ib + pos, op, count, st)
                    if code:
                        return code
                elif pt._copy(dst, src, count, &st.fault):
                    return EXEC_PAGE_FAULT
                moved = count
                st.read += count
                st.walks += pages(addr64(ib + pos + 3), count)
            elif op == SDMA_OP_WRITE:
                count = ((ib[pos + 3] & SDMA_WRITE_COUNT_MASK) + 1) * 4
                if pt._write(addr64(ib + pos + 1), <const uint8_t*>(ib + pos + 4), count,
                             &st.fault):
                    return EXEC_PAGE_FAULT
                moved = count
            elif op == SDMA_OP_FENCE:
                if pt._write(addr64(ib + pos + 1), <const uint8_t*>(ib + pos + 3), 4, &st.fault):
                    return EXEC_PAGE_FAULT
                st.written += 4
                st.walks += pages(addr64(ib + pos + 1), 4)
            elif op == SDMA_OP_TRAP:
                st.trap_context = ib[pos + 1] & SDMA_TRAP_INT_CONTEXT_MASK
            elif op == SDMA_OP_POLL_REGMEM:
                code = self._poll(pt, hdr, ib + pos, st)
                if code:
                    return code
            elif op == SDMA_OP_CONST_FILL:
                count = (ib[pos + 4] & SDMA_CONST_FILL_COUNT_MASK) + 1
                code = self._chunks(pt, ib + pos, op, count, st)
                if code:
                    return code
                moved = count
            elif op == SDMA_OP_TIMESTAMP:
                clock_gettime(CLOCK_MONOTONIC, &ts)
                stamp = <uint64_t>ts.tv_sec * 1000000000 + <uint64_t>ts.tv_nsec
                if pt._write(addr64(ib + pos + 1), <const uint8_t*>&stamp, 8, &st.fault):
                    return EXEC_PAGE_FAULT
                st.written += 8
                st.walks += pages(addr64(ib + pos + 1), 8)
            if moved:   # COPY, WRITE, CONST_FILL: their destination
                st.written += moved
                st.walks += pages(addr64(ib + pos + (5 if op == SDMA_OP_COPY else 1)), moved)
            st.done = 0
            st.ops[op] += 1
            st.moved += moved
            st.last = pos
            st.last_op = op
            st.packets += 1
            st.pos = pos + length
            if op == SDMA_OP_TRAP:
                return EXEC_TRAP
        return EXEC_DONE

    cdef void _tell_wait(self, uint64_t pos) noexcept nogil:
        with gil:
            try:
                self._on_wait(pos)
            except BaseException:   # a hook's failure must not stop the engine (the worker's
                pass                # hook handles its own errors)

    cdef int _poll(self, PageTable pt, uint32_t hdr, const uint32_t* pkt,
                   ExecState* st) noexcept nogil:
        cdef uint32_t mem
        cdef int code
        cdef int func = (hdr >> 28) & 7
        cdef bint told = not self._has_on_wait
        if not (hdr >> 31):
            return 0    # register poll: no registers are emulated (docs/hw.md)
        while True:
            if pt._read(addr64(pkt + 1), <uint8_t*>&mem, 4, &st.fault):
                return EXEC_PAGE_FAULT
            st.read += 4
            st.walks += 1
            if compare(func, mem & pkt[4], pkt[3]):
                return 0
            if not told:
                told = True
                self._tell_wait(st.pos)
            code = self._stop.load()
            if code == SDMA_STOP_ABORT:
                return EXEC_ABORTED
            if code == SDMA_STOP_PREEMPT:   # the packet runs again on resume: it only reads
                return EXEC_PREEMPTED
            usleep(SDMA_POLL_STEP_US)


# -- compute unit ----------------------------------------------------------

include "_l2.pxi"
include "_cu.pxi"
include "_userq.pxi"
include "_cp_fast.pxi"
