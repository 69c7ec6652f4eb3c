"""BO lists, command submission and fences (libdrm amdgpu_bo_list_*, amdgpu_cs_*).

Coherence needs no calls at all: a BO's CPU mappings and the engines share its
pages (docs/memory.md), so a program written the libdrm way (map, write, submit,
wait, read) sees correct data, as on a device with a large BAR.

What the requests point to (BO list entries, the CS chunk pointer table, each chunk's
header and data, WAIT_FENCES' fences) is built in ctypes buffers whose addresses go
in the structs' pointer fields, as libdrm does; the kernel (the daemon) reads them
in this process's memory during the ioctl.
"""
from __future__ import annotations

import ctypes
import errno
import threading
from dataclasses import dataclass, field

from vgpu import uapi

from .errors import error_for
from .handle import Handle
from .ioctl import AMDGPU_TIMEOUT_INFINITE, absolute_timeout, address

AMDGPU_QUERY_FENCE_TIMEOUT_IS_ABSOLUTE = 1 << 0  # libdrm amdgpu.h
_CHUNK_SIZE = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk)


class BoList(Handle):
    """A kernel BO list (amdgpu_bo_list_handle). `bos` are libvgpu Bo objects.
    Released by :meth:`destroy` (libdrm's verb) or :meth:`free`, the same call."""

    _repr_fields = ("handle", ("bos", len))

    def __init__(self, dev, handle: int, bos: list):
        self.dev, self.handle, self.bos = dev, handle, list(bos)

    def free(self) -> None:
        bo_list_destroy(self)

    destroy = free


def _entries(bos: list, priorities: list[int] | None, what: str = "bo_list_create"):
    """The drm_amdgpu_bo_list_entry array for ``bos`` (a ctypes array the caller
    keeps alive while the kernel reads it)."""
    prio = priorities or [0] * len(bos)
    if len(prio) != len(bos):
        raise error_for(errno.EINVAL, f"{what}: one priority per BO")
    return (uapi.drm_amdgpu_bo_list_entry * len(bos))(
        *(uapi.drm_amdgpu_bo_list_entry(bo_handle=b.handle, bo_priority=p) for b, p in zip(bos, prio)))


def _bo_list_in(target: uapi.drm_amdgpu_bo_list_in, entries) -> None:
    target.bo_number = len(entries)
    target.bo_info_size = ctypes.sizeof(uapi.drm_amdgpu_bo_list_entry)
    target.bo_info_ptr = address(entries) if len(entries) else 0


def bo_list_create(dev, bos: list, priorities: list[int] | None = None) -> BoList:
    """AMDGPU_BO_LIST_OP_CREATE (amdgpu_bo_list_create): ``bo_info_ptr`` points to
    the entry array."""
    entries = _entries(bos, priorities)
    req = uapi.drm_amdgpu_bo_list()
    req.in_.operation = uapi.AMDGPU_BO_LIST_OP_CREATE
    _bo_list_in(req.in_, entries)
    dev.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, req)
    return BoList(dev, req.out.list_handle, bos)


def bo_list_update(bo_list: BoList, bos: list, priorities: list[int] | None = None) -> None:
    """AMDGPU_BO_LIST_OP_UPDATE (amdgpu_bo_list_update)."""
    entries = _entries(bos, priorities, "bo_list_update")
    req = uapi.drm_amdgpu_bo_list()
    req.in_.operation = uapi.AMDGPU_BO_LIST_OP_UPDATE
    req.in_.list_handle = bo_list.handle
    _bo_list_in(req.in_, entries)
    bo_list.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, req)
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
    resources: BoList | None = None      # a BO list handle (amdgpu_cs_submit)...
    ring: int = 0
    ip_instance: int = 0
    dependencies: list[CsFence] = field(default_factory=list)
    fence_info: tuple | None = None      # (Bo, offset): the KMD writes the seq there
    syncobj_in: list = field(default_factory=list)    # Syncobjs whose fences the job waits for
    syncobj_out: list = field(default_factory=list)   # Syncobjs that get the job's fence
    timeline_wait: list = field(default_factory=list)    # (Syncobj, point[, flags]) to wait for
    timeline_signal: list = field(default_factory=list)  # (Syncobj, point) to signal
    bo_handles: list | None = None       # ...or the job's Bos as a BO_HANDLES chunk (Mesa's way)
    seq_no: int = 0


