"""The nodes of the vgpu tree and their open files (docs/vdev.md; used by vdev.fs).

A :class:`Node` is what an inode number names (directory, control file, generated
file, BO symlink, sync file); it knows its attributes, who may reach it and how to
open itself. ``Node.open()`` returns a :class:`Handle`, the state of one open()
until release(), which answers that file's read(), write(), poll() and release().
``vdev.fs.VgpuFs`` keeps the FUSE plumbing (inode and handle tables, directory
listings, errno mapping) and calls these methods; it never asks what kind of node
or handle it holds.

Everything here runs on the trio loop of the daemon (docs/vdev.md, "Threads"),
except what is explicitly handed to ``trio.to_thread``: a call that may wait for the
GPU never runs on the loop, because the loop serves every client. vdev starts no
thread of its own: a KMD thread that must wake a poller hands the wake-up to the loop
(SyncHandle).
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import select
import stat
import time
from typing import Callable

import pyfuse3
import trio

from vgpu.frame import encode_reply, parse_request

from .ioctl.drm_debug import frame_caller
from .kmd_interface import (BufferObject, KmdDevice, KmdError, KmdGpu, PendingReply, PrimeExport, Reader, Reply, Stream,
                            SyncExport)

log = logging.getLogger(__name__)

# Generated files change under the reader: the kernel caches their attributes briefly.
GENERATED_TIMEOUT = 1.0
# A BO symlink's target never changes and its name is a capability that stays valid
# while the BO lives (readlink() rechecks that), so the kernel may cache both for long;
# the control files never change either.
LONG_TIMEOUT = 3600.0

# What poll() answers for a file that is always ready (everything but sync files).
ALWAYS_READY = select.POLLIN | select.POLLOUT | select.POLLRDNORM | select.POLLWRNORM


def _fail(err: int):
    raise pyfuse3.FUSEError(err)


def _to_bytes(value) -> bytes:
    if callable(value):
        value = value()
    if isinstance(value, str):
        return value.encode()
    return bytes(value or b"")


def _proc_comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


def _proc_groups(pid: int) -> frozenset[int]:
    """The supplementary groups of thread ``pid`` (/proc/<pid>/status, "Groups:"):
    FUSE passes only the requester's uid, gid and pid."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return frozenset(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset()


# What a request asks of a node, as access(2)'s mode bits.
MAY_READ, MAY_WRITE, MAY_EXEC = os.R_OK, os.W_OK, os.X_OK


class Credentials:
    """Who makes a request: the uid, gid and pid of the FUSE request context, and the
    supplementary groups, read from /proc only when a check needs them."""

    def __init__(self, ctx):
        self.uid, self.gid, self.pid = ctx.uid, getattr(ctx, "gid", ctx.uid), ctx.pid
        self._groups: frozenset[int] | None = None

    def in_group(self, gid: int) -> bool:
        if gid == self.gid:
            return True
        if self._groups is None:
            self._groups = _proc_groups(self.pid)
        return gid in self._groups


def mode_permits(mode: int, uid: int, gid: int, cred: Credentials, want: int) -> bool:
    """generic_permission(): root may do anything (CAP_DAC_OVERRIDE; vgpu has no
    executable files); otherwise the owner's, the group's or the others' bits of
    ``mode``, whichever class the requester is in, must hold every bit of ``want``."""
    if cred.uid == 0:
        return True
    if cred.uid == uid:
        bits = mode >> 6
    elif (mode >> 3 & 7) != (mode & 7) and cred.in_group(gid):
        bits = mode >> 3
    else:
        bits = mode
    return want & ~bits & 7 == 0


