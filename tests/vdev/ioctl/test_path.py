"""vdev.ioctl.path through VgpuFs.ioctl over the real KMD, in this process (no mount):
called as pyfuse3 calls it for a FUSE_IOCTL (the struct the kernel copied in, the
size it copies back, the caller's pid: ours, so the pointers are this process's
ctypes buffers). What a mount cannot show is checked here: a wait that is
interrupted (its task cancelled, as FUSE_INTERRUPT does) leaves no waiter behind on
the syncobj or the fence, and an interrupted CS waiting for room submits nothing.
The same through the kernel: tests/e2e/test_ioctl_*.py."""
import ctypes
import errno
import os
import struct

import pyfuse3
import pytest
import trio
import trio.testing

from kmd import sched
from kmd.device import Device
from kmd.syncobj import lookup
from tests.raw_ioctl import (AMDGPU_FOREVER, DMA, RWX, SYNCOBJ_FOREVER, Chunks, address, bo_handles_chunk, ib_chunk,
                             resized, syncobj_out_chunk, u32_array)
from vdev.fs import VgpuFs
from vgpu import pointers, uapi
from vgpu.sdma import SdmaIb

MiB = 1 << 20
VA = 0x200000


class Ctx:
    uid = gid = 0
    pid = os.getpid()
    umask = 0o22


@pytest.fixture
def dev():
    d = Device(vram_size=4 * MiB, gtt_size=4 * MiB, timeout=30.0)
    yield d
    d.shutdown()


@pytest.fixture
def fs(dev):
    return VgpuFs(dev)


async def open_node(fs, path="dev/dri/renderD128", flags=os.O_RDWR):
    ino = pyfuse3.ROOT_INODE
    for part in path.split("/"):
        ino = (await fs.lookup(ino, part.encode(), Ctx())).st_ino
    return (await fs.open(ino, flags, Ctx())).fh


def kernel_call(fs, fh, request, arg):
    """fs.ioctl as the kernel's FUSE_IOCTL reaches it: the _IOC_SIZE bytes at the
    argument copied in for _IOC_WRITE, _IOC_SIZE bytes taken back for _IOC_READ."""
    size, d = uapi._IOC_SIZE(request), uapi._IOC_DIR(request)
    in_buf = ctypes.string_at(address(arg), size) if d & uapi._IOC_WRITE else b""
    reply = fs.ioctl(0, fh, request, address(arg), in_buf, size if d & uapi._IOC_READ else 0, 0, Ctx())
    if isinstance(reply, tuple):   # (result, data, then): pyfuse3 replies, then calls then()
        result, data, then = reply
        assert result == 0
        then()
        return data
    return reply


def copy_back(arg, reply) -> None:
    if reply:
        ctypes.memmove(address(arg), reply, len(reply))


async def call(fs, fh, request, arg):
    """The whole ioctl: a reply answered at once, or the awaited wait; the struct
    updated as the kernel's copy back does. FUSEError for a refusal."""
    reply = kernel_call(fs, fh, request, arg)
    if hasattr(reply, "__await__"):
        reply = await reply
    copy_back(arg, reply)
    return arg


async def fails(err, fs, fh, request, arg):
    with pytest.raises(pyfuse3.FUSEError) as e:
        await call(fs, fh, request, arg)
    assert e.value.errno == err, f"expected {errno.errorcode[err]}, got {errno.errorcode.get(e.value.errno)}"


class Client:
    """A DRM file of this process, with a context and a mapped 64 KiB GTT BO."""

    def __init__(self, fs, dev, fh):
        self.fs, self.dev, self.fh = fs, dev, fh
        self.file = fs._handles[fh].file

    @classmethod
    async def open(cls, fs, dev):
        c = cls(fs, dev, await open_node(fs))
        a = uapi.drm_amdgpu_ctx()
        a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
        c.ctx = (await c.call(uapi.DRM_IOCTL_AMDGPU_CTX, a)).out.alloc.ctx_id
        g = uapi.drm_amdgpu_gem_create()
        g.in_.bo_size, g.in_.alignment, g.in_.domains = 65536, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT
        c.handle = (await c.call(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, g)).out.handle
        await c.call(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(
            handle=c.handle, operation=uapi.AMDGPU_VA_OP_MAP, flags=RWX, va_address=VA, map_size=65536))
        c.bo = c.file.bos[c.handle]
        c.slot = 0
        return c

    async def call(self, request, arg):
        return await call(self.fs, self.fh, request, arg)

    def cs(self, ib: SdmaIb, *chunks):
        """A CS struct (pointing to this process's memory) running ``ib`` from its own
        256-byte slot of the BO."""
        off = 32768 + 256 * self.slot
        self.slot += 1
        self.bo.write(off, ib.tobytes())
        return Chunks([ib_chunk(VA + off, len(ib)), bo_handles_chunk([self.handle]), *chunks]).struct(self.ctx)

    async def syncobj(self) -> int:
        return (await self.call(uapi.DRM_IOCTL_SYNCOBJ_CREATE, uapi.drm_syncobj_create())).handle

    def word(self, off: int) -> int:
        return struct.unpack("<I", self.bo.read(off, 4))[0]


