"""libvgpu without a mount: frame encoding, error mapping, the VA allocator, and
the library's calls against a scripted fake device on a SOCK_SEQPACKET socket
pair (one write() = one request frame, one read() = one reply, as on FUSE)."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import threading

import pytest

import libvgpu
from libvgpu import ioctl as lio
from libvgpu.va import VaManager
from vgpu import uapi

HDR = ctypes.sizeof(uapi.vgpu_request_header)


# -- frames (the codec itself is vgpu.frame, tests/test_frame.py) ------------------

def _reply(arg: bytes, extra: bytes = b"", result: int = 0) -> bytes:
    hdr = uapi.vgpu_reply_header(result=result, arg_size=len(arg), extra_size=len(extra))
    return bytes(hdr) + arg + extra


def _ioctl_with_reply(reply: bytes, extra: bytes = b""):
    """drm_ioctl(GEM_CLOSE) on one end of a SOCK_SEQPACKET pair whose other end has
    queued ``reply``; returns (its result, the request frame it wrote)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        theirs.send(reply)
        try:
            return lio.drm_ioctl(ours.fileno(), uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=7),
                                 extra), theirs.recv(1 << 20)
        finally:
            theirs.setblocking(False)


def test_drm_ioctl_frames_the_request_and_updates_the_struct():
    (struct, out_extra), sent = _ioctl_with_reply(_reply(bytes(uapi.drm_gem_close(handle=9)), b"BC"),
                                                  b"xyz")
    assert sent[:4] == b"VGPU" and sent[HDR:] == bytes(uapi.drm_gem_close(handle=7)) + b"xyz"
    assert (struct.handle, out_extra) == (9, b"BC")


def test_drm_ioctl_maps_frame_errors():
    with pytest.raises(libvgpu.VgpuInvalidArgument, match="GEM_CLOSE.*VGPU_MAX_FRAME") as e:
        _ioctl_with_reply(_reply(b""), b"\0" * uapi.VGPU_MAX_FRAME)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(libvgpu.VgpuProtocolError):
        _ioctl_with_reply(b"\0" * 5)
    with pytest.raises(libvgpu.VgpuProtocolError):
        _ioctl_with_reply(_reply(b"A" * 8)[:-1])
    with pytest.raises(libvgpu.VgpuNoSuchObject):
        _ioctl_with_reply(_reply(b"", result=-errno.ENOENT))


# -- errors -----------------------------------------------------------------------

@pytest.mark.parametrize("err, cls", [
    (errno.EINVAL, libvgpu.VgpuInvalidArgument), (errno.ENOENT, libvgpu.VgpuNoSuchObject),
    (errno.ENOMEM, libvgpu.VgpuOutOfMemory), (errno.ETIME, libvgpu.VgpuTimeout),
    (errno.ECANCELED, libvgpu.VgpuCanceled), (errno.ENOTTY, libvgpu.VgpuNotSupported),
    (errno.EACCES, libvgpu.VgpuPermissionDenied), (errno.EXDEV, libvgpu.VgpuError),
])
def test_error_mapping_keeps_errno(err, cls):
    e = libvgpu.from_oserror(OSError(err, os.strerror(err)), "AMDGPU_CS")
    assert type(e) is cls and isinstance(e, OSError)
    assert e.errno == err and "AMDGPU_CS" in str(e)
    assert libvgpu.from_oserror(e) is e


# -- VA allocator -----------------------------------------------------------------

def test_va_manager_first_fit_alignment_and_merge():
    m = VaManager(0x10000, 0x100000, 0x1000)
    a = m.alloc(0x1800)                      # rounded to 0x2000
    b = m.alloc(0x1000, alignment=0x10000)   # next 64 KiB boundary
    assert (a, b) == (0x10000, 0x20000)
    assert m.alloc(0x1000) == 0x12000        # first fit fills the gap before b
    m.free(a, 0x1800)
    assert m.alloc(0x2000) == a              # the freed hole is reused
    total = m.free_bytes()
    for addr, size in ((a, 0x2000), (0x12000, 0x1000), (b, 0x1000)):
        m.free(addr, size)
    assert m.free_bytes() == total + 0x4000 == 0x100000 - 0x10000
    assert m._holes == [(0x10000, 0xF0000)]  # fully merged


def test_va_manager_errors_and_fixed_address():
    m = VaManager(0x10000, 0x20000, 0x1000)
    assert m.alloc(0x1000, base_required=0x18000) == 0x18000
    with pytest.raises(libvgpu.VgpuOutOfMemory):
        m.alloc(0x1000, base_required=0x18000)
    with pytest.raises(libvgpu.VgpuOutOfMemory):
        m.alloc(0x10000)
    with pytest.raises(libvgpu.VgpuInvalidArgument):
        m.free(0x11000, 0x1000)              # never allocated
    with pytest.raises(libvgpu.VgpuInvalidArgument):
        m.alloc(0x1000, alignment=0x3000)


