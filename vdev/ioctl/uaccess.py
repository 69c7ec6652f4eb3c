"""The caller's memory, as Linux's copy_from_user / copy_to_user reach it.

An ioctl's struct arrives in the FUSE request (the kernel copied ``_IOC_SIZE`` bytes),
but the data its pointers point to is in the calling process. The daemon reads and
writes it with process_vm_readv/writev on the pid FUSE reports, which the kernel
allows where ptrace would be allowed (PTRACE_MODE_ATTACH_REALCREDS: the daemon is
root, or has the caller's uid and Yama's ptrace_scope lets it; libvgpu and the
preload declare the daemon their tracer with PR_SET_PTRACER for scope 1).

Every failure is an OSError: EFAULT for an address the caller has not mapped (or
not readable/writable), as copy_*_user return; EPERM when the kernel refuses the
daemon access to that process at all (its ``reason`` says why, for kmsg); ESRCH
when the caller is gone. A partial transfer is EFAULT.
"""
from __future__ import annotations

import ctypes
import errno
import os
import threading

_libc = ctypes.CDLL(None, use_errno=True)


class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


for _name in ("process_vm_readv", "process_vm_writev"):
    _fn = getattr(_libc, _name)
    _fn.restype = ctypes.c_ssize_t
    _fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
_readv, _writev = _libc.process_vm_readv, _libc.process_vm_writev


class UserAccessError(OSError):
    """A copy from or to the caller that failed; ``reason`` is the line for kmsg."""

    def __init__(self, err: int, reason: str):
        super().__init__(err, reason)
        self.reason = reason


def _denied_reason(pid: int) -> str:
    """Why the kernel refuses this daemon the caller's memory, as far as we can tell."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = int(f.read())
    except (OSError, ValueError):
        scope = -1
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        uid = -1
    me = os.geteuid()
    if me != 0 and uid != me:
        return (f"the daemon (uid {me}) may not read the memory of pid {pid} (uid {uid}): "
                "a daemon that is not root serves only its own uid's ioctls with pointers")
    if scope >= 1:
        return (f"Yama ptrace_scope is {scope} and pid {pid} did not declare the daemon its tracer "
                f"(prctl(PR_SET_PTRACER, {os.getpid()}); libvgpu and vgpu run do this)")
    return f"the kernel refused the daemon access to the memory of pid {pid}"


_tls = threading.local()


def _iovecs() -> tuple:
    """This thread's two iovecs and their addresses, made once: building them per call
    was half of a copy's cost (docs/bench.md, "Waste seen in the profiles")."""
    try:
        return _tls.iovecs
    except AttributeError:
        local, remote = _iovec(), _iovec()
        _tls.iovecs = (local, remote, ctypes.addressof(local), ctypes.addressof(remote))
        return _tls.iovecs


class UserMemory:
    """The memory of process ``pid`` (any of its threads' ids will do)."""

    __slots__ = ("pid",)

    def __init__(self, pid: int):
        self.pid = pid

    def _transfer(self, fn, addr: int, buf, n: int, what: str) -> None:
        local, remote, local_p, remote_p = _iovecs()
        local.iov_base, local.iov_len = ctypes.addressof(buf), n
        remote.iov_base, remote.iov_len = addr, n
        done = fn(self.pid, local_p, 1, remote_p, 1, 0)
        if done == n:
            return
        if done >= 0:
            raise UserAccessError(errno.EFAULT, f"{what} {n} bytes at {addr:#x}: only {done} mapped")
        err = ctypes.get_errno()
        if err == errno.EPERM:
            raise UserAccessError(errno.EPERM, _denied_reason(self.pid))
        if err == errno.ESRCH:
            raise UserAccessError(errno.ESRCH, f"pid {self.pid} is gone")
        raise UserAccessError(errno.EFAULT, f"{what} {n} bytes at {addr:#x}: {os.strerror(err)}")

    def read(self, addr: int, n: int) -> bytes:
        """copy_from_user: the ``n`` bytes at ``addr`` in the caller."""
        if n <= 0:
            return b""
        buf = ctypes.create_string_buffer(n)
        self._transfer(_readv, addr, buf, n, "read")
        return buf.raw

    def write(self, addr: int, data: bytes) -> None:
        """copy_to_user: ``data`` to ``addr`` in the caller."""
        n = len(data)
        if n:
            self._transfer(_writev, addr, ctypes.create_string_buffer(bytes(data), n), n, "write")
