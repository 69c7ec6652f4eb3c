"""vgpu trace: strace's ioctl lines matched with the daemon's records of the same
requests (the new engine), the legacy decoding of frame data in old logs (built from
real frames, vgpu.frame encoders), and drm.debug's kmsg lines (vdev/ioctl/drm_debug.py).

No FUSE here; tests/e2e/test_trace_e2e.py traces real clients.
"""
import ctypes
import shutil
import sys

import pytest

from vgpu.frame import encode_reply, encode_request
from vgpu import uapi
from vgpu_tools import cli
from vgpu_tools.trace import decode_lines, run
from vgpu_tools.trace_strace import parse_log, split_call, unescape

M = "/tmp/vgpu-x"
RENDER = f"{M}/dev/dri/renderD128"


def hx(data: bytes) -> str:
    """A string argument as `strace -xx` prints it."""
    return '"' + "".join(f"\\x{b:02x}" for b in data) + '"'


def octal(data: bytes) -> str:
    """A string argument in strace's default style (printable as is, octal escapes)."""
    out = []
    for b in data:
        c = chr(b)
        out.append("\\" + c if c in '"\\' else c if 32 <= b < 127 else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def yfd(fd: int, path: str = RENDER) -> str:
    """An fd as `strace -y -xx` prints it."""
    return f"{fd}<" + "".join(f"\\x{b:02x}" for b in path.encode()) + ">"


def req(request: int, struct, extra: bytes = b"") -> bytes:
    return encode_request(request, bytes(struct), extra)


def rep(struct, extra: bytes = b"") -> bytes:
    return encode_reply(0, bytes(struct), extra)


def pair(fd: str, request: bytes, reply: bytes, pid: str = "") -> list[str]:
    return [f"{pid}write({fd}, {hx(request)}, {len(request)}) = {len(request)}",
            f"{pid}read({fd}, {hx(reply)}, 131072) = {len(reply)}"]


def gem_create(size=4096, domains=uapi.AMDGPU_GEM_DOMAIN_GTT, handle=1):
    c = uapi.drm_amdgpu_gem_create()
    c.in_.bo_size, c.in_.alignment, c.in_.domains = size, 4096, domains
    out = uapi.drm_amdgpu_gem_create()
    out.out.handle = handle
    return req(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, c), rep(out)


GEM_CREATE_LINE = ("renderD128: AMDGPU_GEM_CREATE {bo_size=4096, alignment=4096, domains=GTT, "
                   "flags=0} = 0 {handle=1}")


def test_gem_create_with_y_paths():
    r, p = gem_create()
    assert decode_lines(pair(yfd(3), r, p)) == [GEM_CREATE_LINE]


def test_fds_tracked_from_openat_without_y():
    r, p = gem_create()
    log = [f'openat(AT_FDCWD, "{RENDER}", O_RDWR|O_CLOEXEC) = 3', *pair("3", r, p),
           "close(3) = 0",
           'openat(AT_FDCWD, "/etc/hosts", O_RDONLY) = 3',
           *pair("3", r, p)]                     # fd 3 is no longer the device
    assert decode_lines(log) == ["open renderD128 -> fd 3", GEM_CREATE_LINE, "close renderD128 fd 3"]


def test_open_failure_and_card0():
    log = [f'openat(AT_FDCWD, "{M}/dev/dri/card0", O_RDWR) = -1 EACCES (Permission denied)']
    assert decode_lines(log) == ["open card0 = -1 EACCES (Permission denied)"]


def test_default_escapes_and_timestamps():
    r, p = gem_create()
    log = [f'12:00:00.000001 open("{RENDER}", O_RDWR) = 5',
           f"12:00:00.000002 write(5, {octal(r)}, {len(r)}) = {len(r)} <0.000021>",
           f"12:00:00.000003 read(5, {octal(p)}, 65536) = {len(p)} <0.000100>"]
    assert decode_lines(log)[1] == GEM_CREATE_LINE


def test_unfinished_resumed_and_several_pids():
    r1, p1 = gem_create(handle=1)
    r2, p2 = gem_create(size=8192, domains=uapi.AMDGPU_GEM_DOMAIN_VRAM, handle=7)
    log = [f"100 write({yfd(3)}, {hx(r1)}, {len(r1)} <unfinished ...>",
           f"[pid   200] write({yfd(4)}, {hx(r2)}, {len(r2)}) = {len(r2)}",
           f"100 <... write resumed>) = {len(r1)}",
           f"100 read({yfd(3)},  <unfinished ...>",
           f"200 read({yfd(4)}, {hx(p2)}, 131072) = {len(p2)}",
           "200 +++ exited with 0 +++",
           f"100 <... read resumed>{hx(p1)}, 131072) = {len(p1)}"]
    assert decode_lines(log) == [
        f"[pid 100] {GEM_CREATE_LINE}",
        "[pid 200] renderD128: AMDGPU_GEM_CREATE {bo_size=8192, alignment=4096, domains=VRAM, "
        "flags=0} = 0 {handle=7}"]


def test_failed_write_and_failed_read():
    va = uapi.drm_amdgpu_gem_va(handle=1, operation=uapi.AMDGPU_VA_OP_MAP, va_address=0x10,
                                map_size=4096, flags=uapi.AMDGPU_VM_PAGE_READABLE
                                | uapi.AMDGPU_VM_PAGE_WRITEABLE)
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.timeout, w.in_.ip_type, w.in_.ctx_id = 5, 123456789, uapi.AMDGPU_HW_IP_DMA, 2
    rv, rw = req(uapi.DRM_IOCTL_AMDGPU_GEM_VA, va), req(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)
    log = [f"write({yfd(3)}, {hx(rv)}, {len(rv)}) = -1 EINVAL (Invalid argument)",
           f"write({yfd(3)}, {hx(rw)}, {len(rw)}) = {len(rw)}",
           f"read({yfd(3)}, 0x7f0000001000, 131072) = -1 EINTR (Interrupted system call)",
           f"read({yfd(3)}, 0x7f0000001000, 131072) = -1 ETIME (Timer expired)"]
    assert decode_lines(log) == [
        "renderD128: AMDGPU_GEM_VA {op=MAP, handle=1, va=0x10, offset=0x0, size=4096, "
        "flags=READ|WRITE} = -1 EINVAL (Invalid argument)",
        "renderD128: AMDGPU_WAIT_CS {seq=5, ctx=2, ip=DMA ring=0, timeout=123456789} "
        "= -1 ETIME (Timer expired) (in read)"]


def test_cs_chunks_and_wait_cs():
    ib = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x100004000, ib_bytes=28, ip_type=uapi.AMDGPU_HW_IP_DMA)
    fence = uapi.drm_amdgpu_cs_chunk_fence(handle=4, offset=64)
    dep = uapi.drm_amdgpu_cs_chunk_dep(ip_type=uapi.AMDGPU_HW_IP_COMPUTE, ring=1, ctx_id=1, handle=9)
    sems = (ctypes.c_uint32 * 2)(5, 6)
    tl = uapi.drm_amdgpu_cs_chunk_syncobj(handle=8, point=3)
    extra = b""
    for cid, data in ((uapi.AMDGPU_CHUNK_ID_IB, bytes(ib)), (uapi.AMDGPU_CHUNK_ID_FENCE, bytes(fence)),
                      (uapi.AMDGPU_CHUNK_ID_DEPENDENCIES, bytes(dep)),
                      (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, bytes(sems)),
                      (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, bytes(tl))):
        extra += bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=cid, length_dw=len(data) // 4)) + data
    cs = uapi.drm_amdgpu_cs()
    cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks = 1, 2, 5
    out = uapi.drm_amdgpu_cs()
    out.out.handle = 3
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.timeout, w.in_.ip_type, w.in_.ctx_id = 3, (1 << 64) - 1, uapi.AMDGPU_HW_IP_DMA, 1
    lines = decode_lines(pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_CS, cs, extra), rep(out))
                         + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w),
                                rep(uapi.drm_amdgpu_wait_cs())))
    assert lines == [
        "renderD128: AMDGPU_CS {ctx=1, bo_list=2, chunks=[IB{va=0x100004000, size=28 bytes, "
        "ip=DMA ring=0}, FENCE{handle=4, offset=64}, DEPENDENCIES[{ctx=1 ip=COMPUTE ring=1 seq=9}], "
        "SYNCOBJ_IN[5, 6], SYNCOBJ_TIMELINE_SIGNAL[8@3]]} = 0 {seq=3}",
        "renderD128: AMDGPU_WAIT_CS {seq=3, ctx=1, ip=DMA ring=0, timeout=inf} = 0 "
        "{status=0 (signaled)}"]