async def test_an_answer_at_once_is_bytes_and_a_wait_is_an_awaitable(fs, dev):
    fh = await open_node(fs)
    reply = kernel_call(fs, fh, uapi.DRM_IOCTL_GET_CAP, uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ))
    assert isinstance(reply, bytes) and uapi.drm_get_cap.from_buffer_copy(reply).value == 1
    s = (await call(fs, fh, uapi.DRM_IOCTL_SYNCOBJ_CREATE, uapi.drm_syncobj_create())).handle
    arr = u32_array([s])
    wait = uapi.drm_syncobj_wait(handles=address(arr), count_handles=1, timeout_nsec=SYNCOBJ_FOREVER,
                                 flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
    pending = kernel_call(fs, fh, uapi.DRM_IOCTL_SYNCOBJ_WAIT, wait)
    assert hasattr(pending, "__await__")
    async with trio.open_nursery() as n:
        done = []

        async def waiter():
            done.append(await pending)
        n.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not done
        await call(fs, fh, uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, uapi.drm_syncobj_array(handles=address(arr),
                                                                                count_handles=1))
    assert len(done[0]) == ctypes.sizeof(wait)
    await fs.release(fh)


async def test_requests_that_are_not_drm_s_are_enotty(fs, dev):
    fh = await open_node(fs)
    with pytest.raises(pyfuse3.FUSEError) as e:
        fs.ioctl(0, fh, 0x5401, 0, b"", 60, 0, Ctx())    # TCGETS (isatty)
    assert e.value.errno == errno.ENOTTY
    other = await open_node(fs, "sys/kernel/debug/dri/0/name", os.O_RDONLY)
    with pytest.raises(pyfuse3.FUSEError) as e:
        kernel_call(fs, other, uapi.DRM_IOCTL_GET_CAP, uapi.drm_get_cap())
    assert e.value.errno == errno.ENOTTY
    assert "refused" not in dev.kmsg.text()


async def test_version_null_buffers_then_strings(fs, dev):
    fh = await open_node(fs)
    v = await call(fs, fh, uapi.DRM_IOCTL_VERSION, uapi.drm_version())
    assert v.version_major == 3 and v.name_len == 6 and v.name == 0
    name = ctypes.create_string_buffer(16)
    v.name = address(name)
    v.date_len = v.desc_len = 0
    await call(fs, fh, uapi.DRM_IOCTL_VERSION, v)
    assert name.raw == b"amdgpu".ljust(16, b"\0")


async def test_cs_from_this_process_s_memory_runs_and_signals_its_syncobj(fs, dev):
    c = await Client.open(fs, dev)
    s = await c.syncobj()
    seq = (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().write_linear(VA + 64, [0xC0FFEE]),
                                                        syncobj_out_chunk([s])))).out.handle
    assert seq == 1
    arr = u32_array([s])
    await c.call(uapi.DRM_IOCTL_SYNCOBJ_WAIT, uapi.drm_syncobj_wait(handles=address(arr), count_handles=1,
                                                                   timeout_nsec=SYNCOBJ_FOREVER))
    assert c.word(64) == 0xC0FFEE
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ctx_id, w.in_.ip_type, w.in_.timeout = seq, c.ctx, DMA, AMDGPU_FOREVER
    assert (await c.call(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)).out.status == 0


