"""Syncobjs (drivers/gpu/drm/drm_syncobj.c) and sync files (drivers/dma-buf/sync_file.c).

A syncobj holds one fence slot. Binary use puts a plain Fence there; timeline use
puts a `ChainNode` (dma_fence_chain): a point number, the fence of that point and
the previous node. A chain node signals once its own fence and every earlier node
have signalled, so waiting on point P waits for all points <= P.

Handles are per DrmFile; the objects are shared. HANDLE_TO_FD gives a token (docs/design.md
3: a positive 31-bit integer standing in for the fd) naming MOUNT/sync/<token-hex>,
either the syncobj itself or, with EXPORT_SYNC_FILE, a sync file: a snapshot of the
syncobj's current fence. FD_TO_HANDLE takes the token back in any file of the
device; tokens live until the exporting file closes (docs/syncobj.md).

Extra data (docs/design.md 3): the u32 handle array, then the u64 point array where the
struct has one. Waits that must block are PendingReply: they complete in the client's
read(), outside the device lock, woken by fence callbacks and syncobj fence changes
(kmd/fence.py).
"""
import errno
import itertools
import secrets
import struct
import threading

from vgpu import uapi
from vgpu.timeout import syncobj_seconds_left

from .errors import KmdError, check
from .fence import Fence, deadline
from .ioctl import PendingReply

WAIT_ALL = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL
WAIT_FOR_SUBMIT = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT
WAIT_AVAILABLE = uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE
MAX_HANDLES = 4096          # per request; the 128 KiB frame holds ~10k anyway
MAX_TOKENS_PER_FILE = 4096  # exported tokens a file may hold (EMFILE beyond, like fds)
WAIT_FOR_SUBMIT_TIMEOUT = 5.0  # drm_syncobj_find_fence's DRM_SYNCOBJ_WAIT_FOR_SUBMIT_TIMEOUT

_contexts = itertools.count(1)


def signaled_stub() -> Fence:
    """dma_fence_get_stub(): a fence that has already signalled."""
    f = Fence("stub", 0)
    f.signal()
    return f


class ChainNode(Fence):
    """One timeline point (dma_fence_chain). `seq` is the point; `prev_seqno` the
    previous point of the same context (0 if the node starts a new context)."""

    def __init__(self, prev: Fence | None, fence: Fence, point: int):
        prev_chain = prev if isinstance(prev, ChainNode) else None
        if prev_chain is not None and point > prev_chain.seq:
            context, prev_seqno = prev_chain.context, prev_chain.seq
        else:
            # dma_fence_chain_init: an unordered point starts a new context and
            # keeps a valid (non-decreasing) seqno.
            context, prev_seqno = next(_contexts), 0
            if prev_chain is not None:
                point = max(prev_chain.seq, point)
        super().__init__("syncobj", point)
        self.context, self.prev_seqno = context, prev_seqno
        self.fence, self.prev = fence, prev
        self._pending = 2 if prev is not None else 1
        self._plock = threading.Lock()
        fence.add_callback(self._one_done)
        if prev is not None:
            prev.add_callback(self._one_done)

    def _one_done(self, _fence) -> None:
        with self._plock:
            self._pending -= 1
            done = self._pending == 0
        if done:
            self.prev = None  # everything older has signalled: let it go (chain GC)
            self.signal(self.fence.error)


def find_fence(fence: Fence | None, point: int) -> Fence | None:
    """dma_fence_chain_find_seqno: the fence that covers `point` of a syncobj whose
    slot holds `fence`, or None if that point has not been submitted yet."""
    if fence is None:
        return None
    if point == 0:
        return fence
    if not isinstance(fence, ChainNode) or fence.seq < point:
        return None
    node = fence
    while True:
        prev = node.prev
        if not (isinstance(prev, ChainNode) and prev.context == node.context and node.prev_seqno >= point):
            return node
        node = prev


