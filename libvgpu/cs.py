"""BO lists, command submission and fences (libdrm amdgpu_bo_list_*, amdgpu_cs_*).

Coherence needs no calls at all: a BO's CPU mappings and the engines share its
pages (docs/memory.md), so a program written the libdrm way (map, write, submit,
wait, read) sees correct data, as on a device with a large BAR.
"""
from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass, field

from vgpu import uapi

from .errors import error_for
from .handle import Handle
from .ioctl import AMDGPU_TIMEOUT_INFINITE, absolute_timeout

AMDGPU_QUERY_FENCE_TIMEOUT_IS_ABSOLUTE = 1 << 0  # libdrm amdgpu.h


class BoList(Handle):
    """A kernel BO list (amdgpu_bo_list_handle). `bos` are libvgpu Bo objects.
    Released by :meth:`destroy` (libdrm's verb) or :meth:`free`, the same call."""

    _repr_fields = ("handle", ("bos", len))

    def __init__(self, dev, handle: int, bos: list):
        self.dev, self.handle, self.bos = dev, handle, list(bos)

    def free(self) -> None:
        bo_list_destroy(self)

    destroy = free


def _entries(bos: list, priorities: list[int] | None) -> bytes:
    prio = priorities or [0] * len(bos)
    if len(prio) != len(bos):
        raise error_for(errno.EINVAL, "bo_list_create: one priority per BO")
    return b"".join(bytes(uapi.drm_amdgpu_bo_list_entry(bo_handle=b.handle, bo_priority=p))
                    for b, p in zip(bos, prio))


def bo_list_create(dev, bos: list, priorities: list[int] | None = None) -> BoList:
    """AMDGPU_BO_LIST_OP_CREATE (amdgpu_bo_list_create)."""
    req = uapi.drm_amdgpu_bo_list()
    req.in_.operation = uapi.AMDGPU_BO_LIST_OP_CREATE
    req.in_.bo_number = len(bos)
    req.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, req, _entries(bos, priorities))
    return BoList(dev, req.out.list_handle, bos)


def bo_list_update(bo_list: BoList, bos: list, priorities: list[int] | None = None) -> None:
    """AMDGPU_BO_LIST_OP_UPDATE (amdgpu_bo_list_update)."""
    req = uapi.drm_amdgpu_bo_list()
    req.in_.operation = uapi.AMDGPU_BO_LIST_OP_UPDATE
    req.in_.list_handle = bo_list.handle
    req.in_.bo_number = len(bos)
    req.in_.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
    bo_list.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, req, _entries(bos, priorities))
    bo_list.bos = list(bos)


def bo_list_destroy(bo_list: BoList) -> None:
    """AMDGPU_BO_LIST_OP_DESTROY (amdgpu_bo_list_destroy). Idempotent."""
    if bo_list.handle == 0:
        return
    handle, bo_list.handle = bo_list.handle, 0
    if bo_list.dev.fd < 0:
        return
    req = uapi.drm_amdgpu_bo_list()
    req.in_.operation = uapi.AMDGPU_BO_LIST_OP_DESTROY
    req.in_.list_handle = handle
    bo_list.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, req)


@dataclass
class IbInfo:
    """One IB (amdgpu_cs_ib_info): GPU VA and size in dwords."""

    ib_mc_address: int
    size: int
    flags: int = 0


@dataclass(frozen=True)
class CsFence:
    """A submission's fence (struct amdgpu_cs_fence)."""

    context: object
    ip_type: int
    ip_instance: int
    ring: int
    fence: int  # the sequence number

    def as_uapi(self) -> uapi.drm_amdgpu_fence:
        return uapi.drm_amdgpu_fence(ctx_id=self.context.id, ip_type=self.ip_type,
                                     ip_instance=self.ip_instance, ring=self.ring, seq_no=self.fence)


@dataclass
class CsRequest:
    """One submission (struct amdgpu_cs_request). `seq_no` is filled by cs_submit."""

    ip_type: int
    ibs: list[IbInfo]
    resources: BoList | None = None
    ring: int = 0
    ip_instance: int = 0
    dependencies: list[CsFence] = field(default_factory=list)
    fence_info: tuple | None = None      # (Bo, offset): the KMD writes the seq there
    syncobj_in: list = field(default_factory=list)    # Syncobjs whose fences the job waits for
    syncobj_out: list = field(default_factory=list)   # Syncobjs that get the job's fence
    timeline_wait: list = field(default_factory=list)    # (Syncobj, point[, flags]) to wait for
    timeline_signal: list = field(default_factory=list)  # (Syncobj, point) to signal
    seq_no: int = 0


def _chunk(chunk_id: int, data: bytes) -> bytes:
    return bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=len(data) // 4)) + data


