"""USERQ_SIGNAL and USERQ_WAIT: user-queue work and the kernel's fences, each waiting
for the other (amdgpu_userq_fence.c; docs/userq.md).

USERQ_SIGNAL makes a fence that signals once the queue's read pointer reaches its
write pointer as it is now: it replaces the fence of the syncobjs named (a CS job,
a syncobj wait or another queue can then wait for it) and joins the BOs' reservations
(GEM_WAIT_IDLE waits for it). Such a fence knows its (rptr VA, value): waiting for
it in memory is waiting until the u64 at rptr_va is at least the value.

USERQ_WAIT turns fences into those (va, value) pairs, for the queue to wait on in
memory (PM4 WAIT_REG_MEM, SDMA POLL_REGMEM: their 32-bit compare on the low word).
A queue fence gives its own pair. A kernel fence (a CS job's, a signalled-from-CPU
syncobj's) gets a slot of the file's seq64 page, a kernel BO mapped read-only in the
file's VM at SEQ64_VA (amdgpu maps its seq64 area into every VM likewise); when
the fence signals, its callback writes the value there and FUTEX_WAKEs the word.
Signalled fences need no wait and give no pair.
"""
from __future__ import annotations

import errno
import os
import struct

from vgpu import futex, uapi

from .errors import KmdError, check
from .fence import Fence
from .gem import BufferObject, lookup_bo
from .syncobj import lookup as lookup_syncobj
from .userq import read_u64
from .vm import VA_END
from .vram import PAGE_SIZE

SEQ64_VA = VA_END                     # above every VA a client may map (kmd/vm.py)
SEQ64_SLOTS = PAGE_SIZE // 8
MAX_HANDLES = 1 << 16


class QueueFence(Fence):
    """A fence of queue `q`: signalled when q's rptr reaches `value`."""

    def __init__(self, q, value: int) -> None:
        super().__init__(q.name, value)
        self.userq_info = (q.rptr_va, value)


def signal_fences(q) -> None:
    """Signal q's USERQ_SIGNAL fences that its read pointer has reached (worker)."""
    with q.lock:
        done = [f for v, f in q.fences if v <= q.rptr]
        if done:
            q.fences = [(v, f) for v, f in q.fences if v > q.rptr]
    for f in done:
        f.signal()


def fail_fences(q, err: int) -> None:
    """The queue stopped: every fence still pending fails with `err`."""
    with q.lock:
        pending, q.fences = q.fences, []
    for _, f in pending:
        f.signal(err)


def _handles(extra: bytes, at: int, count: int, size: int = 4) -> tuple[tuple, int]:
    fmt = "I" if size == 4 else "Q"
    check(at + size * count <= len(extra), errno.EINVAL, "handle arrays missing")
    return struct.unpack_from(f"<{count}{fmt}", extra, at), at + size * count