class Syncobj:
    """struct drm_syncobj: the fence slot plus the waiters to poke when it changes."""

    def __init__(self, fence: Fence | None = None):
        self.fence = fence
        self._watchers: list = []
        self._wlock = threading.Lock()

    def watch(self, fn) -> None:
        """Call `fn()` on every later fence change until `unwatch(fn)`."""
        with self._wlock:
            self._watchers.append(fn)

    def unwatch(self, fn) -> None:
        with self._wlock:
            if fn in self._watchers:
                self._watchers.remove(fn)

    def _changed(self) -> None:
        with self._wlock:
            watchers = list(self._watchers)
        for fn in watchers:
            fn()

    def replace_fence(self, fence: Fence | None) -> None:
        """drm_syncobj_replace_fence (binary signal/reset, point 0)."""
        self.fence = fence
        self._changed()

    def add_point(self, fence: Fence, point: int) -> None:
        """drm_syncobj_add_point: append `point` (fence) to the timeline."""
        self.fence = ChainNode(self.fence, fence, point)
        self._changed()

    def signal_point(self, fence: Fence, point: int) -> None:
        """Point 0 is a binary signal (replace), any other point a timeline point."""
        if point:
            self.add_point(fence, point)
        else:
            self.replace_fence(fence)

    def find(self, point: int) -> Fence | None:
        return find_fence(self.fence, point)

    def query(self, last_submitted: bool) -> int:
        """SYNCOBJ_QUERY's point: the last submitted point, or the highest point up to
        which everything has signalled (0 for a binary syncobj)."""
        head = self.fence
        if not isinstance(head, ChainNode):
            return 0
        if last_submitted:
            return head.seq
        oldest, node = None, head
        while isinstance(node, ChainNode) and node.context == head.context and not node.signaled:
            if not node.fence.signaled:
                oldest = node
            node = node.prev
        return head.seq if oldest is None else oldest.prev_seqno


# -- exported tokens: MOUNT/sync/<token-hex> ------------------------------------------

class SyncExport:
    """What a token names: a syncobj (HANDLE_TO_FD) or a sync file (a fixed fence)."""

    def __init__(self, token: int, owner, syncobj: Syncobj | None = None, fence: Fence | None = None):
        self.token, self.owner, self.uid = token, owner, owner.uid
        self.syncobj, self._fence = syncobj, fence

    @property
    def is_sync_file(self) -> bool:
        return self.syncobj is None

    def fence(self) -> Fence | None:
        return self._fence if self.syncobj is None else self.syncobj.fence

    def signaled(self) -> bool:
        f = self.fence()
        return f is not None and f.signaled

    def status(self) -> str:
        """The text read() of MOUNT/sync/<token> returns."""
        f = self.fence()
        if f is None:
            return "unsubmitted\n"
        if not f.signaled:
            return "active\n"
        if f.error:
            return f"signaled error={errno.errorcode.get(f.error, f.error)}\n"
        return "signaled\n"

    def notify_on_change(self, fn) -> None:
        """Call `fn()` once, when the export may have become signalled (its fence
        signalled, or the syncobj got a new fence). Runs in the signalling thread,
        possibly under the device lock: `fn` must only hand work off."""
        fired = threading.Event()

        def once(*_):
            if not fired.is_set():
                fired.set()
                if self.syncobj is not None:
                    self.syncobj.unwatch(once)
                fn()

        if self.syncobj is not None:
            self.syncobj.watch(once)
        f = self.fence()
        if f is not None:
            f.add_callback(once)


class SyncTokens:
    """The device's token table (the fds of exported syncobjs and sync files)."""

    def __init__(self):
        self.by_token: dict[int, SyncExport] = {}

    def export(self, file, syncobj: Syncobj | None = None, fence: Fence | None = None) -> int:
        """A new token for `syncobj` or the sync file of `fence`. EMFILE: the file
        holds MAX_TOKENS_PER_FILE tokens already."""
        check(len(file.sync_tokens) < MAX_TOKENS_PER_FILE, errno.EMFILE,
              f"file holds {len(file.sync_tokens)} exported tokens")
        while True:
            token = secrets.randbits(31)
            if token and token not in self.by_token:
                break
        self.by_token[token] = SyncExport(token, file, syncobj, fence)
        file.sync_tokens.add(token)
        return token

    def get(self, token: int) -> SyncExport | None:
        return self.by_token.get(token)

    def drop_file(self, file) -> None:
        for token in file.sync_tokens:
            self.by_token.pop(token, None)
        file.sync_tokens.clear()


def close_file(dev, file) -> None:
    """Last close (device lock held): the file's handles and tokens go; waiters
    of the file are woken so they notice (they fail with EBADF)."""
    for _ in close_file_steps(dev, file):
        pass


def close_file_steps(dev, file):
    """close_file one syncobj per step (a generator the device runs in slices,
    Device.run_sliced, so a file with many syncobjs does not hold the lock long)."""
    dev.sync_tokens.drop_file(file)
    yield
    while file.syncobjs:
        _, s = file.syncobjs.popitem()
        s._changed()
        yield


