"""Raw DRM ioctls for the tests of the ioctl path (docs/design.md section 3).

A client here does what a C program built on the kernel headers does: a ctypes
struct of vgpu.uapi handed to libc's ``ioctl(fd, DRM_IOCTL_..., &arg)`` on
MOUNT/dev/dri/renderD128 (or card0), its pointer fields set to the addresses of
ctypes buffers of its own. No libvgpu (the tests of the path must not depend on
it) and no numpy: a client of another uid runs this under the system python
(tests/helpers.client_python). Import it in client code as
``from tests.raw_ioctl import Raw``.

Also: ``threads_in_ioctl(pid, request)``, what /proc says about a process's threads
blocked in an ioctl, so a test knows a waiter has entered the kernel before it
signals it (the call is a FUSE request the daemon then holds).
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import time

from vgpu import uapi
from vgpu.sdma import SdmaIb

libc = ctypes.CDLL(None, use_errno=True)
_ioctl = libc.ioctl
_ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_ioctl.restype = ctypes.c_int

#: The ioctl system call's number, for /proc/PID/task/TID/syscall.
SYS_IOCTL = {"x86_64": 16, "aarch64": 29, "riscv64": 29, "ppc64le": 54, "s390x": 54}.get(platform.machine(), 16)
#: WAIT_CS / WAIT_FENCES: AMDGPU_TIMEOUT_INFINITE (the top bit set: forever).
AMDGPU_FOREVER = (1 << 64) - 1
#: SYNCOBJ_WAIT's timeout_nsec (absolute CLOCK_MONOTONIC): INT64_MAX is forever.
SYNCOBJ_FOREVER = (1 << 63) - 1
DMA = uapi.AMDGPU_HW_IP_DMA
GTT = uapi.AMDGPU_GEM_DOMAIN_GTT
RWX = uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE | uapi.AMDGPU_VM_PAGE_EXECUTABLE
VA_BASE = 0x200000


def address(obj) -> int:
    """The address of a ctypes object (0 for None, an int as it is)."""
    if obj is None:
        return 0
    if isinstance(obj, int):
        return obj
    return ctypes.addressof(obj)


def u32_array(values):
    return (ctypes.c_uint32 * max(1, len(values)))(*values)


def u64_array(values):
    return (ctypes.c_uint64 * max(1, len(values)))(*values)


def sys_ioctl(fd: int, request: int, arg) -> int:
    """ioctl(fd, request, arg); 0 or the errno. ``arg``: a ctypes object or an address."""
    if _ioctl(fd, request, address(arg)) == 0:
        return 0
    return ctypes.get_errno()


def resized(request: int, size: int) -> int:
    """``request`` with another _IOC_SIZE (a struct of another KMD version)."""
    return uapi._IOC(uapi._IOC_DIR(request), uapi._IOC_TYPE(request), uapi._IOC_NR(request), size)


class Chunks:
    """The memory of one CS: the pointer table, each chunk header, each chunk's data,
    all ctypes objects kept alive with the struct that points to them."""

    def __init__(self, chunks):
        """``chunks``: ``(chunk_id, data)`` pairs, data a ctypes object or bytes."""
        self.keep = []
        self.headers = []
        for chunk_id, data in chunks:
            if isinstance(data, (bytes, bytearray)):
                data = ctypes.create_string_buffer(bytes(data), len(data))
            self.keep.append(data)
            h = uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=ctypes.sizeof(data) // 4,
                                         chunk_data=address(data))
            self.headers.append(h)
        self.table = u64_array([address(h) for h in self.headers])

    def struct(self, ctx: int, bo_list: int = 0) -> uapi.drm_amdgpu_cs:
        a = uapi.drm_amdgpu_cs()
        a.in_.ctx_id, a.in_.bo_list_handle = ctx, bo_list
        a.in_.num_chunks, a.in_.chunks = len(self.headers), address(self.table)
        a._keep = self   # the struct holds the memory it points to
        return a


def ib_chunk(va: int, ndw: int, ip: int = DMA, ring: int = 0):
    return (uapi.AMDGPU_CHUNK_ID_IB, uapi.drm_amdgpu_cs_chunk_ib(va_start=va, ib_bytes=4 * ndw, ip_type=ip, ring=ring))


def bo_handles_chunk(handles):
    entries = (uapi.drm_amdgpu_bo_list_entry * len(handles))(*[uapi.drm_amdgpu_bo_list_entry(bo_handle=h)
                                                              for h in handles])
    bl = uapi.drm_amdgpu_bo_list_in(bo_number=len(handles), bo_info_size=8, bo_info_ptr=address(entries))
    bl._keep = entries
    return (uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bl)


def syncobj_out_chunk(handles):
    return (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, u32_array(handles))


class Bo:
    """A GTT BO, mapped for the CPU (through MOUNT/bo/<offset>) and at ``va`` for the GPU."""

    def __init__(self, raw: "Raw", size: int):
        self.handle = raw.gem_create(size)
        self.size = size
        self.va = raw.alloc_va(size)
        raw.gem_va(self.handle, self.va, size)
        with open(raw.bo_path(raw.gem_mmap(self.handle)), "r+b") as f:
            self.map = mmap.mmap(f.fileno(), size)

    def write(self, offset: int, data: bytes) -> None:
        self.map[offset:offset + len(data)] = data

    def read(self, offset: int, n: int) -> bytes:
        return bytes(self.map[offset:offset + n])


class Gate:
    """A job on ``ctx`` that polls a dword of its BO (POLL_REGMEM) until ``open()``
    writes 1 there: a wait on it blocks for as long as the test wants (or until the
    mount's ring timeout). ``seq`` is its sequence number on sdma0."""

    def __init__(self, raw: "Raw", ctx: int):
        self.bo = Bo(raw, 4096)
        ib = SdmaIb().poll_regmem(self.bo.va, 1).tobytes()
        self.bo.write(256, ib)
        self.seq = raw.submit(ctx, [ib_chunk(self.bo.va + 256, len(ib) // 4),
                                    bo_handles_chunk([self.bo.handle])])

    def open(self) -> None:
        self.bo.write(0, (1).to_bytes(4, "little"))


class Raw:
    """One open DRM file spoken to with raw ioctls. Errors raise OSError(errno)."""

    def __init__(self, mount: str, node: str = "renderD128", flags: int = os.O_RDWR):
        self.mount = mount
        self.fd = os.open(os.path.join(mount, "dev", "dri", node), flags)
        self._va = VA_BASE

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the system call ----------------------------------------------------------------
    def errno(self, request: int, arg) -> int:
        """The errno of ``ioctl(fd, request, arg)``, 0 on success."""
        return sys_ioctl(self.fd, request, arg)

    def call(self, request: int, arg):
        err = self.errno(request, arg)
        if err:
            raise OSError(err, f"{uapi.ioctl_name(request)}: {os.strerror(err)}")
        return arg

    # -- requests -------------------------------------------------------------------------
    def version(self):
        """(major, name, date, desc), as drmGetVersion asks: lengths first, then strings."""
        v = uapi.drm_version()
        self.call(uapi.DRM_IOCTL_VERSION, v)
        bufs = [ctypes.create_string_buffer(n + 1) for n in (v.name_len, v.date_len, v.desc_len)]
        v.name, v.date, v.desc = (address(b) for b in bufs)
        self.call(uapi.DRM_IOCTL_VERSION, v)
        return (v.version_major, *(b.value.decode() for b in bufs))

    def get_cap(self, cap: int = uapi.DRM_CAP_SYNCOBJ) -> int:
        return self.call(uapi.DRM_IOCTL_GET_CAP, uapi.drm_get_cap(capability=cap)).value

    def info(self, query: int, answer_type, **sub):
        """AMDGPU_INFO ``query`` answered into a new ``answer_type``; ``sub`` sets the
        union's members as ``member__field=value``."""
        out = answer_type()
        a = uapi.drm_amdgpu_info(return_pointer=address(out), return_size=ctypes.sizeof(out), query=query)
        for k, v in sub.items():
            member, field = k.split("__")
            setattr(getattr(a, member), field, v)
        self.call(uapi.DRM_IOCTL_AMDGPU_INFO, a)
        return out

    def ctx(self) -> int:
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
        return self.call(uapi.DRM_IOCTL_AMDGPU_CTX, a).out.alloc.ctx_id

    def gem_create(self, size: int = 4096, domains: int = GTT) -> int:
        a = uapi.drm_amdgpu_gem_create()
        a.in_.bo_size, a.in_.alignment, a.in_.domains = size, 4096, domains
        return self.call(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, a).out.handle

    def gem_close(self, handle: int) -> None:
        self.call(uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=handle))

    def gem_mmap(self, handle: int) -> int:
        a = uapi.drm_amdgpu_gem_mmap()
        a.in_.handle = handle
        return self.call(uapi.DRM_IOCTL_AMDGPU_GEM_MMAP, a).out.addr_ptr

    def bo_path(self, offset: int) -> str:
        return os.path.join(self.mount, "bo", format(offset, "x"))

    def alloc_va(self, size: int) -> int:
        va = self._va
        self._va += (size + 0xFFFF) & ~0xFFFF
        return va

    def gem_va(self, handle: int, va: int, size: int, op: int = uapi.AMDGPU_VA_OP_MAP) -> None:
        self.call(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(
            handle=handle, operation=op, flags=RWX, va_address=va, map_size=size))

    def bo_list(self, handles) -> int:
        entries = (uapi.drm_amdgpu_bo_list_entry * len(handles))(*[uapi.drm_amdgpu_bo_list_entry(bo_handle=h)
                                                                  for h in handles])
        a = uapi.drm_amdgpu_bo_list()
        a.in_.operation, a.in_.bo_number, a.in_.bo_info_size = uapi.AMDGPU_BO_LIST_OP_CREATE, len(handles), 8
        a.in_.bo_info_ptr = address(entries)
        return self.call(uapi.DRM_IOCTL_AMDGPU_BO_LIST, a).out.list_handle

    def submit(self, ctx: int, chunks, bo_list: int = 0) -> int:
        """CS of ``chunks`` (``(chunk_id, data)`` pairs); the job's seq."""
        return self.call(uapi.DRM_IOCTL_AMDGPU_CS, Chunks(chunks).struct(ctx, bo_list)).out.handle

    def wait_cs_struct(self, ctx: int, seq: int, timeout: int = AMDGPU_FOREVER, ip: int = DMA, ring: int = 0):
        a = uapi.drm_amdgpu_wait_cs()
        a.in_.handle, a.in_.ctx_id, a.in_.ip_type, a.in_.ring, a.in_.timeout = seq, ctx, ip, ring, timeout
        return a

    def wait_cs(self, ctx: int, seq: int, timeout: int = AMDGPU_FOREVER, ip: int = DMA) -> int:
        """WAIT_CS; its status (0 signaled, 1 timed out)."""
        return self.call(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, self.wait_cs_struct(ctx, seq, timeout, ip)).out.status

    def syncobj_create(self, signaled: bool = False) -> int:
        a = uapi.drm_syncobj_create(flags=uapi.DRM_SYNCOBJ_CREATE_SIGNALED if signaled else 0)
        return self.call(uapi.DRM_IOCTL_SYNCOBJ_CREATE, a).handle

    def syncobj_destroy(self, handle: int) -> None:
        self.call(uapi.DRM_IOCTL_SYNCOBJ_DESTROY, uapi.drm_syncobj_destroy(handle=handle))

    def syncobj_wait_struct(self, handles, timeout_nsec: int = SYNCOBJ_FOREVER,
                            flags: int = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT):
        arr = u32_array(handles)
        a = uapi.drm_syncobj_wait(handles=address(arr), count_handles=len(handles), timeout_nsec=timeout_nsec,
                                  flags=flags)
        a._keep = arr
        return a

    def syncobj_wait(self, handles, timeout_nsec: int = SYNCOBJ_FOREVER,
                     flags: int = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT) -> int:
        """SYNCOBJ_WAIT (by default WAIT_FOR_SUBMIT, forever); first_signaled."""
        return self.call(uapi.DRM_IOCTL_SYNCOBJ_WAIT, self.syncobj_wait_struct(handles, timeout_nsec, flags)) \
            .first_signaled

    def _array(self, request, handles):
        arr = u32_array(handles)
        self.call(request, uapi.drm_syncobj_array(handles=address(arr), count_handles=len(handles)))

    def syncobj_signal(self, handles) -> None:
        self._array(uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, handles)

    def syncobj_reset(self, handles) -> None:
        self._array(uapi.DRM_IOCTL_SYNCOBJ_RESET, handles)

    def gate(self, ctx: int) -> Gate:
        return Gate(self, ctx)


# -- what a process's threads are doing --------------------------------------------------------
def threads_in_ioctl(pid: int, request: int | None = None) -> int:
    """How many threads of ``pid`` are inside an ioctl system call now (``request``:
    only those with that request number), from /proc/PID/task/TID/syscall."""
    n = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            continue
        if fields and fields[0] == str(SYS_IOCTL) and (request is None or int(fields[2], 16) == request):
            n += 1
    return n


def wait_threads_in_ioctl(pid: int, count: int, request: int | None = None, limit: float = 30.0) -> None:
    """Wait until ``count`` threads of ``pid`` are in the ioctl (``request``); raise
    TimeoutError after ``limit`` seconds (a watchdog, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while threads_in_ioctl(pid, request) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{threads_in_ioctl(pid, request)} of {count} threads of {pid} in the ioctl")
        time.sleep(0.005)


def errname(err: int) -> str:
    return errno.errorcode.get(err, str(err)) if err else "ok"
