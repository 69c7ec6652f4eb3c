"""vdev.ioctl.fast, the clock read answered in C: its function called through the
capsule the daemon gives pyfuse3 (ctypes, with the GIL held as pyfuse3 calls it), on
handles opened through VgpuFs over the real KMD, in this process (the caller's
pointers are this process's ctypes buffers). It answers INFO TIMESTAMP as the Python
path does and declines (0) everything that path must answer or record itself."""
import ctypes
import errno
import os

import pyfuse3
import pytest

from kmd.device import Device
from vdev.fs import VgpuFs
from vdev.options import NodePermissions
from vgpu import uapi

from .test_path import Ctx, kernel_call, open_node

_FAST = ctypes.PYFUNCTYPE(   # PYFUNCTYPE: called with the GIL held, as fuse_ioctl calls it
    ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint64, ctypes.c_char_p,
    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t))
_capi = ctypes.pythonapi
_capi.PyCapsule_GetPointer.restype = _capi.PyCapsule_GetContext.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_GetContext.argtypes = [ctypes.py_object]


@pytest.fixture
def dev():
    d = Device(vram_size=4 << 20, gtt_size=4 << 20, timeout=30.0)
    yield d
    d.shutdown()


@pytest.fixture
def fs(dev):
    return VgpuFs(dev)


def fast_call(fs, fh, request: int, arg, out_size: int = 0, pid: int = os.getpid()):
    """The capsule's function on ``arg`` (a ctypes struct) as pyfuse3's fuse_ioctl
    calls it: (returned, result, out_len)."""
    capsule = fs.fast.capsule()
    fn = _FAST(_capi.PyCapsule_GetPointer(capsule, b"pyfuse3.ioctl_fast_path"))
    result, out_len = ctypes.c_int(-1), ctypes.c_size_t(99)
    out = ctypes.create_string_buffer(max(out_size, 1))
    data = bytes(arg)
    returned = fn(_capi.PyCapsule_GetContext(capsule), fh, request, ctypes.addressof(arg), data, len(data),
                  ctypes.addressof(out), out_size, pid, ctypes.byref(result), ctypes.byref(out_len))
    return returned, result.value, out_len.value


def timestamp_request(buf, size: int = 8):
    return uapi.drm_amdgpu_info(return_pointer=ctypes.addressof(buf), return_size=size,
                                query=uapi.AMDGPU_INFO_TIMESTAMP)


async def test_timestamp_is_answered_with_the_device_clock(fs, dev):
    fh = await open_node(fs)
    buf = ctypes.c_uint64(0)
    before = dev.gpu_timestamp()
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf)) == (1, 0, 0)
    assert before <= buf.value <= dev.gpu_timestamp()
    assert fs.fast.answered == 1
    # return_size 4: the low half, the rest of the caller's buffer untouched (as INFO's out-data)
    small = ctypes.c_uint64(0xFFFFFFFF00000000)
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(small, 4))[0] == 1
    assert small.value >> 32 == 0xFFFFFFFF and small.value & 0xFFFFFFFF != 0
    # a larger buffer: 8 bytes written, its tail untouched (amdgpu copies min(size, 8))
    big = (ctypes.c_uint64 * 2)(0, 0xAAAA)
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(big, 16))[0] == 1
    assert big[0] >= buf.value and big[1] == 0xAAAA
    # card0, opened by root (authenticated): answered too
    card = await open_node(fs, "dev/dri/card0")
    assert fast_call(fs, card, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))[0] == 1


async def test_everything_else_goes_to_the_python_path(fs, dev):
    fh = await open_node(fs)
    buf = ctypes.c_uint64(7)
    declined = [
        (uapi.DRM_IOCTL_AMDGPU_INFO, uapi.drm_amdgpu_info(return_pointer=ctypes.addressof(buf), return_size=8,
                                                          query=uapi.AMDGPU_INFO_VRAM_USAGE)),
        (uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf, 0)),    # EINVAL's to give
        (uapi.DRM_IOCTL_AMDGPU_INFO, uapi.drm_amdgpu_info(return_pointer=0, return_size=8,
                                                          query=uapi.AMDGPU_INFO_TIMESTAMP)),   # EINVAL too
        (uapi.DRM_IOCTL_GET_CAP, uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ)),
    ]
    for request, arg in declined:
        assert fast_call(fs, fh, request, arg, uapi._IOC_SIZE(request))[0] == 0
    assert fast_call(fs, fh + 100, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))[0] == 0   # not a handle
    assert buf.value == 7 and fs.fast.answered == 0


async def test_a_bad_pointer_is_left_to_the_python_path_which_gives_efault(fs, dev):
    fh = await open_node(fs)
    bad = uapi.drm_amdgpu_info(return_pointer=8, return_size=8, query=uapi.AMDGPU_INFO_TIMESTAMP)
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, bad)[0] == 0
    with pytest.raises(pyfuse3.FUSEError) as e:
        kernel_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, bad)
    assert e.value.errno == errno.EFAULT
    buf = ctypes.c_uint64(0)   # and the next request is served
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))[0] == 1