def test_ctx_bo_list_info_version():
    ctx = uapi.drm_amdgpu_ctx()
    ctx.in_.op, ctx.in_.priority = uapi.AMDGPU_CTX_OP_ALLOC_CTX, uapi.AMDGPU_CTX_PRIORITY_HIGH
    ctx_out = uapi.drm_amdgpu_ctx()
    ctx_out.out.alloc.ctx_id = 4
    bl = uapi.drm_amdgpu_bo_list()
    bl.in_.operation, bl.in_.bo_number = uapi.AMDGPU_BO_LIST_OP_CREATE, 2
    bl.in_.bo_info_size = 8
    entries = bytes(uapi.drm_amdgpu_bo_list_entry(1)) + bytes(uapi.drm_amdgpu_bo_list_entry(3, 2))
    bl_out = uapi.drm_amdgpu_bo_list()
    bl_out.out.list_handle = 1
    info = uapi.drm_amdgpu_info(return_size=4, query=uapi.AMDGPU_INFO_HW_IP_COUNT)
    info.query_hw_ip.type = uapi.AMDGPU_HW_IP_DMA
    v = uapi.drm_version(name_len=6, date_len=8, desc_len=3)
    v_out = uapi.drm_version(version_major=3, version_minor=49, name_len=6, date_len=8, desc_len=3)
    log = (pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_CTX, ctx), rep(ctx_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_BO_LIST, bl, entries), rep(bl_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_INFO, info), rep(info, (2).to_bytes(4, "little")))
           + pair(yfd(3), req(uapi.DRM_IOCTL_VERSION, v), rep(v_out, b"amdgpu20261129abc")))
    assert decode_lines(log) == [
        "renderD128: AMDGPU_CTX {op=ALLOC_CTX, priority=HIGH} = 0 {ctx_id=4}",
        "renderD128: AMDGPU_BO_LIST {op=CREATE, bo_number=2, handles=[1, 3@prio2]} = 0 {list_handle=1}",
        "renderD128: AMDGPU_INFO {query=HW_IP_COUNT, return_size=4, ip=DMA} = 0 {value=2}",
        'renderD128: VERSION {name_len=6, date_len=8, desc_len=3} = 0 {version=3.49.0, name="amdgpu", '
        'date="20261129", desc="abc"}']