# ---------------------------------------------------------------------------
# Nodes of the tree
# ---------------------------------------------------------------------------
class Node:
    """An inode. The defaults describe a node that cannot be opened, written,
    truncated or read as a link, and that lives as long as the mount. Who may
    reach it is its mode, owner and group, checked by vdev.fs on every request
    (``permits``, with every directory above it searchable: docs/vdev.md,
    "Permissions")."""

    #: entry and attribute timeout the kernel is given for this node, in seconds
    cache_timeout = GENERATED_TIMEOUT
    #: an O_TRUNC open (a size change in setattr) is accepted and ignored
    truncatable = False
    nlink = 1

    def __init__(self, inode: int, mode: int, uid: int = 0, gid: int = 0):
        self.inode = inode
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.parent: "Dir | None" = None  # set when linked into the tree

    @property
    def size(self) -> int:
        return 0

    def permits(self, cred: Credentials, want: int) -> bool:
        """The mode bits allow ``want`` (MAY_READ | MAY_WRITE | MAY_EXEC) to ``cred``."""
        return mode_permits(self.mode, self.uid, self.gid, cred, want)

    def may_access(self, uid: int) -> bool:
        """access(2) for ``uid``: True unless the node is private to its owner."""
        return True

    def open(self, dev: KmdGpu, flags: int, ctx) -> "Handle":
        """A new Handle for one open() with ``flags`` by ``ctx`` (pid, uid); raises
        FUSEError (EACCES here: the node has no open files)."""
        _fail(errno.EACCES)

    def readlink(self, dev: KmdGpu, ctx) -> bytes:
        """The target of a symlink; EINVAL for anything else, as readlink(2) says."""
        _fail(errno.EINVAL)

    def forget(self, nlookup: int) -> bool:
        """The kernel dropped ``nlookup`` references; True when the inode may go."""
        return False

    #: the partition (KmdDevice) whose removal from the PCI bus takes this entry away
    #: (its sysfs directory and links, its nodes, its debugfs: kmd/pci_hotplug.py)
    gone_with = None

    def present(self) -> bool:
        """False while ``gone_with`` is unplugged: lookups say ENOENT, listings skip it."""
        return self.gone_with is None or not self.gone_with.unplugged


class Dir(Node):
    """A directory: fixed children, plus children computed by ``provider`` each time
    the directory is listed or searched (sysfs, debugfs, devcoredump)."""

    nlink = 2

    def __init__(self, inode: int, parent: "Dir | None", provider: Callable[[], dict] | None = None,
                 mode: int = 0o755, uid: int = 0):
        super().__init__(inode, stat.S_IFDIR | mode, uid)
        self.parent = parent or self
        self.file_mode: int | None = None  # mode of the provider's files (None: GeneratedFile's)
        self.children: dict[str, Node] = {}   # every child the kernel may know, by name
        self.fixed: dict[str, Node] = {}      # those that do not come from the provider
        self.provider = provider

    def open(self, dev, flags, ctx):
        _fail(errno.EISDIR)


class ControlFile(Node):
    """dev/dri/card0 or renderD128: each open() is one DRM file of the KMD. Its mode
    and group are the mount's (`vgpu mount --mode/--render-mode/--group`: card0 0660
    video, renderD128 0666, as udev makes them), checked by vdev.fs at open."""

    cache_timeout = LONG_TIMEOUT
    truncatable = True  # `> card0` in a shell opens with O_TRUNC

    def __init__(self, inode: int, render: bool, mode: int = 0o666, uid: int = 0, gid: int = 0,
                 device: KmdDevice | None = None):
        super().__init__(inode, stat.S_IFREG | mode, uid, gid)
        self.render = render
        self.device = device  # the partition this node drives (None: the mount's one device)

    def open(self, dev, flags, ctx) -> "ControlHandle":
        dev = self.device or dev
        f = dev.open_file(pid=ctx.pid, uid=ctx.uid, comm=_proc_comm(ctx.pid), render=self.render)
        return ControlHandle(dev, f)


