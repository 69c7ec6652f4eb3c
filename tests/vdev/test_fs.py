"""VgpuFs handlers called directly over the real KMD (kmd.device.Device, small VRAM
and GTT, no mount): generated files and their providers, writable debugfs entries,
devcoredump directories, the control-file protocol, BO symlinks, sync-file poll,
and the errno mapping of _guard. The behaviour through the kernel is in tests/e2e/."""
import ctypes
import errno
import os
import select
import stat
import struct
import threading
import time

import pyfuse3
import pytest
import trio

from kmd.errors import KmdError
from tests.kmd.conftest import call, gem_create, gem_va
from vgpu.frame import encode_request, parse_reply
from vdev.fs import VgpuFs
from vgpu import uapi
from vgpu.paths import PCI_PORT_PATH, PCI_PORT_SLOT, PCI_ROOT, PCI_SLOT
from vgpu.sdma import SdmaIb

MiB = 1 << 20


class Ctx:
    """The request context pyfuse3 passes: who is calling."""
    uid = gid = 0
    pid = os.getpid()
    umask = 0o22


class Owner(Ctx):
    uid = 1000


class Other(Ctx):
    uid = 1001


@pytest.fixture
def fs(dev):
    return VgpuFs(dev)


def ioctl(name: str) -> int:
    return next(d.request for d in uapi.IOCTLS.values() if d.name == name)


async def walk(fs, path, follow=True):
    """The inode of ``path``; relative symlinks on the way (sysfs) are followed as the
    kernel does, except the last one with ``follow=False``; absolute ones (BO files,
    outside the mount) are not."""
    parts, stack = path.split("/"), [pyfuse3.ROOT_INODE]
    while parts:
        part = parts.pop(0)
        if part == "..":
            stack.pop()
            continue
        attr = await fs.lookup(stack[-1], part.encode(), Ctx())
        if stat.S_ISLNK(attr.st_mode) and (parts or follow):
            target = (await fs.readlink(attr.st_ino, Ctx())).decode()
            if not target.startswith("/"):
                parts = target.split("/") + parts
                continue
        stack.append(attr.st_ino)
    return stack[-1]


async def cat(fs, path, ctx=Ctx()):
    fi = await fs.open(await walk(fs, path), os.O_RDONLY, ctx)
    assert fi.direct_io
    try:
        return await fs.read(fi.fh, 0, 1 << 20)
    finally:
        await fs.release(fi.fh)


async def listdir(fs, path):
    fh = await fs.opendir(await walk(fs, path), Ctx())
    names = [name for name, _ in fs._dir_listings[fh]]
    await fs.releasedir(fh)
    return names


async def fails(err, coro):
    with pytest.raises(pyfuse3.FUSEError) as e:
        await coro
    assert e.value.errno == err, f"expected {errno.errorcode[err]}, got {errno.errorcode.get(e.value.errno)}"


# -- generated files ---------------------------------------------------------------
async def test_generated_files_are_the_providers_text(fs, dev):
    assert await cat(fs, "sys/class/drm/card0/device/vendor") == dev.sysfs_files()["vendor"]().encode()
    assert await cat(fs, "sys/kernel/debug/dri/0/name") == dev.debugfs_files()["name"]().encode()
    assert sorted(await listdir(fs, "sys/kernel/debug/dri/0")) == sorted(dev.debugfs_files())
    assert b"vgpu: initialized" in await cat(fs, "dev/kmsg")
    dev.kmsg.log("hello from the test")
    assert (await cat(fs, "dev/kmsg")).endswith(b"hello from the test\n")


async def test_snapshot_is_taken_at_open(fs, dev):
    fi = await fs.open(await walk(fs, "dev/kmsg"), os.O_RDONLY, Ctx())
    dev.kmsg.log("later")
    first = await fs.read(fi.fh, 0, 1 << 20)
    assert b"later" not in first
    assert await fs.read(fi.fh, len(first), 100) == b""  # end of file, no new text
    await fs.release(fi.fh)
    assert b"later" in await cat(fs, "dev/kmsg")


