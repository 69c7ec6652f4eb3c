"""The one codec of the control-file protocol (docs/design.md section 3).

An ioctl on ``dev/dri/card0`` or ``renderD128`` is ONE write() of a request frame
and ONE read() of the reply frame::

    request = vgpu_request_header {magic, request, arg_size, extra_size}
              + arg_size bytes of the ioctl struct + extra_size bytes of inline data
    reply   = vgpu_reply_header {result, arg_size, extra_size, reserved}
              + the updated struct + the out-data

``extra`` carries what the amdgpu/DRM struct points to ("flattening", section 3):
the client puts the pointed-to data there in field order and the KMD ignores the
pointer values. The daemon (vdev), the client library (libvgpu) and the tracer all
frame and unframe through this module; it imports only :mod:`vgpu.uapi`.
"""
from __future__ import annotations

import ctypes
import errno
import struct
from typing import NamedTuple

from .uapi import VGPU_MAGIC, VGPU_MAX_FRAME, _IOC_SIZE, vgpu_reply_header, vgpu_request_header

REQUEST_HEADER_SIZE = ctypes.sizeof(vgpu_request_header)
REPLY_HEADER_SIZE = ctypes.sizeof(vgpu_reply_header)
# The same layouts as struct formats (faster per ioctl than ctypes), checked at import.
_REQUEST_HEADER = struct.Struct("<IIII")
_REPLY_HEADER = struct.Struct("<iIII")
assert _REQUEST_HEADER.size == REQUEST_HEADER_SIZE and _REPLY_HEADER.size == REPLY_HEADER_SIZE
#: The smallest read() buffer that holds any reply.
REPLY_BUFFER = VGPU_MAX_FRAME


class FrameError(OSError):
    """A malformed or refused frame; ``errno`` is what the failing syscall reports
    (EINVAL, E2BIG for requests; EPROTO for a reply a client cannot decode)."""

    def __init__(self, errno_: int, msg: str):
        super().__init__(errno_, msg)


class Request(NamedTuple):
    """One request: the DRM-encoded number, the struct bytes, the inline data."""
    request: int
    arg: bytes
    extra: bytes


class Reply(NamedTuple):
    """One reply: ``result`` (0, or an errno), the updated struct, the out-data."""
    result: int
    arg: bytes
    extra: bytes


def check_request(request: int, arg: bytes, extra: bytes = b"") -> None:
    """FrameError(EINVAL) for a request the device would refuse anyway: struct size
    not ``_IOC_SIZE(request)``, or a frame over VGPU_MAX_FRAME (clients call it
    before sending; the daemon's parse_request makes the same checks)."""
    if _IOC_SIZE(request) != len(arg):
        raise FrameError(errno.EINVAL, f"struct is {len(arg)} bytes, request {request:#010x} "
                                       f"encodes {_IOC_SIZE(request)}")
    total = REQUEST_HEADER_SIZE + len(arg) + len(extra)
    if total > VGPU_MAX_FRAME:
        raise FrameError(errno.EINVAL, f"frame of {total} bytes exceeds VGPU_MAX_FRAME ({VGPU_MAX_FRAME})")


def encode_request(request: int, arg: bytes = b"", extra: bytes = b"") -> bytes:
    """The frame a client writes, exactly as given (tests and fuzzers build refused
    frames with it too; see check_request)."""
    return b"".join((_REQUEST_HEADER.pack(VGPU_MAGIC, request, len(arg), len(extra)),
                     bytes(arg), bytes(extra)))


def parse_request(buf: bytes, strict: bool = True) -> Request:
    """Split one write() into a Request (the daemon's side).

    FrameError: EINVAL when the frame is shorter than the header or its magic is
    wrong; with ``strict`` (the daemon) also E2BIG when it is longer than
    VGPU_MAX_FRAME, EINVAL when arg_size + extra_size disagree with the write length
    or ``_IOC_SIZE(request) != arg_size``. The tracer passes ``strict=False`` to show
    a refused or truncated frame as far as it goes.
    """
    n = len(buf)
    if strict and n > VGPU_MAX_FRAME:
        raise FrameError(errno.E2BIG, f"frame of {n} bytes exceeds VGPU_MAX_FRAME ({VGPU_MAX_FRAME})")
    if n < REQUEST_HEADER_SIZE:
        raise FrameError(errno.EINVAL, f"short frame: {n} bytes, header is {REQUEST_HEADER_SIZE}")
    magic, request, arg_size, extra_size = _REQUEST_HEADER.unpack_from(buf)
    if magic != VGPU_MAGIC:
        raise FrameError(errno.EINVAL, f"bad magic {magic:#010x}")
    if strict and REQUEST_HEADER_SIZE + arg_size + extra_size != n:
        raise FrameError(errno.EINVAL, f"header says {arg_size}+{extra_size} payload bytes, "
                                       f"write carries {n - REQUEST_HEADER_SIZE}")
    if strict and _IOC_SIZE(request) != arg_size:
        raise FrameError(errno.EINVAL, f"request {request:#010x} encodes size {_IOC_SIZE(request)}, "
                                       f"arg_size is {arg_size}")
    end = REQUEST_HEADER_SIZE + arg_size
    return Request(request, bytes(buf[REQUEST_HEADER_SIZE:end]), bytes(buf[end:end + extra_size]))


def encode_reply(result: int, arg: bytes, extra: bytes = b"") -> bytes:
    """The bytes one read() returns: reply header, updated struct, out-data."""
    return _REPLY_HEADER.pack(result, len(arg), len(extra), 0) + bytes(arg) + bytes(extra)


def parse_reply(buf: bytes, strict: bool = True) -> Reply:
    """Decode one reply frame (the client's side). FrameError(EPROTO) when it is
    shorter than its header or (``strict``) its sizes disagree with its length."""
    if len(buf) < REPLY_HEADER_SIZE:
        raise FrameError(errno.EPROTO, f"reply of {len(buf)} bytes has no header")
    result, arg_size, extra_size, _ = _REPLY_HEADER.unpack_from(buf)
    end = REPLY_HEADER_SIZE + arg_size
    if strict and end + extra_size != len(buf):
        raise FrameError(errno.EPROTO, f"reply sizes {arg_size}+{extra_size} disagree with "
                                       f"{len(buf)} bytes read")
    return Reply(result, bytes(buf[REPLY_HEADER_SIZE:end]), bytes(buf[end:end + extra_size]))


def payload_sizes(buf: bytes) -> tuple[int, int]:
    """(arg_size, extra_size) as the header of a request or reply frame states them
    (both headers keep them at the same offsets); for tools showing odd frames."""
    return _REQUEST_HEADER.unpack_from(buf)[2:4]


def reply_errno(result: int) -> int:
    """The errno a nonzero ``result`` stands for (Linux's negative form accepted)."""
    return -result if result < 0 else result
