"""Command submission and fence waits: CS, WAIT_CS, WAIT_FENCES, FENCE_TO_HANDLE
(amdgpu_cs.c, which keeps all four).

CS takes its chunks flattened (docs/design.md 3): for each chunk, its drm_amdgpu_cs_chunk
header immediately followed by `length_dw` dwords of chunk data. It checks every
chunk before it queues anything; the reply's `handle` is the job's sequence number
on its ring. A CS past the context's in-flight cap and the waits are PendingReply:
woken by fence callbacks (kmd/fence.py), they complete in the client's read(),
outside the device lock.
"""
import ctypes
import errno
import struct

from vgpu import uapi
from vgpu.timeout import amdgpu_seconds_left

from .bo_list import parse_entries
from .errors import KmdError, check
from .fence import deadline, subscribe
from .ioctl import PendingReply
from .job import MAX_IBS, Job
from .syncobj import Syncobj, signaled_stub
from .syncobj import lookup as lookup_syncobj
from .vram import PAGE_SIZE

CHUNK = uapi.drm_amdgpu_cs_chunk
CHUNK_SIZE = ctypes.sizeof(CHUNK)
_IB_ID = uapi.AMDGPU_CHUNK_ID_IB
# Every AMDGPU_IB_FLAG_* of the uapi. Linux stores whatever bits it is given; vgpu
# refuses bits the uapi does not define (docs/kmd.md).
KNOWN_IB_FLAGS = (uapi.AMDGPU_IB_FLAG_CE | uapi.AMDGPU_IB_FLAG_PREAMBLE | uapi.AMDGPU_IB_FLAG_PREEMPT
                  | uapi.AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE | uapi.AMDGPU_IB_FLAG_RESET_GDS_MAX_WAVE_ID
                  | uapi.AMDGPU_IB_FLAGS_SECURE | uapi.AMDGPU_IB_FLAG_EMIT_MEM_SYNC)
MAX_IB_BYTES = 1 << 22
# The chunk header's (chunk_id, length_dw) and drm_amdgpu_cs_chunk_ib's fields, read
# with struct: a CS parses both for every submission, and a ctypes struct per chunk
# (and an attribute access per field) was a good part of a NOP CS's parsing.
_CHUNK_HEAD = struct.Struct("=II")
_CHUNK_IB = struct.Struct("=IIQIIII")   # _pad, flags, va_start, ib_bytes, ip_type, ip_instance, ring
assert _CHUNK_IB.size == ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_ib)
assert _CHUNK_HEAD.size == uapi.drm_amdgpu_cs_chunk.chunk_data.offset
MAX_WAIT_FENCES = 1024  # per WAIT_FENCES; the 128 KiB frame holds ~5000


def split_chunks(extra: bytes, num_chunks: int) -> list[tuple[int, bytes]]:
    """Flattened chunks -> [(chunk_id, data)]. EINVAL on truncation or leftovers."""
    # (The checks of the per-request paths test first and format their reason only
    # when they refuse: an f-string per passed check is most of a NOP CS's parsing.)
    chunks, pos, size = [], 0, len(extra)
    head = _CHUNK_HEAD.unpack_from
    for i in range(num_chunks):
        if pos + CHUNK_SIZE > size:
            raise KmdError(errno.EINVAL, f"chunk {i} header truncated")
        chunk_id, length_dw = head(extra, pos)
        pos += CHUNK_SIZE
        end = pos + 4 * length_dw
        if end > size:
            raise KmdError(errno.EINVAL, f"chunk {i} data truncated")
        chunks.append((chunk_id, extra[pos:end]))
        pos = end
    if pos != size:
        raise KmdError(errno.EINVAL, f"{size - pos} bytes after the last chunk")
    return chunks


def as_struct(struct, data: bytes, what: str):
    size = ctypes.sizeof(struct)
    if len(data) < size:
        raise KmdError(errno.EINVAL, f"{what} chunk too short")
    return struct.from_buffer_copy(data[:size])


def ring_of(dev, ip_type: int, ip_instance: int, ring: int):
    r = dev.rings.get((ip_type, ring))
    if r is None or ip_instance != 0:
        raise KmdError(errno.EINVAL, f"no ring ip_type {ip_type} instance {ip_instance} ring {ring}")
    return r


