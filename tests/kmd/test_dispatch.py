"""The dispatch table itself: unknown requests, struct size rules, logging."""
import ctypes
import errno

import pytest

from kmd.errors import KmdError
from vgpu import uapi

from .conftest import call


def test_unknown_request_is_enotty_and_logged(dev, client):
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x3F, 8), bytes(8))
    assert e.value.errno == errno.ENOTTY
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, ord("x"), 0, 8), bytes(8))
    assert e.value.errno == errno.ENOTTY
    assert "refused" in dev.kmsg.text()


def test_ioc_size_must_match_arg(dev, client):
    req = uapi.DRM_IOCTL_GET_CAP
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, req, bytes(8))
    assert e.value.errno == errno.EINVAL


def test_shorter_and_longer_structs(dev, client):
    """Like drm_ioctl: a shorter struct is zero-extended, a longer one needs a zero tail."""
    cap = uapi.drm_get_cap()
    cap.capability = uapi.DRM_CAP_PRIME
    full = bytes(cap)
    longer = full + bytes(8)
    r = dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, len(longer)), longer)
    assert len(r.arg) == len(longer)
    assert uapi.drm_get_cap.from_buffer_copy(r.arg).value == 3
    with pytest.raises(KmdError) as e:
        dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, len(longer)), full + b"\1" + bytes(7))
    assert e.value.errno == errno.EINVAL
    short = full[:8]  # capability only; value reads as 0
    r = dev.ioctl(client, uapi._IOC(uapi._IOC_READ | uapi._IOC_WRITE, uapi.DRM_IOCTL_BASE, 0x0C, 8), short)
    assert len(r.arg) == 8


def test_closed_file_is_ebadf(dev):
    f = dev.open_file(pid=2, uid=0)
    dev.close_file(f)
    with pytest.raises(KmdError) as e:
        call(dev, f, "GET_CAP", uapi.drm_get_cap())
    assert e.value.errno == errno.EBADF


def test_struct_sizes_follow_request_numbers():
    for d in uapi.IOCTLS.values():
        assert uapi._IOC_SIZE(d.request) == ctypes.sizeof(d.struct), d.name