class GeneratedFile(Node):
    """Text made on open by ``read_fn``; ``write_fn(bytes)`` takes writes if set.
    Mode 0444, or 0644 with a ``write_fn`` (a writable debugfs entry), unless given."""

    truncatable = True  # `echo 1 > enable` opens with O_TRUNC

    def __init__(self, inode: int, read_fn: Callable, write_fn: Callable | None = None,
                 mode: int | None = None, uid: int = 0):
        if mode is None:
            mode = 0o644 if write_fn else 0o444
        super().__init__(inode, stat.S_IFREG | mode, uid)
        self.read_fn = read_fn
        self.write_fn = write_fn

    def open(self, dev, flags, ctx) -> "SnapshotHandle":
        """The text is taken here, once, so every read() of this open sees one
        snapshot (docs/vdev.md). A write-only open takes none."""
        acc = flags & os.O_ACCMODE
        if acc != os.O_RDONLY and self.write_fn is None:
            _fail(errno.EACCES)
        return SnapshotHandle(self, _to_bytes(self.read_fn) if acc != os.O_WRONLY else b"")


class StreamFile(Node):
    """A file whose read() waits for entries (tracing/trace_pipe, tracing/vgpu_timeline):
    each open gets its own Reader from the KMD's Stream (docs/tracing.md)."""

    def __init__(self, inode: int, stream: Stream, mode: int = 0o444, uid: int = 0):
        super().__init__(inode, stat.S_IFREG | mode, uid)
        self.stream = stream

    def open(self, dev, flags, ctx) -> "StreamHandle":
        """Read-only (EACCES otherwise)."""
        if flags & os.O_ACCMODE != os.O_RDONLY:
            _fail(errno.EACCES)
        return StreamHandle(self.stream.open_reader(), bool(flags & os.O_NONBLOCK), ctx.pid)


class Symlink(Node):
    """A symbolic link to a fixed ``target``: the sysfs links (sys/dev/char/226:N,
    sys/class/drm/<node>, device, subsystem...), always relative so that they stay
    inside the mount; and, as BoFile, the links to BO files."""

    def __init__(self, inode: int, target: bytes | str, uid: int = 0):
        super().__init__(inode, stat.S_IFLNK | 0o777, uid)
        self.target = target.encode() if isinstance(target, str) else target

    @property
    def size(self) -> int:
        return len(self.target)

    def readlink(self, dev, ctx) -> bytes:
        return self.target


class BoFile(Symlink):
    """MOUNT/bo/<offset-hex>: a symlink to the BO's shared-memory file. The kernel
    follows it, so open(), mmap() and I/O reach the tmpfs file and never this node."""

    cache_timeout = LONG_TIMEOUT

    def __init__(self, inode: int, bo: BufferObject):
        super().__init__(inode, bo.path, bo.uid)
        self.bo = bo
        self.offset = bo.mmap_offset
        self.nlookup = 0  # references the kernel holds (lookup minus forget)

    def permits(self, cred, want: int) -> bool:
        return True  # readlink() decides by its own rule, and logs a refusal

    def may_access(self, uid: int) -> bool:
        return self.bo.may_access(uid)

    def readlink(self, dev, ctx) -> bytes:
        """The target, for the BO's uid, a uid that imported it (PRIME) or root
        (EACCES, logged to kmsg, for any other); ENOENT once the BO is freed, even if
        the kernel still caches the name."""
        if dev.bo_by_offset(self.offset) is not self.bo:
            _fail(errno.ENOENT)
        if not self.bo.may_access(ctx.uid):
            dev.kmsg.log(f"bo/{self.offset:x}: access by uid {ctx.uid} (pid {ctx.pid}) denied, "
                         f"owner uid {self.bo.uid}")
            _fail(errno.EACCES)
        return self.target

    def forget(self, nlookup: int) -> bool:
        self.nlookup -= nlookup
        return self.nlookup <= 0