def userq_signal(dev, file, args, extra):
    """DRM_IOCTL_AMDGPU_USERQ_SIGNAL. ENOENT: no such queue, syncobj or BO handle
    (nothing is changed then). EINVAL: nonzero pad, a count over 65536, an unreadable
    wptr. A stopped (hung or faulted) queue's fence fails at once with ECANCELED."""
    q = file.userqs.get(args.queue_id)
    check(q is not None, errno.ENOENT, f"no user queue {args.queue_id}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    n_sync, n_rd, n_wr = args.num_syncobj_handles, args.num_bo_read_handles, args.num_bo_write_handles
    check(max(n_sync, n_rd, n_wr) <= MAX_HANDLES, errno.EINVAL, "more than 65536 handles")
    handles, at = _handles(extra, 0, n_sync)
    reads, at = _handles(extra, at, n_rd)
    writes, _ = _handles(extra, at, n_wr)
    syncobjs = [lookup_syncobj(file, h) for h in handles]
    bos = [lookup_bo(file, h) for h in (*reads, *writes)]
    try:
        wptr = read_u64(file.vm.page_table, q.wptr_va)
    except Exception as e:
        raise KmdError(errno.EINVAL, f"wptr of queue {q.id} unreadable: {e}") from None
    fence = QueueFence(q, wptr)
    with q.lock:
        if q.state != "active" or q.reason:
            now = errno.ECANCELED
        elif wptr <= q.rptr:
            now = 0
        else:
            now = None
            q.fences.append((wptr, fence))
    if now is not None:
        fence.signal(now)
    for s in syncobjs:
        s.replace_fence(fence)
    for bo in bos:
        bo.fences.add(fence)
        fence.add_callback(lambda f, bo=bo: bo.fences.discard(f))


class Seq64:
    """A file's seq64 page: slots a kernel fence's callback writes when it signals."""

    def __init__(self, dev, file) -> None:
        placement = dev.memory.alloc(uapi.AMDGPU_GEM_DOMAIN_GTT, PAGE_SIZE, PAGE_SIZE, os.getuid())
        self.bo = BufferObject(PAGE_SIZE, PAGE_SIZE, uapi.AMDGPU_GEM_DOMAIN_GTT, 0, placement,
                               dev.memory.storage(placement), os.getuid(), file.pid)
        self.bo.pin_count = 1
        file.vm.map(self.bo, 0, SEQ64_VA, PAGE_SIZE, uapi.AMDGPU_VM_PAGE_READABLE)
        self.words = self.bo.storage.view("<u8")
        self.busy: dict[int, Fence] = {}
        self.next = 0

    def slot_for(self, fence) -> tuple[int, int]:
        """(va, value) that `fence` writes when it signals. ENOSPC: every slot waits."""
        for _ in range(SEQ64_SLOTS):
            i, self.next = self.next, (self.next + 1) % SEQ64_SLOTS
            if i not in self.busy:
                break
        else:
            raise KmdError(errno.ENOSPC, f"{SEQ64_SLOTS} kernel fences already waited on by queues")
        value = int(self.words[i]) + 1
        self.busy[i] = fence
        addr = self.bo.storage.ctypes.data + 8 * i

        def signalled(_f, i=i, value=value, addr=addr) -> None:
            self.words[i] = value
            self.busy.pop(i, None)
            futex.wake(addr)

        fence.add_callback(signalled)
        return SEQ64_VA + 8 * i, value


def _seq64(dev, file) -> Seq64:
    if file.seq64 is None:
        file.seq64 = Seq64(dev, file)
    return file.seq64


def userq_wait(dev, file, args, extra):
    """DRM_IOCTL_AMDGPU_USERQ_WAIT: the (va, value) pairs of the unsignalled fences of
    the syncobjs (current fence), the timeline syncobjs' points and the BOs'
    reservations, written to `out_fences` (out-data). `num_fences` 0: only counts
    them (num_fences out). ENOENT: no such queue, syncobj or BO. EINVAL: nonzero
    pad, a timeline point not submitted yet, more fences than num_fences allows.
    ENOSPC: the seq64 page has no free slot."""
    check(args.waitq_id in file.userqs, errno.ENOENT, f"no user queue {args.waitq_id}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    n_sync, n_tl = args.num_syncobj_handles, args.num_syncobj_timeline_handles
    n_rd, n_wr = args.num_bo_read_handles, args.num_bo_write_handles
    check(max(n_sync, n_rd, n_wr) <= MAX_HANDLES, errno.EINVAL, "more than 65536 handles")
    handles, at = _handles(extra, 0, n_sync)
    tl_handles, at = _handles(extra, at, n_tl)
    tl_points, at = _handles(extra, at, n_tl, 8)
    reads, at = _handles(extra, at, n_rd)
    writes, _ = _handles(extra, at, n_wr)
    fences = []
    for h in handles:
        fences.append(lookup_syncobj(file, h).fence)
    for h, p in zip(tl_handles, tl_points):
        f = lookup_syncobj(file, h).find(p)
        check(f is not None or p == 0, errno.EINVAL, f"syncobj {h} has no point {p} yet")
        fences.append(f)
    for h in (*reads, *writes):
        fences.extend(lookup_bo(file, h).fences)
    pending = []
    for f in fences:
        if f is not None and not f.signaled and f not in pending:
            pending.append(f)
    if args.num_fences == 0:
        args.num_fences = len(pending)
        return b""
    check(len(pending) <= args.num_fences, errno.EINVAL,
          f"{len(pending)} fences to wait for, room for {args.num_fences}")
    out = []
    for f in pending:
        info = getattr(f, "userq_info", None)
        out.append(info if info is not None else _seq64(dev, file).slot_for(f))
    args.num_fences = len(out)
    return b"".join(struct.pack("<QQ", va, value) for va, value in out)