# -- argument helpers --------------------------------------------------------------------

def lookup(file, handle: int) -> Syncobj:
    s = file.syncobjs.get(handle)
    check(s is not None, errno.ENOENT, f"no syncobj {handle}")
    return s


def _arrays(file, extra: bytes, count: int, with_points: bool) -> tuple[list[Syncobj], list[int]]:
    """Decode the flattened handle (and point) arrays. EINVAL: count 0 or too big,
    extra of the wrong length. ENOENT: a bad handle."""
    check(0 < count <= MAX_HANDLES, errno.EINVAL, f"count_handles {count} not in 1..{MAX_HANDLES}")
    want = count * (12 if with_points else 4)
    check(len(extra) == want, errno.EINVAL, f"extra data is {len(extra)} bytes, expected {want}")
    handles = struct.unpack_from(f"<{count}I", extra)
    points = list(struct.unpack_from(f"<{count}Q", extra, 4 * count)) if with_points else [0] * count
    return [lookup(file, h) for h in handles], points


class _ArrayWait:
    """drm_syncobj_array_wait_timeout as the parts of a PendingReply (kmd/ioctl.py):
    an entry counts once the fence of its point is submitted (WAIT_AVAILABLE) or
    has signalled; the wait is over when all count (WAIT_ALL) or any does, or when
    the file is closed (then EBADF). Fence errors do not matter, as in Linux.
    `subscribe` watches the syncobjs for new fences (WAIT_FOR_SUBMIT) and hangs a
    callback on every fence it finds."""

    def __init__(self, file, syncobjs: list[Syncobj], points: list[int], flags: int):
        self.file, self.syncobjs, self.points, self.flags = file, syncobjs, points, flags
        # WAIT_ALL reports the first entry seen counting (0xffffffff, the ioctl's
        # initial value, until one does); wait-any the first one counting at the end.
        self.first = 0xFFFFFFFF
        self._counted()

    def _counted(self) -> list[bool]:
        avail = bool(self.flags & WAIT_AVAILABLE)
        fences = (s.find(p) for s, p in zip(self.syncobjs, self.points))
        counted = [f is not None and (avail or f.signaled) for f in fences]
        if self.first == 0xFFFFFFFF and any(counted):
            self.first = counted.index(True)
        return counted

    def _done(self, counted: list[bool]) -> bool:
        return all(counted) or (any(counted) and not self.flags & WAIT_ALL)

    def ready(self) -> bool:
        return self.file.closed or self._done(self._counted())

    def finish(self) -> int:
        """The first_signaled to report; EBADF once the file is closed, ETIME if the
        wait is not over (its deadline passed)."""
        check(not self.file.closed, errno.EBADF, "file closed during the wait")
        counted = self._counted()
        if not self._done(counted):
            raise KmdError(errno.ETIME, "syncobj wait timed out")
        return self.first if self.flags & WAIT_ALL else counted.index(True)

    def subscribe(self, wake):
        lock = threading.Lock()
        hooked: dict[int, Fence] = {}
        cancelled = False

        def on_fence(_fence) -> None:
            wake()

        def hook() -> None:
            with lock:
                if cancelled:
                    return
                found = [s.find(p) for s, p in zip(self.syncobjs, self.points)]
                new = [f for f in found if f is not None and id(f) not in hooked]
                for f in new:
                    hooked[id(f)] = f
            for f in new:
                f.add_callback(on_fence)

        def on_change() -> None:  # a new fence in a syncobj (device lock held)
            hook()
            wake()

        for s in self.syncobjs:
            s.watch(on_change)
        hook()

        def cancel() -> None:
            nonlocal cancelled
            for s in self.syncobjs:
                s.unwatch(on_change)
            with lock:
                cancelled = True
                fences = list(hooked.values())
                hooked.clear()
            for f in fences:
                f.remove_callback(on_fence)

        return cancel