async def test_gpu_recover_resets_at_each_read(fs, dev):
    """amdgpu_gpu_recover is read-only, as on Linux: each read (its open) resets."""
    inode = await walk(fs, "sys/kernel/debug/dri/0/amdgpu_gpu_recover")
    assert (await fs.getattr(inode, Ctx())).st_mode & 0o777 == 0o444
    resets = dev.reset_counter
    assert await cat(fs, "sys/kernel/debug/dri/0/amdgpu_gpu_recover") == b"0\n"
    assert dev.reset_counter == resets + 1 and "GPU reset succeeded" in dev.kmsg.text()
    await fails(errno.EACCES, fs.open(inode, os.O_WRONLY, Ctx()))
    ro = await walk(fs, "sys/kernel/debug/dri/0/name")
    assert (await fs.getattr(ro, Ctx())).st_mode & 0o777 == 0o444
    await fails(errno.EACCES, fs.open(ro, os.O_WRONLY, Ctx()))


async def test_ring_files_are_binary_as_amdgpus(fs, dev):
    data = await cat(fs, "sys/kernel/debug/dri/0/amdgpu_ring_sdma0")
    assert data == dev.debugfs_files()["amdgpu_ring_sdma0"]() and len(data) > 12


async def test_an_internal_error_in_a_provider_becomes_eio_with_a_kmsg_line(dev, monkeypatch):
    """A bug in one debugfs view fails that open() with EIO and says so in kmsg; the
    daemon and the other entries go on."""
    real = dev.debugfs_files

    def broken():
        raise RuntimeError("bug in a view")

    monkeypatch.setattr(dev, "debugfs_files", lambda: {**real(), "amdgpu_fence_info": broken})
    fs = VgpuFs(dev)
    await fails(errno.EIO, cat(fs, "sys/kernel/debug/dri/0/amdgpu_fence_info"))
    assert "vdev: internal error in open: RuntimeError('bug in a view')" in dev.kmsg.text()
    assert (await cat(fs, "sys/kernel/debug/dri/0/name")).startswith(b"amdgpu")


def bo_path(dev, f, handle: int) -> str:
    """The shared-memory file behind a GEM handle (what bo/<offset-hex> leads to)."""
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = handle
    return dev.bo_by_offset(call(dev, f, "AMDGPU_GEM_MMAP", m)[0].out.addr_ptr).path


# -- devcoredump ---------------------------------------------------------------------
VA_IB, VA_UNMAPPED = 0x100000000, 0x200000000


def faulting_job(dev, f, ib_path: str) -> None:
    """Submit an SDMA write to an unmapped VA and wait for it: one GPU fault, one dump.
    A fresh context each time: the fault makes the context guilty."""
    a = uapi.drm_amdgpu_ctx()
    a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    ctx_id = call(dev, f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id
    packets = SdmaIb().write_linear(VA_UNMAPPED, [0xDEAD]).tobytes()
    with open(ib_path, "r+b") as bo:  # the IB BO's shared-memory file, as a client writes it
        bo.write(packets)
    ib = uapi.drm_amdgpu_cs_chunk_ib()
    ib.va_start, ib.ib_bytes, ib.ip_type = VA_IB, len(packets), uapi.AMDGPU_HW_IP_DMA
    head = uapi.drm_amdgpu_cs_chunk()
    head.chunk_id, head.length_dw = uapi.AMDGPU_CHUNK_ID_IB, len(bytes(ib)) // 4
    cs = uapi.drm_amdgpu_cs()
    cs.in_.ctx_id, cs.in_.num_chunks = ctx_id, 1
    seq = call(dev, f, "AMDGPU_CS", cs, bytes(head) + bytes(ib))[0].out.handle
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ip_type, w.in_.ctx_id, w.in_.timeout = seq, uapi.AMDGPU_HW_IP_DMA, ctx_id, (1 << 64) - 1
    with pytest.raises(KmdError) as e:
        call(dev, f, "AMDGPU_WAIT_CS", w)
    assert e.value.errno == errno.EFAULT


async def test_devcoredump_directories_follow_the_provider(fs, dev):
    assert await listdir(fs, "sys/class/devcoredump") == []
    f = dev.open_file(pid=10, uid=0, comm="faulty")
    handle = gem_create(dev, f, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, handle, VA_IB, 4096))
    ib = bo_path(dev, f, handle)

    faulting_job(dev, f, ib)
    assert await listdir(fs, "sys/class/devcoredump") == ["devcd0"]
    assert await listdir(fs, "sys/class/devcoredump/devcd0") == ["data"]
    data = await cat(fs, "sys/class/devcoredump/devcd0/data")
    assert data == dev.devcoredumps()[0].encode() and b"faulty" in data
    inode = await walk(fs, "sys/class/devcoredump/devcd0")
    faulting_job(dev, f, ib)
    assert await listdir(fs, "sys/class/devcoredump") == ["devcd0", "devcd1"]
    assert await walk(fs, "sys/class/devcoredump/devcd0") == inode  # a name keeps its inode
    for _ in range(64):  # the KMD keeps the last few dumps: devcd0 goes at some point
        if 0 not in dev.devcoredumps():
            break
        faulting_job(dev, f, ib)
    await fails(errno.ENOENT, walk(fs, "sys/class/devcoredump/devcd0"))
    dev.close_file(f)


