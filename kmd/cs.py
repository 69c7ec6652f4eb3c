"""Command submission and fence waits: CS, WAIT_CS, WAIT_FENCES, FENCE_TO_HANDLE
(amdgpu_cs.c, which keeps all four).

CS takes its chunks flattened (docs/design.md 3): for each chunk, its drm_amdgpu_cs_chunk
header immediately followed by `length_dw` dwords of chunk data. It checks every
chunk before it queues anything; the reply's `handle` is the job's sequence number
on its ring. Waits run outside the device lock, as PendingReply.
"""
import ctypes
import errno

from vgpu import uapi

from .bo_list import parse_entries
from .errors import KmdError, check
from .fence import abs_timeout_to_relative, wait_any
from .gem import lookup_bo
from .ioctl import PendingReply
from .job import Job
from .syncobj import Syncobj, signaled_stub
from .syncobj import lookup as lookup_syncobj

CHUNK = uapi.drm_amdgpu_cs_chunk
KNOWN_IB_FLAGS = (uapi.AMDGPU_IB_FLAG_CE | uapi.AMDGPU_IB_FLAG_PREAMBLE
                  | uapi.AMDGPU_IB_FLAG_PREEMPT | uapi.AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE)
MAX_IB_BYTES = 1 << 22


def split_chunks(extra: bytes, num_chunks: int) -> list[tuple[int, bytes]]:
    """Flattened chunks -> [(chunk_id, data)]. EINVAL on truncation or leftovers."""
    chunks, pos = [], 0
    for i in range(num_chunks):
        check(pos + ctypes.sizeof(CHUNK) <= len(extra), errno.EINVAL, f"chunk {i} header truncated")
        hdr = CHUNK.from_buffer_copy(extra, pos)
        pos += ctypes.sizeof(CHUNK)
        end = pos + 4 * hdr.length_dw
        check(end <= len(extra), errno.EINVAL, f"chunk {i} data truncated")
        chunks.append((hdr.chunk_id, extra[pos:end]))
        pos = end
    check(pos == len(extra), errno.EINVAL, f"{len(extra) - pos} bytes after the last chunk")
    return chunks


def as_struct(struct, data: bytes, what: str):
    check(len(data) >= ctypes.sizeof(struct), errno.EINVAL, f"{what} chunk too short")
    return struct.from_buffer_copy(data[: ctypes.sizeof(struct)])


def ring_of(dev, ip_type: int, ip_instance: int, ring: int):
    r = dev.rings.get((ip_type, ring))
    check(r is not None and ip_instance == 0, errno.EINVAL,
          f"no ring ip_type {ip_type} instance {ip_instance} ring {ring}")
    return r


def lookup_fence(dev, file, ctx_id: int, ip_type: int, ip_instance: int, ring: int, seq: int):
    """The fence of `seq` on a ring; None when long signaled. EINVAL: unknown ring or
    context, or a sequence number never emitted."""
    check(ctx_id in file.contexts, errno.EINVAL, f"no context {ctx_id}")
    r = ring_of(dev, ip_type, ip_instance, ring)
    check(seq <= r.emitted_seq, errno.EINVAL, f"seq {seq} not emitted on {r.name} (last {r.emitted_seq})")
    return r.fence(seq)