def test_libdrm_start_up_requests():
    """GET_CLIENT, READ_MMR_REG, GEM_METADATA, the stable-pstate CTX ops and AMDGPU_VM,
    decoded with their names (docs/trace.md)."""
    card = f"{M}/dev/dri/card0"
    gc = uapi.drm_client(idx=0)
    gc_out = uapi.drm_client(idx=0, auth=1, pid=42, uid=65534)
    mmr = uapi.drm_amdgpu_info(return_size=8, query=uapi.AMDGPU_INFO_READ_MMR_REG)
    mmr.read_mmr_reg.dword_offset, mmr.read_mmr_reg.count, mmr.read_mmr_reg.instance = 0x263E, 2, 0xFFFFFFFF
    md = uapi.drm_amdgpu_gem_metadata(handle=3, op=uapi.AMDGPU_GEM_METADATA_OP_SET_METADATA)
    md.data.tiling_info, md.data.data_size_bytes, md.data.data[0] = 0x19, 4, 0x64636261
    md_get = uapi.drm_amdgpu_gem_metadata(handle=3, op=uapi.AMDGPU_GEM_METADATA_OP_GET_METADATA)
    pset = uapi.drm_amdgpu_ctx()
    pset.in_.op, pset.in_.ctx_id, pset.in_.flags = uapi.AMDGPU_CTX_OP_SET_STABLE_PSTATE, 1, 4
    pget = uapi.drm_amdgpu_ctx()
    pget.in_.op, pget.in_.ctx_id = uapi.AMDGPU_CTX_OP_GET_STABLE_PSTATE, 1
    pget_out = uapi.drm_amdgpu_ctx()
    pget_out.out.pstate.flags = 4
    vm = uapi.drm_amdgpu_vm()
    vm.in_.op = uapi.AMDGPU_VM_OP_RESERVE_VMID
    log = (pair(yfd(4, card), req(uapi.DRM_IOCTL_GET_CLIENT, gc), rep(gc_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_INFO, mmr),
                  rep(mmr, (0x22014042).to_bytes(4, "little") + bytes(4)))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_GEM_METADATA, md), rep(md))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_GEM_METADATA, md_get), rep(md))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_CTX, pset), rep(pset))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_CTX, pget), rep(pget_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_VM, vm), rep(vm)))
    assert decode_lines(log) == [
        "card0: GET_CLIENT {idx=0} = 0 {auth=1, pid=42, uid=65534}",
        "renderD128: AMDGPU_INFO {query=READ_MMR_REG, return_size=8, dword_offset=0x263e (GB_ADDR_CONFIG), "
        "count=2, instance=0xffffffff} = 0 {GB_ADDR_CONFIG=0x22014042, 0x263f=0x00000000}",
        "renderD128: AMDGPU_GEM_METADATA {handle=3, op=SET_METADATA, tiling_info=0x19, flags=0x0, "
        "data_size_bytes=4, data=61626364} = 0",
        "renderD128: AMDGPU_GEM_METADATA {handle=3, op=GET_METADATA} = 0 {tiling_info=0x19, flags=0x0, "
        "data_size_bytes=4, data=61626364}",
        "renderD128: AMDGPU_CTX {op=SET_STABLE_PSTATE, ctx_id=1, pstate=PEAK} = 0",
        "renderD128: AMDGPU_CTX {op=GET_STABLE_PSTATE, ctx_id=1} = 0 {pstate=PEAK}",
        "renderD128: AMDGPU_VM {op=RESERVE_VMID} = 0"]


def test_prime_and_userptr():
    """PRIME export/import name the prime file; GEM_USERPTR shows its range and flags."""
    export = uapi.drm_prime_handle(handle=2, flags=uapi.DRM_CLOEXEC | uapi.DRM_RDWR)
    export_out = uapi.drm_prime_handle(handle=2, flags=export.flags, fd=0x1234abc)
    imp = uapi.drm_prime_handle(fd=0x1234abc)
    imp_out = uapi.drm_prime_handle(fd=0x1234abc, handle=5)
    up = uapi.drm_amdgpu_gem_userptr(addr=0x7f0000001000, size=8192,
                                     flags=uapi.AMDGPU_GEM_USERPTR_ANONONLY | uapi.AMDGPU_GEM_USERPTR_REGISTER
                                     | uapi.AMDGPU_GEM_USERPTR_VALIDATE)
    up_out = uapi.drm_amdgpu_gem_userptr(addr=up.addr, size=up.size, flags=up.flags, handle=7)
    log = (pair(yfd(3), req(uapi.DRM_IOCTL_PRIME_HANDLE_TO_FD, export), rep(export_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_PRIME_FD_TO_HANDLE, imp), rep(imp_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_GEM_USERPTR, up), rep(up_out)))
    out = decode_lines(log)
    assert out[0].startswith("renderD128: PRIME_HANDLE_TO_FD {handle=2, flags=RDWR|CLOEXEC} = 0") or \
        out[0].startswith("renderD128: PRIME_HANDLE_TO_FD {handle=2, flags=CLOEXEC|RDWR} = 0"), out[0]
    assert "prime/1234abc" in out[0]
    assert out[1] == "renderD128: PRIME_FD_TO_HANDLE {fd=19090108 (prime/1234abc)} = 0 {handle=5}"
    assert out[2] == ("renderD128: AMDGPU_GEM_USERPTR {addr=0x7f0000001000, size=8192, "
                      "flags=ANONONLY|VALIDATE|REGISTER} = 0 {handle=7}")


def test_trace_register_names_are_the_kmds():
    from kmd import info as kinfo
    from vgpu_tools.trace_ioctls import MMR_REGISTERS
    assert MMR_REGISTERS == kinfo.READABLE_REGISTERS


def test_syncobj_wait_fences_and_generic_fallback():
    sw = uapi.drm_syncobj_wait(timeout_nsec=(1 << 63) - 1, count_handles=2,
                               flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL)
    handles = bytes((ctypes.c_uint32 * 2)(1, 2))
    wf = uapi.drm_amdgpu_wait_fences()
    wf.in_.fence_count, wf.in_.wait_all, wf.in_.timeout_ns = 1, 1, 1000
    fence = bytes(uapi.drm_amdgpu_fence(ctx_id=1, ip_type=uapi.AMDGPU_HW_IP_DMA, seq_no=7))
    wf_out = uapi.drm_amdgpu_wait_fences()
    wf_out.out.status = 1
    tr = uapi.drm_syncobj_transfer(src_handle=1, dst_handle=2, dst_point=5)
    log = (pair(yfd(3), req(uapi.DRM_IOCTL_SYNCOBJ_WAIT, sw, handles), rep(sw))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, wf, fence), rep(wf_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_SYNCOBJ_TRANSFER, tr), rep(tr)))
    assert decode_lines(log) == [
        "renderD128: SYNCOBJ_WAIT {handles=[1, 2], timeout=inf, flags=WAIT_ALL} = 0 {first_signaled=0}",
        "renderD128: AMDGPU_WAIT_FENCES {[{ctx=1 ip=DMA ring=0 seq=7}], wait_all=1, timeout=1000} "
        "= 0 {status=1 (signaled), first_signaled=0}",
        "renderD128: SYNCOBJ_TRANSFER {src_handle=1, dst_handle=2, src_point=0, dst_point=5, flags=0} = 0"]


