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
import inspect
import logging
import os
import select
import stat
from typing import Callable

import pyfuse3
import trio

from vgpu.frame import encode_reply, parse_request

from .kmd_interface import BufferObject, KmdDevice, KmdError, PendingReply, PrimeExport, SyncExport

log = logging.getLogger(__name__)

# A cancelled read (the client was interrupted) must not wait for the GPU: trio 0.23
# renamed run_sync's `cancellable` to `abandon_on_cancel` and later dropped the old name.
_ABANDON_ON_CANCEL = ({"abandon_on_cancel": True}
                      if "abandon_on_cancel" in inspect.signature(trio.to_thread.run_sync).parameters
                      else {"cancellable": True})

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


# ---------------------------------------------------------------------------
# Nodes of the tree
# ---------------------------------------------------------------------------
class Node:
    """An inode. The defaults describe a node that cannot be opened, written,
    truncated or read as a link, that every uid may reach, and that lives as long
    as the mount."""

    #: entry and attribute timeout the kernel is given for this node, in seconds
    cache_timeout = GENERATED_TIMEOUT
    #: an O_TRUNC open (a size change in setattr) is accepted and ignored
    truncatable = False
    nlink = 1

    def __init__(self, inode: int, mode: int, uid: int = 0):
        self.inode = inode
        self.mode = mode
        self.uid = uid

    @property
    def size(self) -> int:
        return 0

    def may_access(self, uid: int) -> bool:
        """access(2) for ``uid``: True unless the node is private to its owner."""
        return True

    def open(self, dev: KmdDevice, flags: int, ctx) -> "Handle":
        """A new Handle for one open() with ``flags`` by ``ctx`` (pid, uid); raises
        FUSEError (EACCES here: the node has no open files)."""
        _fail(errno.EACCES)

    def readlink(self, dev: KmdDevice, ctx) -> bytes:
        """The target of a symlink; EINVAL for anything else, as readlink(2) says."""
        _fail(errno.EINVAL)

    def forget(self, nlookup: int) -> bool:
        """The kernel dropped ``nlookup`` references; True when the inode may go."""
        return False


class Dir(Node):
    """A directory: fixed children, plus children computed by ``provider`` each time
    the directory is listed or searched (sysfs, debugfs, devcoredump)."""

    nlink = 2

    def __init__(self, inode: int, parent: "Dir | None", provider: Callable[[], dict] | None = None):
        super().__init__(inode, stat.S_IFDIR | 0o755)
        self.parent = parent or self
        self.children: dict[str, Node] = {}   # every child the kernel may know, by name
        self.fixed: dict[str, Node] = {}      # those that do not come from the provider
        self.provider = provider

    def open(self, dev, flags, ctx):
        _fail(errno.EISDIR)


class ControlFile(Node):
    """dev/dri/card0 or renderD128: each open() is one DRM file of the KMD."""

    cache_timeout = LONG_TIMEOUT
    truncatable = True  # `> card0` in a shell opens with O_TRUNC

    def __init__(self, inode: int, render: bool):
        super().__init__(inode, stat.S_IFREG | 0o666)
        self.render = render

    def open(self, dev, flags, ctx) -> "ControlHandle":
        f = dev.open_file(pid=ctx.pid, uid=ctx.uid, comm=_proc_comm(ctx.pid), render=self.render)
        return ControlHandle(dev, f)


class GeneratedFile(Node):
    """Text made on open by ``read_fn``; ``write_fn(bytes)`` takes writes if set."""

    truncatable = True  # `echo 1 > gpu_reset` opens with O_TRUNC

    def __init__(self, inode: int, read_fn: Callable, write_fn: Callable | None = None):
        super().__init__(inode, stat.S_IFREG | (0o644 if write_fn else 0o444))
        self.read_fn = read_fn
        self.write_fn = write_fn

    def open(self, dev, flags, ctx) -> "SnapshotHandle":
        """The text is taken here, once, so every read() of this open sees one
        snapshot (docs/vdev.md). A write-only open takes none."""
        acc = flags & os.O_ACCMODE
        if acc != os.O_RDONLY and self.write_fn is None:
            _fail(errno.EACCES)
        return SnapshotHandle(self, _to_bytes(self.read_fn) if acc != os.O_WRONLY else b"")


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


class ControlHandle(Handle):
    """One open of card0/renderD128 = one DRM file, plus its unread reply
    (docs/vdev.md, "Control-file protocol choices")."""

    def __init__(self, dev: KmdDevice, file):
        self.dev = dev
        self.file = file
        self.reply = None  # kmd Reply | PendingReply | None

    async def write(self, off, buf) -> int:
        """One request frame. Never blocks: the KMD answers at once or returns a
        PendingReply that read() waits for. A new request replaces an unread reply,
        also when it fails (FrameError or KmdError: the write fails with its errno)."""
        req = parse_request(buf)
        self.reply = None
        self.reply = self.dev.ioctl(self.file, req.request, req.arg, req.extra)
        return len(buf)

    async def read(self, off, size) -> bytes:
        """The reply of the last request: EINVAL if none is waiting or ``size`` is too
        small (the reply stays for a retry). A PendingReply is waited for here, in a
        worker thread, so the loop serves other clients meanwhile; a KmdError from it
        fails the read and drops the reply."""
        reply = self.reply
        if reply is None:
            _fail(errno.EINVAL)
        if isinstance(reply, PendingReply):
            try:
                done = await trio.to_thread.run_sync(reply.wait, **_ABANDON_ON_CANCEL)
            except KmdError:
                if self.reply is reply:
                    self.reply = None
                raise
            if self.reply is reply:  # a newer write() replaced it meanwhile: keep that one
                self.reply = done
            reply = done
        data = encode_reply(reply.result, reply.arg, reply.extra)
        if size < len(data):
            _fail(errno.EINVAL)
        if self.reply is reply:
            self.reply = None
        return data

    async def release(self) -> None:
        """The last close of a DRM file frees its handles, VAs and contexts; in a
        worker thread, so the loop stays free if the KMD waits for jobs."""
        self.reply = None
        await trio.to_thread.run_sync(self.dev.close_file, self.file)


class SnapshotHandle(Handle):
    """An open generated file: the text taken at open()."""

    def __init__(self, node: GeneratedFile, data: bytes):
        self.node = node
        self.data = data

    async def read(self, off, size) -> bytes:
        return self.data[off: off + size]

    async def write(self, off, buf) -> int:
        """Runs the entry's ``write_fn(bytes)`` in a worker thread: a debugfs action
        (gpu_reset) may wait for engines."""
        if self.node.write_fn is None:
            _fail(errno.EBADF)
        await trio.to_thread.run_sync(self.node.write_fn, bytes(buf))
        return len(buf)


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


class SyncHandle(Handle):
    """An open sync file: the status text of its first read, and the poll handle the
    kernel gave us while the fence is busy (armed: a notification is arranged).
    Its state is touched on the trio loop only."""

    def __init__(self, node: SyncFile):
        self.export = node.export
        self.data: bytes | None = None
        self.poll_handle = None
        self.armed = False

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
        if poll_handle is not None:
            self.poll_handle = poll_handle
            if not self.armed:
                self.armed = True
                token = trio.lowlevel.current_trio_token()
                self.export.notify_on_change(functools.partial(self._changed, token))
        return 0

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
            log.exception("vdev: waking a sync-file poller failed")

    async def release(self) -> None:
        self.poll_handle = None  # a wake-up still queued then has nobody to notify
