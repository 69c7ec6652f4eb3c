"""The one generic ioctl helper: a real ``ioctl()`` on the DRM node, as libdrm's drmIoctl.

docs/design.md section 3: every DRM request is ``ioctl(fd, DRM_IOCTL_..., &struct)``
on an open file of ``card0``/``renderD128``. The kernel copies ``_IOC_SIZE`` bytes of
the struct to the daemon and back (FUSE_IOCTL); the data the struct's pointer fields
point to (CS chunks, BO list entries, syncobj arrays, INFO's answer...) lives in the
caller's buffers, which the daemon reads and writes in this process's memory, as
Linux's ``copy_from_user``/``copy_to_user`` do. So a caller fills the pointer fields
with the addresses of its own ctypes buffers and keeps them alive across the call.

Like libdrm's ``drmIoctl`` the helper retries EINTR/EAGAIN; a Python exception raised
by a signal handler (Ctrl-C's KeyboardInterrupt) ends the wait instead. Any other
failure becomes a :class:`~libvgpu.errors.VgpuError` carrying the errno, its message
naming the request.

The write()/read() frame protocol of the first versions (vgpu/frame.py) stays as a
second transport: with ``VGPU_TRANSPORT=frame`` in the environment (or
``transport="frame"``) the helper writes a request frame whose inline data it builds
from the struct's pointers (:func:`vgpu.pointers.gather`) and writes the reply's
out-data back behind the output pointers (:func:`vgpu.pointers.scatter`), so a caller
sees the same effect either way. With a request tag (the calling thread's id) the
frame is ``pwrite``/``pread`` at offset = tag; tag None is plain ``write``/``read``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import time

from vgpu import frame, pointers, uapi
from vgpu.timeout import INFINITE, deadline_ns

from .errors import error_for, from_oserror

#: libdrm's AMDGPU_TIMEOUT_INFINITE (amdgpu.h): wait forever (vgpu.timeout.INFINITE).
AMDGPU_TIMEOUT_INFINITE = INFINITE

#: The environment variable that picks the transport: ``ioctl`` (default) or ``frame``.
TRANSPORT_ENV = "VGPU_TRANSPORT"
TRANSPORTS = ("ioctl", "frame")

# SYS_ioctl by architecture (asm/unistd.h); elsewhere libc's ioctl() through fcntl.
_SYS_IOCTL = {"x86_64": 16, "aarch64": 29, "riscv64": 29, "ppc64le": 54, "s390x": 54}.get(os.uname().machine)


# syscall(SYS_ioctl, fd, request, arg) with its argument types set once: wrapping
# each argument in a ctypes object per call was most of the call's cost. (A CDLL
# function: the GIL is released while the ioctl blocks.)
_syscall = ctypes.CDLL(None, use_errno=True).syscall
_syscall.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_ulong, ctypes.c_void_p]
_syscall.restype = ctypes.c_long

# Runs the Python-level signal handlers now, raising what they raise (a ctypes
# pythonapi call checks the error indicator on return). The interpreter would run
# them between bytecodes anyway; the EINTR retry asks at the one point where it
# matters, so Ctrl-C ends a wait whatever runs the loop.
_check_signals = ctypes.pythonapi.PyErr_CheckSignals


def _raw_ioctl(fd: int, request: int, struct, _mutate: bool = True) -> int:
    """ioctl(2) itself, not libc's ioctl(): under ``vgpu run`` the preload library
    wraps ioctl() and turns the daemon's prime/sync tokens into fds, which libvgpu
    does itself (libvgpu/bo.py, syncobj.py), so it must see the tokens. strace shows
    the same ``ioctl(...)`` line either way. OSError with the errno on failure."""
    r = _syscall(_SYS_IOCTL, fd, request, ctypes.addressof(struct))
    if r == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return r


#: The system call behind the ioctl transport; the in-process tests replace it
#: (tests/libvgpu/conftest.py). Called as ``_sys_ioctl(fd, request, struct, True)``.
_sys_ioctl = _raw_ioctl if _SYS_IOCTL is not None else fcntl.ioctl


def transport_from_env() -> str:
    """The transport ``$VGPU_TRANSPORT`` names (``ioctl`` when unset or empty).
    VgpuInvalidArgument for any other value."""
    name = os.environ.get(TRANSPORT_ENV, "") or "ioctl"
    if name not in TRANSPORTS:
        raise error_for(errno.EINVAL, f"{TRANSPORT_ENV}={name!r}: expected one of {', '.join(TRANSPORTS)}")
    return name


def address(buf) -> int:
    """The address of a ctypes object, for a pointer field (0 for None)."""
    return 0 if buf is None else ctypes.addressof(buf)


def drm_ioctl(fd: int, request: int, struct, *, transport: str | None = None,
              tag: int | None = None):
    """Issue ``request`` on ``fd`` with ``struct`` (a ctypes struct/union of the
    request's ``_IOC_SIZE``) and return it, updated in place as the kernel leaves it.

    Pointer fields of ``struct`` must point to buffers the caller keeps alive until
    the call returns. ``transport`` is ``"ioctl"`` or ``"frame"`` (None: from
    ``$VGPU_TRANSPORT``); ``tag`` is the frame transport's request tag (the file
    offset of the pwrite and pread; ``Device.ioctl`` passes the calling thread's id),
    ignored by the ioctl transport.
    """
    name = transport or transport_from_env()
    size = ctypes.sizeof(struct)
    if size != uapi._IOC_SIZE(request):
        raise error_for(errno.EINVAL, f"{uapi.ioctl_name(request)}: struct of {size} bytes, the request "
                                      f"declares {uapi._IOC_SIZE(request)}")
    if name == "frame":
        return _frame_ioctl(fd, request, struct, uapi.ioctl_name(request), tag)
    if name != "ioctl":
        raise error_for(errno.EINVAL, f"{uapi.ioctl_name(request)}: unknown transport {name!r}")
    while True:
        try:
            _sys_ioctl(fd, request, struct, True)
            return struct
        except OSError as e:   # a KeyboardInterrupt from a signal handler is no OSError
            if e.errno in (errno.EINTR, errno.EAGAIN):
                _check_signals()
                continue       # drmIoctl: restart (the struct is as we sent it)
            raise from_oserror(e, uapi.ioctl_name(request)) from e


# -- the frame transport -------------------------------------------------------------

def _read_memory(ptr: int, n: int) -> bytes:
    return ctypes.string_at(ptr, n)


def _write_memory(ptr: int, data: bytes) -> None:
    ctypes.memmove(ptr, data, len(data))


def _frame_error(e: frame.FrameError, context: str):
    return error_for(e.errno, f"{context}: {e.strerror}")


def _write_frame(fd: int, data: bytes, context: str, tag: int | None) -> None:
    while True:
        try:
            written = os.write(fd, data) if tag is None else os.pwrite(fd, data, tag)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                time.sleep(0.001)
                continue
            if e.errno == errno.EINTR:
                continue
            raise from_oserror(e, context) from e
        if written != len(data):  # the daemon takes a frame whole or not at all
            raise error_for(errno.EIO, f"{context}: short write {written}/{len(data)}")
        return


def _read_frame(fd: int, size: int, context: str, tag: int | None) -> bytes:
    while True:
        try:
            return os.read(fd, size) if tag is None else os.pread(fd, size, tag)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                time.sleep(0.001)  # the reply is not ready on a non-blocking fd
                continue
            if e.errno == errno.EINTR:
                continue  # the reply stays queued; ask again
            raise from_oserror(e, context) from e


def _frame_ioctl(fd: int, request: int, struct, context: str, tag: int | None):
    """One request frame written, one reply frame read (docs/design.md section 3,
    "the frame protocol"): the struct's pointed-to data goes inline, the reply's
    out-data is written behind its output pointers."""
    arg = bytes(struct)
    try:
        extra = pointers.gather(request, arg, _read_memory)
    except OSError as e:   # EFAULT (a NULL pointer with a count), E2BIG
        raise error_for(e.errno, f"{context}: {e.strerror}") from e
    try:
        frame.check_request(request, arg, extra)
    except frame.FrameError as e:  # refused before anything is sent
        raise _frame_error(e, context) from e
    _write_frame(fd, frame.encode_request(request, arg, extra), context, tag)
    size = max(frame.REPLY_BUFFER,
               frame.REPLY_HEADER_SIZE + len(arg) + pointers.reply_room(request, arg))
    try:
        reply = frame.parse_reply(_read_frame(fd, size, context, tag))
    except frame.FrameError as e:
        raise _frame_error(e, context) from e
    if reply.result:
        raise error_for(frame.reply_errno(reply.result), context)
    # A shorter or longer struct from another KMD version: missing tail reads as zero.
    updated = type(struct).from_bytes(reply.arg)
    ctypes.memmove(ctypes.addressof(struct), ctypes.addressof(updated), ctypes.sizeof(struct))
    try:
        pointers.scatter(request, arg, reply.extra, _write_memory)
    except OSError as e:   # EFAULT: a NULL output pointer
        raise error_for(e.errno, f"{context}: {e.strerror}") from e
    return struct


def absolute_timeout(timeout_ns: int) -> int:
    """CLOCK_MONOTONIC deadline for a relative timeout, as libdrm's
    amdgpu_cs_calculate_timeout: infinite stays infinite, overflow saturates."""
    return deadline_ns(timeout_ns)