class CsChunks:
    """The chunk array of one AMDGPU_CS, laid out as amdgpu_cs_submit_raw2 builds it:
    ``chunks`` (what ``drm_amdgpu_cs_in.chunks`` points to) is an array of u64
    pointers, each to a drm_amdgpu_cs_chunk whose ``chunk_data`` points to its data.
    The object owns every buffer, so it must outlive the ioctl."""

    def __init__(self):
        self._data: list = []     # (chunk_id, data) of each chunk, kept alive
        self._keep: list = []     # what the chunks' data points to (BO_HANDLES' entries)
        self.headers = None       # drm_amdgpu_cs_chunk array
        self.pointers = None      # u64 array of the headers' addresses

    def add(self, chunk_id: int, data, keep=None) -> None:
        """Append a chunk whose data is the ctypes object ``data`` (``length_dw`` is
        its size); ``keep``: a buffer ``data`` points to, kept alive with it."""
        self._data.append((chunk_id, data))
        if keep is not None:
            self._keep.append(keep)

    def __len__(self) -> int:
        return len(self._data)

    def build(self) -> int:
        """Lay out headers and pointer table; returns the address for ``in.chunks``."""
        n = len(self._data)
        # Field by field into a zeroed array: a struct per chunk passed to the array's
        # constructor through a generator costs three times as much, on every submit.
        self.headers = headers = (uapi.drm_amdgpu_cs_chunk * n)()
        for h, (cid, d) in zip(headers, self._data):
            h.chunk_id, h.length_dw, h.chunk_data = cid, ctypes.sizeof(d) >> 2, ctypes.addressof(d)
        base = ctypes.addressof(headers)
        self.pointers = (ctypes.c_uint64 * n)(*range(base, base + n * _CHUNK_SIZE, _CHUNK_SIZE))
        return ctypes.addressof(self.pointers) if n else 0


def _array(cls, items):
    return (cls * len(items))(*items)


def cs_chunks(request: CsRequest) -> CsChunks:
    """The chunks of ``request``: one IB chunk per IB, then FENCE, DEPENDENCIES,
    BO_HANDLES, SYNCOBJ_IN/OUT and SYNCOBJ_TIMELINE_WAIT/SIGNAL where present."""
    chunks = CsChunks()
    for ib in request.ibs:
        chunks.add(uapi.AMDGPU_CHUNK_ID_IB, uapi.drm_amdgpu_cs_chunk_ib(
            flags=ib.flags, va_start=ib.ib_mc_address, ib_bytes=ib.size * 4, ip_type=request.ip_type,
            ip_instance=request.ip_instance, ring=request.ring))
    if request.fence_info is not None:
        bo, offset = request.fence_info
        chunks.add(uapi.AMDGPU_CHUNK_ID_FENCE, uapi.drm_amdgpu_cs_chunk_fence(handle=bo.handle, offset=offset))
    if request.dependencies:
        chunks.add(uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, _array(uapi.drm_amdgpu_cs_chunk_dep, [
            uapi.drm_amdgpu_cs_chunk_dep(ip_type=d.ip_type, ip_instance=d.ip_instance, ring=d.ring,
                                         ctx_id=d.context.id, handle=d.fence)
            for d in request.dependencies]))
    if request.bo_handles is not None:
        entries = _entries(request.bo_handles, None, "cs_submit")
        bl = uapi.drm_amdgpu_bo_list_in()
        _bo_list_in(bl, entries)
        chunks.add(uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bl, keep=entries)   # bo_info_ptr -> entries
    for chunk_id, syncobjs in ((uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, request.syncobj_in),
                               (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, request.syncobj_out)):
        if syncobjs:
            chunks.add(chunk_id, _array(uapi.drm_amdgpu_cs_chunk_sem,
                                        [uapi.drm_amdgpu_cs_chunk_sem(handle=s.handle) for s in syncobjs]))
    for chunk_id, entries in ((uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT, request.timeline_wait),
                              (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, request.timeline_signal)):
        if entries:
            chunks.add(chunk_id, _array(uapi.drm_amdgpu_cs_chunk_syncobj, [
                uapi.drm_amdgpu_cs_chunk_syncobj(handle=e[0].handle, point=e[1], flags=e[2] if len(e) > 2 else 0)
                for e in entries]))
    return chunks