# -- control files -------------------------------------------------------------------
async def open_card(fs, node="renderD128"):
    return (await fs.open(await walk(fs, f"dev/dri/{node}"), os.O_RDWR, Ctx())).fh


async def test_control_file_protocol(fs, dev):
    """write() a request, read() the reply: EINVAL without a reply, EINVAL for a
    buffer too small (the reply stays), consumed by the read that returns it."""
    fh = await open_card(fs)
    await fails(errno.EINVAL, fs.read(fh, 0, 4096))
    frame = encode_request(ioctl("VERSION"), bytes(uapi.drm_version()))
    assert await fs.write(fh, 0, frame) == len(frame)
    await fails(errno.EINVAL, fs.read(fh, 0, 16))
    reply = parse_reply(await fs.read(fh, 0, 4096))
    version = uapi.drm_version.from_buffer_copy(reply.arg)
    assert reply.result == 0 and version.version_major == 3
    await fails(errno.EINVAL, fs.read(fh, 0, 4096))
    clients = await cat(fs, "sys/kernel/debug/dri/0/clients")
    assert f" {os.getpid()} ".encode() in clients
    await fs.release(fh)  # the last close frees the DRM file
    assert f" {os.getpid()} ".encode() not in await cat(fs, "sys/kernel/debug/dri/0/clients")


async def test_refused_requests_fail_the_write_with_their_errno(fs, dev):
    fh = await open_card(fs)
    frame = encode_request(ioctl("VERSION"), bytes(uapi.drm_version()))
    await fails(errno.EINVAL, fs.write(fh, 0, b"XXXX" + frame[4:]))          # framing: bad magic
    unknown = uapi.DRM_IOWR(0x7F, uapi.drm_version)
    await fails(errno.ENOTTY, fs.write(fh, 0, encode_request(unknown, bytes(uapi.drm_version()))))  # KMD
    assert "refused" in dev.kmsg.text()
    await fails(errno.EINVAL, fs.read(fh, 0, 4096))  # a failed request leaves no reply
    await fs.release(fh)


def syncobj_wait(handle: int, seconds: float) -> bytes:
    a = uapi.drm_syncobj_wait(count_handles=1, flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT,
                              timeout_nsec=time.monotonic_ns() + int(seconds * 1e9))
    return encode_request(ioctl("SYNCOBJ_WAIT"), bytes(a), struct.pack("<I", handle))


async def test_a_blocking_wait_blocks_in_read_off_the_loop(fs, dev):
    """A wait is written at once and waited for in read(), on the loop, woken by the
    fence callbacks: the loop goes on serving while the read waits (here: a SIGNAL written to the same
    file, which replaces the unread reply, so the waiting read returns the wait's
    reply and the next read the signal's); a timeout fails the read with ETIME and
    drops the reply."""
    fh = await open_card(fs)
    await fs.write(fh, 0, encode_request(ioctl("SYNCOBJ_CREATE"), bytes(uapi.drm_syncobj_create())))
    h = uapi.drm_syncobj_create.from_buffer_copy(parse_reply(await fs.read(fh, 0, 4096)).arg).handle
    frame = syncobj_wait(h, 0.05)
    assert await fs.write(fh, 0, frame) == len(frame)
    await fails(errno.ETIME, fs.read(fh, 0, 4096))
    await fails(errno.EINVAL, fs.read(fh, 0, 4096))

    await fs.write(fh, 0, syncobj_wait(h, 10))
    replies = []
    async with trio.open_nursery() as nursery:
        async def reader():
            replies.append(parse_reply(await fs.read(fh, 0, 4096)))
        nursery.start_soon(reader)
        await trio.sleep(0.05)
        assert not replies
        signal = encode_request(ioctl("SYNCOBJ_SIGNAL"), bytes(uapi.drm_syncobj_array(count_handles=1)),
                                struct.pack("<I", h))
        await fs.write(fh, 0, signal)
    assert replies[0].result == 0 and len(replies[0].arg) == ctypes.sizeof(uapi.drm_syncobj_wait)
    signalled = parse_reply(await fs.read(fh, 0, 4096))
    assert len(signalled.arg) == ctypes.sizeof(uapi.drm_syncobj_array)
    await fs.release(fh)


