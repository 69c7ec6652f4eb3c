"""VgpuFs handlers called directly (no mount): generated-file providers, writable
debugfs entries, devcoredump directories, error mapping. The end-to-end behaviour
through the kernel is in tests/e2e/."""
import errno
import os

import pyfuse3
import pytest

from kmd.errors import KmdError
from vdev.fs import VgpuFs


class Log:
    def __init__(self):
        self.lines = []

    def log(self, msg):
        self.lines.append(msg)

    def text(self):
        return "".join(line + "\n" for line in self.lines)


class FakeDevice:
    """Just what VgpuFs touches, with entries the KMD may grow later."""

    def __init__(self):
        self.kmsg = Log()
        self.written = []
        self.dumps = {}

    def sysfs_files(self):
        return {"vendor": lambda: "0x1002\n"}

    def debugfs_files(self):
        def boom():
            raise RuntimeError("bug in a view")
        return {"name": lambda: "vgpu\n", "gpu_reset": (lambda: "0\n", self.written.append),
                "broken": boom, "refuse": (lambda: "", self._refuse)}

    def _refuse(self, data):
        raise KmdError(errno.EBUSY, "busy")

    def devcoredumps(self):
        return self.dumps

    def bo_by_offset(self, offset):
        return None


class Ctx:
    uid = pid = gid = 0
    umask = 0o22


@pytest.fixture
def fs():
    return VgpuFs(FakeDevice())


async def walk(fs, path):
    inode = pyfuse3.ROOT_INODE
    for part in path.split("/"):
        inode = (await fs.lookup(inode, part.encode(), Ctx())).st_ino
    return inode


async def cat(fs, path):
    fi = await fs.open(await walk(fs, path), os.O_RDONLY, Ctx())
    assert fi.direct_io
    try:
        return await fs.read(fi.fh, 0, 1 << 16)
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
    assert e.value.errno == err


async def test_generated_files(fs):
    assert await cat(fs, "sys/class/drm/card0/device/vendor") == b"0x1002\n"
    assert await cat(fs, "sys/kernel/debug/dri/0/name") == b"vgpu\n"
    assert b"" == await cat(fs, "dev/kmsg")
    fs.dev.kmsg.log("hello")
    assert await cat(fs, "dev/kmsg") == b"hello\n"


async def test_snapshot_is_taken_at_open(fs):
    fi = await fs.open(await walk(fs, "dev/kmsg"), os.O_RDONLY, Ctx())
    fs.dev.kmsg.log("later")
    assert await fs.read(fi.fh, 0, 100) == b""


async def test_writable_debugfs_entry(fs):
    inode = await walk(fs, "sys/kernel/debug/dri/0/gpu_reset")
    assert (await fs.getattr(inode, Ctx())).st_mode & 0o777 == 0o644
    fi = await fs.open(inode, os.O_WRONLY, Ctx())
    assert await fs.write(fi.fh, 0, b"1\n") == 2
    assert fs.dev.written == [b"1\n"]
    ro = await walk(fs, "sys/kernel/debug/dri/0/name")
    await fails(errno.EACCES, fs.open(ro, os.O_WRONLY, Ctx()))


async def test_kmd_errors_keep_their_errno_and_bugs_become_eio(fs):
    fi = await fs.open(await walk(fs, "sys/kernel/debug/dri/0/refuse"), os.O_WRONLY, Ctx())
    await fails(errno.EBUSY, fs.write(fi.fh, 0, b"x"))
    await fails(errno.EIO, fs.open(await walk(fs, "sys/kernel/debug/dri/0/broken"), os.O_RDONLY, Ctx()))
    assert "internal error in open" in fs.dev.kmsg.text()