def test_va_managers_from_dev_info():
    info = uapi.drm_amdgpu_info_device(virtual_address_offset=0x200000,
                                       virtual_address_max=1 << 40, virtual_address_alignment=0x10000)
    general, low = VaManager.from_dev_info(info)
    assert (low.start, low.end, low.alignment) == (0x200000, 1 << 32, 0x10000)
    assert (general.start, general.end) == (1 << 32, 1 << 40)
    info.virtual_address_max = 1 << 30
    general, low = VaManager.from_dev_info(info)
    assert general is low


# -- against a fake device ----------------------------------------------------------

class FakeDevice:
    """A scripted KMD on the far end of a socket pair: ``handlers[name](arg, extra)``
    returns (arg, extra) or raises OSError(errno) (sent as a nonzero result)."""

    def __init__(self, tmp_path):
        self.mount = tmp_path
        (tmp_path / "dev" / "dri").mkdir(parents=True)
        (tmp_path / "bo").mkdir()
        self.client, self._server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log: list[str] = []
        self.handles: dict[int, tuple] = {}
        self.va: list[uapi.drm_amdgpu_gem_va] = []
        self.handlers = {
            "VERSION": self.version, "AMDGPU_INFO": self.info, "GET_CAP": self.get_cap,
            "AMDGPU_GEM_CREATE": self.gem_create, "GEM_CLOSE": self.gem_close,
            "AMDGPU_GEM_MMAP": self.gem_mmap, "AMDGPU_GEM_OP": self.gem_op,
            "AMDGPU_GEM_VA": self.gem_va, "AMDGPU_CTX": self.ctx,
        }
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            frame = self._server.recv(1 << 20)
            if not frame:
                return
            hdr = uapi.vgpu_request_header.from_buffer_copy(frame[:HDR])
            assert hdr.magic == uapi.VGPU_MAGIC and hdr.arg_size == uapi._IOC_SIZE(hdr.request)
            d = uapi.IOCTLS[uapi._IOC_NR(hdr.request)]
            self.log.append(d.name)
            arg = d.struct.from_bytes(frame[HDR:HDR + hdr.arg_size])
            try:
                extra = self.handlers[d.name](arg, frame[HDR + hdr.arg_size:]) or b""
                self._server.send(_reply(bytes(arg), extra))
            except OSError as e:
                self._server.send(_reply(b"", result=-e.errno))
            except Exception as e:  # a bug in the fake: fail the call, not hang it
                self.log.append(f"fake crashed: {e!r}")
                self._server.send(_reply(b"", result=-errno.EIO))

    def version(self, a, extra):
        a.version_major, a.version_minor = 3, 1
        out = b"".join(s[:n].ljust(n, b"\0") for s, n in
                       ((b"vgpu", a.name_len), (b"20240101", a.date_len), (b"virtual GPU", a.desc_len)))
        a.name_len, a.date_len, a.desc_len = 4, 8, 11
        return out

    def info(self, a, extra):
        if a.query == uapi.AMDGPU_INFO_DEV_INFO:
            ans = bytes(uapi.drm_amdgpu_info_device(
                family=uapi.AMDGPU_FAMILY_AI, virtual_address_offset=0x200000,
                virtual_address_max=1 << 40, virtual_address_alignment=0x1000))
        elif a.query == uapi.AMDGPU_INFO_HW_IP_INFO:
            if a.query_hw_ip.type != uapi.AMDGPU_HW_IP_DMA:
                raise OSError(errno.EINVAL, "ip")
            ans = bytes(uapi.drm_amdgpu_info_hw_ip(hw_ip_version_major=4, available_rings=3))
        else:
            raise OSError(errno.EINVAL, "query")
        return ans[:a.return_size].ljust(a.return_size, b"\0")

    def get_cap(self, a, extra):
        a.value = 1

    def gem_create(self, a, extra):
        handle = len(self.handles) + 1
        self.handles[handle] = (a.in_.bo_size, a.in_.alignment, a.in_.domains, a.in_.domain_flags)
        a.out.handle = handle

    def gem_close(self, a, extra):
        if self.handles.pop(a.handle, None) is None:
            raise OSError(errno.ENOENT, "handle")

    def gem_mmap(self, a, extra):
        size = self.handles[a.in_.handle][0]
        a.out.addr_ptr = 0x100000 * a.in_.handle
        (self.mount / "bo" / f"{a.out.addr_ptr:x}").write_bytes(b"\0" * size)

    def gem_op(self, a, extra):
        size, align, dom, flags = self.handles[a.handle]
        return bytes(uapi.drm_amdgpu_gem_create_in(bo_size=size, alignment=align, domains=dom,
                                                   domain_flags=flags))

    def gem_va(self, a, extra):
        self.va.append(a)

    def ctx(self, a, extra):
        if a.in_.op == uapi.AMDGPU_CTX_OP_ALLOC_CTX:
            a.out.alloc.ctx_id = 5
        elif a.in_.op == uapi.AMDGPU_CTX_OP_QUERY_STATE2:
            a.out.state.flags = uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY

    def open(self):
        return libvgpu.device_initialize_fd(os.dup(self.client.fileno()),
                                            self.mount / "dev" / "dri" / "renderD128")