#: A plain submission (IB chunks only, at most this many) is built in the thread's
#: scratch buffers (_Scratch).
PLAIN_IBS = 4


class _Scratch(threading.local):
    """This thread's chunk buffers for a plain submission, made once: the IB chunks,
    their headers (pointing to them) and the pointer table (pointing to those), and the
    CS struct, as libdrm's amdgpu_cs_submit_one keeps its chunk arrays on the stack.
    Making the five ctypes objects per call was half of the client's time before the
    CS system call (docs/bench.md). ``busy`` while a submission uses them: a signal
    handler's own cs_submit in the middle of the ioctl's retry takes the other path."""

    def __init__(self):
        self.busy = False
        self.ibs = (uapi.drm_amdgpu_cs_chunk_ib * PLAIN_IBS)()
        self.headers = (uapi.drm_amdgpu_cs_chunk * PLAIN_IBS)()
        for h, ib in zip(self.headers, self.ibs):
            h.chunk_id, h.length_dw, h.chunk_data = (uapi.AMDGPU_CHUNK_ID_IB, ctypes.sizeof(ib) >> 2,
                                                     ctypes.addressof(ib))
        self.table = (ctypes.c_uint64 * PLAIN_IBS)(*[ctypes.addressof(h) for h in self.headers])
        self.table_address = ctypes.addressof(self.table)
        self.req = uapi.drm_amdgpu_cs()


_scratch = _Scratch()


def _plain(request: CsRequest) -> bool:
    """Whether ``request``'s chunks are its IBs alone (1 to PLAIN_IBS of them)."""
    return (0 < len(request.ibs) <= PLAIN_IBS and request.fence_info is None and not request.dependencies
            and request.bo_handles is None and not request.syncobj_in and not request.syncobj_out
            and not request.timeline_wait and not request.timeline_signal)


def _submit_plain(context, request: CsRequest, flags: int, s: _Scratch) -> int:
    """cs_submit of a plain request through the scratch buffers ``s`` (busy)."""
    for ib, info in zip(s.ibs, request.ibs):
        ib.flags, ib.va_start, ib.ib_bytes = info.flags, info.ib_mc_address, info.size * 4
        ib.ip_type, ib.ip_instance, ib.ring = request.ip_type, request.ip_instance, request.ring
    return _issue(context, request, flags, s.req, len(request.ibs), s.table_address)


def _issue(context, request: CsRequest, flags: int, req, num_chunks: int, chunks: int) -> int:
    """Fill ``req`` (a drm_amdgpu_cs: every ``in`` field, since a reused struct holds
    the last reply's ``out``) and issue it; the sequence number, in request.seq_no."""
    i = req.in_
    i.ctx_id = context.id
    i.bo_list_handle = request.resources.handle if request.resources else 0
    i.num_chunks = num_chunks
    i.flags = flags
    i.chunks = chunks
    context.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, req)
    request.seq_no = req.out.handle
    return request.seq_no


def cs_submit(context, request: CsRequest, flags: int = 0) -> int:
    """AMDGPU_CS (amdgpu_cs_submit): queue `request` on its ring; returns the
    sequence number (also stored in request.seq_no). ``in.chunks`` points to the
    chunk pointer array (:func:`cs_chunks`); syncobj lists become the SYNCOBJ_IN/OUT
    and SYNCOBJ_TIMELINE_WAIT/SIGNAL chunks, ``bo_handles`` a BO_HANDLES chunk.
    Raises VgpuCanceled once the context is guilty."""
    s = _scratch
    if not s.busy and _plain(request):
        s.busy = True
        try:
            return _submit_plain(context, request, flags, s)
        finally:
            s.busy = False
    chunks = cs_chunks(request)
    return _issue(context, request, flags, uapi.drm_amdgpu_cs(), len(chunks), chunks.build())


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
    array = _array(uapi.drm_amdgpu_fence, [f.as_uapi() for f in fences])
    req = uapi.drm_amdgpu_wait_fences()
    req.in_.fences = address(array)
    req.in_.fence_count = len(fences)
    req.in_.wait_all = int(wait_all)
    req.in_.timeout_ns = absolute_timeout(timeout_ns)
    fences[0].context.dev.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, req)
    return req.out.status == 1, req.out.first_signaled