def test_unknown_request_and_garbage_write():
    bogus = encode_request(uapi.DRM_IOWR(0x3F, uapi.drm_gem_close), bytes(8))
    log = [f"write({yfd(3)}, {hx(bogus)}, {len(bogus)}) = -1 ENOTTY (Inappropriate ioctl for device)",
           f'write({yfd(3)}, "hello", 5) = -1 EINVAL (Invalid argument)']
    out = decode_lines(log)
    assert out[0].startswith("renderD128: 0xc008643f {arg_size=8") and out[0].endswith("= -1 ENOTTY "
                                                                                       "(Inappropriate ioctl for device)")
    assert out[1] == "renderD128: <short frame: 5 bytes> = -1 EINVAL (Invalid argument)"


def test_bo_mmap_msync_munmap_and_fcntl_dup_without_y():
    bo = f"{M}/bo/3fa2c000"
    log = [f'openat(AT_FDCWD, "{bo}", O_RDWR|O_CLOEXEC) = 4',
           "fcntl(4, F_DUPFD_CLOEXEC, 0) = 5",
           "mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_SHARED, 4, 0) = 0x7f0000010000",
           "close(4) = 0",
           "mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 5, 0x1000) = 0x7f0000020000",
           "msync(0x7f0000011000, 4096, MS_SYNC) = 0",
           "munmap(0x7f0000010000, 8192) = 0",
           "msync(0x7f0000010000, 4096, MS_SYNC) = -1 ENOMEM (Cannot allocate memory)",
           "close(5) = 0"]
    assert decode_lines(log) == [
        "open bo/3fa2c000 -> fd 4",
        "mmap bo/3fa2c000 size=8192 -> 0x7f0000010000",
        "close bo/3fa2c000 fd 4",
        "mmap bo/3fa2c000 size=4096 offset=0x1000 MAP_PRIVATE -> 0x7f0000020000",
        "msync 0x7f0000011000 4096 (bo/3fa2c000)",
        "munmap 0x7f0000010000 8192 (bo/3fa2c000)",
        "close bo/3fa2c000 fd 5"]


def test_bo_symlink_target_shown_by_y_keeps_the_bo_name():
    # strace -y annotates the fd with where the bo/ symlink led (the shared-memory
    # file); the decoded lines keep naming the BO by its MOUNT/bo name.
    bo, shm = f"{M}/bo/3fa2c000", "/dev/shm/vgpu-0011223344556677/" + "ab" * 16
    log = [f'openat(AT_FDCWD, "{bo}", O_RDWR|O_CLOEXEC) = 4<{shm}>',
           f"fcntl(4<{shm}>, F_DUPFD_CLOEXEC, 0) = 5<{shm}>",
           f"mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 5<{shm}>, 0) = 0x7f0000010000",
           "munmap(0x7f0000010000, 4096) = 0",
           f"close(4<{shm}>) = 0"]
    assert decode_lines(log) == [
        "open bo/3fa2c000 -> fd 4",
        "mmap bo/3fa2c000 size=4096 -> 0x7f0000010000",
        "munmap 0x7f0000010000 4096 (bo/3fa2c000)",
        "close bo/3fa2c000 fd 4"]


def test_forked_child_inherits_fds_and_threads_share():
    r, p = gem_create()
    log = [f'100 openat(AT_FDCWD, "{RENDER}", O_RDWR) = 3',
           "100 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 101",
           "100 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_THREAD, exit_signal=0}, 88) = 102",
           *pair("3", r, p, "101 "),
           '102 openat(AT_FDCWD, "/etc/hosts", O_RDONLY) = 3',   # the thread reuses fd 3
           *pair("3", r, p, "100 ")]
    assert decode_lines(log) == ["[pid 100] open renderD128 -> fd 3", f"[pid 101] {GEM_CREATE_LINE}"]


def test_unread_reply_and_truncated_frame():
    r, p = gem_create()
    cut = hx(r[:30]) + "..."
    log = [f"write({yfd(3)}, {hx(r)}, {len(r)}) = {len(r)}",
           f"write({yfd(3)}, {cut}, {len(r)}) = {len(r)}",
           f"read({yfd(3)}, {hx(p)}, 131072) = {len(p)}"]
    out = decode_lines(log)
    assert out[0].endswith("= ? <reply not read>")
    assert "<truncated>" in out[1] and out[1].endswith("= 0 {handle=1}")


def test_gem_mmap_va_flags_and_ctx_free():
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = 2
    m_out = uapi.drm_amdgpu_gem_mmap()
    m_out.out.addr_ptr = 0x3FA2C000
    va = uapi.drm_amdgpu_gem_va(handle=2, operation=uapi.AMDGPU_VA_OP_UNMAP, va_address=0x100000000,
                                map_size=8192, flags=uapi.AMDGPU_VM_PAGE_EXECUTABLE
                                | uapi.AMDGPU_VM_MTYPE_UC)
    ctx = uapi.drm_amdgpu_ctx()
    ctx.in_.op, ctx.in_.ctx_id = uapi.AMDGPU_CTX_OP_FREE_CTX, 4
    log = (pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_GEM_MMAP, m), rep(m_out))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_GEM_VA, va), rep(va))
           + pair(yfd(3), req(uapi.DRM_IOCTL_AMDGPU_CTX, ctx), rep(ctx)))
    assert decode_lines(log) == [
        "renderD128: AMDGPU_GEM_MMAP {handle=2} = 0 {offset=0x3fa2c000 (bo/3fa2c000)}",
        "renderD128: AMDGPU_GEM_VA {op=UNMAP, handle=2, va=0x100000000, offset=0x0, size=8192, "
        "flags=EXEC|MTYPE_UC} = 0",
        "renderD128: AMDGPU_CTX {op=FREE_CTX, ctx_id=4} = 0"]


