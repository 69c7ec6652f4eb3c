"""Permissions from the requester's uid and groups on every request (docs/vdev.md,
"Permissions"), VgpuFs called directly over the real KMD: debugfs and devcoredump
data are root only, a read of amdgpu_gpu_recover (which resets) needs root, card0 is 0660 of
group video, renderD128 0666, the world-readable sysfs files stay readable. The same
through a mount, as uid 65534: tests/e2e/test_permissions.py."""
import errno
import os
import stat

import pyfuse3
import pytest

from tests.kmd.conftest import call, gem_create, gem_va
from vdev import nodes
from vdev.fs import VgpuFs
from vdev.options import NodePermissions
from vgpu import uapi

from .test_fs import VA_IB, Ctx, bo_path, fails, faulting_job, walk

VIDEO = 44


class Nobody:
    uid = gid = 65534
    pid = os.getpid()
    umask = 0o22


class Video(Nobody):
    gid = VIDEO            # its primary group is the card's


class Member(Nobody):
    pass                   # video only as a supplementary group (see the fixture)


@pytest.fixture
def fs(dev, monkeypatch):
    # Member's supplementary groups as /proc/<pid>/status would give them.
    real = nodes._proc_groups
    monkeypatch.setattr(nodes, "_proc_groups", lambda pid: frozenset({VIDEO}) if pid == -1 else real(pid))
    Member.pid = -1
    return VgpuFs(dev, NodePermissions(gid=VIDEO))


async def open_as(fs, path, ctx, flags=os.O_RDONLY):
    inode = await walk(fs, path)  # looked up by root: the kernel may hold the name cached
    fi = await fs.open(inode, flags, ctx)
    await fs.release(fi.fh)


DEBUGFS = ["sys/kernel/debug/dri/0/" + n for n in ("name", "clients", "amdgpu_gem_info", "amdgpu_vm_info",
                                                    "amdgpu_fence_info", "amdgpu_gpu_recover", "amdgpu_ring_sdma0")]
SYSFS = ["sys/class/drm/card0/device/" + n for n in ("vendor", "device", "uevent", "mem_info_vram_total",
                                                      "mem_info_vram_used", "mem_info_gtt_total",
                                                      "mem_info_gtt_used", "gpu_busy_percent")]


@pytest.mark.parametrize("path", DEBUGFS)
async def test_debugfs_is_root_only(fs, path):
    await fails(errno.EACCES, open_as(fs, path, Nobody()))
    await open_as(fs, path, Ctx())


async def test_debugfs_cannot_be_listed_or_searched_by_others(fs):
    debug = await walk(fs, "sys/kernel/debug")
    assert stat.S_IMODE((await fs.getattr(debug, Ctx())).st_mode) == 0o700
    await fails(errno.EACCES, fs.opendir(debug, Nobody()))
    await fails(errno.EACCES, fs.lookup(debug, b"dri", Nobody()))
    assert not await fs.access(await walk(fs, "sys/kernel/debug/dri/0/amdgpu_gem_info"), os.R_OK, Nobody())
    assert await fs.access(await walk(fs, "sys/kernel/debug/dri/0/amdgpu_gem_info"), os.R_OK, Ctx())


async def test_a_read_of_gpu_recover_needs_root_and_resets(fs, dev):
    """amdgpu_gpu_recover is 0444, as on Linux: a read resets, a write is refused."""
    path = "sys/kernel/debug/dri/0/amdgpu_gpu_recover"
    resets = dev.reset_counter
    await fails(errno.EACCES, open_as(fs, path, Nobody()))
    await fails(errno.EACCES, open_as(fs, path, Ctx(), os.O_WRONLY | os.O_TRUNC))
    assert dev.reset_counter == resets
    inode = await walk(fs, path)
    assert stat.S_IMODE((await fs.getattr(inode, Ctx())).st_mode) == 0o444
    fi = await fs.open(inode, os.O_RDONLY, Ctx())
    assert await fs.read(fi.fh, 0, 64) == b"0\n"
    await fs.release(fi.fh)
    assert dev.reset_counter == resets + 1


async def test_devcoredump_data_is_root_only_but_listed(fs, dev):
    f = dev.open_file(pid=10, uid=0, comm="faulty")
    handle = gem_create(dev, f, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, handle, VA_IB, 4096))
    faulting_job(dev, f, bo_path(dev, f, handle))
    fh = await fs.opendir(await walk(fs, "sys/class/devcoredump"), Nobody())   # Linux lists them
    assert [n for n, _ in fs._dir_listings[fh]] == ["devcd0"]
    await fs.releasedir(fh)
    data = await walk(fs, "sys/class/devcoredump/devcd0/data")
    assert stat.S_IMODE((await fs.getattr(data, Ctx())).st_mode) == 0o600
    await fails(errno.EACCES, open_as(fs, "sys/class/devcoredump/devcd0/data", Nobody()))
    await open_as(fs, "sys/class/devcoredump/devcd0/data", Ctx())
    dev.close_file(f)


async def test_card0_is_0660_group_video_and_render_0666(fs):
    card = await fs.getattr(await walk(fs, "dev/dri/card0"), Ctx())
    render = await fs.getattr(await walk(fs, "dev/dri/renderD128"), Ctx())
    assert (stat.S_IMODE(card.st_mode), card.st_gid) == (0o660, VIDEO)
    assert (stat.S_IMODE(render.st_mode), render.st_gid) == (0o666, VIDEO)
    assert card.st_uid == render.st_uid == os.geteuid()
    await fails(errno.EACCES, open_as(fs, "dev/dri/card0", Nobody(), os.O_RDWR))
    await open_as(fs, "dev/dri/card0", Video(), os.O_RDWR)      # its gid
    await open_as(fs, "dev/dri/card0", Member(), os.O_RDWR)     # a supplementary group
    await open_as(fs, "dev/dri/renderD128", Nobody(), os.O_RDWR)


async def test_node_modes_and_group_are_options(dev):
    fs = VgpuFs(dev, NodePermissions(card_mode=0o666, render_mode=0o600, gid=0))
    await open_as(fs, "dev/dri/card0", Nobody(), os.O_RDWR)
    await fails(errno.EACCES, open_as(fs, "dev/dri/renderD128", Nobody(), os.O_RDWR))


@pytest.mark.parametrize("path", SYSFS + ["dev/kmsg"])
async def test_the_world_readable_files_stay_readable(fs, path):
    await open_as(fs, path, Nobody())
    await fails(errno.EACCES, open_as(fs, path, Nobody(), os.O_WRONLY))


async def test_a_truncate_needs_write_permission(fs):
    """`> card0` opens with O_TRUNC: the size change must be the requester's to make."""

    class Fields:  # what pyfuse3.SetattrFields says for a truncate
        update_size, update_mode, update_uid, update_gid = True, False, False, False

    inode = await walk(fs, "dev/dri/card0")
    await fails(errno.EACCES, fs.setattr(inode, pyfuse3.EntryAttributes(), Fields(), None, Nobody()))
    await fs.setattr(inode, pyfuse3.EntryAttributes(), Fields(), None, Video())
