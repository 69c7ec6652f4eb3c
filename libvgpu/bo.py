"""Buffer objects: allocation, CPU mapping, idle wait, queries (amdgpu_bo.c).

A CPU map is GEM_MMAP (the fake offset) then ``mmap(MAP_SHARED)`` of
``MOUNT/bo/<offset lowercase hex>``, a symlink to the BO's shared-memory file:
the mapping and the GPU share the same pages, so a CPU write is visible to the
GPU at once and a GPU write to the CPU by the time its fence signals, with no
flush of any kind. Maps are reference-counted; the last unmap unmaps.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from typing import NamedTuple

from vgpu import uapi

from .errors import error_for, from_oserror
from .handle import Handle
from .ioctl import AMDGPU_TIMEOUT_INFINITE, absolute_timeout, address


class BoInfo(NamedTuple):
    """amdgpu_bo_info: how the BO was created (AMDGPU_GEM_OP_GET_GEM_CREATE_INFO)."""
    alloc_size: int
    phys_alignment: int
    preferred_heap: int
    alloc_flags: int


class Bo(Handle):
    """A GEM buffer object of one Device (libdrm's amdgpu_bo_handle).

    Use :func:`bo_alloc`; ``with bo_alloc(...) as bo:`` frees it on exit.
    """

    _repr_fields = ("handle", ("size", "#x"), ("domain", "#x"))

    def __init__(self, dev, handle: int, size: int, alignment: int, domain: int, flags: int):
        self.dev = dev
        self.handle = handle
        self.size = size
        self.alignment = alignment
        self.domain = domain
        self.flags = flags
        self.mmap_offset: int | None = None
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._map_count = 0
        self._refs = 1  # bo_import of a handle the Device already has adds one (libdrm's refcount)
        self.user_memory = None  # create_bo_from_user_mem: the caller's buffer, kept alive
        self.user_address = None  # ... and its address (None for an ordinary BO)

    # -- object-style API, same verbs as the functions below -------------------------
    def cpu_map(self) -> memoryview:
        return bo_cpu_map(self)

    def cpu_unmap(self) -> None:
        bo_cpu_unmap(self)

    def cpu_map_array(self, dtype="uint8"):
        """A numpy view of the whole BO (takes a map reference like :meth:`cpu_map`;
        pair it with :meth:`cpu_unmap`)."""
        import numpy as np  # only callers that want arrays pay for numpy

        dtype = np.dtype(dtype)
        view = bo_cpu_map(self)
        return np.frombuffer(view, dtype=dtype, count=self.size // dtype.itemsize)

    def wait_for_idle(self, timeout_ns: int = AMDGPU_TIMEOUT_INFINITE) -> bool:
        return bo_wait_for_idle(self, timeout_ns)

    def query_info(self) -> BoInfo:
        return bo_query_info(self)

    def free(self) -> None:
        bo_free(self)

    def export(self, handle_type: int | None = None) -> int:
        return bo_export(self, handle_type)

    # -- mapping internals ------------------------------------------------------------
    def _drop_mapping(self) -> None:
        """Unmap regardless of the reference count."""
        if self._map is None:
            return
        m, view = self._map, self._view
        self._map, self._view, self._map_count = None, None, 0
        try:
            view.release()
            m.close()
        except BufferError:
            # The caller still holds views (memoryview slices, numpy arrays):
            # the pages stay mapped until the last of them is garbage.
            pass


def bo_alloc(dev, size: int, alignment: int = 4096, domain: int = uapi.AMDGPU_GEM_DOMAIN_VRAM,
             flags: int = 0) -> Bo:
    """AMDGPU_GEM_CREATE (amdgpu_bo_alloc). Raises VgpuOutOfMemory when the
    domain is full, VgpuInvalidArgument for a bad size, alignment, domain or flag."""
    req = uapi.drm_amdgpu_gem_create()
    req.in_.bo_size = size
    req.in_.alignment = alignment
    req.in_.domains = domain
    req.in_.domain_flags = flags
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, req)
    handle = req.out.handle
    try:
        bo = Bo(dev, handle, size, alignment, domain, flags)
        dev._bos[handle] = bo
    except BaseException:
        # Our own bookkeeping failed: do not leak the kernel object.
        _gem_close(dev, handle)
        raise
    return bo


def _gem_close(dev, handle: int) -> None:
    dev.ioctl(uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=handle))


def bo_free(bo: Bo) -> None:
    """Unmap and GEM_CLOSE the BO (amdgpu_bo_free). Idempotent. A Bo that
    :func:`bo_import` returned more than once is released by its last free."""
    if bo.handle == 0:
        return
    if bo._refs > 1:
        bo._refs -= 1
        return
    try:
        bo._drop_mapping()
    finally:
        handle, bo.handle = bo.handle, 0
        bo.dev._bos.pop(handle, None)
        if bo.dev.fd >= 0:  # a closed device already freed every handle
            _gem_close(bo.dev, handle)


def _bo_path(bo: Bo) -> str:
    return os.path.join(bo.dev.mount, "bo", f"{bo.mmap_offset:x}")


def bo_cpu_map(bo: Bo) -> memoryview:
    """Map the BO for the CPU (amdgpu_bo_cpu_map): a writable memoryview of
    ``bo.size`` bytes. Reference-counted: a second map returns the same mapping."""
    if bo.handle == 0:
        raise error_for(errno.EINVAL, "bo_cpu_map: BO was freed")
    if bo._map is not None:
        bo._map_count += 1
        return bo._view
    if bo.mmap_offset is None:
        req = uapi.drm_amdgpu_gem_mmap()
        req.in_.handle = bo.handle
        bo.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_MMAP, req)
        bo.mmap_offset = req.out.addr_ptr
    path = _bo_path(bo)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise from_oserror(e, f"open {path}") from e
    try:
        m = mmap.mmap(fd, bo.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise from_oserror(e, f"mmap {path}") from e
    finally:
        os.close(fd)  # the mapping keeps the file referenced
    bo._map, bo._view, bo._map_count = m, memoryview(m), 1
    return bo._view


def bo_cpu_unmap(bo: Bo) -> None:
    """Drop one map reference (amdgpu_bo_cpu_unmap); the last one unmaps.
    EINVAL if the BO is not mapped."""
    if bo._map is None:
        raise error_for(errno.EINVAL, f"bo_cpu_unmap: BO {bo.handle} is not mapped")
    bo._map_count -= 1
    if bo._map_count == 0:
        bo._drop_mapping()


def bo_wait_for_idle(bo: Bo, timeout_ns: int = AMDGPU_TIMEOUT_INFINITE) -> bool:
    """AMDGPU_GEM_WAIT_IDLE (amdgpu_bo_wait_for_idle) with a relative timeout.
    Returns True if the BO is idle, False if still busy when the time ran out."""
    req = uapi.drm_amdgpu_gem_wait_idle()
    req.in_.handle = bo.handle
    req.in_.timeout = absolute_timeout(timeout_ns)
    bo.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE, req)
    return req.out.status == 0


def bo_query_info(bo: Bo) -> BoInfo:
    """AMDGPU_GEM_OP GET_GEM_CREATE_INFO (amdgpu_bo_query_info)."""
    info = _gem_create_info(bo.dev, bo.handle)
    return BoInfo(info.bo_size, info.alignment, info.domains, info.domain_flags)


def _gem_create_info(dev, handle: int) -> uapi.drm_amdgpu_gem_create_in:
    """AMDGPU_GEM_OP GET_GEM_CREATE_INFO: ``value`` points to the struct the kernel fills."""
    info = uapi.drm_amdgpu_gem_create_in()
    req = uapi.drm_amdgpu_gem_op(handle=handle, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO,
                                 value=address(info))
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_OP, req)
    return info


# -- sharing: PRIME (amdgpu_bo_export / amdgpu_bo_import) --------------------------

#: amdgpu_bo_handle_type (amdgpu.h): what bo_export returns and bo_import takes.
amdgpu_bo_handle_type_gem_flink_name = 0
amdgpu_bo_handle_type_kms = 1
amdgpu_bo_handle_type_dma_buf_fd = 2
amdgpu_bo_handle_type_kms_noimport = 3


def bo_export(bo: Bo, handle_type: int | None = None) -> int:
    """amdgpu_bo_export. ``dma_buf_fd`` (the default) is PRIME_HANDLE_TO_FD: a token
    (vgpu's stand-in for the dma-buf fd, docs/design.md section 3) naming
    ``MOUNT/prime/<token-hex>``, which another process imports with :func:`bo_import`
    into its own Device; the same token for every export of one BO. ``kms`` and
    ``kms_noimport`` return the GEM handle. Flink names do not exist on vgpu
    (VgpuNotSupported). EPERM (VgpuPermissionDenied) for a userptr BO."""
    handle_type = amdgpu_bo_handle_type_dma_buf_fd if handle_type is None else handle_type
    if bo.handle == 0:
        raise error_for(errno.EINVAL, "bo_export: BO was freed")
    if handle_type in (amdgpu_bo_handle_type_kms, amdgpu_bo_handle_type_kms_noimport):
        return bo.handle
    if handle_type != amdgpu_bo_handle_type_dma_buf_fd:
        raise error_for(errno.EOPNOTSUPP if handle_type == amdgpu_bo_handle_type_gem_flink_name else errno.EINVAL,
                        f"bo_export: handle type {handle_type} (vgpu shares BOs as dma-buf tokens only)")
    req = uapi.drm_prime_handle(handle=bo.handle, flags=uapi.DRM_CLOEXEC | uapi.DRM_RDWR)
    bo.dev.ioctl(uapi.DRM_IOCTL_PRIME_HANDLE_TO_FD, req)
    return req.fd


def bo_import(dev, token: int, handle_type: int | None = None) -> Bo:
    """amdgpu_bo_import of a ``dma_buf_fd`` (the default): PRIME_FD_TO_HANDLE with the
    token of :func:`bo_export` gives this Device a handle to the same BO, whose pages
    :meth:`Bo.cpu_map` maps (the same shared pages the exporter and the GPU use),
    then GEM_OP GET_GEM_CREATE_INFO tells its size (libdrm lseeks the dma-buf fd).
    Importing a BO the Device already has returns the same Bo (freed by its last
    :func:`bo_free`). ENOENT (VgpuNoSuchObject): no live export has this token."""
    handle_type = amdgpu_bo_handle_type_dma_buf_fd if handle_type is None else handle_type
    if handle_type != amdgpu_bo_handle_type_dma_buf_fd:
        raise error_for(errno.EOPNOTSUPP if handle_type == amdgpu_bo_handle_type_gem_flink_name else errno.EINVAL,
                        f"bo_import: handle type {handle_type} (vgpu imports dma-buf tokens only)")
    req = uapi.drm_prime_handle(fd=token)
    dev.ioctl(uapi.DRM_IOCTL_PRIME_FD_TO_HANDLE, req)
    handle = req.handle
    known = dev._bos.get(handle)
    if known is not None:
        known._refs += 1
        return known
    try:
        info = _gem_create_info(dev, handle)
        bo = Bo(dev, handle, info.bo_size, info.alignment, info.domains, info.domain_flags)
        dev._bos[handle] = bo
    except BaseException:
        _gem_close(dev, handle)
        raise
    return bo


# -- user memory: GEM_USERPTR (amdgpu_create_bo_from_user_mem) ---------------------

def _buffer_address(buf) -> tuple[int, int]:
    """(address, size in bytes) of a writable buffer (mmap, bytearray, numpy array...)."""
    view = memoryview(buf)
    try:
        if view.readonly or not view.c_contiguous:
            raise error_for(errno.EINVAL, "create_bo_from_user_mem: the buffer must be writable and contiguous")
        byte_view = view.cast("B")
        char = ctypes.c_char.from_buffer(byte_view)
        try:
            return ctypes.addressof(char), byte_view.nbytes
        finally:
            del char
            byte_view.release()
    finally:
        view.release()


def create_bo_from_user_mem(dev, cpu, size: int | None = None,
                            flags: int = (uapi.AMDGPU_GEM_USERPTR_ANONONLY | uapi.AMDGPU_GEM_USERPTR_REGISTER
                                          | uapi.AMDGPU_GEM_USERPTR_VALIDATE)) -> Bo:
    """amdgpu_create_bo_from_user_mem: AMDGPU_GEM_USERPTR, a BO whose bytes are this
    process's own memory, which the GPU then reads and writes (map it with bo_va_op
    like any BO). ``cpu`` is a writable buffer (an anonymous private mmap, a numpy
    array on one...; the Bo keeps a reference to it) or an address; ``size``
    defaults to the buffer's. Both must be page aligned (EINVAL otherwise).
    ``flags`` are libdrm's: ANONONLY | REGISTER | VALIDATE (add READONLY for memory
    the GPU only reads).

    vgpu copies the range into the BO before each job that uses it and writes back
    what the job changed after it (docs/kmd.md, "GEM_USERPTR"): the CPU sees the
    GPU's writes once the fence has signalled, as with any BO, but a CPU store made
    while a job runs may be missed by that job. ``bo.cpu_map()`` is refused (EPERM,
    as on Linux): the CPU has the memory already. Errors: VgpuInvalidArgument,
    VgpuPermissionDenied (EACCES: writable without REGISTER; EPERM: ANONONLY and
    file-backed memory, such as Python's default shared ``mmap(-1, n)``),
    OSError EFAULT (not mapped as needed), VgpuOutOfMemory."""
    if isinstance(cpu, int):
        addr, keep = cpu, None
        if size is None:
            raise error_for(errno.EINVAL, "create_bo_from_user_mem: an address needs a size")
    else:
        addr, nbytes = _buffer_address(cpu)
        keep = cpu
        size = nbytes if size is None else size
        if size > nbytes:
            raise error_for(errno.EINVAL, f"create_bo_from_user_mem: size {size} past the buffer's {nbytes}")
    req = uapi.drm_amdgpu_gem_userptr(addr=addr, size=size, flags=flags)
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_USERPTR, req)
    try:
        bo = Bo(dev, req.handle, size, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT, 0)
        bo.user_memory = keep
        bo.user_address = addr
        dev._bos[req.handle] = bo
    except BaseException:
        _gem_close(dev, req.handle)
        raise
    return bo