def version_frame() -> bytes:
    return encode_request(ioctl("VERSION"), bytes(uapi.drm_version()))


def get_cap_frame(cap=uapi.DRM_CAP_SYNCOBJ) -> bytes:
    return encode_request(ioctl("GET_CAP"), bytes(uapi.drm_get_cap(capability=cap)))


async def test_tags_are_independent(fs, dev):
    """docs/design.md section 3: the reply of tag T (the write's offset) goes only to
    a read at offset T; an unread reply survives requests on other tags; a new
    request replaces only its own tag's reply."""
    fh = await open_card(fs)
    await fs.write(fh, 1001, version_frame())
    await fs.write(fh, 1002, get_cap_frame())
    await fails(errno.EINVAL, fs.read(fh, 1003, 4096))                 # nothing on tag 1003
    cap = parse_reply(await fs.read(fh, 1002, 4096))
    assert len(cap.arg) == ctypes.sizeof(uapi.drm_get_cap)
    assert uapi.drm_get_cap.from_buffer_copy(cap.arg).value == 1
    await fails(errno.EINVAL, fs.read(fh, 1002, 4096))                 # consumed
    await fs.write(fh, 1002, get_cap_frame(uapi.DRM_CAP_SYNCOBJ_TIMELINE))
    await fs.write(fh, 1002, get_cap_frame())                          # replaces tag 1002's only
    version = parse_reply(await fs.read(fh, 1001, 4096))                # tag 1001 still there
    assert len(version.arg) == ctypes.sizeof(uapi.drm_version)
    assert uapi.drm_get_cap.from_buffer_copy(parse_reply(await fs.read(fh, 1002, 4096)).arg).capability \
        == uapi.DRM_CAP_SYNCOBJ
    await fs.release(fh)


async def test_plain_write_and_read_still_pair(fs, dev):
    """A plain write() leaves the file offset past the frame, where the plain read()
    then comes; pwrite/pread at offset 0 are tag 0 like any other."""
    fh = await open_card(fs)
    pos = 0
    for frame in (version_frame(), get_cap_frame(), version_frame()):
        await fs.write(fh, pos, frame)
        pos += len(frame)
        data = await fs.read(fh, pos, 4096)
        assert parse_reply(data).result == 0
        pos += len(data)
    await fs.write(fh, 0, get_cap_frame())
    assert len(parse_reply(await fs.read(fh, 0, 4096)).arg) == ctypes.sizeof(uapi.drm_get_cap)
    await fs.release(fh)


def timeline_frames(handle: int, point: int, seconds: float) -> tuple[bytes, bytes]:
    wait = uapi.drm_syncobj_timeline_wait(count_handles=1, flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT,
                                          timeout_nsec=time.monotonic_ns() + int(seconds * 1e9))
    arrays = struct.pack("<IQ", handle, point)
    signal = uapi.drm_syncobj_timeline_array(count_handles=1)
    return (encode_request(ioctl("SYNCOBJ_TIMELINE_WAIT"), bytes(wait), arrays),
            encode_request(ioctl("SYNCOBJ_TIMELINE_SIGNAL"), bytes(signal), arrays))


async def test_a_wait_on_one_tag_never_holds_up_another(fs, dev, monkeypatch):
    """Thread A's TIMELINE_WAIT (WAIT_FOR_SUBMIT) blocks in its read of tag A; thread
    B's TIMELINE_SIGNAL on tag B of the same file goes through, and A's read returns
    at once. The wait holds no worker thread: the fence callback wakes the loop."""
    def no_thread(*args, **kwargs):
        raise AssertionError("a fence wait went to a worker thread")

    fh = await open_card(fs)
    await fs.write(fh, 7, encode_request(ioctl("SYNCOBJ_CREATE"), bytes(uapi.drm_syncobj_create())))
    h = uapi.drm_syncobj_create.from_buffer_copy(parse_reply(await fs.read(fh, 7, 4096)).arg).handle
    wait, signal = timeline_frames(h, 1, 10)
    monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
    await fs.write(fh, 11, wait)
    done = {}
    async with trio.open_nursery() as nursery:
        async def waiter():
            done["reply"] = parse_reply(await fs.read(fh, 11, 4096))
            done["at"] = time.monotonic()
        nursery.start_soon(waiter)
        await trio.sleep(0.1)
        assert not done
        t0 = time.monotonic()
        await fs.write(fh, 22, signal)
        assert parse_reply(await fs.read(fh, 22, 4096)).result == 0
    assert done["reply"].result == 0 and done["at"] - t0 < 1.0
    monkeypatch.undo()
    await fs.release(fh)