async def test_bad_pointers_are_efault_and_change_nothing(fs, dev):
    c = await Client.open(fs, dev)
    ring = dev.rings[(DMA, 0)]
    good = c.cs(SdmaIb().write_linear(VA + 64, [1]))
    table = good._keep.table
    for value in (0, 0x10):                   # the chunks array
        a = uapi.drm_amdgpu_cs.from_buffer_copy(good)
        a.in_.chunks = value
        await fails(errno.EFAULT, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, a)
    saved = table[1]
    for value in (0, 0x10):                   # a chunk pointer
        table[1] = value
        await fails(errno.EFAULT, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, good)
    table[1] = saved
    hdr = good._keep.headers[1]               # the BO_HANDLES chunk's data, then its entries
    saved = hdr.chunk_data
    hdr.chunk_data = 0x10
    await fails(errno.EFAULT, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, good)
    hdr.chunk_data = saved
    good._keep.keep[1].bo_info_ptr = 0
    await fails(errno.EFAULT, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, good)
    assert ring.emitted_seq == 0 and c.word(64) == 0      # nothing was submitted
    # INFO: the KMD answers, the copy to an unmapped return_pointer fails; a NULL one is
    # amdgpu_info_ioctl's EINVAL (the soak's ioctl fuzzer once found EIO for it)
    for pointer, err in ((0x10, errno.EFAULT), (0, errno.EINVAL)):
        info = uapi.drm_amdgpu_info(return_pointer=pointer, return_size=4, query=uapi.AMDGPU_INFO_ACCEL_WORKING)
        await fails(err, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_INFO, info)
    # syncobj handle arrays
    for request, arg in [
        (uapi.DRM_IOCTL_SYNCOBJ_WAIT, uapi.drm_syncobj_wait(handles=0x10, count_handles=1)),
        (uapi.DRM_IOCTL_SYNCOBJ_SIGNAL, uapi.drm_syncobj_array(handles=0, count_handles=1)),
        (uapi.DRM_IOCTL_SYNCOBJ_QUERY, uapi.drm_syncobj_timeline_array(handles=0x10, count_handles=1)),
    ]:
        await fails(errno.EFAULT, fs, c.fh, request, arg)
    # the file goes on: the same CS, whole again, runs
    good._keep.keep[1].bo_info_ptr = address(good._keep.keep[1]._keep)
    assert (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, good)).out.handle == 1
    assert "internal error" not in dev.kmsg.text()


async def test_struct_sizes_shorter_and_longer_than_the_kmds(fs, dev):
    c = await Client.open(fs, dev)
    h = c.handle
    va = uapi.drm_amdgpu_gem_va(handle=h, operation=uapi.AMDGPU_VA_OP_MAP, flags=RWX, va_address=0x400000,
                                map_size=4096)
    longer = ctypes.create_string_buffer(bytes(va), 64)             # a newer kernel's 64-byte GEM_VA
    await call(fs, c.fh, resized(uapi.DRM_IOCTL_AMDGPU_GEM_VA, 64), longer)
    # it mapped: mapping it again with libdrm's 40-byte struct overlaps, unmapping works
    await fails(errno.EINVAL, fs, c.fh, uapi.DRM_IOCTL_AMDGPU_GEM_VA, va)
    va.operation = uapi.AMDGPU_VA_OP_UNMAP
    await call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_GEM_VA, va)
    va.operation = uapi.AMDGPU_VA_OP_MAP
    ctypes.memmove(longer, bytes(va), ctypes.sizeof(va))
    longer[60] = 1                                                   # a nonzero tail
    await fails(errno.EINVAL, fs, c.fh, resized(uapi.DRM_IOCTL_AMDGPU_GEM_VA, 64), longer)
    await call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_GEM_VA, va)           # nothing was mapped by it
    # a shorter CTX (no priority field): read as zero-extended, the reply cut to its size
    short = ctypes.create_string_buffer(bytes(uapi.drm_amdgpu_ctx_in(op=uapi.AMDGPU_CTX_OP_ALLOC_CTX))[:12], 12)
    reply = kernel_call(fs, c.fh, resized(uapi.DRM_IOCTL_AMDGPU_CTX, 12), short)
    assert len(reply) == 12 and struct.unpack_from("<I", reply)[0] == c.ctx + 1


