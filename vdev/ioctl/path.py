"""One FUSE_IOCTL request on card0/renderD128, answered as drm_ioctl() answers it.

The kernel (FUSE's restricted ioctl mode) has copied ``_IOC_SIZE(cmd)`` bytes of the
struct in when the request has ``_IOC_WRITE``, and copies ``out_size`` bytes back when
it has ``_IOC_READ``. The rest is ours, in Linux's order (drivers/gpu/drm/drm_ioctl.c):

1. the struct, zero-filled to its encoded size (an ``_IOR`` request sends none);
2. the data behind its pointers, read from the caller (vgpu.pointers.gather through
   :class:`~vdev.ioctl.uaccess.UserMemory`: copy_from_user; a plain CS's through
   vdev.ioctl.cs_gather, in C); a bad pointer is EFAULT,
   unless drm_ioctl's own checks refuse the request (EACCES, ENODEV...: Linux copies
   this data in the handler, after them);
3. the KMD's dispatch, the same table and rights as the frame protocol's;
4. the out-data written behind the output pointers (copy_to_user), the struct
   returned to the kernel for the copy back.

A request the KMD answers at once is answered here, synchronously, in pyfuse3's
loop: no task, no thread (docs/ioctl.md, "Speed"). The light jobs a CS submitted to an
idle ring (kmd/direct_run.py) run in the same thread right after the reply is written,
before it reads the next request (docs/ioctl.md, "Jobs after the reply"). One that must wait (a
PendingReply: WAIT_CS, the syncobj waits, WAIT_FENCES, GEM_WAIT_IDLE, a CS waiting
for room) is returned as a coroutine, which pyfuse3 runs as a task of its own, so
a blocked wait holds no worker; if the caller gets a signal, FUSE_INTERRUPT cancels
that task (vdev.nodes.wait_pending unsubscribes) and the ioctl fails with EINTR.
"""
from __future__ import annotations

import errno
import logging
from typing import Callable

import pyfuse3
import trio

from vgpu import pointers, uapi

from ..kmd_interface import KmdError, PendingReply
from ..nodes import ControlHandle, wait_pending
from .cs_gather import gather_cs
from .uaccess import UserAccessError, UserMemory

log = logging.getLogger(__name__)

_DRM = uapi.DRM_IOCTL_BASE
# _IOC_TYPE and _IOC_SIZE, inlined: the two are asked for every request
_TYPE_SHIFT, _TYPE_MASK = uapi._IOC_TYPESHIFT, uapi._IOC_TYPEMASK
_SIZE_SHIFT, _SIZE_MASK = uapi._IOC_SIZESHIFT, uapi._IOC_SIZEMASK
_CS = uapi.DRM_IOCTL_AMDGPU_CS
_CS_NR = uapi._IOC_NR(_CS)

#: Called after each request: ``(handle, cmd, pid, errno_or_0)`` (drm.debug, tracing).
Observer = Callable[[ControlHandle, int, int, int], None]


def _fail(err: int, handle: ControlHandle | None = None, cmd: int = 0, pid: int = 0,
          observe: Observer | None = None):
    if observe is not None and handle is not None:
        observe(handle, cmd, pid, err)
    raise pyfuse3.FUSEError(err)


def _run_direct(rings: list) -> None:
    """Run the light jobs a request submitted (Device.ioctl's ``direct_runs``)."""
    for ring in rings:
        ring.run_direct()