@pytest.fixture
def fake(tmp_path):
    f = FakeDevice(tmp_path)
    yield f
    f.client.close()


def test_device_initialize_and_queries(fake):
    with fake.open() as dev:
        assert dev.version == libvgpu.DrmVersion(3, 1, 0, "vgpu", "20240101", "virtual GPU")
        assert dev.info.family == uapi.AMDGPU_FAMILY_AI
        assert libvgpu.get_cap(dev, uapi.DRM_CAP_PRIME) == 1
        ip = libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA)
        assert (ip.hw_ip_version_major, ip.available_rings) == (4, 3)
        with pytest.raises(libvgpu.VgpuInvalidArgument) as e:
            libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_GFX)
        assert e.value.errno == errno.EINVAL and "AMDGPU_INFO" in str(e.value)
    assert dev.fd == -1
    assert fake.log[:3] == ["VERSION", "VERSION", "AMDGPU_INFO"]


def test_ioctl_retries_eintr_and_eagain(fake, monkeypatch):
    dev = fake.open()
    real_write, real_read = os.write, os.read
    failures = {"write": [errno.EINTR, errno.EAGAIN], "read": [errno.EAGAIN, errno.EINTR]}

    def flaky(kind, real):
        def call(*args):
            if failures[kind]:
                raise OSError(failures[kind].pop(0), "flaky")
            return real(*args)
        return call

    monkeypatch.setattr(lio.os, "write", flaky("write", real_write))
    monkeypatch.setattr(lio.os, "read", flaky("read", real_read))
    assert libvgpu.get_cap(dev, uapi.DRM_CAP_SYNCOBJ) == 1
    assert failures == {"write": [], "read": []}
    monkeypatch.undo()
    dev.close()


def test_bo_alloc_map_refcount_and_free(fake):
    dev = fake.open()
    bo = libvgpu.bo_alloc(dev, 8192, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    assert bo.query_info() == libvgpu.BoInfo(8192, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT, 0)
    view = bo.cpu_map()
    assert bo.cpu_map() is view and bo._map_count == 2
    view[:4] = b"abcd"
    arr = bo.cpu_map_array("uint32")
    arr[1] = 0x64636261
    bo.cpu_unmap()
    bo.cpu_unmap()
    del arr
    bo.cpu_unmap()                              # last unmap: munmap
    assert bo._map is None
    data = (fake.mount / "bo" / f"{bo.mmap_offset:x}").read_bytes()
    assert data[:8] == b"abcdabcd" and len(data) == 8192
    with pytest.raises(libvgpu.VgpuInvalidArgument):
        bo.cpu_unmap()
    bo.free()
    bo.free()                                   # idempotent
    assert fake.handles == {} and fake.log.count("GEM_CLOSE") == 1
    dev.close()


def test_bo_alloc_undoes_gem_create_when_bookkeeping_fails(fake):
    dev = fake.open()

    class Broken(dict):
        def __setitem__(self, key, value):
            raise MemoryError("bookkeeping")

    dev._bos = Broken()
    with pytest.raises(MemoryError):
        libvgpu.bo_alloc(dev, 4096)
    assert fake.handles == {} and fake.log[-1] == "GEM_CLOSE"
    dev.close()


def test_va_and_ctx(fake):
    with fake.open() as dev, libvgpu.bo_alloc(dev, 4096) as bo, \
            libvgpu.va_range_alloc(dev, 4096) as va, libvgpu.cs_ctx_create(dev) as ctx:
        assert va.address >= 1 << 32
        libvgpu.bo_va_op(bo, 0, 100, va.address)
        (req,) = fake.va
        assert (req.handle, req.operation, req.va_address, req.map_size) == (
            bo.handle, uapi.AMDGPU_VA_OP_MAP, va.address, 4096)
        assert req.flags == (uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE
                             | uapi.AMDGPU_VM_PAGE_EXECUTABLE)
        with pytest.raises(libvgpu.VgpuInvalidArgument):
            libvgpu.bo_va_op(bo, 0, 4096, va.address, op=uapi.AMDGPU_VA_OP_CLEAR)
        low = libvgpu.va_range_alloc(dev, 4096, flags=libvgpu.VA_RANGE_32_BIT)
        assert 0x200000 <= low.address < 1 << 32
        low.free()
        assert ctx.id == 5 and ctx.query_state() == uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    assert fake.log[-2:] == ["AMDGPU_CTX", "GEM_CLOSE"]  # contexts free in reverse order
