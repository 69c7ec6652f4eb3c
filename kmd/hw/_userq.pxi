# The hot path of a user queue's worker (kmd/userq_worker.py): wait for the write
# pointer to move, then after a run publish the read pointer and wake the words the
# run's fence packets wrote, each one call with the GIL released. Same API and
# behaviour as kmd/hw/userq_ref.py (docs/userq.md).

cdef extern from *:
    """
    #include <linux/futex.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    #include <time.h>
    #include <sched.h>
    static void vgpu_futex_wait(uint64_t addr, uint32_t seen, long ns) {
        struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
        syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    static void vgpu_futex_wake(uint64_t addr) {
        syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
    }
    static uint32_t vgpu_load32(uint64_t addr) {
        return __atomic_load_n((volatile uint32_t*)addr, __ATOMIC_ACQUIRE);
    }
    static void vgpu_store64(uint64_t addr, uint64_t v) {
        __atomic_store_n((volatile uint64_t*)addr, v, __ATOMIC_RELEASE);
    }
    static long vgpu_now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1000000000L + t.tv_nsec;
    }
    /* A pause, then the CPU to any other thread waiting for it: a client the worker's
       wake-up placed on this CPU (the scheduler puts a wakee beside its waker) must
       not wait for the end of the spin to commit its next packets. */
    static void vgpu_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #endif
        sched_yield();
    }
    """
    void vgpu_futex_wait(uint64_t addr, uint32_t seen, long ns) noexcept nogil
    void vgpu_futex_wake(uint64_t addr) noexcept nogil
    uint32_t vgpu_load32(uint64_t addr) noexcept nogil
    void vgpu_store64(uint64_t addr, uint64_t v) noexcept nogil
    long vgpu_now_ns() noexcept nogil
    void vgpu_cpu_relax() noexcept nogil

cdef uint32_t PM4_NOP_FILLER_DW = 0xFFFF1000u   # vgpu/pm4.py PM4_NOP_FILLER
cdef uint32_t PKT3_WRITE_DATA_OP = 0x37
cdef uint32_t PKT3_RELEASE_MEM_OP = 0x49


cdef uint64_t _host_of(PageTable pt, uint64_t va, uint32_t need) noexcept nogil:
    """The host address of `va` if its PTE has `need`, else 0."""
    cdef uint64_t out = 0
    pt.lock.lock_shared()
    it = pt.ptes.find(va >> PAGE_SHIFT)
    if it != pt.ptes.end() and deref(it).second.flags & need:
        out = <uint64_t>deref(it).second.host + (va & PAGE_MASK)
    pt.lock.unlock_shared()
    return out


def userq_wait(PageTable pt not None, uint64_t db_addr, uint64_t wptr_va, uint64_t rptr, double timeout,
               double spin=0.0):
    """The u64 at `wptr_va` once it differs from `rptr`: read at once, else polled for
    at most `spin` s, else after one FUTEX_WAIT of at most `timeout` s (less the spin)
    on the doorbell word at host address `db_addr` (its value read before the write
    pointer, so a doorbell rung in between ends the wait at once). -1: still `rptr`
    after the sleep; -2: `wptr_va` is unmapped."""
    cdef uint64_t w = 0
    cdef uint32_t db
    cdef Fault fault
    cdef int bad
    cdef long ns = <long>(timeout * 1e9)
    cdef long spin_ns = <long>(min(spin, timeout) * 1e9)
    cdef long end
    pin = pt.pin()          # buffers stay alive while the GIL is released
    with nogil:
        db = vgpu_load32(db_addr)
        bad = pt._read(wptr_va, <uint8_t*>&w, 8, &fault)
        if not bad and w == rptr and spin_ns > 0:
            # A queue in use gets its next packets within microseconds: polling for
            # them spares a sleep the hypervisor may turn into an idle CPU, whose
            # wake-up costs more than a small job (docs/userq.md, "Polling").
            end = vgpu_now_ns() + spin_ns
            while not bad and w == rptr and vgpu_now_ns() < end:
                vgpu_cpu_relax()
                db = vgpu_load32(db_addr)
                bad = pt._read(wptr_va, <uint8_t*>&w, 8, &fault)
            ns -= spin_ns
        if not bad and w == rptr and ns > 0:
            vgpu_futex_wait(db_addr, db, ns)
            bad = pt._read(wptr_va, <uint8_t*>&w, 8, &fault)
    pin.release()
    if bad:
        return -2
    return -1 if w == rptr else <int64_t>w


cdef uint64_t _fence_vas(const uint32_t* dw, uint64_t n, bint sdma, uint64_t* out, uint64_t room) noexcept nogil:
    """The VAs fence packets among `dw[0:n]` write (SDMA FENCE, WRITE_LINEAR; PM4
    RELEASE_MEM, WRITE_DATA), at most `room`; a packet it cannot size ends the scan."""
    cdef uint64_t pos = 0, found = 0, length
    cdef uint32_t hdr, op
    while pos < n and found < room:
        hdr = dw[pos]
        if sdma:
            if packet_length(dw, pos, n, &length) != 0:
                break
            op = hdr & 0xFF
            if (op == SDMA_OP_FENCE or op == SDMA_OP_WRITE) and pos + 2 < n:
                out[found] = dw[pos + 1] | (<uint64_t>dw[pos + 2] << 32)
                found += 1
        else:
            if hdr == PM4_NOP_FILLER_DW or hdr >> 30 == 2:
                pos += 1
                continue
            if hdr >> 30 != 3:
                break
            length = ((hdr >> 16) & 0x3FFF) + 2
            op = (hdr >> 8) & 0xFF
            if op == PKT3_RELEASE_MEM_OP and pos + 4 < n:
                out[found] = dw[pos + 3] | (<uint64_t>dw[pos + 4] << 32)
                found += 1
            elif op == PKT3_WRITE_DATA_OP and pos + 3 < n:
                out[found] = dw[pos + 2] | (<uint64_t>dw[pos + 3] << 32)
                found += 1
        pos += length
    return found


def userq_done(PageTable pt not None, uint64_t va, uint64_t n, bint sdma, uint64_t rptr_va, uint64_t rptr):
    """After `n` dwords at `va` ran: store `rptr` at `rptr_va` (if mapped writable)
    and FUTEX_WAKE it and every word the fence packets among them wrote."""
    cdef vector[uint32_t] dw
    cdef uint64_t vas[64]
    cdef uint64_t found = 0, addr, i
    cdef Fault fault
    pin = pt.pin()
    dw.resize(n if n else 1)
    with nogil:
        if n and pt._read(va, <uint8_t*>dw.data(), 4 * n, &fault) == 0:
            found = _fence_vas(dw.data(), n, sdma, vas, 64)
        addr = _host_of(pt, rptr_va, C_PTE_WRITE)
        if addr:
            vgpu_store64(addr, rptr)
            vgpu_futex_wake(addr)
        for i in range(found):
            if i and vas[i] & ~(<uint64_t>3) == vas[i - 1] & ~(<uint64_t>3):
                continue                  # the same word again (a fence per dispatch): woken already
            addr = _host_of(pt, vas[i] & ~(<uint64_t>3), C_PTE_READ)
            if addr:
                vgpu_futex_wake(addr)
    pin.release()
