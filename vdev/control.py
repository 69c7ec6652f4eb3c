"""Control-file framing: re-exported from the protocol's one codec, :mod:`vgpu.frame`.

Kept while vdev.fs still imports it from here; new code imports vgpu.frame.
"""
from vgpu.frame import (REPLY_HEADER_SIZE, REQUEST_HEADER_SIZE, FrameError, Reply, Request,  # noqa: F401
                        encode_reply, encode_request, parse_reply, parse_request)