def lookup_fence(dev, file, ctx_id: int, ip_type: int, ip_instance: int, ring: int, seq: int):
    """The fence of `seq` on a ring; None when long signaled. EINVAL: unknown ring or
    context, or a sequence number never emitted."""
    if ctx_id not in file.contexts:
        raise KmdError(errno.EINVAL, f"no context {ctx_id}")
    r = ring_of(dev, ip_type, ip_instance, ring)
    if seq > r.emitted_seq:
        raise KmdError(errno.EINVAL, f"seq {seq} not emitted on {r.name} (last {r.emitted_seq})")
    return r.fence(seq)


def cs(dev, file, args, extra):
    """Queue the IBs of one submission on one ring (amdgpu_cs_ioctl), with the checks
    of amdgpu_cs.c; the reply's `out.handle` is the job's sequence number.

    A context with MAX_JOBS_PER_CONTEXT jobs in flight makes the submission wait for
    room, as amdgpu_ctx_wait_prev_fence does: the write() never blocks, so the CS is
    then a PendingReply and its reply (with the seq) comes once the KMD has queued
    the job, in submission order, when an older job of the context completes
    (kmd/device.py, queue_job). A CS still waiting fails with ECANCELED if a GPU
    reset cancels its guilty context's work, EBADF if its file is closed.

    Chunks: IB (any AMDGPU_IB_FLAG_*; the engines have no CE, preemption, GDS wave
    ids, TMZ or caches to act on), FENCE (the user fence: 8 bytes in a one-page BO),
    DEPENDENCIES / SCHEDULED_DEPENDENCIES, BO_HANDLES, SYNCOBJ_IN /
    SYNCOBJ_TIMELINE_WAIT (the job waits for a syncobj's fence at a point),
    SYNCOBJ_OUT / SYNCOBJ_TIMELINE_SIGNAL (at most one of the two: syncobjs that get
    the job's fence once it is queued, amdgpu_cs_p2_syncobj_*). A refused CS
    changes nothing.

    EINVAL: no chunks, unknown context, unknown or short chunk, IB not dword-sized
    or too big or with unknown flags or nonzero padding, IBs for different rings,
    more IBs than MAX_IBS allows the IP (amdgpu_ring_max_ibs),
    unknown ring, no IB, a user-fence handle that names no BO or a BO that is not
    one page or is a userptr BO, a user-fence offset past its end, bad dependency,
    a syncobj (point) without a fence, a bad SYNCOBJ_OUT / TIMELINE_SIGNAL handle or
    a second such chunk, two BO lists, nonzero CS flags (a timeline chunk's flags are
    ignored, as amdgpu ignores them).
    ENOENT: bad BO list handle, BO handle (BO_HANDLES) or SYNCOBJ_IN / TIMELINE_WAIT
    handle. ENOMEM: the job's BOs cannot all be placed where the engines reach them
    (job_bos, kmd/residency.py; BOs moved before the failure stay moved). ECANCELED: the context is guilty of a hang or fault (also in read(),
    see above)."""
    a = args.in_
    if a.num_chunks == 0:
        raise KmdError(errno.EINVAL, "no chunks")
    ctx = file.contexts.get(a.ctx_id)
    if ctx is None:
        raise KmdError(errno.EINVAL, f"no context {a.ctx_id}")
    if ctx.guilty:
        raise KmdError(errno.ECANCELED, f"context {ctx.id} is guilty of an earlier GPU fault/hang")
    if a.flags != 0:
        raise KmdError(errno.EINVAL, f"unknown CS flags {a.flags:#x}")
    ibs, deps, bos, user_fence, ring = [], [], None, None, None
    signals = None  # [(syncobj, point)]: get the job's fence once it is queued
    if a.bo_list_handle:
        bos = file.bo_lists.get(a.bo_list_handle)
        if bos is None:
            raise KmdError(errno.ENOENT, f"no BO list {a.bo_list_handle}")
        bos = list(bos)
    for chunk_id, data in split_chunks(extra, a.num_chunks):
        if chunk_id == _IB_ID:
            if len(data) < _CHUNK_IB.size:
                raise KmdError(errno.EINVAL, "IB chunk too short")
            pad, flags, va_start, ib_bytes, ip_type, ip_instance, ring_index = _CHUNK_IB.unpack_from(data)
            if pad != 0 or flags & ~KNOWN_IB_FLAGS:
                raise KmdError(errno.EINVAL, f"bad IB flags {flags:#x} or padding")
            if not (0 < ib_bytes <= MAX_IB_BYTES and ib_bytes % 4 == 0 and va_start % 4 == 0):
                raise KmdError(errno.EINVAL,
                               f"IB at {va_start:#x} of {ib_bytes} bytes is not dword sized/aligned")
            r = ring_of(dev, ip_type, ip_instance, ring_index)
            if ring is not None and ring is not r:
                raise KmdError(errno.EINVAL, "IBs of one submission must use one ring")
            ring = r
            if len(ibs) >= MAX_IBS[ip_type]:      # amdgpu_cs_p1_ib
                raise KmdError(errno.EINVAL, f"more than {MAX_IBS[ip_type]} IBs in one submission")
            ibs.append((va_start, ib_bytes // 4))
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_FENCE:
            # amdgpu_cs_p1_user_fence: one page, the 8 bytes at `offset` inside it
            f = as_struct(uapi.drm_amdgpu_cs_chunk_fence, data, "FENCE")
            bo = file.bos.get(f.handle)
            check(bo is not None, errno.EINVAL, f"no GEM handle {f.handle} for the user fence")
            check(bo.size == PAGE_SIZE and f.offset <= bo.size - 8, errno.EINVAL,
                  f"user fence at offset {f.offset:#x} of a {bo.size}-byte BO (one page, 8 bytes inside)")
            check(not bo.on_chip, errno.EINVAL, "user fence in a GDS/GWS/OA BO (no memory to write)")
            check(bo.userptr is None, errno.EINVAL, "user fence in a userptr BO (amdgpu_ttm_tt_get_usermm)")
            user_fence = (bo, f.offset)
        elif chunk_id in (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, uapi.AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES):
            for d in chunk_entries(uapi.drm_amdgpu_cs_chunk_dep, data):
                fence = lookup_fence(dev, file, d.ctx_id, d.ip_type, d.ip_instance, d.ring, d.handle)
                if fence is not None and not fence.signaled:
                    deps.append(fence)
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN:
            for d in chunk_entries(uapi.drm_amdgpu_cs_chunk_sem, data):
                fence = syncobj_fence(lookup_syncobj(file, d.handle), d.handle, 0)
                if not fence.signaled:
                    deps.append(fence)
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT:
            for d in chunk_entries(uapi.drm_amdgpu_cs_chunk_syncobj, data):
                # `flags` go to drm_syncobj_find_fence, which reads WAIT_FOR_SUBMIT
                # only: other bits are ignored, as amdgpu_cs_p2_syncobj_timeline_wait does.
                s = lookup_syncobj(file, d.handle)
                fence = syncobj_fence(s, d.handle, d.point)
                if not fence.signaled:
                    deps.append(fence)
        elif chunk_id in (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL):
            # amdgpu_cs_p2_syncobj_out / _timeline_signal: one such chunk, EINVAL for a bad handle
            check(signals is None, errno.EINVAL, "a second SYNCOBJ_OUT / SYNCOBJ_TIMELINE_SIGNAL chunk")
            signals = []
            timeline = chunk_id == uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL
            for d in chunk_entries(uapi.drm_amdgpu_cs_chunk_syncobj if timeline else uapi.drm_amdgpu_cs_chunk_sem, data):
                s = file.syncobjs.get(d.handle)
                check(s is not None, errno.EINVAL, f"no syncobj {d.handle} to signal")
                # (a timeline entry's `flags` are ignored: amdgpu_cs_p2_syncobj_timeline_signal)
                signals.append((s, d.point if timeline else 0))
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_BO_HANDLES:
            lst = as_struct(uapi.drm_amdgpu_bo_list_in, data, "BO_HANDLES")
            check(bos is None, errno.EINVAL, "both a BO list handle and a BO_HANDLES chunk")
            entries = data[ctypes.sizeof(uapi.drm_amdgpu_bo_list_in):]
            bos = parse_entries(file, entries, lst.bo_number, lst.bo_info_size)
        else:
            raise KmdError(errno.EINVAL, f"unknown or unsupported chunk id {chunk_id}")
    if ring is None:
        raise KmdError(errno.EINVAL, "no IB chunk")
    job = Job(file, ctx, ibs, job_bos(file, bos, user_fence), deps, user_fence=user_fence)
    dev.validate(job)
    seq = dev.queue_job(ring, job, signals or ())
    if seq is not None:
        args.out.handle = seq
        return None

    def finish():
        if job.queued.error:
            raise KmdError(job.queued.error, f"the submission waiting for room on context {ctx.id} was dropped")
        args.out.handle = job.fence.seq

    return PendingReply(ready=lambda: job.queued.signaled, subscribe=lambda wake: subscribe([job.queued], wake),
                        finish=finish)


def job_bos(file, listed: list | None, user_fence) -> list:
    """The BOs a job holds while queued and running (busy: never evicted) and that are
    validated at submission (kmd/residency.py). With a BO list: its BOs, the file's
    per-VM (VM_ALWAYS_VALID) BOs and the user-fence BO, as amdgpu_cs_parser_bos
    validates the list, amdgpu_vm_validate the per-VM BOs and the user fence BO
    joins the list. Without one: every BO mapped in the file's VM, which vgpu treats
    as amdgpu treats per-VM BOs (a job without a list may touch any of them)."""
    if listed is not None and user_fence is None and not file.per_vm_bos:
        return listed   # a BO list holds each BO once (bo_list.parse_entries)
    bos = file.mapped_bos() if listed is None else listed + list(file.per_vm_bos.values())
    if user_fence is not None:
        bos.append(user_fence[0])
    if listed is None and user_fence is None:
        return bos
    seen, out = set(), []
    for bo in bos:
        if id(bo) not in seen:
            seen.add(id(bo))
            out.append(bo)
    return out


def chunk_entries(struct, data: bytes) -> list:
    """The whole `struct`s in a chunk's data; a partial one at the end is ignored, as
    amdgpu_cs.c counts them (length_dw * 4 / sizeof)."""
    size = ctypes.sizeof(struct)
    return [struct.from_buffer_copy(data, i) for i in range(0, len(data) - size + 1, size)]


def syncobj_fence(s, handle: int, point: int):
    """The fence a SYNCOBJ_IN / TIMELINE_WAIT entry makes the job wait for. EINVAL
    when the syncobj has none (for that point): amdgpu_syncobj_lookup_and_add."""
    fence = s.find(point)
    check(fence is not None, errno.EINVAL, f"syncobj {handle} has no fence" + (f" for point {point}" if point else ""))
    return fence


def _clear(args) -> None:
    """memset(args, 0): amdgpu clears the union before it writes the out fields.
    (Through a memoryview: ctypes.memset is a foreign call that gives up the GIL,
    a hand-off to any other daemon thread in the middle of the request.)"""
    view = memoryview(args).cast("B")
    view[:] = bytes(len(view))


def wait_cs(dev, file, args, extra):
    """Wait for one submission (amdgpu_cs_wait_ioctl); `timeout` is absolute
    CLOCK_MONOTONIC ns, top bit set for forever (vgpu.timeout.amdgpu_seconds_left).
    `status` is 0 once it signaled (or signaled long ago), 1 on timeout. A fence that
    carries an error makes the request fail with that error instead, as amdgpu
    returns `fence->error` as the ioctl's result: EFAULT (page fault), EINVAL (bad
    packet or instruction), ETIME (hang), ECANCELED (cancelled), EIO; the read()
    fails with it, also when the job failed long before the call.
    EINVAL: unknown context or ring, seq never emitted."""
    a = args.in_
    fence = lookup_fence(dev, file, a.ctx_id, a.ip_type, a.ip_instance, a.ring, a.handle)
    if fence is None or (fence.signaled and not fence.error):
        # Decided already and not failed: the answer dispatch would give at once for
        # the pending reply below (a failed fence still fails the read(), below).
        _clear(args)
        args.out.status = 0
        return None

    def finish():
        if fence is not None and fence.signaled and fence.error:
            raise KmdError(fence.error, f"seq {fence.seq} on {fence.ring_name} failed")
        busy = fence is not None and not fence.signaled
        _clear(args)
        args.out.status = int(busy)

    fences = [fence] if fence is not None else []
    return PendingReply(ready=lambda: all(f.signaled for f in fences), subscribe=lambda wake: subscribe(fences, wake),
                        finish=finish, deadline=deadline(amdgpu_seconds_left(a.timeout)), fences=fences)


def wait_fences(dev, file, args, extra):
    """Wait for all or any of `fence_count` drm_amdgpu_fence entries (flattened in
    the extra data), as amdgpu_cs_wait_fences_ioctl: `status` 1 when the wait is
    satisfied, 0 on timeout.
    Wait-all (amdgpu_cs_wait_all_fences) takes the fences in order: the first one
    found signalled with an error fails the request with that error. Wait-any
    (amdgpu_cs_wait_any_fence): `first_signaled` is the index of the first fence
    signalled (a fence signalled long ago counts at once), 0xffffffff on timeout;
    if that fence carries an error the request fails with it.
    EINVAL: bad count, extra length, context, ring or seq."""
    a = args.in_
    size = ctypes.sizeof(uapi.drm_amdgpu_fence)
    check(0 < a.fence_count <= MAX_WAIT_FENCES and len(extra) == a.fence_count * size, errno.EINVAL,
          f"fence_count {a.fence_count} does not match {len(extra)} bytes of fences")
    fences = []  # None: signalled long ago
    for i in range(a.fence_count):
        f = uapi.drm_amdgpu_fence.from_buffer_copy(extra, i * size)
        fences.append(lookup_fence(dev, file, f.ctx_id, f.ip_type, f.ip_instance, f.ring, f.seq_no))
    live = [f for f in fences if f is not None]
    wait_all = bool(a.wait_all)

    def ready() -> bool:
        if not wait_all:
            return len(live) < len(fences) or any(f.signaled for f in live)
        for f in live:  # in order: an error ends the wait where amdgpu would return it
            if not f.signaled:
                return False
            if f.error:
                return True
        return True

    def finish():
        if wait_all:
            status = 1
            for f in live:
                if not f.signaled:
                    status = 0
                    break
                if f.error:
                    raise KmdError(f.error, f"seq {f.seq} on {f.ring_name} failed")
            _clear(args)
            args.out.status = status
            return
        if None in fences:  # amdgpu_cs_get_fence gave NULL: signalled, no error to report
            first = fences.index(None)
        else:
            first = next((i for i, f in enumerate(fences) if f.signaled), None)
        if first is not None and fences[first] is not None and fences[first].error:
            f = fences[first]
            raise KmdError(f.error, f"seq {f.seq} on {f.ring_name} failed")
        _clear(args)
        args.out.status = int(first is not None)
        args.out.first_signaled = 0xFFFFFFFF if first is None else first

    return PendingReply(ready=ready, subscribe=lambda wake: subscribe(live, wake), finish=finish,
                        deadline=deadline(amdgpu_seconds_left(a.timeout_ns)), fences=live)


def fence_to_handle(dev, file, args, extra):
    """Turn a CS fence into a new syncobj handle (GET_SYNCOBJ), a syncobj token
    (GET_SYNCOBJ_FD) or a sync-file token (GET_SYNC_FILE_FD), in `out.handle`. A
    long-signalled seq gives a signalled fence.
    EINVAL: unknown `what`, nonzero pad, unknown context or ring, seq never emitted.
    EMFILE: too many tokens held by the file."""
    a = args.in_
    check(a.pad == 0, errno.EINVAL, "nonzero pad")
    check(a.what in (uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ, uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ_FD,
                     uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNC_FILE_FD), errno.EINVAL, f"unknown what {a.what}")
    f = a.fence
    fence = lookup_fence(dev, file, f.ctx_id, f.ip_type, f.ip_instance, f.ring, f.seq_no) or signaled_stub()
    if a.what == uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ:
        out = file.add_syncobj(Syncobj(fence))
    elif a.what == uapi.AMDGPU_FENCE_TO_HANDLE_GET_SYNCOBJ_FD:
        out = dev.sync_tokens.export(file, syncobj=Syncobj(fence))
    else:
        out = dev.sync_tokens.export(file, fence=fence)
    _clear(args)
    args.out.handle = out