def _start_wait(file, args, syncobjs, points, flags, timeout_nsec):
    """Shared by WAIT and TIMELINE_WAIT: a PendingReply (answered at once by the
    dispatch when the condition holds already; ETIME from the read() on timeout).
    The deadline is `timeout_nsec` read as drm_timeout_abs_to_jiffies does
    (vgpu.timeout.syncobj_seconds_left: 0 or a past time, negative included, polls)."""
    if not flags & (WAIT_FOR_SUBMIT | WAIT_AVAILABLE):
        for i, (s, p) in enumerate(zip(syncobjs, points)):
            check(s.find(p) is not None, errno.EINVAL,
                  f"syncobj {i} has no fence" + (f" for point {p}" if p else "") + " and no WAIT_FOR_SUBMIT")
    w = _ArrayWait(file, syncobjs, points, flags)

    def finish():
        args.first_signaled = w.finish()

    return PendingReply(ready=w.ready, subscribe=w.subscribe, finish=finish,
                        deadline=deadline(syncobj_seconds_left(timeout_nsec)),
                        fences=lambda: [s.find(p) for s, p in zip(syncobjs, points)])


# -- ioctls ------------------------------------------------------------------------------

def syncobj_create(dev, file, args, extra):
    """Create a syncobj, without a fence or (CREATE_SIGNALED) with a signalled one.
    EINVAL: unknown flags."""
    check(not args.flags & ~uapi.DRM_SYNCOBJ_CREATE_SIGNALED, errno.EINVAL, f"bad flags {args.flags:#x}")
    fence = signaled_stub() if args.flags & uapi.DRM_SYNCOBJ_CREATE_SIGNALED else None
    args.handle = file.add_syncobj(Syncobj(fence))


def syncobj_destroy(dev, file, args, extra):
    """Drop a handle (the object lives while other handles or tokens name it).
    EINVAL: nonzero pad. ENOENT: bad handle (Linux says EINVAL here)."""
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    lookup(file, args.handle)
    del file.syncobjs[args.handle]