# -- interrupted waits -------------------------------------------------------------------
async def interrupted(pending, blocked):
    """Run ``pending`` (the awaitable fs.ioctl returned) as pyfuse3 does, until
    ``blocked()`` says it waits, then cancel it as a FUSE_INTERRUPT does."""
    scope = trio.CancelScope()
    done = []

    async def task():
        with scope:
            done.append(await pending)
    async with trio.open_nursery() as n:
        n.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        assert blocked()
        scope.cancel()
    assert scope.cancelled_caught and not done


async def test_an_interrupted_syncobj_wait_leaves_no_waiter(fs, dev):
    c = await Client.open(fs, dev)
    s = await c.syncobj()
    obj = lookup(c.file, s)
    arr = u32_array([s])
    w = uapi.drm_syncobj_wait(handles=address(arr), count_handles=1, timeout_nsec=SYNCOBJ_FOREVER,
                              flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
    await interrupted(kernel_call(fs, c.fh, uapi.DRM_IOCTL_SYNCOBJ_WAIT, w), lambda: len(obj._watchers) == 1)
    assert obj._watchers == []
    # with a fence in the syncobj that has not signalled: its callback goes too
    gate = SdmaIb().poll_regmem(VA, 1)
    await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(gate, syncobj_out_chunk([s])))
    fence = obj.find(0)
    before = len(fence._callbacks)
    for _ in range(3):
        await interrupted(kernel_call(fs, c.fh, uapi.DRM_IOCTL_SYNCOBJ_WAIT, w),
                          lambda: len(fence._callbacks) == before + 1)
        assert obj._watchers == [] and len(fence._callbacks) == before
    c.bo.write(0, struct.pack("<I", 1))                        # the job ends: a new wait returns
    await c.call(uapi.DRM_IOCTL_SYNCOBJ_WAIT, w)


async def test_an_interrupted_wait_cs_leaves_no_callback_on_the_fence(fs, dev):
    c = await Client.open(fs, dev)
    seq = (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().poll_regmem(VA, 1)))).out.handle
    fence = dev.rings[(DMA, 0)].fence(seq)
    before = len(fence._callbacks)
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ctx_id, w.in_.ip_type, w.in_.timeout = seq, c.ctx, DMA, AMDGPU_FOREVER
    await interrupted(kernel_call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w),
                      lambda: len(fence._callbacks) == before + 1)
    assert len(fence._callbacks) == before
    c.bo.write(0, struct.pack("<I", 1))
    assert (await c.call(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)).out.status == 0


async def test_an_interrupted_cs_waiting_for_room_is_submitted_once(fs, dev, monkeypatch):
    """A CS that gets a signal while its context is full must not be both failed
    with EINTR and run: drmIoctl would submit it again. Linux's
    amdgpu_ctx_wait_prev_fence comes before the job is pushed, so it returns
    -ERESTARTSYS having submitted nothing; vgpu's KMD queues the job in the
    context's backlog first, so the path lets the wait finish (the reply carries
    the seq). Either way the job runs exactly as often as the caller was told."""
    monkeypatch.setattr(sched, "MAX_JOBS_PER_CONTEXT", 2)
    c = await Client.open(fs, dev)
    await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().poll_regmem(VA, 1)))     # seq 1: blocks the ring
    await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().nop()))                  # seq 2: the context is full
    third = c.cs(SdmaIb().write_linear(VA + 64, [0xC0DE]))
    pending = kernel_call(fs, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, third)
    assert hasattr(pending, "__await__")
    scope, done = trio.CancelScope(), []

    async def task():
        with scope:
            done.append(await pending)
    async with trio.open_nursery() as n:
        n.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()                                                   # the caller's signal
        await trio.testing.wait_all_tasks_blocked()
        c.bo.write(0, struct.pack("<I", 1))                              # let the ring go
    last = (await c.call(uapi.DRM_IOCTL_AMDGPU_CS, c.cs(SdmaIb().nop()))).out.handle
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ctx_id, w.in_.ip_type, w.in_.timeout = last, c.ctx, DMA, AMDGPU_FOREVER
    await c.call(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)
    if done:    # answered: it ran, once, as seq 3
        assert uapi.drm_amdgpu_cs.from_buffer_copy(done[0]).out.handle == 3
        assert c.word(64) == 0xC0DE and last == 4
    else:       # EINTR: nothing ran
        assert scope.cancelled_caught
        assert c.word(64) == 0, "the CS failed with EINTR but ran"
        assert last == 3