class PrimeFile(Node):
    """MOUNT/prime/<token-hex>: an exported BO (kmd/prime.py), a regular file vdev
    serves itself so that /proc/self/fd/N names the token. Its size is the BO's
    (stat, lseek SEEK_END); read() and write() reach the BO's bytes. Each open holds
    the export, as a dma-buf fd does. It cannot be mmap()ed (direct_io): a mapping
    of the BO is GEM_MMAP + bo/<hex> after PRIME_FD_TO_HANDLE (docs/vdev.md)."""

    #: not cached: a name must vanish as soon as the last holder of the export goes
    cache_timeout = 0.0

    def __init__(self, inode: int, export: PrimeExport):
        super().__init__(inode, stat.S_IFREG | 0o600, export.uid)
        self.export = export

    @property
    def size(self) -> int:
        return self.export.size

    def permits(self, cred, want: int) -> bool:
        return True  # open() decides by its own rule, and logs a refusal

    def may_access(self, uid: int) -> bool:
        return self.export.may_access(uid)

    def open(self, dev, flags, ctx) -> "PrimeHandle":
        """For root, the BO's uid, the exporter's and every uid that imported it
        (EACCES, logged); ENOENT once the export is gone."""
        if dev.prime_by_token(self.export.token) is not self.export:
            _fail(errno.ENOENT)
        if not self.export.may_access(ctx.uid):
            dev.kmsg.log(f"prime/{self.export.token:x}: open by uid {ctx.uid} (pid {ctx.pid}) "
                         f"denied, exporter uid {self.uid}")
            _fail(errno.EACCES)
        if not self.export.hold():
            _fail(errno.ENOENT)
        return PrimeHandle(self.export, flags & os.O_ACCMODE)

    def forget(self, nlookup: int) -> bool:
        return True


class SyncFile(Node):
    """MOUNT/sync/<token-hex>: a SyncExport (syncobj or sync file).
    Each lookup makes a new one; the KMD's token table is the truth, rechecked at open."""

    def __init__(self, inode: int, export: SyncExport):
        super().__init__(inode, stat.S_IFREG | 0o400, export.uid)
        self.export = export

    def permits(self, cred, want: int) -> bool:
        return True  # open() decides by its own rule, and logs a refusal

    def may_access(self, uid: int) -> bool:
        return uid in (0, self.uid)

    def open(self, dev, flags, ctx) -> "SyncHandle":
        """Read-only, for the exporter's uid or root (EACCES, logged); ENOENT once the
        exporter has closed the token."""
        if dev.sync_file_by_token(self.export.token) is not self.export:
            _fail(errno.ENOENT)
        if ctx.uid not in (0, self.uid) or flags & os.O_ACCMODE != os.O_RDONLY:
            dev.kmsg.log(f"sync/{self.export.token:x}: open by uid {ctx.uid} (pid {ctx.pid}) "
                         f"denied, exporter uid {self.uid}")
            _fail(errno.EACCES)
        return SyncHandle(self)

    def forget(self, nlookup: int) -> bool:
        return True