def test_strace_text_helpers():
    assert unescape(r"a\x41\101\n\"\\") == b"aAA\n\"\\"
    name, args, rest = split_call('write(3</a\\x3eb>, "x)\\"y", 4) = 4')
    assert (name, args, rest) == ("write", ["3</a\\x3eb>", '"x)\\"y"', "4"], " = 4")
    calls = list(parse_log(["7 fork() = 8", "7 exit_group(0) = ?", "garbage"]))
    assert [(c.name, c.args, c.ret) for c in calls] == [("fork", [], "8"), ("exit_group", ["0"], "?")]


def test_cli_decode(tmp_path, capsys):
    r, p = gem_create()
    log = tmp_path / "log"
    log.write_text("\n".join(pair(yfd(3), r, p)) + "\n")
    assert cli.main(["trace", "--decode", str(log)]) == 0
    assert capsys.readouterr().out == GEM_CREATE_LINE + "\n"
    assert cli.main(["trace", "--decode", str(tmp_path / "missing")]) == 1
    assert cli.main(["trace"]) == 2


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_run_returns_the_command_status(tmp_path):
    import io
    out = io.StringIO()
    log = tmp_path / "raw.strace"
    assert run([sys.executable, "-c", "import sys; sys.exit(3)"], str(log), out) == 3
    assert out.getvalue() == "" and log.exists()
    assert run(["sh", "-c", "kill -TERM $$"], None, io.StringIO()) == 128 + 15


def test_version_strings_follow_the_requested_lengths():
    # libdrm asks with buffers larger than the strings (drmGetVersion asks twice: the
    # second time with the lengths of the first); the out-data is laid out by the
    # REQUESTED lengths, zero-padded, and the reply's lengths are the true ones.
    v = uapi.drm_version(name_len=8, date_len=10, desc_len=4)
    v_out = uapi.drm_version(version_major=3, version_minor=49, name_len=6, date_len=8, desc_len=3)
    extra = b"amdgpu\0\0" + b"20261129\0\0" + b"abc\0"
    log = pair(yfd(3), req(uapi.DRM_IOCTL_VERSION, v), rep(v_out, extra))
    assert decode_lines(log) == [
        'renderD128: VERSION {name_len=8, date_len=10, desc_len=4} = 0 {version=3.49.0, name="amdgpu", '
        'date="20261129", desc="abc"}']


# ---------------------------------------------------------------------------
# The engine: strace's ioctl lines + the daemon's records of the same requests
# ---------------------------------------------------------------------------
import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import types  # noqa: E402

from vgpu_tools.trace import (clock_text, find_mounts, strace_argv, strace_request,  # noqa: E402
                              trace_lines)

T0 = 1_700_000_000.0


def record(tid, request, struct, extra=b"", reply=None, reply_extra=b"", error=0, at=0.0, took=0.0001,
           node="renderD128", tag=None):
    """What the daemon records for one request (kmd/trace.py Tracer.ioctl), at T0 + at."""
    rec = {"type": "ioctl", "ts": T0 + at, "end": T0 + at + took, "tid": tid, "pid": tid, "tgid": tid,
           "comm": "python3", "client": 1, "node": node, "name": uapi.ioctl_name(request), "request": request,
           "arg": bytes(struct).hex(), "extra": extra.hex(), "extra_size": len(extra), "error": error}
    if tag is not None:
        rec["tag"], rec["tid"] = tag, 0
        del rec["tgid"]
    if reply is not None:
        rec["reply_arg"], rec["reply_extra"] = bytes(reply).hex(), reply_extra.hex()
    return rec


def line(tid, at, call, took=0.0002):
    """A line of `strace -f -ttt -T -o LOG`: the call started at T0 + at and took `took`."""
    return f"{tid} {T0 + at:.6f} {call} <{took:.6f}>"


def shown(tid, at, call, took=0.0002):
    """How the trace prints that strace line: time of day, as -tt would."""
    return f"{tid} {clock_text(T0 + at)} {call} <{took:.6f}>"


def cs_request():
    ib = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x100020000, ib_bytes=28, ip_type=uapi.AMDGPU_HW_IP_DMA)
    sems = (ctypes.c_uint32 * 2)(5, 6)
    extra = b""
    for cid, data in ((uapi.AMDGPU_CHUNK_ID_IB, bytes(ib)), (uapi.AMDGPU_CHUNK_ID_SYNCOBJ_IN, bytes(sems))):
        extra += bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=cid, length_dw=len(data) // 4)) + data
    cs = uapi.drm_amdgpu_cs()
    cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks = 1, 2, 2
    cs.in_.chunks = 0x7FFD00001000
    out = uapi.drm_amdgpu_cs()
    out.out.handle = 3
    return cs, extra, out


CS_TEXT = ("renderD128: AMDGPU_CS {ctx=1, bo_list=2, chunks=[IB{va=0x100020000, size=28 bytes, ip=DMA ring=0}, "
           "SYNCOBJ_IN[5, 6]]} = 0 {seq=3}")


def test_an_ioctl_line_gets_the_daemons_decoding_of_its_chunks():
    cs, extra, out = cs_request()
    openat = f'openat(AT_FDCWD, "{RENDER}", O_RDWR|O_CLOEXEC) = 3'
    ioctl = "ioctl(3, DRM_IOCTL_AMDGPU_CS, 0x7ffd00000f00) = 0"
    log = [line(100, 0.0, openat), line(100, 0.001, ioctl),
           line(100, 0.002, "ioctl(1, TCGETS, 0x7ffd00000e00) = -1 ENOTTY (Inappropriate ioctl for device)"),
           "100 1700000000.003000 +++ exited with 0 +++"]
    out_lines = trace_lines(log, [record(100, uapi.DRM_IOCTL_AMDGPU_CS, cs, extra, out, at=0.00105)])
    assert out_lines == [shown(100, 0.0, openat), shown(100, 0.001, ioctl), "    " + CS_TEXT]