async def test_an_interrupted_read_keeps_its_pending_reply(fs, dev):
    fh = await open_card(fs)
    await fs.write(fh, 5, encode_request(ioctl("SYNCOBJ_CREATE"), bytes(uapi.drm_syncobj_create())))
    h = uapi.drm_syncobj_create.from_buffer_copy(parse_reply(await fs.read(fh, 5, 4096)).arg).handle
    wait, signal = timeline_frames(h, 2, 10)
    await fs.write(fh, 5, wait)
    with trio.move_on_after(0.05):  # the client's read is interrupted (EINTR)
        await fs.read(fh, 5, 4096)
    await fs.write(fh, 6, signal)
    assert parse_reply(await fs.read(fh, 6, 4096)).result == 0
    assert parse_reply(await fs.read(fh, 5, 4096)).result == 0  # the retried read gets the wait's reply
    await fs.release(fh)


async def test_too_many_unread_tags_is_ebusy(fs, dev, monkeypatch):
    from vdev import nodes
    monkeypatch.setattr(nodes, "MAX_TAGS", 3)
    fh = await open_card(fs)
    for tag in (1, 2, 3):
        await fs.write(fh, tag, version_frame())
    await fails(errno.EBUSY, fs.write(fh, 4, version_frame()))
    await fs.write(fh, 3, version_frame())   # a tag that has one may replace it
    await fs.read(fh, 1, 4096)
    await fs.write(fh, 4, version_frame())   # room again
    await fs.release(fh)


# -- lookups, BO symlinks, sync files -------------------------------------------------
async def test_lookup_errors(fs):
    await fails(errno.ENOENT, walk(fs, "nothing"))
    await fails(errno.ENOENT, walk(fs, "bo/1000"))
    await fails(errno.ENOENT, walk(fs, "sync/1000"))
    await fails(errno.ENOTDIR, walk(fs, "dev/kmsg/x"))
    await fails(errno.EISDIR, fs.open(await walk(fs, "dev"), os.O_RDONLY, Ctx()))
    await fails(errno.EINVAL, fs.readlink(await walk(fs, "dev/kmsg"), Ctx()))


async def test_bo_entries_are_symlinks_to_the_owners_shared_memory_file(fs, dev):
    """bo/<offset-hex> is a symlink to the BO's tmpfs file; only the BO's uid (or
    root) may read the link; a freed BO's name is gone."""
    f = dev.open_file(pid=10, uid=1000, comm="t")
    h = gem_create(dev, f)
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = h
    offset = call(dev, f, "AMDGPU_GEM_MMAP", m)[0].out.addr_ptr
    name = f"bo/{offset:x}"
    attr = await fs.getattr(await walk(fs, name))
    assert stat.S_ISLNK(attr.st_mode)

    target = await fs.readlink(await walk(fs, name), Owner())
    assert target == dev.bo_by_offset(offset).path.encode()
    st = os.stat(target)
    assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_size) == (1000, 0o600, 4096)
    assert stat.S_IMODE(os.stat(os.path.dirname(target)).st_mode) == 0o711
    await fails(errno.EACCES, fs.readlink(await walk(fs, name), Other()))
    assert f"{name}: access by uid 1001" in dev.kmsg.text()
    assert await fs.access(await walk(fs, name), os.R_OK, Owner())
    assert not await fs.access(await walk(fs, name), os.R_OK, Other())
    inode = await walk(fs, name)
    dev.close_file(f)
    await fails(errno.ENOENT, fs.readlink(inode, Owner()))
    await fails(errno.ENOENT, walk(fs, name))
    assert not os.path.exists(target)


class PollHandle:
    """Records what pyfuse3.PollHandle.notify would do (pyfuse3 makes the real ones)."""

    def __init__(self):
        self.threads = []

    def notify(self):
        self.threads.append(threading.get_ident())


def export_syncobj(dev, f) -> tuple[int, int]:
    h = call(dev, f, "SYNCOBJ_CREATE", uapi.drm_syncobj_create())[0].handle
    return h, call(dev, f, "SYNCOBJ_HANDLE_TO_FD", uapi.drm_syncobj_handle(handle=h))[0].fd


