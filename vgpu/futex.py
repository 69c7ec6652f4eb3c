"""futex(2) on words of shared memory: how user queues wake and wait without ioctls.

A user queue's doorbell, its read pointer and the fence words it writes live in BO
files that the client and the daemon both map MAP_SHARED (docs/userq.md). A futex
on such a word is keyed by (file, offset), not by address, so a FUTEX_WAKE in one
process wakes a FUTEX_WAIT on the same word in another, whatever address each maps
it at. The operations are therefore the shared ones (no FUTEX_PRIVATE_FLAG).

ctypes releases the GIL around the system call, so a thread waiting here does not
hold up the rest of its process. Imports nothing of vgpu.
"""
from __future__ import annotations

import ctypes
import errno
import os

SYS_futex = 202          # x86-64 (asm/unistd_64.h); vgpu runs on x86-64 only
FUTEX_WAIT = 0
FUTEX_WAKE = 1
INT_MAX = 2**31 - 1

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def wait(addr: int, expected: int, timeout: float | None = None) -> bool:
    """Sleep while the u32 at `addr` equals `expected`, at most `timeout` seconds
    (None: until woken). True when woken or the word already differs (EAGAIN);
    False on timeout. A signal ends the wait early (True: the caller re-checks its
    condition, as every futex user must). `addr` must be 4-byte aligned and mapped."""
    ts = None
    if timeout is not None:
        t = max(0.0, timeout)
        ts = ctypes.byref(_Timespec(int(t), int((t - int(t)) * 1e9)))
    r = _syscall(SYS_futex, ctypes.c_void_p(addr), FUTEX_WAIT, ctypes.c_uint32(expected & 0xFFFFFFFF),
                 ts, None, 0)
    if r == 0:
        return True
    e = ctypes.get_errno()
    if e == errno.ETIMEDOUT:
        return False
    if e in (errno.EAGAIN, errno.EINTR):
        return True
    raise OSError(e, f"futex wait at {addr:#x}: {os.strerror(e)}")


def wake(addr: int, count: int = INT_MAX) -> int:
    """Wake up to `count` waiters on the u32 at `addr`; the number woken."""
    r = _syscall(SYS_futex, ctypes.c_void_p(addr), FUTEX_WAKE, count, None, None, 0)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"futex wake at {addr:#x}: {os.strerror(e)}")
    return r
