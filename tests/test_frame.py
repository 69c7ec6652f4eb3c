"""The frame codec (vgpu.frame): requests as the daemon parses them, replies as
clients decode them, the lenient mode of the tracer. No FUSE."""
import ctypes
import errno

import pytest

from vgpu import uapi
from vgpu.frame import (REPLY_HEADER_SIZE, REQUEST_HEADER_SIZE, FrameError, check_request, encode_reply,
                        encode_request, parse_reply, parse_request, reply_errno)


def frame(request, arg=b"", extra=b"", magic=uapi.VGPU_MAGIC, arg_size=None, extra_size=None):
    hdr = uapi.vgpu_request_header(magic, request,
                                   len(arg) if arg_size is None else arg_size,
                                   len(extra) if extra_size is None else extra_size)
    return bytes(hdr) + arg + extra


VERSION = uapi.DRM_IOCTL_VERSION
VERSION_SIZE = ctypes.sizeof(uapi.drm_version)


def errno_of(buf):
    with pytest.raises(FrameError) as exc:
        parse_request(buf)
    return exc.value.errno


def test_header_sizes_come_from_uapi():
    assert REQUEST_HEADER_SIZE == ctypes.sizeof(uapi.vgpu_request_header) == 16
    assert REPLY_HEADER_SIZE == ctypes.sizeof(uapi.vgpu_reply_header) == 16


def test_parse_splits_arg_and_extra():
    arg = bytes(range(VERSION_SIZE))
    req, a, e = parse_request(frame(VERSION, arg, b"xyz"))
    assert (req, a, e) == (VERSION, arg, b"xyz")


def test_parse_accepts_memoryview():
    arg = bytes(VERSION_SIZE)
    assert parse_request(memoryview(frame(VERSION, arg))) == (VERSION, arg, b"")


def test_encode_request_round_trips():
    arg = b"\1" * VERSION_SIZE
    assert parse_request(encode_request(VERSION, arg, b"ab")) == (VERSION, arg, b"ab")


@pytest.mark.parametrize("n", [0, 1, REQUEST_HEADER_SIZE - 1])
def test_short_header_is_einval(n):
    assert errno_of(frame(VERSION, bytes(VERSION_SIZE))[:n]) == errno.EINVAL


def test_bad_magic_is_einval():
    assert errno_of(frame(VERSION, bytes(VERSION_SIZE), magic=0x12345678)) == errno.EINVAL


@pytest.mark.parametrize("arg_size,extra_size", [(VERSION_SIZE + 1, 0), (VERSION_SIZE, 1),
                                                 (VERSION_SIZE - 1, 0), (0, VERSION_SIZE + 4)])
def test_sizes_disagreeing_with_write_length_are_einval(arg_size, extra_size):
    buf = frame(VERSION, bytes(VERSION_SIZE), b"abcd", arg_size=arg_size, extra_size=extra_size)
    assert errno_of(buf) == errno.EINVAL


def test_ioc_size_must_match_arg_size():
    # The same payload length, split differently: arg_size disagrees with _IOC_SIZE.
    buf = frame(VERSION, bytes(VERSION_SIZE), b"abcd", arg_size=VERSION_SIZE + 4, extra_size=0)
    assert errno_of(buf) == errno.EINVAL
    assert errno_of(frame(VERSION, bytes(VERSION_SIZE - 8))) == errno.EINVAL


def test_frame_over_max_is_e2big():
    extra = bytes(uapi.VGPU_MAX_FRAME - REQUEST_HEADER_SIZE - VERSION_SIZE + 1)
    assert errno_of(frame(VERSION, bytes(VERSION_SIZE), extra)) == errno.E2BIG


def test_frame_of_exactly_max_is_accepted():
    extra = bytes(uapi.VGPU_MAX_FRAME - REQUEST_HEADER_SIZE - VERSION_SIZE)
    req, arg, got = parse_request(frame(VERSION, bytes(VERSION_SIZE), extra))
    assert len(got) == len(extra)


def test_unknown_request_is_not_a_framing_error():
    # ENOTTY is the KMD's answer; framing only checks sizes.
    req = uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x9F, 8)
    assert parse_request(frame(req, bytes(8))).request == req


def test_frame_error_is_an_oserror_with_errno():
    e = FrameError(errno.EINVAL, "bad")
    assert isinstance(e, OSError) and e.errno == errno.EINVAL and e.strerror == "bad"


def test_encode_reply_layout():
    buf = encode_reply(-5, b"ARGS", b"extra")
    hdr = uapi.vgpu_reply_header.from_buffer_copy(buf[:REPLY_HEADER_SIZE])
    assert (hdr.result, hdr.arg_size, hdr.extra_size, hdr.reserved) == (-5, 4, 5, 0)
    assert buf[REPLY_HEADER_SIZE:] == b"ARGSextra"
    assert parse_reply(buf) == (-5, b"ARGS", b"extra")


def test_check_request_refuses_what_the_device_would():
    check_request(VERSION, bytes(VERSION_SIZE), b"ok")
    for arg, extra in ((bytes(VERSION_SIZE - 1), b""), (bytes(VERSION_SIZE), bytes(uapi.VGPU_MAX_FRAME))):
        with pytest.raises(FrameError) as e:
            check_request(VERSION, arg, extra)
        assert e.value.errno == errno.EINVAL
        assert errno_of(encode_request(VERSION, arg, extra)) in (errno.EINVAL, errno.E2BIG)


@pytest.mark.parametrize("buf", [b"", bytes(REPLY_HEADER_SIZE - 1),
                                 encode_reply(0, b"ARGS", b"extra")[:-1]])
def test_a_reply_a_client_cannot_decode_is_eproto(buf):
    with pytest.raises(FrameError) as e:
        parse_reply(buf)
    assert e.value.errno == errno.EPROTO


def test_lenient_parsing_shows_truncated_frames_as_far_as_they_go():
    arg = bytes(range(VERSION_SIZE))
    cut = encode_request(VERSION, arg, b"xyz")[:-2]
    assert parse_request(cut, strict=False) == (VERSION, arg, b"x")
    assert parse_reply(encode_reply(0, b"ARGS", b"extra")[:-3], strict=False) == (0, b"ARGS", b"ex")
    assert errno_of(cut) == errno.EINVAL       # the daemon refuses it


def test_reply_errno_takes_both_signs():
    assert reply_errno(-errno.ETIME) == reply_errno(errno.ETIME) == errno.ETIME
