"""Control-file framing: one ioctl is a write() of a request, then a read() of the reply.

docs/design.md section 3. Request: ``vgpu_request_header`` {magic, request, arg_size,
extra_size}, then ``arg_size`` bytes of the ioctl struct, then ``extra_size`` bytes
of flattened pointer data, all in one write(). Reply: ``vgpu_reply_header``
{result, arg_size, extra_size, reserved}, then the updated struct and the out-data.

Pure Python, no FUSE: ``vdev.fs`` calls it, and the unit tests drive it directly.
Every number and struct comes from :mod:`vgpu.uapi`.
"""
from __future__ import annotations

import ctypes
import errno
import struct
from typing import NamedTuple

from vgpu.uapi import (VGPU_MAGIC, VGPU_MAX_FRAME, _IOC_SIZE, vgpu_reply_header,
                       vgpu_request_header)

REQUEST_HEADER_SIZE = ctypes.sizeof(vgpu_request_header)
REPLY_HEADER_SIZE = ctypes.sizeof(vgpu_reply_header)
# The same layouts as struct formats, checked against the ctypes ones at import.
_REQUEST_HEADER = struct.Struct("<IIII")
_REPLY_HEADER = struct.Struct("<iIII")
assert _REQUEST_HEADER.size == REQUEST_HEADER_SIZE and _REPLY_HEADER.size == REPLY_HEADER_SIZE


class FrameError(OSError):
    """A malformed frame; ``errno`` is what the failing write() reports."""

    def __init__(self, errno_: int, msg: str):
        super().__init__(errno_, msg)


class Request(NamedTuple):
    """One parsed request frame."""
    request: int
    arg: bytes
    extra: bytes


def parse_request(buf: bytes) -> Request:
    """Split one write() into (request, arg, extra).

    Raises FrameError: E2BIG when the frame is longer than VGPU_MAX_FRAME; EINVAL
    when it is shorter than the header, the magic is wrong, arg_size + extra_size
    disagree with the write length, or _IOC_SIZE(request) != arg_size.
    """
    n = len(buf)
    if n > VGPU_MAX_FRAME:
        raise FrameError(errno.E2BIG, f"frame of {n} bytes exceeds VGPU_MAX_FRAME ({VGPU_MAX_FRAME})")
    if n < REQUEST_HEADER_SIZE:
        raise FrameError(errno.EINVAL, f"short frame: {n} bytes, header is {REQUEST_HEADER_SIZE}")
    # struct, not the ctypes header class: this runs for every ioctl (docs/bench.md).
    magic, request, arg_size, extra_size = _REQUEST_HEADER.unpack_from(buf)
    if magic != VGPU_MAGIC:
        raise FrameError(errno.EINVAL, f"bad magic {magic:#010x}")
    if REQUEST_HEADER_SIZE + arg_size + extra_size != n:
        raise FrameError(errno.EINVAL,
                         f"header says {arg_size}+{extra_size} payload bytes, "
                         f"write carries {n - REQUEST_HEADER_SIZE}")
    if _IOC_SIZE(request) != arg_size:
        raise FrameError(errno.EINVAL,
                         f"request {request:#010x} encodes size {_IOC_SIZE(request)}, "
                         f"arg_size is {arg_size}")
    end = REQUEST_HEADER_SIZE + arg_size
    return Request(request, bytes(buf[REQUEST_HEADER_SIZE:end]), bytes(buf[end:]))


def encode_request(request: int, arg: bytes = b"", extra: bytes = b"") -> bytes:
    """The frame a client writes (the inverse of parse_request; for tests and tools)."""
    hdr = vgpu_request_header(VGPU_MAGIC, request, len(arg), len(extra))
    return bytes(hdr) + bytes(arg) + bytes(extra)


def encode_reply(result: int, arg: bytes, extra: bytes = b"") -> bytes:
    """The bytes one read() returns: reply header, updated struct, out-data."""
    return _REPLY_HEADER.pack(result, len(arg), len(extra), 0) + bytes(arg) + bytes(extra)


class Reply(NamedTuple):
    """One decoded reply frame."""
    result: int
    arg: bytes
    extra: bytes


def parse_reply(buf: bytes) -> Reply:
    """Decode a reply frame (for tests and tools); EINVAL if it is inconsistent."""
    if len(buf) < REPLY_HEADER_SIZE:
        raise FrameError(errno.EINVAL, f"short reply: {len(buf)} bytes")
    hdr = vgpu_reply_header.from_buffer_copy(buf[:REPLY_HEADER_SIZE])
    if REPLY_HEADER_SIZE + hdr.arg_size + hdr.extra_size != len(buf):
        raise FrameError(errno.EINVAL, "reply sizes disagree with its length")
    end = REPLY_HEADER_SIZE + hdr.arg_size
    return Reply(hdr.result, bytes(buf[REPLY_HEADER_SIZE:end]), bytes(buf[end:]))
