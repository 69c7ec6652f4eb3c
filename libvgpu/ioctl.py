"""The one generic ioctl helper: a request frame written, a reply frame read.

docs/design.md section 3: an ioctl on a vgpu control file is ONE write of a request
frame followed by ONE read of the reply frame, both made and read by the
protocol's codec, :mod:`vgpu.frame`. With a request tag (the calling thread's id)
they are ``pwrite``/``pread`` at offset = tag, so threads sharing one open file
never meet; tag None is plain ``write``/``read``. Like libdrm's ``drmIoctl`` the
helper retries EINTR/EAGAIN; any other failure becomes a
:class:`~libvgpu.errors.VgpuError` carrying the errno of the syscall that failed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time

from vgpu import frame, uapi
from vgpu.timeout import INFINITE, deadline_ns

from .errors import error_for, from_oserror

#: libdrm's AMDGPU_TIMEOUT_INFINITE (amdgpu.h): wait forever (vgpu.timeout.INFINITE).
AMDGPU_TIMEOUT_INFINITE = INFINITE


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


def drm_ioctl(fd: int, request: int, struct, extra: bytes = b"",
              reply_extra: int = 0, tag: int | None = None) -> tuple[object, bytes]:
    """Issue ``request`` with ``struct`` (a ctypes struct/union) and inline ``extra``.

    The struct is updated in place from the reply (as the kernel would through
    the ioctl pointer) and returned with the reply's out-data. ``reply_extra``
    is the largest out-data expected (INFO's return_size...); the read buffer
    is at least ``vgpu.frame.REPLY_BUFFER``. ``tag``: the request tag, the file
    offset of the pwrite and of the pread of the reply (``Device.ioctl`` passes the
    calling thread's id); None sends with write() and reads with read(), which the
    caller must not interleave with another thread's on the same fd.
    """
    context = uapi.ioctl_name(request)
    arg = bytes(struct)
    try:
        frame.check_request(request, arg, bytes(extra))
    except frame.FrameError as e:  # refused before anything is sent
        raise _frame_error(e, context) from e
    _write_frame(fd, frame.encode_request(request, arg, bytes(extra)), context, tag)
    size = max(frame.REPLY_BUFFER, frame.REPLY_HEADER_SIZE + len(arg) + reply_extra)
    try:
        reply = frame.parse_reply(_read_frame(fd, size, context, tag))
    except frame.FrameError as e:
        raise _frame_error(e, context) from e
    if reply.result:
        raise error_for(frame.reply_errno(reply.result), context)
    out, out_extra = reply.arg, reply.extra
    # A shorter or longer struct from another KMD version: missing tail reads as zero.
    updated = type(struct).from_bytes(out)
    ctypes.memmove(ctypes.addressof(struct), ctypes.addressof(updated), ctypes.sizeof(struct))
    return struct, out_extra


def absolute_timeout(timeout_ns: int) -> int:
    """CLOCK_MONOTONIC deadline for a relative timeout, as libdrm's
    amdgpu_cs_calculate_timeout: infinite stays infinite, overflow saturates."""
    return deadline_ns(timeout_ns)
