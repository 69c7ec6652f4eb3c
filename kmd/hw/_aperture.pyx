# cython: language_level=3
"""Cython core of the memory apertures: a window of host address space standing for
VRAM or GTT, into which BO files are mapped at their physical addresses.

Same API as kmd/hw/aperture_ref.py (the ctypes twin, selected with VGPU_HW=ref).
The window is reserved once (anonymous zero pages, MAP_NORESERVE) and never moves,
so numpy views of it, page-table entries and engine pointers stay valid for the
life of the device; ``map_file`` puts a file's pages over a range with MAP_FIXED and
``zero`` puts anonymous zero pages back (docs/memory.md).
"""
from libc.errno cimport errno
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport strerror
from posix.mman cimport (MAP_ANONYMOUS, MAP_FAILED, MAP_FIXED, MAP_NORESERVE, MAP_PRIVATE,
                         MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap)

DEF PAGE_MASK = 4095

# A BO's file belongs to its owner, who may shrink it (ftruncate) while it is mapped
# into the aperture; the next access to a page past the new end would be SIGBUS in
# the daemon. As Wayland compositors do for client shm pools, a SIGBUS inside an
# aperture is repaired by mapping a private zero page over the faulting page and
# retrying the access; anything else goes to the previous handler (or kills us as
# the default action would). The repair count is read by the KMD for its log.
cdef extern from *:
    """
    #include <signal.h>
    #include <stdint.h>
    #include <sys/mman.h>
    #define VGPU_MAX_APERTURES 1024
    static uintptr_t vgpu_ap_lo[VGPU_MAX_APERTURES], vgpu_ap_hi[VGPU_MAX_APERTURES];
    static uint64_t vgpu_bus_repairs = 0;
    static uintptr_t vgpu_bus_last = 0;
    static struct sigaction vgpu_prev_bus;
    static int vgpu_bus_installed = 0;

    static void vgpu_sigbus(int sig, siginfo_t *si, void *uc) {
        uintptr_t a = (uintptr_t)si->si_addr;
        for (int i = 0; i < VGPU_MAX_APERTURES; i++) {
            if (a >= __atomic_load_n(&vgpu_ap_lo[i], __ATOMIC_ACQUIRE)
                    && a < __atomic_load_n(&vgpu_ap_hi[i], __ATOMIC_ACQUIRE)) {
                void *page = (void *)(a & ~(uintptr_t)4095);
                if (mmap(page, 4096, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
                    __atomic_store_n(&vgpu_bus_last, a, __ATOMIC_RELAXED);
                    __atomic_add_fetch(&vgpu_bus_repairs, 1, __ATOMIC_RELEASE);
                    return;
                }
            }
        }
        if (vgpu_prev_bus.sa_flags & SA_SIGINFO) {
            vgpu_prev_bus.sa_sigaction(sig, si, uc);
        } else if (vgpu_prev_bus.sa_handler != SIG_DFL && vgpu_prev_bus.sa_handler != SIG_IGN) {
            vgpu_prev_bus.sa_handler(sig);
        } else {
            signal(SIGBUS, SIG_DFL);  /* the access is retried and kills us as it should */
        }
    }

    static int vgpu_register_aperture(uintptr_t lo, uintptr_t hi) {
        if (!vgpu_bus_installed) {
            struct sigaction sa;
            sa.sa_sigaction = vgpu_sigbus;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_SIGINFO | SA_NODEFER;
            if (sigaction(SIGBUS, &sa, &vgpu_prev_bus) != 0) return -1;
            vgpu_bus_installed = 1;
        }
        for (int i = 0; i < VGPU_MAX_APERTURES; i++) {
            if (vgpu_ap_hi[i] == 0) {
                __atomic_store_n(&vgpu_ap_lo[i], lo, __ATOMIC_RELEASE);
                __atomic_store_n(&vgpu_ap_hi[i], hi, __ATOMIC_RELEASE);
                return i;
            }
        }
        return -1;
    }

    static void vgpu_unregister_aperture(int i) {
        __atomic_store_n(&vgpu_ap_hi[i], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&vgpu_ap_lo[i], 0, __ATOMIC_RELEASE);
    }

    static uint64_t vgpu_bus_repair_count(void) {
        return __atomic_load_n(&vgpu_bus_repairs, __ATOMIC_ACQUIRE);
    }

    static uintptr_t vgpu_bus_last_address(void) {
        return __atomic_load_n(&vgpu_bus_last, __ATOMIC_RELAXED);
    }
    """
    int vgpu_register_aperture(uint64_t lo, uint64_t hi)
    void vgpu_unregister_aperture(int i)
    uint64_t vgpu_bus_repair_count()
    uint64_t vgpu_bus_last_address()