def syncobj_handle_to_fd(dev, file, args, extra):
    """Export a syncobj as a token (`fd`) naming MOUNT/sync/<token-hex>; with
    EXPORT_SYNC_FILE, a sync file of its current fence instead.
    EINVAL: unknown flags, nonzero pad, EXPORT_SYNC_FILE of a syncobj without a
    fence. ENOENT: bad handle. EMFILE: too many tokens held by the file."""
    check(not args.flags & ~uapi.DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE, errno.EINVAL,
          f"bad flags {args.flags:#x}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    s = lookup(file, args.handle)
    if args.flags & uapi.DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE:
        check(s.fence is not None, errno.EINVAL, f"syncobj {args.handle} has no fence to export")
        args.fd = dev.sync_tokens.export(file, fence=s.fence)
    else:
        args.fd = dev.sync_tokens.export(file, syncobj=s)


def syncobj_fd_to_handle(dev, file, args, extra):
    """Import a token from any file of the device: a syncobj token gives a new handle
    to the same syncobj; with IMPORT_SYNC_FILE, a sync-file token's fence replaces
    the fence of the existing syncobj `handle`.
    EINVAL: unknown flags, nonzero pad, a token of the wrong kind. ENOENT: unknown
    token, bad handle (IMPORT_SYNC_FILE)."""
    check(not args.flags & ~uapi.DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE, errno.EINVAL,
          f"bad flags {args.flags:#x}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    ex = dev.sync_tokens.get(args.fd)
    check(ex is not None, errno.ENOENT, f"no exported syncobj or sync file {args.fd:#x}")
    if args.flags & uapi.DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE:
        check(ex.is_sync_file, errno.EINVAL, f"token {args.fd:#x} is a syncobj, not a sync file")
        lookup(file, args.handle).replace_fence(ex.fence())
    else:
        check(not ex.is_sync_file, errno.EINVAL, f"token {args.fd:#x} is a sync file, not a syncobj")
        args.handle = file.add_syncobj(ex.syncobj)


def syncobj_wait(dev, file, args, extra):
    """Wait for all (WAIT_ALL) or any of the syncobjs' current fences; the read()
    blocks until then or `timeout_nsec` (absolute CLOCK_MONOTONIC; 0 polls).
    `first_signaled` is the index of the first signalled syncobj (wait-any).
    EINVAL: unknown flags, nonzero pad, count 0, extra of the wrong length, a
    syncobj without a fence and no WAIT_FOR_SUBMIT. ENOENT: bad handle.
    ETIME (read()): the timeout passed first."""
    check(not args.flags & ~(WAIT_ALL | WAIT_FOR_SUBMIT), errno.EINVAL, f"bad flags {args.flags:#x}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    syncobjs, points = _arrays(file, extra, args.count_handles, with_points=False)
    return _start_wait(file, args, syncobjs, points, args.flags, args.timeout_nsec)


def syncobj_timeline_wait(dev, file, args, extra):
    """SYNCOBJ_WAIT for one point per syncobj (point 0: the current fence). With
    WAIT_AVAILABLE a point counts once it is submitted, signalled or not.
    EINVAL: unknown flags, nonzero pad, count 0, extra of the wrong length, a point
    not submitted yet without WAIT_FOR_SUBMIT/WAIT_AVAILABLE. ENOENT: bad handle.
    ETIME (read()): the timeout passed first."""
    check(not args.flags & ~(WAIT_ALL | WAIT_FOR_SUBMIT | WAIT_AVAILABLE), errno.EINVAL,
          f"bad flags {args.flags:#x}")
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    syncobjs, points = _arrays(file, extra, args.count_handles, with_points=True)
    return _start_wait(file, args, syncobjs, points, args.flags, args.timeout_nsec)


def syncobj_reset(dev, file, args, extra):
    """Remove the fence of each syncobj. EINVAL: nonzero pad, count 0, extra of the
    wrong length. ENOENT: bad handle (then none is reset)."""
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    syncobjs, _ = _arrays(file, extra, args.count_handles, with_points=False)
    for s in syncobjs:
        s.replace_fence(None)


def syncobj_signal(dev, file, args, extra):
    """Give each syncobj a signalled fence (binary signal). EINVAL: nonzero pad,
    count 0, extra of the wrong length. ENOENT: bad handle (then none is signalled)."""
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    syncobjs, _ = _arrays(file, extra, args.count_handles, with_points=False)
    for s in syncobjs:
        s.replace_fence(signaled_stub())


def syncobj_timeline_signal(dev, file, args, extra):
    """Signal one point per syncobj from the CPU: point 0 replaces the fence with a
    signalled one (binary rules), any other point is appended signalled.
    EINVAL: nonzero flags, count 0, extra of the wrong length. ENOENT: bad handle."""
    check(args.flags == 0, errno.EINVAL, f"bad flags {args.flags:#x}")
    syncobjs, points = _arrays(file, extra, args.count_handles, with_points=True)
    for s, p in zip(syncobjs, points):
        s.signal_point(signaled_stub(), p)


def syncobj_query(dev, file, args, extra):
    """Each syncobj's timeline point: the highest point up to which everything has
    signalled, or with LAST_SUBMITTED the last point submitted (0 for a binary
    syncobj). Out-data: the u64 point array. EINVAL: unknown flags, count 0, extra
    of the wrong length. ENOENT: bad handle."""
    check(not args.flags & ~uapi.DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED, errno.EINVAL,
          f"bad flags {args.flags:#x}")
    syncobjs, _ = _arrays(file, extra, args.count_handles, with_points=True)
    last = bool(args.flags & uapi.DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED)
    return struct.pack(f"<{len(syncobjs)}Q", *(s.query(last) for s in syncobjs))


def syncobj_transfer(dev, file, args, extra):
    """Copy the fence of `src_point` of one syncobj to `dst_point` of another
    (dst_point 0: replace its fence, binary; else append a timeline point). With
    WAIT_FOR_SUBMIT a source point not submitted yet is waited for (in read(), up
    to 5 s). EINVAL: nonzero pad, unknown flags, source point not submitted (no
    WAIT_FOR_SUBMIT). ENOENT: bad handle. ETIME (read()): not submitted in time."""
    check(args.pad == 0, errno.EINVAL, "nonzero pad")
    check(not args.flags & ~WAIT_FOR_SUBMIT, errno.EINVAL, f"bad flags {args.flags:#x}")
    dst = lookup(file, args.dst_handle)
    src = lookup(file, args.src_handle)
    fence = src.find(args.src_point)
    if fence is not None:
        dst.signal_point(fence, args.dst_point)
        return None
    check(args.flags & WAIT_FOR_SUBMIT, errno.EINVAL,
          f"syncobj {args.src_handle} has no fence for point {args.src_point}")

    w = _ArrayWait(file, [src], [args.src_point], WAIT_AVAILABLE)

    def finish():
        w.finish()  # EBADF, or ETIME: not submitted in time
        with dev.lock:
            dst.signal_point(src.find(args.src_point), args.dst_point)

    return PendingReply(ready=w.ready, subscribe=w.subscribe, finish=finish,
                        deadline=deadline(WAIT_FOR_SUBMIT_TIMEOUT))
