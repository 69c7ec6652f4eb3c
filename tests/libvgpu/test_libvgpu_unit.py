"""libvgpu without a mount: the ioctl helper (real ioctl and the frame transport),
the pointers each call sets up, error mapping, the VA allocator, and the library's
calls against the real KMD in process (tests/libvgpu/conftest.py: the client's
ioctls are answered in process by following their pointers with vgpu.pointers, as
the daemon does; or, for ``frame_client``, frames on a SOCK_SEQPACKET socket pair).
The tests look at the KMD's own state: the DRM file's handles, contexts and VM, the
BO's pages, kmsg, and the transport's request log."""

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
from vgpu import pointers, uapi

HDR = ctypes.sizeof(uapi.vgpu_request_header)


# -- the ioctl transport -------------------------------------------------------------

class _FakeIoctl:
    """Stands in for fcntl.ioctl: fails with the queued errnos (or raises the queued
    exceptions) first, then sets ``handle`` of the struct to 9."""

    def __init__(self, *failures):
        self.failures = list(failures)
        self.calls = 0

    def __call__(self, fd, request, struct, mutate):
        self.calls += 1
        assert mutate is True and isinstance(struct, uapi.drm_gem_close)
        if self.failures:
            f = self.failures.pop(0)
            raise f if isinstance(f, BaseException) else OSError(f, os.strerror(f))
        struct.handle = 9
        return 0


def test_drm_ioctl_is_a_real_ioctl_on_the_struct():
    """On an fd that is no DRM node the kernel says ENOTTY: the ioctl was made."""
    r, w = os.pipe()
    try:
        with pytest.raises(libvgpu.VgpuNotSupported, match="VERSION") as e:
            lio.drm_ioctl(r, uapi.DRM_IOCTL_VERSION, uapi.drm_version(), transport="ioctl")
        assert e.value.errno == errno.ENOTTY
    finally:
        os.close(r)
        os.close(w)


def test_drm_ioctl_retries_eintr_and_eagain_and_updates_in_place(monkeypatch):
    fake = _FakeIoctl(errno.EINTR, errno.EAGAIN, errno.EINTR)
    monkeypatch.setattr(lio, "_sys_ioctl", fake)
    arg = uapi.drm_gem_close(handle=7)
    assert lio.drm_ioctl(3, uapi.DRM_IOCTL_GEM_CLOSE, arg, transport="ioctl") is arg
    assert (fake.calls, arg.handle) == (4, 9)


def test_drm_ioctl_errors_keep_errno_and_name_the_request(monkeypatch):
    fake = _FakeIoctl(errno.ENOENT)
    monkeypatch.setattr(lio, "_sys_ioctl", fake)
    with pytest.raises(libvgpu.VgpuNoSuchObject, match="GEM_CLOSE") as e:
        lio.drm_ioctl(3, uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=7), transport="ioctl")
    assert e.value.errno == errno.ENOENT and fake.calls == 1


def test_drm_ioctl_keyboard_interrupt_ends_the_wait(monkeypatch):
    """fcntl.ioctl raises what a SIGINT handler raised (PyErr_SetFromErrno runs the
    handlers on EINTR): it must reach the caller, not be retried."""
    fake = _FakeIoctl(KeyboardInterrupt())
    monkeypatch.setattr(lio, "_sys_ioctl", fake)
    with pytest.raises(KeyboardInterrupt):
        lio.drm_ioctl(3, uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(), transport="ioctl")
    assert fake.calls == 1


def test_drm_ioctl_refuses_a_struct_of_the_wrong_size(monkeypatch):
    fake = _FakeIoctl()
    monkeypatch.setattr(lio, "_sys_ioctl", fake)
    with pytest.raises(libvgpu.VgpuInvalidArgument, match="GEM_CLOSE"):
        lio.drm_ioctl(3, uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_version(), transport="ioctl")
    assert fake.calls == 0