async def test_drm_ioctls_checks_come_before_the_copy_of_pointed_to_data(dev):
    """Linux copies a request's pointed-to data in the handler, after drm_ioctl's
    checks: an unauthenticated card0 file gets EACCES for a CS with a bad chunk table
    and for an INFO without a return_pointer, not EFAULT / EINVAL; an unplugged
    device ENODEV. A render file, which may make those calls, gets the copy's errno."""
    from vdev.options import NodePermissions
    fs = VgpuFs(dev, NodePermissions(card_mode=0o666))

    def user(uid):
        return type("User", (Ctx,), {"uid": uid, "gid": uid})()
    ino = pyfuse3.ROOT_INODE
    for part in ("dev", "dri", "card0"):
        ino = (await fs.lookup(ino, part.encode(), Ctx())).st_ino
    await fs.open(ino, os.O_RDWR, user(1000))                       # the first card0 open: master
    other = (await fs.open(ino, os.O_RDWR, user(1001))).fh          # unauthenticated
    render = await open_node(fs)
    bad_cs = uapi.drm_amdgpu_cs()
    bad_cs.in_.num_chunks, bad_cs.in_.chunks = 1, 0x10              # an unmapped chunk table
    null_info = uapi.drm_amdgpu_info(return_pointer=0, return_size=8, query=uapi.AMDGPU_INFO_TIMESTAMP)
    await fails(errno.EACCES, fs, other, uapi.DRM_IOCTL_AMDGPU_CS, bad_cs)
    await fails(errno.EACCES, fs, other, uapi.DRM_IOCTL_AMDGPU_INFO, null_info)
    await fails(errno.EFAULT, fs, render, uapi.DRM_IOCTL_AMDGPU_CS, bad_cs)
    await fails(errno.EINVAL, fs, render, uapi.DRM_IOCTL_AMDGPU_INFO, null_info)
    assert "AMDGPU_CS refused for client" in dev.kmsg.text() and "DRM_AUTH" in dev.kmsg.text()
    dev.sysfs_files()["remove"][1](b"1")
    await fails(errno.ENODEV, fs, render, uapi.DRM_IOCTL_AMDGPU_CS, bad_cs)


async def test_a_light_jobs_cs_is_answered_first_and_its_job_runs_after_the_reply(fs, dev):
    """The CS of a direct-run job (kmd/direct_run.py) returns (0, reply, then): its
    sequence number before the job ran; then() runs it, as pyfuse3 does once the
    reply is written. A refused CS runs nothing later."""
    c = await Client.open(fs, dev)
    arg = c.cs(SdmaIb().write_linear(VA + 128, [0xBEEF]))
    reply = fs.ioctl(0, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, address(arg), bytes(arg), ctypes.sizeof(arg), 0, Ctx())
    assert isinstance(reply, tuple) and len(reply) == 3 and reply[0] == 0
    seq = uapi.drm_amdgpu_cs.from_buffer_copy(reply[1]).out.handle
    ring = dev.rings[(DMA, 0)]
    assert seq == ring.emitted_seq and not ring.fence(seq).signaled and c.word(128) == 0
    reply[2]()
    assert ring.fence(seq).signaled and c.word(128) == 0xBEEF
    # a CS the KMD refuses (unknown context) gives its errno and nothing to run after
    bad = c.cs(SdmaIb().write_linear(VA + 132, [1]))
    bad.in_.ctx_id = 99
    with pytest.raises(pyfuse3.FUSEError) as e:
        fs.ioctl(0, c.fh, uapi.DRM_IOCTL_AMDGPU_CS, address(bad), bytes(bad), ctypes.sizeof(bad), 0, Ctx())
    assert e.value.errno == errno.EINVAL and ring.emitted_seq == seq
    # the frame protocol's dispatch (no transport to answer first) still runs it at once
    f = c.file
    a = c.cs(SdmaIb().write_linear(VA + 136, [7]))
    out = dev.ioctl(f, uapi.DRM_IOCTL_AMDGPU_CS, bytes(a),
                    pointers.gather(uapi.DRM_IOCTL_AMDGPU_CS, bytes(a), ctypes.string_at))
    assert ring.fence(uapi.drm_amdgpu_cs.from_buffer_copy(out.arg).out.handle).signaled and c.word(136) == 7
