# The GPU L2 cache model (docs/cache.md), included by _core.pyx before _cu.pxi; its
# twin is kmd/hw/l2_ref.py. A write-back, write-allocate, fully associative cache of
# 128-byte lines with LRU replacement, named by the host address of their first
# byte, each with a byte mask of what compute wrote. The compute units take its
# mutex for a whole memory instruction (so a line they hold cannot be evicted under
# them) and make one request per run of lanes in the same line.

cdef extern from *:
    """
    #include <cstdint>
    #include <cstring>
    #include <mutex>
    #include <unordered_map>
    #include <vector>

    struct VgpuL2Tally { uint64_t hits, misses, writebacks, evictions, invalidations; };

    struct VgpuL2 {
        static const uint64_t LINE = 128;
        uint32_t capacity;
        std::vector<uint8_t> data;          /* capacity * LINE */
        std::vector<uint64_t> key;          /* host address of each slot's line */
        std::vector<uint64_t> dirty_lo, dirty_hi;   /* written bytes 0-63, 64-127 */
        std::vector<int32_t> prev, next;    /* LRU list: head most recent */
        int32_t head = -1, tail = -1, used = 0;
        std::vector<int32_t> free_slots;    /* slots emptied by an invalidate */
        std::unordered_map<uint64_t, int32_t> map;
        std::mutex mu;
        VgpuL2Tally totals = {0, 0, 0, 0, 0};

        explicit VgpuL2(uint32_t lines) : capacity(lines), data((size_t)lines * LINE),
            key(lines), dirty_lo(lines), dirty_hi(lines), prev(lines), next(lines) {
            map.reserve(lines);
        }
        void unlink(int32_t s) {
            if (prev[s] >= 0) next[prev[s]] = next[s]; else head = next[s];
            if (next[s] >= 0) prev[next[s]] = prev[s]; else tail = prev[s];
        }
        void push_front(int32_t s) {
            prev[s] = -1; next[s] = head;
            if (head >= 0) prev[head] = s; else tail = s;
            head = s;
        }
        bool dirty(int32_t s) const { return dirty_lo[s] | dirty_hi[s]; }
        /* Store the slot's written bytes to memory; clean it. */
        void write_back(int32_t s) {
            uint8_t* dst = (uint8_t*)key[s];
            const uint8_t* src = &data[(size_t)s * LINE];
            uint64_t masks[2] = {dirty_lo[s], dirty_hi[s]};
            for (int h = 0; h < 2; h++) {
                uint64_t m = masks[h];
                if (m == ~0ULL) { memcpy(dst + 64 * h, src + 64 * h, 64); continue; }
                for (int b = 0; m; b++, m >>= 1)
                    if (m & 1) dst[64 * h + b] = src[64 * h + b];
            }
            dirty_lo[s] = dirty_hi[s] = 0;
        }
        /* The slot holding line k (under mu): a hit moves it to the front; a miss
           evicts the least recently used slot when full (written back if dirty),
           then reads the line from memory. `counted`: whether a hit counts (a new
           request); a miss always does. */
        int32_t lookup(uint64_t k, bool counted, VgpuL2Tally* t) {
            auto it = map.find(k);
            if (it != map.end()) {
                int32_t s = it->second;
                if (s != head) { unlink(s); push_front(s); }
                if (counted) { t->hits++; totals.hits++; }
                return s;
            }
            t->misses++; totals.misses++;
            int32_t s;
            if (!free_slots.empty()) {
                s = free_slots.back();
                free_slots.pop_back();
            } else if (used < (int32_t)capacity) {
                s = used++;
            } else {
                s = tail;
                unlink(s);
                map.erase(key[s]);
                t->evictions++; totals.evictions++;
                if (dirty(s)) { write_back(s); t->writebacks++; totals.writebacks++; }
            }
            key[s] = k;
            dirty_lo[s] = dirty_hi[s] = 0;
            memcpy(&data[(size_t)s * LINE], (const uint8_t*)k, LINE);
            map.emplace(k, s);
            push_front(s);
            return s;
        }
        uint8_t* line(int32_t s) { return &data[(size_t)s * LINE]; }
        void mark(int32_t s, uint32_t off, uint32_t n) {
            uint64_t m = (n >= 64 ? ~0ULL : ((1ULL << n) - 1));
            if (off < 64) dirty_lo[s] |= m << off; else dirty_hi[s] |= m << (off - 64);
        }
        /* RELEASE_MEM / ACQUIRE_MEM (under mu): 1 write back, 2 invalidate clean lines. */
        void sync(int actions, uint64_t* wb, uint64_t* inv) {
            *wb = *inv = 0;
            if (actions & 1)
                for (int32_t s = head; s >= 0; s = next[s])
                    if (dirty(s)) { write_back(s); (*wb)++; }
            if (actions & 2) {
                for (int32_t s = head; s >= 0;) {
                    int32_t n = next[s];
                    if (!dirty(s)) { unlink(s); map.erase(key[s]); free_slots.push_back(s); (*inv)++; }
                    s = n;
                }
            }
            totals.writebacks += *wb; totals.invalidations += *inv;
        }
        void lock() { mu.lock(); }
        void unlock() { mu.unlock(); }
    };
    """
    cdef struct VgpuL2Tally:
        uint64_t hits
        uint64_t misses
        uint64_t writebacks
        uint64_t evictions
        uint64_t invalidations

    cdef cppclass VgpuL2:
        uint32_t capacity
        int32_t head
        int32_t used
        vector[uint64_t] key
        vector[uint64_t] dirty_lo
        vector[uint64_t] dirty_hi
        vector[int32_t] next
        VgpuL2Tally totals
        void lock() nogil
        void unlock() nogil
        VgpuL2(uint32_t lines) except +
        int32_t lookup(uint64_t k, bint counted, VgpuL2Tally* t) nogil
        uint8_t* line(int32_t s) nogil
        void mark(int32_t s, uint32_t off, uint32_t n) nogil
        void sync(int actions, uint64_t* wb, uint64_t* inv) nogil