async def test_sync_file_poll_is_woken_on_the_trio_loop(fs, dev):
    """A busy sync file answers poll() with 0 and keeps the kernel's handle; when
    another thread signals the syncobj, the handle is notified on the trio loop (no
    vdev thread) and the next poll() answers POLLIN."""
    f = dev.open_file(pid=10, uid=0, comm="t")
    h, token = export_syncobj(dev, f)
    inode = await walk(fs, f"sync/{token:x}")
    fi = await fs.open(inode, os.O_RDONLY, Ctx())
    ph = PollHandle()
    assert await fs.poll(inode, fi.fh, ph, Ctx()) == 0
    assert await fs.read(fi.fh, 0, 100) == b"unsubmitted\n"
    await trio.to_thread.run_sync(call, dev, f, "SYNCOBJ_SIGNAL", uapi.drm_syncobj_array(count_handles=1),
                                  struct.pack("<I", h))
    with trio.fail_after(5):
        while not ph.threads:
            await trio.sleep(0.001)
    assert ph.threads == [threading.get_ident()]
    assert await fs.poll(inode, fi.fh, PollHandle(), Ctx()) & select.POLLIN
    assert await fs.read(fi.fh, 0, 100) == b"signaled\n"
    await fs.release(fi.fh)
    dev.close_file(f)


async def test_sync_files_open_for_their_exporter_only(fs, dev):
    f = dev.open_file(pid=10, uid=1000, comm="t")
    _, token = export_syncobj(dev, f)
    inode = await walk(fs, f"sync/{token:x}")
    await fails(errno.EACCES, fs.open(inode, os.O_RDONLY, Other()))
    assert f"sync/{token:x}: open by uid 1001" in dev.kmsg.text()
    await fails(errno.EACCES, fs.open(inode, os.O_RDWR, Owner()))
    fi = await fs.open(inode, os.O_RDONLY, Owner())
    await fs.release(fi.fh)
    dev.close_file(f)
    await fails(errno.ENOENT, fs.open(inode, os.O_RDONLY, Owner()))  # the token went with its file
    await fails(errno.ENOENT, walk(fs, f"sync/{token:x}"))


# -- prime files (PRIME export) ----------------------------------------------------
def export_bo(dev, f, size=8192) -> tuple[int, int]:
    h = gem_create(dev, f, size, uapi.AMDGPU_GEM_DOMAIN_GTT)
    return h, call(dev, f, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=h, flags=uapi.DRM_RDWR))[0].fd


async def test_prime_file_is_the_exported_bo(fs, dev):
    """prime/<token-hex> is a regular file of the BO's size (never listed), served by
    vdev (direct_io): read() and write() reach the BO's bytes."""
    f = dev.open_file(pid=10, uid=1000, comm="t")
    h, token = export_bo(dev, f)
    assert await listdir(fs, "prime") == []
    if f"{token:X}" != f"{token:x}":  # a token without hex letters has one spelling
        await fails(errno.ENOENT, walk(fs, f"prime/{token:X}"))
    await fails(errno.ENOENT, walk(fs, f"prime/0{token:x}"))
    inode = await walk(fs, f"prime/{token:x}")
    attr = await fs.getattr(inode)
    assert stat.S_ISREG(attr.st_mode) and attr.st_size == 8192 and attr.st_uid == 1000
    fi = await fs.open(inode, os.O_RDWR, Owner())
    assert fi.direct_io
    f.bos[h].write(100, b"from the BO")
    assert await fs.read(fi.fh, 100, 11) == b"from the BO"
    assert await fs.write(fi.fh, 200, b"into the BO") == 11
    assert f.bos[h].read(200, 11) == b"into the BO"
    assert await fs.read(fi.fh, 8190, 100) == bytes(2)
    await fails(errno.ENOSPC, fs.write(fi.fh, 8192, b"x"))
    await fs.release(fi.fh)
    ro = await fs.open(inode, os.O_RDONLY, Owner())
    await fails(errno.EBADF, fs.write(ro.fh, 0, b"x"))
    await fs.release(ro.fh)
    dev.close_file(f)


async def test_prime_file_opens_for_the_exporter_and_importers(fs, dev):
    f = dev.open_file(pid=10, uid=1000, comm="t")
    _, token = export_bo(dev, f)
    inode = await walk(fs, f"prime/{token:x}")
    await fails(errno.EACCES, fs.open(inode, os.O_RDONLY, Other()))
    assert f"prime/{token:x}: open by uid 1001" in dev.kmsg.text()
    importer = dev.open_file(pid=11, uid=1001, comm="i")
    call(dev, importer, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))
    fi = await fs.open(inode, os.O_RDONLY, Other())
    await fs.release(fi.fh)
    dev.close_file(importer)
    dev.close_file(f)