class IoctlPath:
    """Answers FUSE_IOCTL for the control handles of one mount. ``observe`` (optional)
    sees every DRM request's outcome."""

    def __init__(self, kmsg_log: Callable[[str], None], observe: Observer | None = None):
        self._kmsg = kmsg_log
        self.observe = observe

    def answer(self, handle: ControlHandle, cmd: int, arg_addr: int, in_buf: bytes,
               out_size: int, pid: int):
        """The reply bytes (at most ``out_size``); ``(0, bytes, then)`` when the request
        submitted light jobs, which ``then()`` runs (pyfuse3 calls it once the reply is
        written); or a coroutine giving the bytes.
        FUSEError: the errno of the refusal (ENOTTY for a request that is not DRM's,
        EFAULT for a bad pointer, the KMD's errno otherwise)."""
        if (cmd >> _TYPE_SHIFT) & _TYPE_MASK != _DRM:
            # TCGETS from isatty() and the like: not ours, and not worth a kmsg line
            raise pyfuse3.FUSEError(errno.ENOTTY)
        size = (cmd >> _SIZE_SHIFT) & _SIZE_MASK
        arg = in_buf if len(in_buf) == size else bytes(in_buf[:size]).ljust(size, b"\0")
        mem = UserMemory(pid)
        if cmd == _CS:   # the one request that submits jobs
            return self._answer_cs(handle, cmd, arg, mem, out_size, pid)
        reply = self._dispatch(handle, cmd, arg, mem, pid, None)
        if isinstance(reply, PendingReply):
            return self._wait(handle, cmd, arg, reply, mem, out_size, pid)
        if not reply.extra and self.observe is None:  # nothing to scatter or observe
            return reply.arg[:out_size]
        return self._complete(handle, cmd, arg, reply, mem, out_size, pid)

    def _answer_cs(self, handle, cmd, arg, mem: UserMemory, out_size: int, pid: int):
        """answer() for DRM_IOCTL_AMDGPU_CS: the reply first, then its light jobs."""
        runs: list = []
        try:
            reply = self._dispatch(handle, cmd, arg, mem, pid, runs)
        except BaseException:
            _run_direct(runs)
            raise
        if runs:
            if isinstance(reply, PendingReply):
                _run_direct(runs)
            else:
                # The CS's answer first, then its job (its fence signals after the reply,
                # as a GPU's does after the ioctl): the job runs while the reply travels
                # and the caller prepares its next call (docs/ioctl.md, "Jobs after the
                # reply"). This thread reads no request before it has run them.
                try:
                    data = self._completed(handle, cmd, arg, reply, mem, out_size, pid)
                except BaseException:
                    _run_direct(runs)
                    raise
                return 0, data, lambda: _run_direct(runs)
        return self._completed(handle, cmd, arg, reply, mem, out_size, pid)

    def _completed(self, handle, cmd, arg, reply, mem: UserMemory, out_size: int, pid: int):
        """The reply of a dispatched request (bytes), or the coroutine of a pending one."""
        if isinstance(reply, PendingReply):
            return self._wait(handle, cmd, arg, reply, mem, out_size, pid)
        if not reply.extra and self.observe is None:  # nothing to scatter or observe
            return reply.arg[:out_size]
        return self._complete(handle, cmd, arg, reply, mem, out_size, pid)

    def _dispatch(self, handle, cmd, arg, mem: UserMemory, pid: int, runs: list | None):
        """Steps 2 and 3: the pointed-to data, then the KMD's dispatch; the light jobs
        the request submitted go to ``runs`` (None: they run before it returns)."""
        try:
            # a CS's chunks in C where they are plain (vdev/ioctl/cs_gather.pyx), else
            # (and for every refusal) the reference
            extra = gather_cs(pid, arg) if cmd == _CS else None
            if extra is None:
                extra = pointers.gather(cmd, arg, mem.read)
            # pid: the calling thread, for the records; the light jobs go to `runs`
            return handle.dev.ioctl(handle.file, cmd, arg, extra, tid=pid, direct_runs=runs)
        except UserAccessError as e:
            self._permission_first(handle, cmd, arg, pid)
            handle.dev.refused_before_dispatch(handle.file, cmd, arg, e.errno, tid=pid)
            self._refused(handle, cmd, pid, e)
        except OSError as e:   # E2BIG, EINVAL from gather
            self._permission_first(handle, cmd, arg, pid)
            handle.dev.refused_before_dispatch(handle.file, cmd, arg, e.errno, tid=pid)
            _fail(e.errno, handle, cmd, pid, self.observe)
        except KmdError as e:
            _fail(e.errno, handle, cmd, pid, self.observe)

    def _complete(self, handle, cmd, arg, reply, mem: UserMemory, out_size: int, pid: int) -> bytes:
        try:
            pointers.scatter(cmd, arg, reply.extra, mem.write)
        except UserAccessError as e:
            self._refused(handle, cmd, pid, e)
        except OSError as e:   # a NULL output pointer (vgpu.pointers): EFAULT
            _fail(e.errno, handle, cmd, pid, self.observe)
        if self.observe is not None:
            self.observe(handle, cmd, pid, 0)
        return reply.arg[:out_size]   # out_size is 0 without _IOC_READ

    async def _wait(self, handle, cmd, arg, pending: PendingReply, mem, out_size, pid) -> bytes:
        try:
            if uapi._IOC_NR(cmd) == _CS_NR:
                # A CS waiting for room on its context is queued in the KMD already:
                # failing it with EINTR would make drmIoctl submit it twice (amdgpu
                # waits before queueing and can restart). Its wait ends when an older
                # job of the context does, or at the job timeout.
                with trio.CancelScope(shield=True):
                    reply = await wait_pending(pending)
            else:
                reply = await wait_pending(pending)
            return self._complete(handle, cmd, arg, reply, mem, out_size, pid)
        except KmdError as e:
            _fail(e.errno, handle, cmd, pid, self.observe)
        except pyfuse3.FUSEError:
            raise
        except Exception as e:  # never out of the FUSE loop: pyfuse3 would stop serving
            log.exception("vdev: %s failed", uapi.ioctl_name(cmd))
            self._kmsg(f"vdev: internal error in {uapi.ioctl_name(cmd)}: {e!r}")
            raise pyfuse3.FUSEError(errno.EIO) from e

    def _permission_first(self, handle: ControlHandle, cmd: int, arg: bytes, pid: int) -> None:
        """The copy of the request's pointed-to data failed (step 2). Linux makes that
        copy in the handler, after drm_ioctl's checks: a request they refuse (a
        closed or unplugged file, an unknown ioctl, EACCES) fails with their errno."""
        try:
            handle.dev.check_permission(handle.file, cmd)
        except KmdError as e:
            handle.dev.refused_before_dispatch(handle.file, cmd, arg, e.errno, tid=pid)
            _fail(e.errno, handle, cmd, pid, self.observe)

    def _refused(self, handle: ControlHandle, cmd: int, pid: int, e: UserAccessError):
        """A copy from/to the caller failed: EFAULT as Linux's copy_*_user, or the
        reason the daemon may not reach that process at all (logged, with what to do)."""
        name = uapi.ioctl_name(cmd)
        if e.errno == errno.EPERM:
            self._kmsg(f"{name} from pid {pid}: {e.reason}")
        else:
            log.debug("%s from pid %d: %s", name, pid, e.reason)
        _fail(errno.EFAULT if e.errno == errno.ESRCH else e.errno, handle, cmd, pid, self.observe)
