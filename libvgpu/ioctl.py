"""The one generic ioctl helper: a request frame written, a reply frame read.

docs/design.md section 3: an ioctl on a vgpu control file is ONE write() of
``vgpu_request_header + struct + extra`` followed by ONE read() of
``vgpu_reply_header + struct + out-data``. Like libdrm's ``drmIoctl`` the helper
retries EINTR/EAGAIN; any other failure becomes a :class:`~libvgpu.errors.VgpuError`
carrying the errno of the syscall that failed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time

from vgpu import uapi

from .errors import error_for, from_oserror

#: libdrm's AMDGPU_TIMEOUT_INFINITE (amdgpu.h): wait forever.
AMDGPU_TIMEOUT_INFINITE = 0xFFFFFFFFFFFFFFFF

_HEADER = ctypes.sizeof(uapi.vgpu_request_header)
_REPLY_HEADER = ctypes.sizeof(uapi.vgpu_reply_header)
#: Smallest read() buffer for a reply: a reply never exceeds one frame.
REPLY_BUFFER = max(64 * 1024, uapi.VGPU_MAX_FRAME)


def encode_request(request: int, arg: bytes, extra: bytes = b"") -> bytes:
    """One request frame. Raises :class:`VgpuError` (EINVAL) for a frame the
    device would refuse anyway: size not matching ``_IOC_SIZE``, over VGPU_MAX_FRAME."""
    name = uapi.ioctl_name(request)
    if uapi._IOC_SIZE(request) != len(arg):
        raise error_for(errno.EINVAL, f"{name}: struct is {len(arg)} bytes, request encodes "
                                      f"{uapi._IOC_SIZE(request)}")
    total = _HEADER + len(arg) + len(extra)
    if total > uapi.VGPU_MAX_FRAME:
        raise error_for(errno.EINVAL, f"{name}: frame of {total} bytes exceeds VGPU_MAX_FRAME "
                                      f"({uapi.VGPU_MAX_FRAME})")
    header = uapi.vgpu_request_header(magic=uapi.VGPU_MAGIC, request=request,
                                      arg_size=len(arg), extra_size=len(extra))
    return b"".join((bytes(header), arg, extra))


def decode_reply(frame: bytes, context: str = "") -> tuple[bytes, bytes]:
    """Split a reply frame into (struct bytes, out-data); EPROTO if malformed,
    the errno of ``result`` if the reply carries one."""
    if len(frame) < _REPLY_HEADER:
        raise error_for(errno.EPROTO, f"{context}: reply of {len(frame)} bytes has no header")
    header = uapi.vgpu_reply_header.from_buffer_copy(frame[:_REPLY_HEADER])
    if header.result != 0:
        raise error_for(-header.result if header.result < 0 else header.result, context)
    end = _REPLY_HEADER + header.arg_size
    if end + header.extra_size != len(frame):
        raise error_for(errno.EPROTO, f"{context}: reply sizes {header.arg_size}+"
                                      f"{header.extra_size} disagree with {len(frame)} bytes read")
    return frame[_REPLY_HEADER:end], frame[end:]


def _write_frame(fd: int, frame: bytes, context: str) -> None:
    while True:
        try:
            written = os.write(fd, frame)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                time.sleep(0.001)
                continue
            if e.errno == errno.EINTR:
                continue
            raise from_oserror(e, context) from e
        if written != len(frame):  # the daemon takes a frame whole or not at all
            raise error_for(errno.EIO, f"{context}: short write {written}/{len(frame)}")
        return


def _read_frame(fd: int, size: int, context: str) -> bytes:
    while True:
        try:
            return os.read(fd, size)
        except OSError as e:
            if e.errno == errno.EAGAIN:
                time.sleep(0.001)  # the reply is not ready on a non-blocking fd
                continue
            if e.errno == errno.EINTR:
                continue  # the reply stays queued; ask again
            raise from_oserror(e, context) from e


def drm_ioctl(fd: int, request: int, struct, extra: bytes = b"",
              reply_extra: int = 0) -> tuple[object, bytes]:
    """Issue ``request`` with ``struct`` (a ctypes struct/union) and inline ``extra``.

    The struct is updated in place from the reply (as the kernel would through
    the ioctl pointer) and returned with the reply's out-data. ``reply_extra``
    is the largest out-data expected (INFO's return_size...); the read buffer
    is at least :data:`REPLY_BUFFER`. Not thread-safe on one fd: the caller
    serialises (see ``Device.ioctl``).
    """
    context = uapi.ioctl_name(request)
    arg = bytes(struct)
    _write_frame(fd, encode_request(request, arg, bytes(extra)), context)
    size = max(REPLY_BUFFER, _REPLY_HEADER + len(arg) + reply_extra)
    out, out_extra = decode_reply(_read_frame(fd, size, context), context)
    # A shorter or longer struct from another KMD version: missing tail reads as zero.
    updated = type(struct).from_bytes(out)
    ctypes.memmove(ctypes.addressof(struct), ctypes.addressof(updated), ctypes.sizeof(struct))
    return struct, out_extra


def absolute_timeout(timeout_ns: int) -> int:
    """CLOCK_MONOTONIC deadline for a relative timeout, as libdrm's
    amdgpu_cs_calculate_timeout: infinite stays infinite, overflow saturates."""
    if timeout_ns == AMDGPU_TIMEOUT_INFINITE:
        return AMDGPU_TIMEOUT_INFINITE
    deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + timeout_ns
    return min(deadline, AMDGPU_TIMEOUT_INFINITE)