async def test_an_open_prime_file_holds_the_export(fs, dev):
    """Like a dma-buf fd: the BO lives while its prime file is open, after the
    exporter's file is closed; the release frees it, and the name goes."""
    f = dev.open_file(pid=10, uid=1000, comm="t")
    h, token = export_bo(dev, f)
    bo = f.bos[h]
    inode = await walk(fs, f"prime/{token:x}")
    fi = await fs.open(inode, os.O_RDWR, Owner())
    dev.close_file(f)
    assert not bo.freed
    assert await fs.write(fi.fh, 0, b"still here") == 10
    await fs.release(fi.fh)
    assert bo.freed
    await fails(errno.ENOENT, fs.open(inode, os.O_RDONLY, Owner()))
    await fails(errno.ENOENT, walk(fs, f"prime/{token:x}"))
    dev.check_invariants()


async def test_an_importers_uid_may_read_the_bo_link(fs, dev):
    f = dev.open_file(pid=10, uid=1000, comm="t")
    h, token = export_bo(dev, f)
    m = uapi.drm_amdgpu_gem_mmap()
    m.in_.handle = h
    name = f"bo/{call(dev, f, 'AMDGPU_GEM_MMAP', m)[0].out.addr_ptr:x}"
    await fails(errno.EACCES, fs.readlink(await walk(fs, name), Other()))
    importer = dev.open_file(pid=11, uid=1001, comm="i")
    call(dev, importer, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))
    assert await fs.readlink(await walk(fs, name), Other()) == f.bos[h].path.encode()
    assert await fs.access(await walk(fs, name), os.R_OK, Other())
    dev.close_file(importer)
    dev.close_file(f)


# -- sysfs in Linux's shape ------------------------------------------------------------

async def assert_links(fs, links: dict[str, str]) -> None:
    """Each path is a symlink whose target is its value."""
    for path, target in links.items():
        inode = await walk(fs, path, follow=False)
        assert stat.S_ISLNK((await fs.getattr(inode)).st_mode), path
        assert await fs.readlink(inode, Other()) == target.encode(), path


async def test_sysfs_has_linuxs_shape(fs, dev):
    """The links and files libdrm's drmGetDevices2 / drmGetDevice2 read (xf86drm.c),
    values from kmd/sysfs.py (DEV_INFO's device id)."""
    pci = f"sys/devices/{PCI_PORT_PATH}/{PCI_SLOT}"
    links = {
        "sys/dev/char/226:0": f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/card0",
        "sys/dev/char/226:128": f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/renderD128",
        "sys/class/drm/card0": f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/card0",
        "sys/class/drm/renderD128": f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/drm/renderD128",
        f"{pci}/subsystem": "../../../../bus/pci",
        f"{pci}/driver": "../../../../bus/pci/drivers/amdgpu",
        f"{pci}/drm/card0/device": f"../../../{PCI_SLOT}",
        f"{pci}/drm/renderD128/subsystem": "../../../../../../class/drm",
        f"{pci}/hwmon/hwmon0/device": f"../../../{PCI_SLOT}",
        f"{pci}/hwmon/hwmon0/subsystem": "../../../../../../class/hwmon",
        "sys/class/hwmon/hwmon0": f"../../devices/{PCI_PORT_PATH}/{PCI_SLOT}/hwmon/hwmon0",
        f"sys/bus/pci/devices/{PCI_SLOT}": f"../../../devices/{PCI_PORT_PATH}/{PCI_SLOT}",
        f"sys/bus/pci/drivers/amdgpu/{PCI_SLOT}": f"../../../../devices/{PCI_PORT_PATH}/{PCI_SLOT}",
    }
    await assert_links(fs, links)
    assert await listdir(fs, "sys/dev/char/226:128/device/drm") == ["card0", "renderD128"]
    assert await walk(fs, "sys/dev/char/226:128/device") == await walk(fs, pci)
    assert await walk(fs, "sys/class/drm/card0/device/subsystem") == await walk(fs, "sys/bus/pci")
    ident = dev.sysfs_files()
    device = f"{dev.sysfs_files()['device']()}".strip()
    assert device == f"{int(device, 16):#06x}" and int(device, 16) != 0
    for name in ("vendor", "device", "subsystem_vendor", "subsystem_device", "revision", "class"):
        text = (await cat(fs, f"sys/dev/char/226:0/device/{name}")).decode()
        assert text == ident[name]() and text.startswith("0x") and text.endswith("\n"), name
    assert (await cat(fs, "sys/class/drm/card0/device/vendor")) == b"0x1002\n"
    uevent = (await cat(fs, f"{pci}/uevent")).decode()
    assert "DRIVER=amdgpu\n" in uevent and f"PCI_SLOT_NAME={PCI_SLOT}\n" in uevent
    assert f"PCI_ID=1002:{int(device, 16):04X}\n" in uevent and "PCI_SUBSYS_ID=1002:" in uevent
    config = await cat(fs, f"{pci}/config")
    assert len(config) == 256 and config[:4] == struct.pack("<HH", 0x1002, int(device, 16))
    assert await cat(fs, "sys/dev/char/226:128/uevent") == (
        b"MAJOR=226\nMINOR=128\nDEVNAME=dri/renderD128\nDEVTYPE=drm_minor\n")
    assert await cat(fs, "sys/class/drm/card0/dev") == b"226:0\n"
    assert await cat(fs, "sys/class/drm/card0/device/mem_info_vram_total") == f"{2 * MiB}\n".encode()
    names = await listdir(fs, pci)
    assert {"drm", "subsystem", "driver", "uevent", "vendor", "mem_info_vram_used"} <= set(names)
    assert await listdir(fs, "sys/class/drm") == ["card0", "renderD128", "version"]