def bus_repairs():
    """(count, last host address) of SIGBUS repairs so far: accesses to BO pages
    whose file its owner had truncated (they now read as zero)."""
    return vgpu_bus_repair_count(), vgpu_bus_last_address()


cdef inline OSError _os_error(str what):
    cdef int e = errno
    return OSError(e, f"{what}: {strerror(e).decode()}")


cdef class Aperture:
    """``size`` bytes of host address space, page aligned, zero until a file is mapped.

    Supports the buffer protocol (writable, 1-D bytes), so
    ``numpy.frombuffer(aperture, numpy.uint8)`` views the whole window.
    """

    cdef uint8_t* base
    cdef readonly uint64_t size
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef int exports
    cdef int slot

    def __cinit__(self, uint64_t size):
        if size == 0 or size & PAGE_MASK:
            raise ValueError("aperture size must be a nonzero multiple of 4 KiB")
        # 2 MiB aligned, so that a BO file's huge pages (kmd/shmem.py) can be mapped
        # by PMDs: the buddy allocator aligns a block to its size, the window's base
        # must be aligned too. Reserve 2 MiB more, then give back head and tail.
        cdef uint64_t huge = 2 << 20
        cdef void* r = mmap(NULL, size + huge, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if r == MAP_FAILED:
            raise _os_error(f"reserving {size} bytes of address space")
        cdef uint64_t start = (<uint64_t>r + huge - 1) & ~(huge - 1)
        if start > <uint64_t>r:
            munmap(r, start - <uint64_t>r)
        if <uint64_t>r + size + huge > start + size:
            munmap(<void*>(start + size), <uint64_t>r + size + huge - (start + size))
        cdef void* p = <void*>start
        self.base = <uint8_t*>p
        self.size = size
        self.slot = vgpu_register_aperture(<uint64_t>p, <uint64_t>p + size)
        if self.slot < 0:
            munmap(p, size)
            self.base = NULL
            raise OSError("cannot guard the aperture against truncated BO files "
                          "(too many apertures, or sigaction failed)")

    def __dealloc__(self):
        if self.base != NULL:
            vgpu_unregister_aperture(self.slot)
            munmap(self.base, self.size)

    cdef void _check(self, uint64_t offset, uint64_t length) except *:
        if self.base == NULL:
            raise ValueError("aperture is closed")
        if (offset | length) & PAGE_MASK or length == 0 or offset + length > self.size \
                or offset + length < offset:
            raise ValueError(f"range {offset:#x}+{length:#x} is not page aligned inside the "
                             f"{self.size:#x}-byte aperture")

    def map_file(self, uint64_t offset, uint64_t length, int fd):
        """Map ``length`` bytes of file ``fd`` (from its start) at ``offset``, shared:
        a store through the window is a store into the file, seen by every other
        mapping of it. Raises OSError (ENOMEM past vm.max_map_count)."""
        self._check(offset, length)
        cdef void* p = mmap(self.base + offset, length, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_FIXED, fd, 0)
        if p == MAP_FAILED:
            raise _os_error(f"mapping a BO file at aperture offset {offset:#x}")

    def zero(self, uint64_t offset, uint64_t length):
        """Put anonymous zero pages back over [offset, offset + length): the file that
        was there is no longer reachable through the window."""
        self._check(offset, length)
        cdef void* p = mmap(self.base + offset, length, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0)
        if p == MAP_FAILED:
            raise _os_error(f"clearing aperture range {offset:#x}+{length:#x}")

    def view(self):
        """A writable memoryview of the whole window (numpy.frombuffer takes it)."""
        return memoryview(self)

    @property
    def address(self) -> int:
        """The host address of offset 0 (for messages and tests)."""
        return <uint64_t>self.base

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.base == NULL:
            raise BufferError("aperture is closed")
        self.shape[0] = <Py_ssize_t>self.size
        self.strides[0] = 1
        view.buf = self.base
        view.obj = self
        view.len = <Py_ssize_t>self.size
        view.readonly = 0
        view.itemsize = 1
        view.format = "B"
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1