def test_threads_are_told_apart_by_tid_and_ambiguous_names_are_resolved_without_y():
    """No openat (an fd from before the trace, `-p`): the daemon says which node; the
    request strace names "A or B" is the one the record holds; a blocked WAIT_CS split
    into <unfinished ...> / <... resumed> keeps its start time."""
    info = uapi.drm_amdgpu_info(return_size=4, query=uapi.AMDGPU_INFO_ACCEL_WORKING)
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.timeout, w.in_.ip_type, w.in_.ctx_id = 3, (1 << 64) - 1, uapi.AMDGPU_HW_IP_DMA, 1
    log = [f"100 {T0 + 0.001:.6f} ioctl(5, DRM_IOCTL_AMDGPU_WAIT_CS, 0x7f01 <unfinished ...>",
           line(101, 0.002, "ioctl(5, DRM_IOCTL_AMDGPU_INFO or DRM_IOCTL_SIS_FB_FREE, 0x7f02) = 0"),
           f"100 {T0 + 0.010:.6f} <... ioctl resumed>) = 0 <0.009500>"]
    records = [record(101, uapi.DRM_IOCTL_AMDGPU_INFO, info, reply=info, reply_extra=(1).to_bytes(4, "little"),
                      at=0.0021, node="card0"),
               record(100, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w, reply=uapi.drm_amdgpu_wait_cs(), at=0.0012, took=0.008)]
    assert trace_lines(log, records) == [   # in the order the calls ended, as strace's results
        shown(101, 0.002, "ioctl(5, DRM_IOCTL_AMDGPU_INFO or DRM_IOCTL_SIS_FB_FREE, 0x7f02) = 0"),
        "    card0: AMDGPU_INFO {query=ACCEL_WORKING, return_size=4} = 0 {value=1}",
        f"100 {clock_text(T0 + 0.001)} ioctl(5, DRM_IOCTL_AMDGPU_WAIT_CS, 0x7f01) = 0 <0.009500>",
        "    renderD128: AMDGPU_WAIT_CS {seq=3, ctx=1, ip=DMA ring=0, timeout=inf} = 0 {status=0 (signaled)}"]


def test_a_failure_an_interrupted_wait_a_request_without_record_and_other_devices():
    va = uapi.drm_amdgpu_gem_va(handle=1, operation=uapi.AMDGPU_VA_OP_MAP, va_address=0x10, map_size=4096,
                                flags=uapi.AMDGPU_VM_PAGE_READABLE)
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.timeout, w.in_.ip_type, w.in_.ctx_id = 3, (1 << 64) - 1, uapi.AMDGPU_HW_IP_DMA, 1
    cs, extra, out = cs_request()
    real = "/dev/dri/card1"   # a real GPU's node: not ours, not shown
    einval = "ioctl(3, DRM_IOCTL_AMDGPU_GEM_VA, 0x7f01) = -1 EINVAL (Invalid argument)"
    eintr = "ioctl(3, DRM_IOCTL_AMDGPU_WAIT_CS, 0x7f02) = -1 EINTR (Interrupted system call)"
    again = "ioctl(3, DRM_IOCTL_AMDGPU_WAIT_CS, 0x7f02) = 0"
    efault = "ioctl(3, DRM_IOCTL_AMDGPU_CS, 0x7f03) = -1 EFAULT (Bad address)"
    log = [line(100, 0.001, f'openat(AT_FDCWD, "{real}", O_RDWR) = 7'),
           line(100, 0.002, "ioctl(7, DRM_IOCTL_VERSION, 0x7f00) = 0"),
           line(100, 0.010, einval), line(100, 0.020, eintr, 0.05), line(100, 0.080, again),
           line(100, 0.090, efault)]
    records = [record(100, uapi.DRM_IOCTL_AMDGPU_CS, cs, extra, out, at=-0.5),   # before the trace: stale
               record(100, uapi.DRM_IOCTL_AMDGPU_GEM_VA, va, error=errno.EINVAL, at=0.0101),
               record(100, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w, reply=uapi.drm_amdgpu_wait_cs(), at=0.0801)]
    assert trace_lines(log, records, mounts=[M]) == [   # /dev/dri/card1 is not under a vgpu mount
        shown(100, 0.010, einval),
        "    renderD128: AMDGPU_GEM_VA {op=MAP, handle=1, va=0x10, offset=0x0, size=4096, flags=READ} "
        "= -1 EINVAL (Invalid argument)",
        shown(100, 0.020, eintr, 0.05), "    AMDGPU_WAIT_CS <no vgpu record: interrupted before the daemon answered>",
        shown(100, 0.080, again),
        "    renderD128: AMDGPU_WAIT_CS {seq=3, ctx=1, ip=DMA ring=0, timeout=inf} = 0 {status=0 (signaled)}",
        shown(100, 0.090, efault),
        "    AMDGPU_CS <no vgpu record: refused before the ioctl table, reading what the struct points to>"]


def test_requests_strace_has_no_name_for_and_logs_without_timestamps():
    """`_IOC(...)` (a request strace does not know) and a raw number (-X raw) match by
    their number; a log without -ttt/-T matches in order, a result that differs from
    the record's (an EINTR strace saw, the daemon never answered) taking none."""
    gc = uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ)
    gc_out = uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ, value=1)
    sq = uapi.drm_syncobj_timeline_array(count_handles=1)
    qnr = uapi._IOC_NR(uapi.DRM_IOCTL_SYNCOBJ_QUERY)
    ioc = f"_IOC(_IOC_READ|_IOC_WRITE, 0x64, {qnr:#x}, 0x18)"
    log = [f"200 ioctl(4, {ioc}, 0x7f05) = -1 EINTR (Interrupted system call)",
           f"200 ioctl(4, {ioc}, 0x7f05) = 0",
           f"200 ioctl(4, {uapi.DRM_IOCTL_GET_CAP:#x}, 0x7f06) = 0"]
    records = [record(200, uapi.DRM_IOCTL_SYNCOBJ_QUERY, sq, bytes((ctypes.c_uint32 * 1)(9)) + bytes(8),
                      reply=sq, reply_extra=(4).to_bytes(8, "little"), at=5),
               record(200, uapi.DRM_IOCTL_GET_CAP, gc, reply=gc_out, at=6)]
    out = trace_lines(log, records)
    assert out[1::2] == ["    SYNCOBJ_QUERY <no vgpu record: interrupted before the daemon answered>",
                         "    renderD128: SYNCOBJ_QUERY {handles=[9]} = 0 {points=[4]}",
                         "    renderD128: GET_CAP {capability=SYNCOBJ} = 0 {value=1}"]
    assert out[::2] == log   # no timestamps in the log: none shown