async def test_the_gpu_sits_behind_a_pcie_root_port(fs, dev):
    """As an MI100 in a server: the GPU's directory is a child of a PCIe root port's
    (driver pcieport) on the host bridge, where nvtop reads the link
    (device_discovery_linux.c: the GPU's parents with driver pcieport); both ends of
    the link say PCIe 4.0 x16, in pci-sysfs.c's words."""
    port = f"sys/devices/{PCI_PORT_PATH}"
    links = {
        f"{port}/subsystem": "../../../bus/pci",
        f"{port}/driver": "../../../bus/pci/drivers/pcieport",
        f"sys/bus/pci/devices/{PCI_PORT_SLOT}": f"../../../devices/{PCI_PORT_PATH}",
        f"sys/bus/pci/drivers/pcieport/{PCI_PORT_SLOT}": f"../../../../devices/{PCI_PORT_PATH}",
    }
    await assert_links(fs, links)
    # the GPU's parent is the port, whichever way it is reached
    assert await walk(fs, f"sys/bus/pci/devices/{PCI_SLOT}/..") == await walk(fs, port)
    assert await walk(fs, "sys/class/drm/card0/device/..") == await walk(fs, f"sys/bus/pci/devices/{PCI_PORT_SLOT}")
    assert (await walk(fs, f"sys/bus/pci/devices/{PCI_PORT_SLOT}/{PCI_SLOT}")
            == await walk(fs, "sys/class/drm/card0/device"))
    assert await listdir(fs, "sys/bus/pci/devices") == sorted([PCI_PORT_SLOT, PCI_SLOT])
    assert await listdir(fs, "sys/bus/pci/drivers") == ["amdgpu", "pcieport"]
    # the host bridge is a device without a driver (an empty uevent, as on Linux), with the port in it
    assert await cat(fs, f"sys/devices/{PCI_ROOT}/uevent") == b""
    assert await listdir(fs, f"sys/devices/{PCI_ROOT}") == [PCI_PORT_SLOT, "uevent"]
    for name, text in (("vendor", "0x1022\n"), ("device", "0x1483\n"), ("class", "0x060400\n"),
                       ("secondary_bus_number", "1\n"), ("subordinate_bus_number", "1\n")):
        assert (await cat(fs, f"{port}/{name}")).decode() == text, name
    uevent = (await cat(fs, f"{port}/uevent")).decode()
    assert uevent.startswith("DRIVER=pcieport\n") and f"PCI_SLOT_NAME={PCI_PORT_SLOT}\n" in uevent, uevent
    assert "PCI_CLASS=60400\n" in uevent and "PCI_ID=1022:1483\n" in uevent, uevent
    for end in (port, "sys/class/drm/card0/device"):
        for name, text in (("current_link_speed", b"16.0 GT/s PCIe\n"), ("current_link_width", b"16\n"),
                           ("max_link_speed", b"16.0 GT/s PCIe\n"), ("max_link_width", b"16\n")):
            assert await cat(fs, f"{end}/{name}") == text, (end, name)
    names = await listdir(fs, port)
    assert {PCI_SLOT, "subsystem", "driver", "uevent", "config", "vendor", "current_link_speed"} <= set(names)
    assert not {"drm", "hwmon", "mem_info_vram_used"} & set(names), names   # the GPU's, not the port's
