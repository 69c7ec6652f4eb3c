"""libvgpu without a mount: frame handling, error mapping, the VA allocator, and
the library's calls against the real KMD in process (tests/libvgpu/conftest.py:
a SOCK_SEQPACKET socket pair keeps one write() = one request frame and one read()
= one reply, as on FUSE). The tests look at the KMD's own state: the DRM file's
handles, contexts and VM, the BO's pages, kmsg, and the transport's request log."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

import pytest

import libvgpu
from kmd import info as kmd_info
from kmd.vm import VA_START
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



# -- against the real KMD (fixtures in conftest.py) ---------------------------------

RWX = uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE | uapi.AMDGPU_VM_PAGE_EXECUTABLE


def _kmsg_refusals(client, name: str) -> list[str]:
    """The kmsg lines of the KMD refusing request `name` for this client."""
    return [line for line in client.kmd.kmsg.lines() if f"{name} refused for client {client.file.id} " in line]


def test_device_initialize_and_queries(client):
    dev = client.dev
    with dev:
        assert dev.version == libvgpu.DrmVersion(*kmd_info.VERSION, kmd_info.DRIVER_NAME.decode(),
                                                 kmd_info.DRIVER_DATE.decode(), kmd_info.DRIVER_DESC.decode())
        assert bytes(dev.info) == bytes(kmd_info.dev_info(client.kmd))
        assert libvgpu.get_cap(dev, uapi.DRM_CAP_PRIME) == kmd_info.CAPS[uapi.DRM_CAP_PRIME]
        ip = libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA)
        assert (ip.hw_ip_version_major, ip.available_rings) == (4, 0b11)
        with pytest.raises(libvgpu.VgpuInvalidArgument) as e:
            libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA, ip_instance=1)
        assert e.value.errno == errno.EINVAL and "AMDGPU_INFO" in str(e.value)
        assert client.refused == [("AMDGPU_INFO", errno.EINVAL)]
        (line,) = _kmsg_refusals(client, "AMDGPU_INFO")
        assert "ip instance 1 does not exist" in line
    assert dev.fd == -1
    assert client.log[:3] == ["VERSION", "VERSION", "AMDGPU_INFO"]


def test_ioctl_retries_eintr_and_eagain(client, monkeypatch):
    dev = client.dev
    real_write, real_read = os.write, os.read
    failures = {"write": [errno.EINTR, errno.EAGAIN], "read": [errno.EAGAIN, errno.EINTR]}

    def flaky(kind, real):
        def call(fd, *args):
            # os is shared with the KMD's threads: fail only this client's syscalls.
            if fd == dev.fd and failures[kind]:
                raise OSError(failures[kind].pop(0), "flaky")
            return real(fd, *args)
        return call

    monkeypatch.setattr(lio.os, "write", flaky("write", real_write))
    monkeypatch.setattr(lio.os, "read", flaky("read", real_read))
    assert libvgpu.get_cap(dev, uapi.DRM_CAP_SYNCOBJ) == 1
    assert failures == {"write": [], "read": []}
    monkeypatch.undo()
    assert client.log[-1] == "GET_CAP" and client.log.count("GET_CAP") == 1  # sent once


def test_bo_alloc_map_refcount_and_free(client):
    dev = client.dev
    bo = libvgpu.bo_alloc(dev, 8192, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    kbo = client.file.bos[bo.handle]
    assert (kbo.size, kbo.domain) == (8192, uapi.AMDGPU_GEM_DOMAIN_GTT)
    assert bo.query_info() == libvgpu.BoInfo(8192, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT, 0)
    view = bo.cpu_map()
    assert bo.mmap_offset == kbo.mmap_offset
    assert os.readlink(dev.mount / "bo" / f"{bo.mmap_offset:x}") == kbo.path
    assert bo.cpu_map() is view and bo._map_count == 2
    view[:4] = b"abcd"
    arr = bo.cpu_map_array("uint32")
    arr[1] = 0x64636261
    assert kbo.read(0, 8) == b"abcdabcd"          # the BO's own pages: nothing to flush
    kbo.write(8, b"KMD!")                         # and the other way round
    assert bytes(view[8:12]) == b"KMD!"
    bo.cpu_unmap()
    bo.cpu_unmap()
    del arr
    bo.cpu_unmap()                                # last unmap: munmap
    assert bo._map is None
    with pytest.raises(libvgpu.VgpuInvalidArgument):
        bo.cpu_unmap()
    handle = bo.handle
    bo.free()
    bo.free()                                     # idempotent
    assert handle not in client.file.bos and kbo.freed
    assert client.kmd.bo_by_offset(kbo.mmap_offset) is None
    assert client.log.count("AMDGPU_GEM_MMAP") == 1 and client.log.count("GEM_CLOSE") == 1
    client.kmd.check_invariants()


def test_bo_alloc_undoes_gem_create_when_bookkeeping_fails(client):
    dev = client.dev

    class Broken(dict):
        def __setitem__(self, key, value):
            raise MemoryError("bookkeeping")

    dev._bos = Broken()
    with pytest.raises(MemoryError):
        libvgpu.bo_alloc(dev, 4096)
    assert client.log[-2:] == ["AMDGPU_GEM_CREATE", "GEM_CLOSE"]
    assert client.file.bos == {} and client.kmd.memory.bo_count == 0


def test_va_and_ctx(client):
    f = client.file
    with client.dev as dev, libvgpu.bo_alloc(dev, 4096) as bo, \
            libvgpu.va_range_alloc(dev, 4096) as va, libvgpu.cs_ctx_create(dev) as ctx:
        assert va.address >= 1 << 32
        libvgpu.bo_va_op(bo, 0, 100, va.address)  # size rounded up to the page
        (m,) = f.vm.mappings()
        assert (m.va, m.size, m.bo, m.offset, m.flags) == (va.address, 4096, f.bos[bo.handle], 0, RWX)
        with pytest.raises(libvgpu.VgpuInvalidArgument):
            libvgpu.bo_va_op(bo, 0, 4096, va.address, op=uapi.AMDGPU_VA_OP_CLEAR)
        libvgpu.bo_va_op(bo, 0, 4096, va.address, op=uapi.AMDGPU_VA_OP_UNMAP)
        assert f.vm.mappings() == []
        low = libvgpu.va_range_alloc(dev, 4096, flags=libvgpu.VA_RANGE_32_BIT)
        assert VA_START <= low.address < 1 << 32
        low.free()
        assert list(f.contexts) == [ctx.id]
        assert ctx.query_state() == 0 and ctx.query_reset_state() == (uapi.AMDGPU_CTX_NO_RESET, 0)
    assert client.log[-2:] == ["AMDGPU_CTX", "GEM_CLOSE"]  # contexts free in reverse order
    assert (f.contexts, f.bos) == ({}, {})


def test_device_deinitialize_is_the_last_close(client):
    """device_deinitialize only closes the fd: the KMD frees what the file still
    held (handles, contexts, VA mappings, syncobjs)."""
    dev, f = client.dev, client.file
    bo = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    va = libvgpu.va_range_alloc(dev, 4096)
    libvgpu.bo_va_op(bo, 0, 4096, va.address)
    libvgpu.cs_ctx_create(dev)
    libvgpu.syncobj_create(dev)
    bo.cpu_map()[:4] = b"live"
    assert (len(f.bos), len(f.contexts), len(f.syncobjs), len(f.vm.mappings())) == (1, 1, 1, 1)
    client.wait_closed()
    assert bo._map is None and f.closed
    assert (f.bos, f.contexts, f.syncobjs, f.vm.mappings()) == ({}, {}, {}, [])
    assert client.kmd.memory.bo_count == 0
    bo.free()                                     # the device is closed: nothing to send
    assert "GEM_CLOSE" not in client.log


def _gpu_bo(dev, size, domain):
    """A BO mapped read/write/execute at a fresh VA: (bo, va)."""
    bo = libvgpu.bo_alloc(dev, size, 4096, domain)
    va = libvgpu.va_range_alloc(dev, size)
    libvgpu.bo_va_op(bo, 0, size, va.address)
    return bo, va


def test_sdma_constant_fill_job(client):
    """A real job: CONSTANT_FILL of a VRAM BO through cs_submit, its fence, and the
    CPU mapping made before the submit showing the fill with no flush."""
    dev = client.dev
    ring = client.kmd.rings[(uapi.AMDGPU_HW_IP_DMA, 0)]
    dst, dst_va = _gpu_bo(dev, 65536, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    ib, ib_va = _gpu_bo(dev, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    view = dst.cpu_map()
    packets = libvgpu.SdmaIb().constant_fill(dst_va.address, 0xC0FFEE11, 65536)
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    with libvgpu.cs_ctx_create(dev) as ctx, libvgpu.bo_list_create(dev, [ib, dst]) as bo_list:
        assert client.file.bo_lists[bo_list.handle] == [client.file.bos[ib.handle], client.file.bos[dst.handle]]
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_va.address, len(packets))],
                                resources=bo_list)
        seq = libvgpu.cs_submit(ctx, req)
        assert seq == req.seq_no == ring.emitted_seq
        fence = libvgpu.fence_of(ctx, req)
        assert libvgpu.cs_query_fence_status(fence, libvgpu.AMDGPU_TIMEOUT_INFINITE)
        assert bytes(view) == struct.pack("<I", 0xC0FFEE11) * (65536 // 4)
        assert dst.wait_for_idle(0)
        assert libvgpu.cs_wait_fences([fence]) == (True, 0)
        assert ring.jobs_done == 1 and client.file.jobs == set()
    assert client.file.bo_lists == {}
    assert client.log.count("AMDGPU_CS") == 1 and client.refused == []


def test_syncobj_wait_on_a_gated_job(client):
    """SYNCOBJ_WAIT through a PendingReply: a job that polls a flag in memory keeps
    its out-syncobj unsignalled (the wait times out) until the CPU writes the flag
    through its mapping; then the wait returns and the job's fill is there."""
    dev = client.dev
    buf, buf_va = _gpu_bo(dev, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    ib, ib_va = _gpu_bo(dev, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    view = buf.cpu_map()
    flag_va, out_va = buf_va.address, buf_va.address + 256
    packets = libvgpu.SdmaIb().poll_regmem(flag_va, 1).constant_fill(out_va, 0x5A5A5A5A, 64)
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    with libvgpu.cs_ctx_create(dev) as ctx, libvgpu.syncobj_create(dev) as s:
        with pytest.raises(libvgpu.VgpuInvalidArgument):  # no fence yet, no WAIT_FOR_SUBMIT
            libvgpu.syncobj_wait(dev, [s], timeout_ns=0)
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_va.address, len(packets))],
                                syncobj_out=[s])
        libvgpu.cs_submit(ctx, req)
        ksync = client.file.syncobjs[s.handle]
        assert ksync.fence is not None and not ksync.fence.signaled
        with pytest.raises(libvgpu.VgpuTimeout):
            libvgpu.syncobj_wait(dev, [s], timeout_ns=50_000_000)
        assert bytes(view[256:320]) == bytes(64)
        view[:4] = struct.pack("<I", 1)           # the job sees the CPU store at once
        assert libvgpu.syncobj_wait(dev, [s]) == 0
        assert ksync.fence.signaled
        assert bytes(view[256:320]) == b"\x5a" * 64
    assert ("SYNCOBJ_WAIT", errno.ETIME) in client.refused
    assert client.file.syncobjs == {}