def cs(dev, file, args, extra):
    """Queue the IBs of one submission on one ring.

    EINVAL: unknown context, no or unknown chunks, malformed chunk data, IB not
    dword-sized or too big, IBs for different rings, unknown ring, bad dependency.
    Syncobj chunks: SYNCOBJ_IN / SYNCOBJ_TIMELINE_WAIT make the job wait for a
    syncobj's fence (at a point); SYNCOBJ_OUT / SYNCOBJ_TIMELINE_SIGNAL give the
    job's fence to syncobjs once it is queued (amdgpu_cs_p2_syncobj_*).
    ENOENT: bad BO list, BO or syncobj handle; EINVAL also for a syncobj (point)
    without a fence, or unknown syncobj chunk flags. ECANCELED: the context is guilty of a hang or
    fault. ENOMEM: too many jobs in flight on the context."""
    a = args.in_
    ctx = file.contexts.get(a.ctx_id)
    check(ctx is not None, errno.EINVAL, f"no context {a.ctx_id}")
    check(not ctx.guilty, errno.ECANCELED, f"context {ctx.id} is guilty of an earlier GPU fault/hang")
    check(a.flags == 0, errno.EINVAL, f"unknown CS flags {a.flags:#x}")
    check(a.num_chunks > 0, errno.EINVAL, "no chunks")
    ibs, deps, bos, user_fence, ring = [], [], None, None, None
    signals = []  # (syncobj, point): get the job's fence once it is queued
    if a.bo_list_handle:
        bos = file.bo_lists.get(a.bo_list_handle)
        check(bos is not None, errno.ENOENT, f"no BO list {a.bo_list_handle}")
        bos = list(bos)
    for chunk_id, data in split_chunks(extra, a.num_chunks):
        if chunk_id == uapi.AMDGPU_CHUNK_ID_IB:
            ib = as_struct(uapi.drm_amdgpu_cs_chunk_ib, data, "IB")
            check(ib._pad == 0 and not ib.flags & ~KNOWN_IB_FLAGS, errno.EINVAL, "bad IB flags/padding")
            check(0 < ib.ib_bytes <= MAX_IB_BYTES and ib.ib_bytes % 4 == 0 and ib.va_start % 4 == 0,
                  errno.EINVAL, f"IB at {ib.va_start:#x} of {ib.ib_bytes} bytes is not dword sized/aligned")
            r = ring_of(dev, ib.ip_type, ib.ip_instance, ib.ring)
            check(ring in (None, r), errno.EINVAL, "IBs of one submission must use one ring")
            ring = r
            ibs.append((ib.va_start, ib.ib_bytes // 4))
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_FENCE:
            f = as_struct(uapi.drm_amdgpu_cs_chunk_fence, data, "FENCE")
            bo = lookup_bo(file, f.handle)
            check(f.offset % 8 == 0 and f.offset + 8 <= bo.size, errno.EINVAL,
                  f"user fence offset {f.offset:#x} outside the BO")
            check(not bo.on_chip, errno.EINVAL, "user fence in a GDS/GWS/OA BO (no memory to write)")
            user_fence = (bo, f.offset)
        elif chunk_id in (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, uapi.AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES):
            size = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_dep)
            check(len(data) % size == 0, errno.EINVAL, "dependency chunk size")
            for i in range(0, len(data), size):
                d = uapi.drm_amdgpu_cs_chunk_dep.from_buffer_copy(data, i)
                fence = lookup_fence(dev, file, d.ctx_id, d.ip_type, d.ip_instance, d.ring, d.handle)
                if fence is not None and not fence.signaled:
                    deps.append(fence)
        elif chunk_id in (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT):
            check(len(data) % 4 == 0, errno.EINVAL, "syncobj chunk size")
            for i in range(0, len(data), 4):
                handle = int.from_bytes(data[i:i + 4], "little")
                s = lookup_syncobj(file, handle)
                if chunk_id == uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT:
                    signals.append((s, 0))
                else:
                    fence = syncobj_fence(s, handle, 0)
                    if not fence.signaled:
                        deps.append(fence)
        elif chunk_id in (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT, uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL):
            size = ctypes.sizeof(uapi.drm_amdgpu_cs_chunk_syncobj)
            check(len(data) % size == 0, errno.EINVAL, "timeline syncobj chunk size")
            for i in range(0, len(data), size):
                d = uapi.drm_amdgpu_cs_chunk_syncobj.from_buffer_copy(data, i)
                s = lookup_syncobj(file, d.handle)
                if chunk_id == uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL:
                    check(d.flags == 0, errno.EINVAL, f"timeline signal flags {d.flags:#x}")
                    signals.append((s, d.point))
                else:
                    check(not d.flags & ~uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, errno.EINVAL,
                          f"timeline wait flags {d.flags:#x}")
                    fence = syncobj_fence(s, d.handle, d.point)
                    if not fence.signaled:
                        deps.append(fence)
        elif chunk_id == uapi.AMDGPU_CHUNK_ID_BO_HANDLES:
            lst = as_struct(uapi.drm_amdgpu_bo_list_in, data, "BO_HANDLES")
            check(bos is None, errno.EINVAL, "both a BO list handle and a BO_HANDLES chunk")
            entries = data[ctypes.sizeof(uapi.drm_amdgpu_bo_list_in):]
            bos = parse_entries(file, entries, lst.bo_number, lst.bo_info_size)
        else:
            raise KmdError(errno.EINVAL, f"unknown or unsupported chunk id {chunk_id}")
    check(ring is not None, errno.EINVAL, "no IB chunk")
    job = Job(file, ctx, ibs, bos if bos is not None else file.mapped_bos(), deps, user_fence=user_fence)
    args.out.handle = dev.queue_job(ring, job)
    for s, point in signals:  # after queueing: job.fence exists now
        s.signal_point(job.fence, point)


def syncobj_fence(s, handle: int, point: int):
    """The fence a SYNCOBJ_IN / TIMELINE_WAIT entry makes the job wait for. EINVAL
    when the syncobj has none (for that point): amdgpu_syncobj_lookup_and_add."""
    fence = s.find(point)
    check(fence is not None, errno.EINVAL, f"syncobj {handle} has no fence" + (f" for point {point}" if point else ""))
    return fence


def wait_cs(dev, file, args, extra):
    """Wait for one submission; `timeout` is absolute CLOCK_MONOTONIC ns (top bit set:
    forever). `status` is 0 once it signaled, 1 on timeout. A job that failed makes
    the wait fail with the fence's error (EFAULT fault, EINVAL bad packet, ETIME
    hang, ECANCELED cancelled), as amdgpu returns fence->error.
    EINVAL: unknown context or ring, seq never emitted."""
    a = args.in_
    fence = lookup_fence(dev, file, a.ctx_id, a.ip_type, a.ip_instance, a.ring, a.handle)
    timeout = abs_timeout_to_relative(a.timeout)

    def complete():
        done = fence is None or fence.wait(timeout)
        if done and fence is not None and fence.error:
            raise KmdError(fence.error, f"seq {fence.seq} on {fence.ring_name} failed")
        args.out.status = 0 if done else 1

    if fence is None or fence.signaled or timeout == 0:
        complete()
        return None
    return PendingReply(complete)


def wait_fences(dev, file, args, extra):
    """Wait for all or any of `fence_count` drm_amdgpu_fence entries (flattened in the
    extra data). status 0 = done, 1 = timed out; first_signaled is the index of the
    first signaled fence in wait-any mode. EINVAL: bad count, extra length, context,
    ring or seq. Errors of failed fences fail the wait as in WAIT_CS."""
    a = args.in_
    size = ctypes.sizeof(uapi.drm_amdgpu_fence)
    check(0 < a.fence_count <= 1024 and len(extra) == a.fence_count * size, errno.EINVAL,
          f"fence_count {a.fence_count} does not match {len(extra)} bytes of fences")
    fences = []
    for i in range(a.fence_count):
        f = uapi.drm_amdgpu_fence.from_buffer_copy(extra, i * size)
        fences.append(lookup_fence(dev, file, f.ctx_id, f.ip_type, f.ip_instance, f.ring, f.seq_no))
    timeout = abs_timeout_to_relative(a.timeout_ns)
    live = [f for f in fences if f is not None]

    def complete():
        done = wait_any(live, timeout, bool(a.wait_all)) if live else True
        if not live or not a.wait_all and any(f is None for f in fences):
            done = True
        first = next((i for i, f in enumerate(fences) if f is None or f.signaled), 0)
        failed = next((f for f in fences if f is not None and f.signaled and f.error), None)
        if failed is not None and (a.wait_all or fences[first] is failed):
            raise KmdError(failed.error, f"seq {failed.seq} on {failed.ring_name} failed")
        args.out.status = 0 if done else 1
        args.out.first_signaled = first

    if timeout == 0 or all(f is None or f.signaled for f in fences):
        complete()
        return None
    return PendingReply(complete)


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
    ctypes.memset(ctypes.addressof(args), 0, ctypes.sizeof(args))
    args.out.handle = out