def test_strace_request_names_and_numbers():
    cs = uapi._IOC_NR(uapi.DRM_IOCTL_AMDGPU_CS)
    assert strace_request("DRM_IOCTL_AMDGPU_CS") == ({cs}, {"AMDGPU_CS"})
    nrs, names = strace_request("DRM_IOCTL_AMDGPU_CTX or DRM_IOCTL_ETNAVIV_GEM_NEW or DRM_IOCTL_MSM_GEM_NEW")
    assert nrs == {uapi._IOC_NR(uapi.DRM_IOCTL_AMDGPU_CTX)} and "AMDGPU_CTX" in names
    assert strace_request("DRM_IOCTL_GET_UNIQUE") == (set(), {"GET_UNIQUE"})   # not in vgpu's uapi
    assert strace_request("_IOC(_IOC_READ|_IOC_WRITE, 0x64, 0x44, 0x18)") == ({0x44}, set())
    assert strace_request("DRM_IOWR(0x44, 0x18) /* DRM_IOCTL_AMDGPU_CS */")[0] == {0x44}
    assert strace_request("0xc0186444") == ({0x44}, set())
    assert strace_request("TCGETS") is None and strace_request("_IOC(_IOC_READ, 0x54, 0x1, 0x4)") is None
    assert strace_request("0x5401") is None


def test_legacy_frames_match_their_record_by_tag():
    """A frame client (the write()/read() protocol of the first versions): the
    daemon knows the request's tag, the pwrite64 offset, not its thread."""
    r, p = gem_create()
    c = uapi.drm_amdgpu_gem_create()
    c.in_.bo_size, c.in_.alignment, c.in_.domains = 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT
    c_out = uapi.drm_amdgpu_gem_create()
    c_out.out.handle = 1
    pw = f'pwrite64(3, "VGPU"..., {len(r)}, 300) = {len(r)}'
    pr = f'pread64(3, "\\0\\0\\0\\0"..., 131072, 300) = {len(p)}'
    log = [line(300, 0.001, pw), line(300, 0.002, pr),
           line(300, 0.003, 'write(1, "hello\\n", 6) = 6')]      # the program's own output
    records = [record(300, uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, c, reply=c_out, at=0.0011, tag=300)]
    assert trace_lines(log, records) == [shown(300, 0.001, pw), "    " + GEM_CREATE_LINE + " (frame)"]


def test_decode_uses_the_records_kept_beside_the_log(tmp_path, capsys):
    cs, extra, out = cs_request()
    log = tmp_path / "app.strace"
    ioctl = "ioctl(3, DRM_IOCTL_AMDGPU_CS, 0x7ffd00000f00) = 0"
    log.write_text(line(100, 0.001, ioctl) + "\n")
    assert cli.main(["trace", "--decode", str(log)]) == 0   # no records: the strace side only
    assert capsys.readouterr().out == "fd 3: AMDGPU_CS = 0 <arguments not in the log>\n"
    rec = record(100, uapi.DRM_IOCTL_AMDGPU_CS, cs, extra, out, at=0.00105)
    (tmp_path / "app.strace.vgpu").write_text(json.dumps({"type": "header", "ts": T0}) + "\n"
                                              + json.dumps(rec) + "\n")
    assert cli.main(["trace", "--decode", str(log)]) == 0
    assert capsys.readouterr().out == f"{shown(100, 0.001, ioctl)}\n    {CS_TEXT}\n"


def test_an_old_log_with_ioctl_lines_and_frames():
    r, p = gem_create()
    log = [f'openat(AT_FDCWD, "{RENDER}", O_RDWR) = 3', *pair("3", r, p),
           "ioctl(3, DRM_IOCTL_AMDGPU_CS, 0x7ffd00000f00) = -1 EINVAL (Invalid argument)"]
    assert decode_lines(log) == ["open renderD128 -> fd 3", GEM_CREATE_LINE,
                                 "renderD128: AMDGPU_CS = -1 EINVAL (Invalid argument) <arguments not in the log>"]


def test_mounts_are_found_in_mountinfo():
    info = ("22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
            "55 27 0:50 / /tmp/vgpu rw,nosuid,nodev,relatime - fuse.vgpu vgpu rw,user_id=0,group_id=0\n"
            "56 27 0:51 / /tmp/my\\040gpu rw - fuse.vgpu vgpu rw,user_id=0\n"
            "57 27 0:52 / /mnt/sshfs rw - fuse.sshfs host: rw\n")
    assert find_mounts(info) == ["/tmp/vgpu", "/tmp/my gpu"]


def test_strace_command_lines():
    run_argv = strace_argv("LOG", ["python3", "x.py"])
    assert run_argv[:5] == ["strace", "-f", "-ttt", "-T", "-e"] and run_argv[-3:] == ["--", "python3", "x.py"]
    calls = run_argv[5].removeprefix("trace=").split(",")
    assert {"ioctl", "openat", "close", "mmap", "munmap", "pwrite64"} <= set(calls)
    assert "-y" not in run_argv and "-s" not in run_argv     # no memory dumps needed
    attach = strace_argv("LOG", pid=1234)
    assert attach[-2:] == ["-p", "1234"] and "--" not in attach


def test_cli_refusals(capsys):
    assert cli.main(["trace", "-p", "1", "--", "true"]) == 2
    assert cli.main(["trace", "-p", "999999999"]) == 1
    assert "no process 999999999" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# drm.debug (vdev/ioctl/drm_debug.py)
# ---------------------------------------------------------------------------
from vdev.ioctl.drm_debug import DRM_UT_CORE, DrmDebug, frame_caller  # noqa: E402
from vdev.kmd_interface import KmdError  # noqa: E402


def _my_comm() -> str:
    with open("/proc/self/comm") as f:
        return f.read().strip()