async def test_observers_closed_and_unplugged_files_step_aside(fs, dev):
    fh = await open_node(fs)
    buf = ctypes.c_uint64(0)
    req = timestamp_request(buf)
    fs.drm_debug.write(b"0x1")   # drm.debug logs every ioctl: the Python path's to log
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, req)[0] == 0
    fs.drm_debug.write(b"0")
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, req)[0] == 1
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"1\n")   # tracing records
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, req)[0] == 0
    dev.tracing_files()["events"]["amdgpu"]["amdgpu_cs_ioctl"]["enable"][1](b"0\n")
    other = await open_node(fs)
    await fs.release(other)   # released: unknown again
    assert fast_call(fs, other, uapi.DRM_IOCTL_AMDGPU_INFO, req)[0] == 0
    dev.sysfs_files()["remove"][1](b"1")   # ENODEV from now on
    assert fast_call(fs, fh, uapi.DRM_IOCTL_AMDGPU_INFO, req)[0] == 0


async def test_an_unauthenticated_card0_file_is_left_to_the_python_path(dev):
    fs = VgpuFs(dev, NodePermissions(card_mode=0o666))

    class User(Ctx):
        uid = gid = 1000
    ino = pyfuse3.ROOT_INODE
    for part in ("dev", "dri", "card0"):
        ino = (await fs.lookup(ino, part.encode(), Ctx())).st_ino
    master = (await fs.open(ino, os.O_RDWR, User())).fh   # the first card0 open: master
    other = (await fs.open(ino, os.O_RDWR, type("Other", (Ctx,), {"uid": 1001, "gid": 1001})())).fh
    buf = ctypes.c_uint64(0)
    assert fast_call(fs, master, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))[0] == 1
    assert fast_call(fs, other, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))[0] == 0
    with pytest.raises(pyfuse3.FUSEError) as e:
        kernel_call(fs, other, uapi.DRM_IOCTL_AMDGPU_INFO, timestamp_request(buf))
    assert e.value.errno == errno.EACCES


def wait_cs(c, seq: int):
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ctx_id, w.in_.ip_type, w.in_.timeout = seq, c.ctx, uapi.AMDGPU_HW_IP_DMA, (1 << 64) - 1
    return w


def fast_wait(fs, fh, w):
    """The capsule's function on WAIT_CS ``w``: (returned, result, out_len, out bytes);
    the out buffer starts all 0xAA, so the bytes show what was written."""
    capsule = fs.fast.capsule()
    fn = _FAST(_capi.PyCapsule_GetPointer(capsule, b"pyfuse3.ioctl_fast_path"))
    result, out_len = ctypes.c_int(-1), ctypes.c_size_t(99)
    size = ctypes.sizeof(w)
    out = ctypes.create_string_buffer(b"\xaa" * size, size)
    data = bytes(w)
    returned = fn(_capi.PyCapsule_GetContext(capsule), fh, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, ctypes.addressof(w),
                  data, len(data), ctypes.addressof(out), size, os.getpid(), ctypes.byref(result),
                  ctypes.byref(out_len))
    return returned, result.value, out_len.value, out.raw


async def test_wait_cs_of_a_finished_job_is_answered_with_the_cleared_union(fs, dev):
    from vgpu.sdma import SdmaIb

    from .test_path import VA, Client, call
    c = await Client.open(fs, dev)
    seq = (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().nop()))).out.handle
    assert dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)].fence(seq).wait(10)
    python = await call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, wait_cs(c, seq))
    returned, result, n, out = fast_wait(fs, c.fh, wait_cs(c, seq))
    assert (returned, result, n) == (1, 0, ctypes.sizeof(python)) and out == bytes(python)
    assert fs.fast.waits == 1 and fs.fast.answered == 0
    # a job still running, an unknown context, a sequence number never emitted: the
    # Python path's (a pending wait, EINVAL, EINVAL)
    busy = (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().poll_regmem(VA + 60, 1)))).out.handle
    bad_ctx = wait_cs(c, seq)
    bad_ctx.in_.ctx_id = 77
    for w in (wait_cs(c, busy), bad_ctx, wait_cs(c, busy + 9)):
        assert fast_wait(fs, c.fh, w)[0] == 0
    c.bo.write(60, (1).to_bytes(4, "little"))
    assert (await call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, wait_cs(c, busy))).out.status == 0
    fs.drm_debug.write(b"0x1")   # drm.debug logs it: the Python path's
    assert fast_wait(fs, c.fh, wait_cs(c, busy))[0] == 0
    fs.drm_debug.write(b"0")
    assert fast_wait(fs, c.fh, wait_cs(c, busy))[0] == 1 and fs.fast.waits == 2
    await fs.release(c.fh)   # released: unknown
    assert fast_wait(fs, c.fh, wait_cs(c, busy))[0] == 0