DEF L2_LINE = 128
L2_COUNTERS = ("l2_hits", "l2_misses", "l2_writebacks", "l2_evictions", "l2_invalidations")


cdef class L2Cache:
    """One device's L2, shared by its compute engines (kmd.hw.l2_ref.L2Cache is the
    twin: same API and behaviour). `size` bytes, a positive multiple of 128."""

    cdef VgpuL2* c
    cdef readonly uint64_t size
    cdef readonly uint32_t capacity

    def __cinit__(self, uint64_t size=4 << 20):
        if size < L2_LINE or size % L2_LINE or size // L2_LINE > 0x7FFFFFFF:
            raise ValueError(f"L2Cache: size {size} is not a positive multiple of {L2_LINE}")
        self.size, self.capacity = size, size // L2_LINE
        self.c = new VgpuL2(self.capacity)

    def __dealloc__(self):
        del self.c

    def sync(self, int actions):
        """RELEASE_MEM / ACQUIRE_MEM cache actions (vgpu.pm4 L2_* flags), see
        kmd/hw/l2_ref.py L2Cache.sync. Returns {'l2_writebacks', 'l2_invalidations'}."""
        cdef uint64_t wb, inv
        with nogil:
            self.c.lock()
            self.c.sync(actions, &wb, &inv)
            self.c.unlock()
        return {"l2_writebacks": wb, "l2_invalidations": inv}

    def counters(self):
        """The device's totals since it was made."""
        cdef VgpuL2Tally t
        with nogil:
            self.c.lock()
            t = self.c.totals
            self.c.unlock()
        return {"l2_hits": t.hits, "l2_misses": t.misses, "l2_writebacks": t.writebacks,
                "l2_evictions": t.evictions, "l2_invalidations": t.invalidations}

    def lines(self):
        """(host address, data, dirty byte mask) of each line, least recently used first."""
        cdef int32_t s
        out = []
        hi = 0
        with nogil:
            self.c.lock()
        try:
            s = self.c.head
            while s >= 0:
                hi = self.c.dirty_hi[s]
                out.append((self.c.key[s], (<char*>self.c.line(s))[:L2_LINE],
                            self.c.dirty_lo[s] | hi << 64))
                s = self.c.next[s]
        finally:
            self.c.unlock()
        out.reverse()
        return out

    def port(self):
        """What the reference's engines use; the core's units reach the cache in C."""
        raise TypeError("the Cython L2Cache is reached by the Cython ComputeEngine only")