async def test_devcoredump_directories_follow_the_provider(fs):
    assert await listdir(fs, "sys/class/devcoredump") == []
    fs.dev.dumps[0] = "dump zero"
    fs.dev.dumps[3] = "dump three"
    assert await listdir(fs, "sys/class/devcoredump") == ["devcd0", "devcd3"]
    assert await listdir(fs, "sys/class/devcoredump/devcd3") == ["data"]
    assert await cat(fs, "sys/class/devcoredump/devcd0/data") == b"dump zero"
    inode = await walk(fs, "sys/class/devcoredump/devcd3")
    del fs.dev.dumps[3]
    await fails(errno.ENOENT, walk(fs, "sys/class/devcoredump/devcd3"))
    fs.dev.dumps[3] = "again"
    assert await walk(fs, "sys/class/devcoredump/devcd3") == inode  # a name keeps its inode


async def test_lookup_errors(fs):
    await fails(errno.ENOENT, walk(fs, "nothing"))
    await fails(errno.ENOENT, walk(fs, "bo/1000"))
    await fails(errno.ENOTDIR, walk(fs, "dev/kmsg/x"))
    await fails(errno.EISDIR, fs.open(await walk(fs, "dev"), os.O_RDONLY, Ctx()))


async def test_bo_entries_are_symlinks_to_the_owners_shared_memory_file():
    """bo/<offset-hex> is a symlink to the BO's tmpfs file; only the BO's uid (or
    root) may read the link; a freed BO's name is gone (real KMD, no mount)."""
    import stat

    from kmd.device import Device
    from tests.kmd.conftest import call, gem_create
    from vgpu import uapi

    dev = Device(vram_size=1 << 20, gtt_size=1 << 20)
    try:
        fs = VgpuFs(dev)
        f = dev.open_file(pid=10, uid=1000, comm="t")
        h = gem_create(dev, f)
        m = uapi.drm_amdgpu_gem_mmap()
        m.in_.handle = h
        offset = call(dev, f, "AMDGPU_GEM_MMAP", m)[0].out.addr_ptr
        name = f"bo/{offset:x}"
        attr = await fs.getattr(await walk(fs, name))
        assert stat.S_ISLNK(attr.st_mode)

        class Owner(Ctx):
            uid = 1000

        class Other(Ctx):
            uid = 1001

        target = await fs.readlink(await walk(fs, name), Owner())
        assert target == f.bos[h].path.encode()
        st = os.stat(target)
        assert (st.st_uid, stat.S_IMODE(st.st_mode), st.st_size) == (1000, 0o600, 4096)
        assert stat.S_IMODE(os.stat(os.path.dirname(target)).st_mode) == 0o711
        await fails(errno.EACCES, fs.readlink(await walk(fs, name), Other()))
        inode = await walk(fs, name)
        dev.close_file(f)
        await fails(errno.ENOENT, fs.readlink(inode, Owner()))
        await fails(errno.ENOENT, walk(fs, name))
        assert not os.path.exists(target)
    finally:
        dev.shutdown()


async def test_sync_file_poll_is_woken_on_the_trio_loop():
    """A busy sync file answers poll() with 0 and keeps the kernel's handle; when
    another thread signals the syncobj, the handle is notified on the trio loop (no
    vdev thread) and the next poll() answers POLLIN (real KMD, no mount)."""
    import select
    import struct
    import threading

    import trio

    from kmd.device import Device
    from tests.kmd.conftest import call
    from vgpu import uapi

    class PollHandle:  # records what pyfuse3.PollHandle.notify would do
        def __init__(self):
            self.threads = []

        def notify(self):
            self.threads.append(threading.get_ident())

    dev = Device(vram_size=1 << 20, gtt_size=1 << 20)
    try:
        fs = VgpuFs(dev)
        f = dev.open_file(pid=10, uid=0, comm="t")
        h = call(dev, f, "SYNCOBJ_CREATE", uapi.drm_syncobj_create())[0].handle
        token = call(dev, f, "SYNCOBJ_HANDLE_TO_FD", uapi.drm_syncobj_handle(handle=h))[0].fd
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
        await fs.release(fi.fh)
        dev.close_file(f)
    finally:
        dev.shutdown()