def cs_submit(context, request: CsRequest, flags: int = 0) -> int:
    """AMDGPU_CS (amdgpu_cs_submit): queue `request` on its ring; returns the
    sequence number (also stored in request.seq_no). Syncobj lists become the SYNCOBJ_IN/OUT and
    SYNCOBJ_TIMELINE_WAIT/SIGNAL chunks. Raises VgpuCanceled once the context is
    guilty."""
    dev = context.dev
    chunks = b""
    for ib in request.ibs:
        chunks += _chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(uapi.drm_amdgpu_cs_chunk_ib(
            flags=ib.flags, va_start=ib.ib_mc_address, ib_bytes=ib.size * 4, ip_type=request.ip_type,
            ip_instance=request.ip_instance, ring=request.ring)))
    n = len(request.ibs)
    if request.fence_info is not None:
        bo, offset = request.fence_info
        chunks += _chunk(uapi.AMDGPU_CHUNK_ID_FENCE,
                         bytes(uapi.drm_amdgpu_cs_chunk_fence(handle=bo.handle, offset=offset)))
        n += 1
    if request.dependencies:
        deps = b"".join(bytes(uapi.drm_amdgpu_cs_chunk_dep(
            ip_type=d.ip_type, ip_instance=d.ip_instance, ring=d.ring, ctx_id=d.context.id, handle=d.fence))
            for d in request.dependencies)
        chunks += _chunk(uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, deps)
        n += 1
    for chunk_id, syncobjs in ((uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, request.syncobj_in),
                               (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, request.syncobj_out)):
        if syncobjs:
            chunks += _chunk(chunk_id, b"".join(bytes(uapi.drm_amdgpu_cs_chunk_sem(handle=s.handle))
                                                for s in syncobjs))
            n += 1
    for chunk_id, entries in ((uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT, request.timeline_wait),
                              (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, request.timeline_signal)):
        if entries:
            chunks += _chunk(chunk_id, b"".join(bytes(uapi.drm_amdgpu_cs_chunk_syncobj(
                handle=e[0].handle, point=e[1], flags=e[2] if len(e) > 2 else 0)) for e in entries))
            n += 1
    req = uapi.drm_amdgpu_cs()
    req.in_.ctx_id = context.id
    req.in_.bo_list_handle = request.resources.handle if request.resources else 0
    req.in_.num_chunks = n
    req.in_.flags = flags
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, req, chunks)
    request.seq_no = req.out.handle
    return request.seq_no


def fence_of(context, request: CsRequest) -> CsFence:
    """The fence of a submitted request (what libdrm callers build by hand)."""
    return CsFence(context, request.ip_type, request.ip_instance, request.ring, request.seq_no)


def cs_query_fence_status(fence: CsFence, timeout_ns: int = 0, flags: int = 0) -> bool:
    """AMDGPU_WAIT_CS (amdgpu_cs_query_fence_status): True once the fence signaled
    ("expired" in libdrm), False if it is still busy after `timeout_ns`. A failed
    job raises the error its fence carries (EFAULT, ETIME, ECANCELED...)."""
    req = uapi.drm_amdgpu_wait_cs()
    req.in_.handle = fence.fence
    req.in_.ip_type = fence.ip_type
    req.in_.ip_instance = fence.ip_instance
    req.in_.ring = fence.ring
    req.in_.ctx_id = fence.context.id
    req.in_.timeout = timeout_ns if flags & AMDGPU_QUERY_FENCE_TIMEOUT_IS_ABSOLUTE else absolute_timeout(timeout_ns)
    fence.context.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, req)
    return req.out.status == 0


def cs_wait_fences(fences: list[CsFence], wait_all: bool = True,
                   timeout_ns: int = AMDGPU_TIMEOUT_INFINITE) -> tuple[bool, int]:
    """AMDGPU_WAIT_FENCES (amdgpu_cs_wait_fences): (signaled, first_signaled index).
    `signaled` is libdrm's `status`: True once all (or, with `wait_all` False, any)
    signaled, False when `timeout_ns` passed first; `first_signaled` is meaningful
    for wait-any only (0xffffffff after a timeout). A failed job raises the error
    its fence carries: in wait-all the first one in order, in wait-any the first
    signaled one's."""
    if not fences:
        raise error_for(errno.EINVAL, "cs_wait_fences: no fences")
    req = uapi.drm_amdgpu_wait_fences()
    req.in_.fence_count = len(fences)
    req.in_.wait_all = int(wait_all)
    req.in_.timeout_ns = absolute_timeout(timeout_ns)
    fences[0].context.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, req,
                                b"".join(bytes(f.as_uapi()) for f in fences))
    return req.out.status == 1, req.out.first_signaled
