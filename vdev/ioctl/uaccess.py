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
import struct
import threading

# Two bindings of each call. The daemon's ioctl thread makes several small copies per
# request (a CS: three), and a ctypes call through CDLL releases the GIL, so any other
# daemon thread that wants it (a ring worker, a timer) takes it there and the copy
# waits for that thread's whole turn: most of a CS's copy time in the daemon was such
# waits (docs/bench.md, "After the CS path trims"). A small copy is a microsecond in the
# kernel, so it keeps the GIL (PyDLL); a large one releases it (CDLL). The price: a
# pointer into memory that is slow to fault in (a file on a hung network mount) now
# stalls the daemon's other Python threads too, not only the ioctl thread, which
# reads every FUSE request and so stops serving in both cases.
_SIGNATURE = ([ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong],
              ctypes.c_ssize_t)


def _bind(lib) -> tuple:
    fns = []
    for name in ("process_vm_readv", "process_vm_writev"):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = _SIGNATURE
        fns.append(fn)
    return tuple(fns)


_readv_held, _writev_held = _bind(ctypes.PyDLL(None, use_errno=True))
_readv, _writev = _bind(ctypes.CDLL(None, use_errno=True))

#: Copies up to this size keep the GIL and go through the thread's own buffer.
HELD_MAX = 64 << 10

_IOVECS = struct.Struct("@PNPN")   # the local then the remote struct iovec


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


class _Buffers(threading.local):
    """This thread's copy buffer and the two iovecs that point into it, made once:
    building them per call was half of a copy's cost (docs/bench.md, "Waste seen in
    the profiles")."""

    def __init__(self):
        self.data = bytearray(HELD_MAX)
        self.view = memoryview(self.data)
        self.address = ctypes.addressof((ctypes.c_char * HELD_MAX).from_buffer(self.data))
        self.iov = bytearray(_IOVECS.size)
        self.iov_address = ctypes.addressof((ctypes.c_char * _IOVECS.size).from_buffer(self.iov))


_buffers = _Buffers()
_pack_iovecs = _IOVECS.pack_into
_REMOTE = _IOVECS.size // 2   # offset of the remote iovec


class UserMemory:
    """The memory of process ``pid`` (any of its threads' ids will do)."""

    __slots__ = ("pid",)

    def __init__(self, pid: int):
        self.pid = pid

    def _transfer(self, fn, addr: int, local: int, n: int, what: str) -> None:
        b = _buffers
        _pack_iovecs(b.iov, 0, local, n, addr, n)
        done = fn(self.pid, b.iov_address, 1, b.iov_address + _REMOTE, 1, 0)
        if done != n:
            self._failed(done, addr, n, what)

    def _failed(self, done: int, addr: int, n: int, what: str):
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
        if n <= HELD_MAX:
            b = _buffers
            self._transfer(_readv_held, addr, b.address, n, "read")
            return b.view[:n].tobytes()
        buf = ctypes.create_string_buffer(n)
        self._transfer(_readv, addr, ctypes.addressof(buf), n, "read")
        return buf.raw

    def write(self, addr: int, data: bytes) -> None:
        """copy_to_user: ``data`` to ``addr`` in the caller."""
        n = len(data)
        if not n:
            return
        if n <= HELD_MAX:
            b = _buffers
            b.view[:n] = data
            self._transfer(_writev_held, addr, b.address, n, "write")
            return
        buf = ctypes.create_string_buffer(bytes(data), n)
        self._transfer(_writev, addr, ctypes.addressof(buf), n, "write")