def test_kmd_refusals_raise_the_mapped_error(client):
    dev = client.dev
    with pytest.raises(libvgpu.VgpuNoSuchObject) as e:
        dev.ioctl(uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=999))
    assert e.value.errno == errno.ENOENT and "GEM_CLOSE" in str(e.value)
    assert client.refused == [("GEM_CLOSE", errno.ENOENT)]
    assert len(_kmsg_refusals(client, "GEM_CLOSE")) == 1
    # AMDGPU_SCHED is DRM_MASTER without DRM_RENDER_ALLOW: refused on renderD128.
    with libvgpu.cs_ctx_create(dev) as ctx, pytest.raises(libvgpu.VgpuPermissionDenied) as e:
        libvgpu.cs_ctx_override_priority(ctx, uapi.AMDGPU_CTX_PRIORITY_HIGH)
    assert e.value.errno == errno.EACCES and client.refused[-1] == ("AMDGPU_SCHED", errno.EACCES)


def test_bo_export_and_import_share_one_bo(kmd_mount):
    """bo_export gives a PRIME token, bo_import in another Device a Bo of the same
    size whose mapping shares the exporter's pages; a second import of a BO the
    Device has returns the same Bo, released by its last free."""
    a, b = kmd_mount.connect(), kmd_mount.connect()
    src = libvgpu.bo_alloc(a.dev, 8192, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    token = libvgpu.bo_export(src)
    assert 0 < token < 1 << 31 and src.export() == token
    assert libvgpu.bo_export(src, libvgpu.amdgpu_bo_handle_type_kms) == src.handle
    with pytest.raises(libvgpu.VgpuNotSupported):
        libvgpu.bo_export(src, libvgpu.amdgpu_bo_handle_type_gem_flink_name)
    dst = libvgpu.bo_import(b.dev, token)
    assert (dst.size, dst.domain) == (8192, uapi.AMDGPU_GEM_DOMAIN_GTT)
    assert b.file.bos[dst.handle] is a.file.bos[src.handle]
    src.cpu_map()[:5] = b"hello"
    assert bytes(dst.cpu_map()[:5]) == b"hello"
    again = libvgpu.bo_import(b.dev, token)
    assert again is dst and dst._refs == 2
    again.free()
    assert dst.handle in b.file.bos
    src.free()                             # the exporter's file still holds the export
    assert bytes(dst.cpu_map()[:5]) == b"hello"
    dst.cpu_unmap()
    dst.cpu_unmap()
    dst.free()
    assert dst.handle == 0 and dst._map is None
    with pytest.raises(libvgpu.VgpuNoSuchObject):
        libvgpu.bo_import(b.dev, 0x7654321)
    a.wait_closed()
    with pytest.raises(libvgpu.VgpuNoSuchObject):
        libvgpu.bo_import(b.dev, token)    # the exporter's file is gone, nothing holds it
    assert kmd_mount.kmd.memory.gtt_used == 0


def test_create_bo_from_user_mem(client):
    """GEM_USERPTR with libdrm's flags on this process's own page-aligned buffer: a GTT
    BO the GPU writes; cpu_map is EPERM, a shared (file-backed) buffer is refused."""
    import mmap
    dev = client.dev
    with mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as buf:
        bo = libvgpu.create_bo_from_user_mem(dev, buf)
        kbo = client.file.bos[bo.handle]
        assert (bo.size, kbo.size, kbo.domain) == (8192, 8192, uapi.AMDGPU_GEM_DOMAIN_GTT)
        assert kbo.userptr.addr == bo.user_address and bo.user_memory is buf
        with pytest.raises(libvgpu.VgpuPermissionDenied):
            bo.cpu_map()
        bo.free()
        with pytest.raises(libvgpu.VgpuInvalidArgument):
            libvgpu.create_bo_from_user_mem(dev, bo_address(buf) + 1, 4096)
    with mmap.mmap(-1, 4096) as shared:
        with pytest.raises(libvgpu.VgpuPermissionDenied):
            libvgpu.create_bo_from_user_mem(dev, shared)


def bo_address(buf) -> int:
    import ctypes
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))