def test_transport_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("VGPU_TRANSPORT", raising=False)
    assert lio.transport_from_env() == "ioctl"
    monkeypatch.setenv("VGPU_TRANSPORT", "frame")
    assert lio.transport_from_env() == "frame"
    monkeypatch.setenv("VGPU_TRANSPORT", "carrier-pigeon")
    with pytest.raises(libvgpu.VgpuInvalidArgument, match="VGPU_TRANSPORT"):
        lio.transport_from_env()


# -- the frame transport (the codec itself is vgpu.frame, tests/test_frame.py) ---------

def _reply(arg: bytes, extra: bytes = b"", result: int = 0) -> bytes:
    hdr = uapi.vgpu_reply_header(result=result, arg_size=len(arg), extra_size=len(extra))
    return bytes(hdr) + arg + extra


def _frame_ioctl_with_reply(reply: bytes, request: int, arg):
    """drm_ioctl(request, arg) over the frame transport on one end of a SOCK_SEQPACKET
    pair whose other end has queued ``reply``; returns the request frame it wrote."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        theirs.send(reply)
        try:
            assert lio.drm_ioctl(ours.fileno(), request, arg, transport="frame") is arg
            return theirs.recv(1 << 20)
        finally:
            theirs.setblocking(False)


def test_frame_transport_inlines_what_the_pointers_point_to(monkeypatch):
    """VGPU_TRANSPORT=frame: the frame carries the struct then the handle array its
    ``handles`` points to (vgpu.pointers.gather); the struct comes back updated."""
    monkeypatch.setenv("VGPU_TRANSPORT", "frame")
    handles = (ctypes.c_uint32 * 3)(5, 6, 7)
    arg = uapi.drm_syncobj_array(handles=ctypes.addressof(handles), count_handles=3)
    sent_arg = bytes(arg)
    answered = uapi.drm_syncobj_array(handles=ctypes.addressof(handles), count_handles=3, pad=0)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        theirs.send(_reply(bytes(answered)))
        lio.drm_ioctl(ours.fileno(), uapi.DRM_IOCTL_SYNCOBJ_RESET, arg)   # transport from the environment
        sent = theirs.recv(1 << 20)
    assert sent[:4] == b"VGPU" and sent[HDR:] == sent_arg + struct.pack("<3I", 5, 6, 7)


def test_frame_transport_writes_out_data_behind_the_output_pointers():
    """SYNCOBJ_QUERY: the reply's out-data lands in the ``points`` array; VERSION:
    each string in its buffer, as long as asked."""
    handles, points = (ctypes.c_uint32 * 2)(1, 2), (ctypes.c_uint64 * 2)()
    q = uapi.drm_syncobj_timeline_array(handles=ctypes.addressof(handles), points=ctypes.addressof(points),
                                        count_handles=2)
    sent = _frame_ioctl_with_reply(_reply(bytes(q), struct.pack("<2Q", 10, 20)), uapi.DRM_IOCTL_SYNCOBJ_QUERY, q)
    assert sent[HDR + ctypes.sizeof(q):] == struct.pack("<2I2Q", 1, 2, 0, 0)   # QUERY sends zero points
    assert list(points) == [10, 20]
    name, date, desc = (ctypes.create_string_buffer(8) for _ in range(3))
    v = uapi.drm_version(name_len=6, name=ctypes.addressof(name), date_len=2, date=ctypes.addressof(date),
                         desc_len=0, desc=ctypes.addressof(desc))
    answer = uapi.drm_version(version_major=3, name_len=6, date_len=8, desc_len=4)
    _frame_ioctl_with_reply(_reply(bytes(answer), b"amdgpu" + b"20"), uapi.DRM_IOCTL_VERSION, v)
    assert (name.value, date.value, desc.value, v.version_major, v.date_len) == (b"amdgpu", b"20", b"", 3, 8)


def test_frame_transport_maps_frame_errors():
    many = (ctypes.c_uint32 * (uapi.VGPU_MAX_FRAME // 4))()
    big = uapi.drm_syncobj_array(handles=ctypes.addressof(many), count_handles=len(many))
    with pytest.raises(libvgpu.VgpuInvalidArgument, match="SYNCOBJ_RESET.*VGPU_MAX_FRAME") as e:
        _frame_ioctl_with_reply(_reply(b""), uapi.DRM_IOCTL_SYNCOBJ_RESET, big)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(libvgpu.VgpuError, match="SYNCOBJ_RESET.*NULL") as e:   # a NULL pointer with a count
        _frame_ioctl_with_reply(_reply(b""), uapi.DRM_IOCTL_SYNCOBJ_RESET,
                                uapi.drm_syncobj_array(handles=0, count_handles=1))
    assert e.value.errno == errno.EFAULT
    with pytest.raises(libvgpu.VgpuProtocolError):
        _frame_ioctl_with_reply(b"\0" * 5, uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=7))
    with pytest.raises(libvgpu.VgpuProtocolError):
        _frame_ioctl_with_reply(_reply(b"A" * 8)[:-1], uapi.DRM_IOCTL_GEM_CLOSE, uapi.drm_gem_close(handle=7))
    with pytest.raises(libvgpu.VgpuNoSuchObject):
        _frame_ioctl_with_reply(_reply(b"", result=-errno.ENOENT), uapi.DRM_IOCTL_GEM_CLOSE,
                                uapi.drm_gem_close(handle=7))


# -- the pointers each call sets up ------------------------------------------------------

class _Obj:
    """A stand-in for a Bo / Syncobj / Context: what cs_chunks reads of them."""

    def __init__(self, handle=0, id=0):
        self.handle, self.id = handle, id


def _chunk(chunk_id: int, data: bytes, chunk_data: int = 0) -> bytes:
    """A flattened chunk: its header (whose pointer the KMD ignores), then its data."""
    return bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=chunk_id, length_dw=len(data) // 4, chunk_data=chunk_data)) + data


def test_cs_chunks_round_trip_through_pointers_gather():
    """cs_submit's chunk array (u64 pointers to headers, each header's chunk_data to
    its data; BO_HANDLES' bo_info_ptr to the entries) read back the way the daemon
    reads it gives exactly the flattened extra kmd/cs.py parses."""
    ctx = _Obj(id=4)
    bos = [_Obj(handle=h) for h in (11, 12, 13)]
    s1, s2, s3 = _Obj(handle=21), _Obj(handle=22), _Obj(handle=23)
    req = libvgpu.CsRequest(
        uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(0x100000000, 16), libvgpu.IbInfo(0x100001000, 8, flags=1)],
        ring=1, dependencies=[libvgpu.CsFence(ctx, uapi.AMDGPU_HW_IP_DMA, 0, 0, 77)],
        fence_info=(bos[0], 64), syncobj_in=[s1, s2], syncobj_out=[s3],
        timeline_wait=[(s1, 5, 2)], timeline_signal=[(s2, 9)], bo_handles=bos)
    chunks = libvgpu.cs_chunks(req)
    cs = uapi.drm_amdgpu_cs()
    cs.in_.ctx_id, cs.in_.num_chunks, cs.in_.chunks = 4, len(chunks), chunks.build()
    got = pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, bytes(cs), lambda p, n: ctypes.string_at(p, n))

    def ib(va, size, flags=0):
        return bytes(uapi.drm_amdgpu_cs_chunk_ib(flags=flags, va_start=va, ib_bytes=size * 4,
                                                 ip_type=uapi.AMDGPU_HW_IP_DMA, ring=1))
    entries = b"".join(bytes(uapi.drm_amdgpu_bo_list_entry(bo_handle=b.handle)) for b in bos)
    bo_list_in = bytes(uapi.drm_amdgpu_bo_list_in(bo_number=3, bo_info_size=8, bo_info_ptr=ctypes.addressof(
        chunks._keep[0])))
    flattened = [
        (uapi.AMDGPU_CHUNK_ID_IB, ib(0x100000000, 16)),
        (uapi.AMDGPU_CHUNK_ID_IB, ib(0x100001000, 8, 1)),
        (uapi.AMDGPU_CHUNK_ID_FENCE, bytes(uapi.drm_amdgpu_cs_chunk_fence(handle=11, offset=64))),
        (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, bytes(uapi.drm_amdgpu_cs_chunk_dep(
            ip_type=uapi.AMDGPU_HW_IP_DMA, ctx_id=4, handle=77))),
        (uapi.AMDGPU_CHUNK_ID_BO_HANDLES, bo_list_in + entries),
        (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, struct.pack("<2I", 21, 22)),
        (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_OUT, struct.pack("<I", 23)),
        (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT, bytes(uapi.drm_amdgpu_cs_chunk_syncobj(
            handle=21, flags=2, point=5))),
        (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, bytes(uapi.drm_amdgpu_cs_chunk_syncobj(
            handle=22, point=9))),
    ]
    expected = b"".join(_chunk(cid, data, h.chunk_data) for (cid, data), h in zip(flattened, chunks.headers))
    assert got == expected
    # In the real header the BO_HANDLES chunk is just the drm_amdgpu_bo_list_in (6 dwords).
    headers = {h.chunk_id: h.length_dw for h in chunks.headers}
    assert headers[uapi.AMDGPU_CHUNK_ID_BO_HANDLES] == ctypes.sizeof(uapi.drm_amdgpu_bo_list_in) // 4
    assert [ctypes.addressof(h) for h in chunks.headers] == list(chunks.pointers)


def test_a_plain_submission_reads_as_the_general_path_builds_it(monkeypatch):
    """cs_submit of IB chunks alone goes through the thread's scratch buffers; what the
    daemon reads behind its pointers (and the struct) is what cs_chunks would have
    built. While the scratch is busy (a signal handler's submission in the middle of
    the ioctl's retry) the general path serves, and the outer call's buffers are left
    as they were."""
    from libvgpu import cs as lcs
    seen = []

    class Dev:
        def ioctl(self, request, struct):
            seen.append((bytes(struct), pointers.gather(request, bytes(struct), ctypes.string_at)))
            struct.out.handle = 40 + len(seen)
    ctx = _Obj(id=6)
    ctx.dev = Dev()   # records what the daemon would read: the real vgpu.pointers.gather
    for ibs in ([libvgpu.IbInfo(0x100000000, 16)],
                [libvgpu.IbInfo(0x100000000 + 64 * k, k + 1, flags=k & 1) for k in range(lcs.PLAIN_IBS)]):
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, ibs, resources=_Obj(handle=9), ring=1)
        assert lcs._plain(req) and libvgpu.cs_submit(ctx, req, flags=0) == 40 + len(seen) == req.seq_no
        arg, extra = seen[-1]
        chunks = libvgpu.cs_chunks(req)
        cs = uapi.drm_amdgpu_cs.from_buffer_copy(arg)
        assert (cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks, cs.in_.flags) == (6, 9, len(ibs), 0)
        general = uapi.drm_amdgpu_cs()
        general.in_.num_chunks, general.in_.chunks = len(chunks), chunks.build()
        expected = pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, bytes(general), ctypes.string_at)
        # the same chunk ids, sizes and data; only where the data lives differs
        strip = lambda b: b"".join(b[i:i + 8] + b[i + 16:i + 16 + 4 * int.from_bytes(b[i + 4:i + 8], "little")]
                                   for i in _chunk_offsets(b))
        assert strip(extra) == strip(expected)
    too_many = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(0x1000, 1)] * (lcs.PLAIN_IBS + 1))
    fenced = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(0x1000, 1)], fence_info=(_Obj(handle=3), 0))
    assert not lcs._plain(too_many) and not lcs._plain(fenced)
    before = bytes(lcs._scratch.ibs[0])
    monkeypatch.setattr(lcs._scratch, "busy", True)
    req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(0x5550000, 2)])
    libvgpu.cs_submit(ctx, req)
    assert bytes(lcs._scratch.ibs[0]) == before                        # the scratch untouched
    assert seen[-1][1][24:32] == (0x5550000).to_bytes(8, "little")      # the general path's chunk


def _chunk_offsets(extra: bytes):
    """The offsets of each chunk header in a flattened CS extra."""
    pos = 0
    while pos < len(extra):
        yield pos
        pos += 16 + 4 * int.from_bytes(extra[pos + 4:pos + 8], "little")


def test_every_call_points_at_what_the_kmd_expects(client):
    """The extra the in-process daemon gathered from each request's pointers is the
    flattened layout of docs/design.md section 3 (BO_LIST entries, syncobj handle and
    point arrays, WAIT_FENCES' fences), and out-data comes back through them."""
    dev = client.dev
    a, b = libvgpu.bo_alloc(dev, 4096), libvgpu.bo_alloc(dev, 4096)
    with libvgpu.bo_list_create(dev, [a, b], priorities=[3, 4]) as bl:
        assert client.extras[-1] == ("AMDGPU_BO_LIST", struct.pack("<4I", a.handle, 3, b.handle, 4))
        libvgpu.bo_list_update(bl, [b])
        assert client.extras[-1] == ("AMDGPU_BO_LIST", struct.pack("<2I", b.handle, 0))
        assert client.file.bo_lists[bl.handle] == [client.file.bos[b.handle]]
    s1, s2 = libvgpu.syncobj_create(dev), libvgpu.syncobj_create(dev)
    libvgpu.syncobj_timeline_signal([s1, s2], [5, 7])
    assert client.extras[-1] == ("SYNCOBJ_TIMELINE_SIGNAL", struct.pack("<2I2Q", s1.handle, s2.handle, 5, 7))
    assert libvgpu.syncobj_query([s1, s2]) == [5, 7]
    assert client.extras[-1] == ("SYNCOBJ_QUERY", struct.pack("<2I2Q", s1.handle, s2.handle, 0, 0))
    assert libvgpu.syncobj_timeline_wait(dev, [s1, s2], [5, 6], timeout_ns=0) == 0
    assert client.extras[-1] == ("SYNCOBJ_TIMELINE_WAIT", struct.pack("<2I2Q", s1.handle, s2.handle, 5, 6))
    libvgpu.syncobj_reset([s2])
    assert client.extras[-1] == ("SYNCOBJ_RESET", struct.pack("<I", s2.handle))
    libvgpu.syncobj_signal([s2])
    assert libvgpu.syncobj_wait(dev, [s1, s2], timeout_ns=0) == 0
    assert client.extras[-1] == ("SYNCOBJ_WAIT", struct.pack("<2I", s1.handle, s2.handle))
    assert libvgpu.bo_query_info(a) == libvgpu.BoInfo(4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM, 0)
    assert libvgpu.query_info(dev, uapi.AMDGPU_INFO_DEV_INFO, 8) == bytes(kmd_info.dev_info(client.kmd))[:8]
    assert client.refused == []


def _fill_job(client, **request):
    """A CONSTANT_FILL of 4 KiB on DMA: (dst view, CsRequest ready to submit, ib, dst)."""
    dev = client.dev
    dst, dst_va = _gpu_bo(dev, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    ib, ib_va = _gpu_bo(dev, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    packets = libvgpu.SdmaIb().constant_fill(dst_va.address, 0x0BADF00D, 4096)
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(ib_va.address, len(packets))], **request)
    return dst.cpu_map(), req, ib, dst


def test_cs_submit_with_a_bo_handles_chunk(client):
    """Mesa's way: the job's BOs as a BO_HANDLES chunk (bo_info_ptr inside the chunk
    data) instead of a BO list handle; then WAIT_FENCES on two fences."""
    view, req, ib, dst = _fill_job(client)
    req.bo_handles = [ib, dst]
    with libvgpu.cs_ctx_create(client.dev) as ctx:
        libvgpu.cs_submit(ctx, req)
        req2 = libvgpu.CsRequest(req.ip_type, req.ibs, bo_handles=[ib, dst])
        libvgpu.cs_submit(ctx, req2)
        assert libvgpu.cs_wait_fences([libvgpu.fence_of(ctx, req), libvgpu.fence_of(ctx, req2)]) == (True, 0)
        name, extra = client.extras[-1]
        assert name == "AMDGPU_WAIT_FENCES" and len(extra) == 2 * ctypes.sizeof(uapi.drm_amdgpu_fence)
        assert uapi.drm_amdgpu_fence.from_bytes(extra[24:]).seq_no == req2.seq_no
    assert bytes(view) == struct.pack("<I", 0x0BADF00D) * 1024
    assert client.refused == []


def test_frame_transport_runs_the_library_unchanged(frame_client):
    """VGPU_TRANSPORT=frame through the whole library: VERSION and INFO out-data,
    BO lists, a job and its fence, syncobj queries."""
    client = frame_client
    dev = client.dev
    assert dev.transport == "frame" and dev.version.name == kmd_info.DRIVER_NAME.decode()
    assert bytes(dev.info) == bytes(kmd_info.dev_info(client.kmd))
    view, req, ib, dst = _fill_job(client)
    with libvgpu.cs_ctx_create(dev) as ctx, libvgpu.bo_list_create(dev, [ib, dst]) as bl:
        req.resources = bl
        libvgpu.cs_submit(ctx, req)
        assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
    assert bytes(view) == struct.pack("<I", 0x0BADF00D) * 1024
    with libvgpu.syncobj_create(dev) as s:
        libvgpu.syncobj_timeline_signal([s], [3])
        assert libvgpu.syncobj_query([s]) == [3]
    assert dst.query_info().alloc_size == 4096
    assert client.refused == []


def test_declare_tracer_only_under_yama(tmp_path, monkeypatch):
    """prctl(PR_SET_PTRACER, daemon pid) when ptrace_scope >= 1; nothing otherwise,
    and nothing said when the pid file is missing or the prctl fails."""
    from libvgpu import device as ldev
    calls = []

    class Libc:
        def prctl(self, *args):
            calls.append(tuple(a.value for a in args))
            return 0

    monkeypatch.setattr(ldev.ctypes, "CDLL", lambda *a, **k: Libc())
    scope = tmp_path / "ptrace_scope"
    monkeypatch.setattr(ldev, "YAMA_PTRACE_SCOPE", str(scope))
    mount = tmp_path / "mnt"
    assert not libvgpu.declare_tracer(mount) and calls == []          # no Yama
    scope.write_text("0\n")
    assert not libvgpu.declare_tracer(mount) and calls == []          # Yama, classic ptrace
    scope.write_text("1\n")
    assert not libvgpu.declare_tracer(mount) and calls == []          # no daemon_pid file
    (mount / "sys" / "module" / "vgpu").mkdir(parents=True)
    (mount / "sys" / "module" / "vgpu" / "daemon_pid").write_text("4242\n")
    assert libvgpu.declare_tracer(mount)
    assert calls == [(0x59616D61, 4242, 0, 0, 0)]
    (mount / "sys" / "module" / "vgpu" / "daemon_pid").write_text("garbage")
    assert not libvgpu.declare_tracer(mount)


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
    """Device.ioctl -> drm_ioctl: an interrupted or EAGAIN ioctl is made again, and
    the request reaches the KMD once."""
    dev = client.dev
    inner = lio._sys_ioctl
    failures = [errno.EINTR, errno.EAGAIN]

    def flaky(fd, request, struct, mutate):
        if fd == dev.fd and failures:
            raise OSError(failures.pop(0), "flaky")
        return inner(fd, request, struct, mutate)

    monkeypatch.setattr(lio, "_sys_ioctl", flaky)
    assert libvgpu.get_cap(dev, uapi.DRM_CAP_SYNCOBJ) == 1
    assert failures == []
    assert client.log[-1] == "GET_CAP" and client.log.count("GET_CAP") == 1  # sent once


def test_frame_ioctl_retries_eintr_and_eagain(frame_client, monkeypatch):
    dev = frame_client.dev
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
    assert frame_client.log[-1] == "GET_CAP" and frame_client.log.count("GET_CAP") == 1


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