# ---------------------------------------------------------------------------
# Open files
# ---------------------------------------------------------------------------
class Handle:
    """One open() of a node until release(). The defaults: nothing to read or
    write (EBADF), always ready for poll(), nothing to free."""

    async def read(self, off: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``off``; b"" is end of file."""
        _fail(errno.EBADF)

    async def write(self, off: int, buf: bytes) -> int:
        """Take ``buf``; returns the bytes taken."""
        _fail(errno.EBADF)

    def poll(self, poll_handle) -> int:
        """The ready events now (called on the loop). A file that may become ready
        later keeps ``poll_handle`` (a pyfuse3.PollHandle, or None when the kernel
        wants no notification) and calls its ``notify()`` once it may have, so the
        kernel polls again."""
        return ALWAYS_READY

    async def release(self) -> None:
        """The last reference to the open file is gone (all fds, dups, forks)."""


#: Unread replies one open control file keeps (one per request tag); a write on a
#: further tag fails with EBUSY until some are read.
MAX_TAGS = 1024


class ControlHandle(Handle):
    """One open of card0/renderD128 = one DRM file, plus its unread replies, one per
    request tag (docs/design.md section 3; docs/vdev.md, "Control-file protocol
    choices").

    A request's tag is the file offset of its write: a thread sends with
    ``pwrite(fd, frame, T)`` and gets the reply with ``pread(fd, buf, size, T)``, so
    threads of one DRM file have requests in flight at once and one blocked in a
    wait holds up no other. A plain write() moves the file offset past the frame, so
    its read() comes at the offset where that write ended: a read at offset X gets
    the reply of tag X, or else the reply of the write that ended at X."""

    #: the mount's vdev.ioctl.path.IoctlPath (set by vdev.fs at open): its ``observe``
    #: sees frame requests too
    ioctls = None

    def __init__(self, dev: KmdDevice, file):
        self.dev = dev
        self.file = file
        self.replies: dict[int, Reply | PendingReply] = {}  # tag -> its unread reply
        self._end: dict[int, int] = {}      # tag -> the offset where its write ended
        self._by_end: dict[int, int] = {}   # that offset -> tag (plain write()/read())

    def _forget(self, tag: int) -> None:
        self.replies.pop(tag, None)
        end = self._end.pop(tag, None)
        if end is not None and self._by_end.get(end) == tag:
            del self._by_end[end]

    async def write(self, off, buf) -> int:
        """One request frame, tag ``off``. Never blocks: the KMD answers at once or
        returns a PendingReply that read() waits for. A new request replaces an
        unread reply of the same tag, also when it fails (KmdError: the write fails
        with its errno); a frame that does not parse (FrameError) fails before that.
        EBUSY: MAX_TAGS other tags have unread replies."""
        req = parse_request(buf)
        self._forget(off)
        if len(self.replies) >= MAX_TAGS:
            _fail(errno.EBUSY)
        observe = self.ioctls.observe if self.ioctls is not None else None   # drm.debug
        try:
            reply = self.dev.ioctl(self.file, req.request, req.arg, req.extra, tag=off)
        except KmdError as e:
            if observe is not None:
                observe(self, req.request, frame_caller(self.file, off), e.errno)
            raise
        if observe is not None:
            observe(self, req.request, frame_caller(self.file, off), 0)
        self.replies[off] = reply
        self._end[off] = off + len(buf)
        self._by_end[off + len(buf)] = off
        return len(buf)

    async def read(self, off, size) -> bytes:
        """The reply of tag ``off`` (or of the write that ended at ``off``): EINVAL if
        none is waiting or ``size`` is too small (the reply stays for a retry). A
        PendingReply is waited for here, on the loop, woken by the KMD's fence
        callbacks (wait_pending), so the loop serves every other request meanwhile;
        a KmdError from it fails the read and drops the reply."""
        tag = off if off in self.replies else self._by_end.get(off)
        if tag is None:
            _fail(errno.EINVAL)
        reply = self.replies[tag]
        if isinstance(reply, PendingReply):
            try:
                done = await wait_pending(reply)
            except KmdError:
                if self.replies.get(tag) is reply:
                    self._forget(tag)
                raise
            if self.replies.get(tag) is reply:  # a newer write() of this tag replaced it: keep that
                self.replies[tag] = done
            reply = done
        data = encode_reply(reply.result, reply.arg, reply.extra)
        if size < len(data):
            _fail(errno.EINVAL)
        if self.replies.get(tag) is reply:
            self._forget(tag)
        return data

    async def release(self) -> None:
        """The last close of a DRM file frees its handles, VAs and contexts; in a
        worker thread, so the loop stays free if the KMD waits for jobs."""
        self.replies.clear()
        self._end.clear()
        self._by_end.clear()
        await trio.to_thread.run_sync(self.dev.close_file, self.file)


class _Round:
    """The trio event one round of wait_pending sleeps on (hashable, for run_sync_soon's
    idempotent queueing)."""

    __slots__ = ("event",)

    def __init__(self):
        self.event = trio.Event()

    def set(self) -> None:
        self.event.set()


async def wait_pending(pending: PendingReply) -> Reply:
    """Complete a PendingReply on the loop: its fence callbacks (kmd/fence.py) queue a
    wake-up with ``TrioToken.run_sync_soon``, which neither blocks nor locks, as they
    may run in the KMD's interrupt thread under the device lock. No thread waits; a
    cancelled read (the client was interrupted) just stops waiting, and the reply
    stays for the next read."""
    token = trio.lowlevel.current_trio_token()
    current = _Round()

    def wake() -> None:
        try:
            token.run_sync_soon(current.set, idempotent=True)
        except trio.RunFinishedError:
            pass  # the daemon is stopping

    cancel = pending.subscribe(wake)
    try:
        while True:
            current = _Round()  # set by a wake-up from here on
            if pending.ready():
                break
            if pending.deadline is None:
                await current.event.wait()
                continue
            left = pending.deadline - time.monotonic()
            if left <= 0:
                break
            with trio.move_on_after(left):
                await current.event.wait()
    finally:
        cancel()
    return pending.finish()


class SnapshotHandle(Handle):
    """An open generated file: the text taken at open()."""

    def __init__(self, node: GeneratedFile, data: bytes):
        self.node = node
        self.data = data

    async def read(self, off, size) -> bytes:
        return self.data[off: off + size]

    async def write(self, off, buf) -> int:
        """Runs the entry's ``write_fn(bytes)`` in a worker thread: an action file
        (tracing's enable, trace) may wait for the KMD's locks."""
        if self.node.write_fn is None:
            _fail(errno.EBADF)
        await trio.to_thread.run_sync(self.node.write_fn, bytes(buf))
        return len(buf)


class _PollNotifier(Handle):
    """A handle that may become readable later: poll() keeps the kernel's poll
    handle and has the KMD call back once things change. State touched on the loop only."""

    poll_handle = None
    armed = False  # a notification is arranged

    def _keep(self, poll_handle, notify_on_change) -> None:
        """Keep `poll_handle` (a newer one replaces it) and, once per change, ask
        `notify_on_change(fn)` to call fn from the KMD's thread."""
        if poll_handle is None:
            return
        self.poll_handle = poll_handle
        if not self.armed:
            self.armed = True
            notify_on_change(functools.partial(self._changed, trio.lowlevel.current_trio_token()))

    def _changed(self, token: trio.lowlevel.TrioToken) -> None:
        """The export may have signalled. Runs in the signalling thread (the KMD's
        interrupt thread, or the loop itself inside an ioctl), possibly under the
        device lock, so it only queues the wake-up on the loop: run_sync_soon neither
        blocks nor takes a lock. trio.from_thread.run_sync would wait for the loop,
        which may itself be waiting for the device lock this thread holds."""
        try:
            token.run_sync_soon(self._wake)
        except trio.RunFinishedError:
            pass  # the daemon is stopping: nobody is left to wake

    def _wake(self) -> None:
        """On the loop, between tasks (a run_sync_soon callback): pass the change to
        the kernel. PollHandle.notify is one write of a notification to /dev/fuse that
        the kernel handles at once (it wakes the poller's wait queue and waits for no
        reply), so it does not hold up the loop. An exception escaping a run_sync_soon
        callback would end trio.run, hence the catch-all."""
        self.armed = False
        ph, self.poll_handle = self.poll_handle, None
        if ph is None:
            return  # released, or answered POLLIN since
        try:
            ph.notify()
        except OSError:
            pass  # the poller went away
        except Exception:
            log.exception("vdev: waking a poller failed")


#: How often a read() blocked on a stream looks whether its reader got a signal: the
#: kernel then sends FUSE_INTERRUPT and waits for our answer (fuse's
#: request_wait_answer), even for a dying reader, and pyfuse3 does not pass
#: FUSE_INTERRUPT on.
STREAM_RECHECK = 0.25


def _interrupted(pid: int) -> bool:
    """Thread `pid` has a signal pending that it neither blocks nor ignores (the
    kernel's reason for a FUSE_INTERRUPT; a fatal one shows as SIGKILL), or is gone."""
    masks = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:")):
                    masks[line[:6]] = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return True
    pending = masks.get("SigPnd", 0) | masks.get("ShdPnd", 0)
    return bool(pending & ~masks.get("SigBlk", 0) & ~masks.get("SigIgn", 0))


class StreamHandle(_PollNotifier):
    """An open stream: read() returns what the Reader has, or waits on the loop
    until entries come (EAGAIN at once for an O_NONBLOCK open), woken by the
    writer's thread through run_sync_soon, as wait_pending is. poll() answers POLLIN
    once entries are waiting. Many readers, slow or absent, never hold up a writer:
    the KMD's buffers are bounded and drop the oldest entries."""

    def __init__(self, reader: Reader, nonblock: bool, pid: int):
        self.reader = reader
        self.nonblock = nonblock
        self.pid = pid  # the opener: a read waits no longer once it has a signal (EINTR)

    async def read(self, off, size) -> bytes:
        while True:
            data = self.reader.read(size)
            if data:
                return data
            if self.nonblock:
                _fail(errno.EAGAIN)
            if not await self._wait() and _interrupted(self.pid):
                _fail(errno.EINTR)

    async def _wait(self) -> bool:
        """Wait for a wake-up from the writer, STREAM_RECHECK seconds at most; True if woken."""
        token = trio.lowlevel.current_trio_token()
        rnd = _Round()

        def wake() -> None:
            try:
                token.run_sync_soon(rnd.set, idempotent=True)
            except trio.RunFinishedError:
                pass  # the daemon is stopping

        cancel = self.reader.subscribe(wake)
        try:
            with trio.move_on_after(STREAM_RECHECK):
                await rnd.event.wait()
        finally:
            cancel()
        return rnd.event.is_set()

    def poll(self, poll_handle) -> int:
        """POLLIN once entries are waiting; until then, as SyncHandle.poll."""
        if self.reader.ready():
            self.poll_handle = None
            return select.POLLIN | select.POLLRDNORM
        self._keep(poll_handle, self.reader.subscribe)
        return 0

    async def release(self) -> None:
        self.poll_handle = None
        self.reader.close()


class PrimeHandle(Handle):
    """An open prime file: it holds the export until release (a dma-buf fd)."""

    def __init__(self, export: PrimeExport, accmode: int):
        self.export = export
        self.accmode = accmode
        self.released = False

    async def read(self, off, size) -> bytes:
        if self.accmode == os.O_WRONLY:
            _fail(errno.EBADF)
        return self.export.read(off, size)

    async def write(self, off, buf) -> int:
        if self.accmode == os.O_RDONLY:
            _fail(errno.EBADF)
        return self.export.write(off, bytes(buf))

    async def release(self) -> None:
        """Stop holding the export; the last holder's release frees it (and its BO if
        no handle names it). In a worker thread: it takes the device lock."""
        if not self.released:
            self.released = True
            await trio.to_thread.run_sync(self.export.unhold)


class SyncHandle(_PollNotifier):
    """An open sync file: the status text of its first read, and the poll handle the
    kernel gave us while the fence is busy (armed: a notification is arranged).
    Its state is touched on the trio loop only."""

    def __init__(self, node: SyncFile):
        self.export = node.export
        self.data: bytes | None = None

    async def read(self, off, size) -> bytes:
        if self.data is None or off == 0:  # the status as of the first read
            self.data = self.export.status().encode()
        return self.data[off: off + size]

    def poll(self, poll_handle) -> int:
        """POLLIN once the fence has signalled; until then the kernel's handle is
        kept (a newer one replaces it) and woken once the export changes."""
        if self.export.signaled():
            self.poll_handle = None
            return select.POLLIN | select.POLLRDNORM
        self._keep(poll_handle, self.export.notify_on_change)
        return 0

    async def release(self) -> None:
        self.poll_handle = None  # a wake-up still queued then has nobody to notify