def debug_handle(render=True, uid=1000, index=0, pid=None):
    """A ControlHandle's shape as drm_debug reads it: the KMD device (its kmsg and
    partition) and the DRM file (node, opener, authentication)."""
    logged = []
    dev = types.SimpleNamespace(kmsg=types.SimpleNamespace(log=logged.append),
                                partition=types.SimpleNamespace(index=index))
    f = types.SimpleNamespace(render=render, authenticated=not render, uid=uid, pid=pid or os.getpid(),
                              comm="opener")
    return types.SimpleNamespace(dev=dev, file=f), logged


def test_drm_debug_value_reads_back_in_decimal_and_takes_hex_decimal_octal():
    path = types.SimpleNamespace(observe=None)
    d = DrmDebug(path)
    assert d.read() == "0\n"
    for text, value in ((b"0x1\n", 1), (b"1", 1), (b"0X1F", 31), (b"010", 8), (b"0", 0), (b"4294967296", 1 << 32)):
        d.write(text)
        assert d.read() == f"{value}\n"
    for bad, err in ((b"", errno.EINVAL), (b"abc", errno.EINVAL), (b"-1", errno.EINVAL), (b"0x", errno.EINVAL),
                     (b"1 2", errno.EINVAL), (str(1 << 64).encode(), errno.ERANGE)):
        with pytest.raises(KmdError) as e:
            d.write(bad)
        assert e.value.errno == err, bad
    assert d.read() == "4294967296\n"   # refused writes change nothing


def test_drm_debug_core_bit_switches_the_observer():
    path = types.SimpleNamespace(observe=None)
    d = DrmDebug(path)
    d.write(b"0x1")
    assert path.observe == d.observe
    d.write(b"0x6")    # DRM_UT_DRIVER | DRM_UT_KMS: nothing vgpu logs
    assert path.observe is None and d.read() == "6\n"
    d.write(str(DRM_UT_CORE | 0x100).encode())
    assert path.observe == d.observe
    d.write(b"0\n")
    assert path.observe is None


def test_drm_debug_lines_are_drm_ioctls():
    d = DrmDebug(types.SimpleNamespace(observe=None))
    comm, pid = _my_comm(), os.getpid()
    h, logged = debug_handle()
    d.observe(h, uapi.DRM_IOCTL_AMDGPU_CS, pid, 0)
    d.observe(h, uapi.DRM_IOCTL_AMDGPU_GEM_VA, pid, errno.EINVAL)
    assert logged == [f'[drm:drm_ioctl] comm="{comm}" pid={pid}, dev=0xe280, auth=0, AMDGPU_CS',
                      f'[drm:drm_ioctl] comm="{comm}" pid={pid}, dev=0xe280, auth=0, AMDGPU_GEM_VA',
                      f'[drm:drm_ioctl] comm="{comm}", pid={pid}, ret=-22']
    card, logged = debug_handle(render=False, uid=1000)           # the master: authenticated
    d.observe(card, uapi.DRM_IOCTL_VERSION, pid, 0)
    root_render, logged2 = debug_handle(render=True, uid=0, index=1)   # root: authenticated at open
    d.observe(root_render, uapi.DRM_IOCTL_GET_CAP, pid, 0)
    assert logged == [f'[drm:drm_ioctl] comm="{comm}" pid={pid}, dev=0xe200, auth=1, DRM_IOCTL_VERSION']
    assert logged2 == [f'[drm:drm_ioctl] comm="{comm}" pid={pid}, dev=0xe281, auth=1, DRM_IOCTL_GET_CAP']


def test_drm_debug_an_unknown_request_and_a_caller_gone():
    d = DrmDebug(types.SimpleNamespace(observe=None))
    h, logged = debug_handle()
    bogus = uapi.DRM_IOWR(0x99, uapi.drm_gem_close)
    d.observe(h, bogus, 999999999, errno.ENOTTY)    # no such process: the opener's comm
    assert logged == ['[drm:drm_ioctl] invalid ioctl: comm="opener", pid=999999999, dev=0xe280, auth=0, '
                      f'cmd={bogus:#04x}, nr=0x99',
                      '[drm:drm_ioctl] comm="opener", pid=999999999, ret=-25']


def test_a_frames_caller_is_its_tag_when_that_is_a_thread_of_the_opener():
    f = types.SimpleNamespace(pid=os.getpid())
    tids = []
    t = threading.Thread(target=lambda: tids.append(threading.get_native_id()) or ready.wait())
    ready = threading.Event()
    t.start()
    try:
        while not tids:
            pass
        assert frame_caller(f, tids[0]) == tids[0]
        assert frame_caller(f, threading.get_native_id()) == threading.get_native_id()
    finally:
        ready.set()
        t.join()
    assert frame_caller(f, 0) == os.getpid()              # a plain write(): the offset is no thread
    assert frame_caller(f, 1) == os.getpid()              # pid 1 is no thread of ours


def test_the_mounts_a_trace_reads_are_the_ones_it_uses(tmp_path):
    """Only the mounts the command names (or $VGPU_MOUNT, or /tmp/vgpu, or the only
    one): a recording costs its daemon a record per request, others are left alone."""
    from vgpu_tools.trace import guess_mounts
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    both = [a, b]
    assert guess_mounts(["python3", "x.py", "--device", b], env={}, all_mounts=both) == [b]
    assert guess_mounts(["prog", f"--device={a}/dev/dri/renderD128"], env={}, all_mounts=both) == [a]
    assert guess_mounts(["prog"], env={"VGPU_MOUNT": a}, all_mounts=both) == [a]
    assert guess_mounts(["prog"], env={}, all_mounts=both) == []
    assert guess_mounts(["prog"], env={}, all_mounts=[b]) == [b]
    me = guess_mounts(pid=os.getpid(), env={}, all_mounts=[str(tmp_path), a])   # -p: the files it has open
    assert me == []
    with open(tmp_path / "f", "w"):
        assert guess_mounts(pid=os.getpid(), env={}, all_mounts=[str(tmp_path), a]) == [str(tmp_path)]
