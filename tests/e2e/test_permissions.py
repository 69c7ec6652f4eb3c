"""End to end, as uid 65534 in a child process: Linux's permissions on the device
tree (docs/vdev.md, "Permissions"). debugfs and devcoredump data are root only; a
read of amdgpu_gpu_recover (a reset) needs root; card0 is 0660 of group video and
renderD128 0666 (mount options change them); sysfs and kmsg stay world-readable."""
import grp
import os
import stat

import pytest

from tests.conftest import _mounted
from tests.helpers import NOBODY, Drm, read_text, run_client

TRY = """
import errno, os, sys
for path in sys.argv[2:]:
    flags = os.O_WRONLY | os.O_TRUNC if path.startswith("w:") else os.O_RDWR if path.startswith("rw:") else os.O_RDONLY
    path = path.split(":", 1)[-1]
    try:
        if path.endswith("/"):
            os.listdir(os.path.join(sys.argv[1], path))
        else:
            fd = os.open(os.path.join(sys.argv[1], path), flags)
            if flags & os.O_WRONLY:
                os.write(fd, b"1\\n")
            os.close(fd)
        print("ok")
    except OSError as e:
        print(errno.errorcode[e.errno])
"""

DEBUGFS = [f"sys/kernel/debug/dri/0/{n}" for n in ("name", "clients", "amdgpu_gem_info", "amdgpu_vm_info",
                                                     "amdgpu_fence_info", "amdgpu_gpu_recover", "amdgpu_ring_sdma0",
                                                     "amdgpu_ring_comp_1.0.0")]
READABLE = [f"sys/class/drm/card0/device/{n}" for n in ("vendor", "device", "uevent", "mem_info_vram_total",
                                                         "mem_info_vram_used", "mem_info_gtt_total",
                                                         "mem_info_gtt_used", "gpu_busy_percent")] + ["dev/kmsg"]


def attempt(mount, *paths, **kw):
    return run_client(TRY, mount, *paths, check=True, **kw).stdout.split()


def video_gid() -> int:
    try:
        return grp.getgrnam("video").gr_gid
    except KeyError:
        return 0


def test_debugfs_is_root_only(vgpu_mount):
    # Root reads them first, so the kernel holds the names: the open is refused anyway.
    for path in DEBUGFS:
        with open(os.path.join(vgpu_mount, path), "rb") as f:   # amdgpu_ring_* are binary
            f.read()
    assert attempt(vgpu_mount, *DEBUGFS, uid=NOBODY) == ["EACCES"] * len(DEBUGFS)
    assert attempt(vgpu_mount, "sys/kernel/debug/", "sys/kernel/debug/dri/0/", uid=NOBODY) == ["EACCES"] * 2
    assert attempt(vgpu_mount, *DEBUGFS) == ["ok"] * len(DEBUGFS)
    assert stat.S_IMODE(os.stat(f"{vgpu_mount}/sys/kernel/debug").st_mode) == 0o700


def test_a_read_of_gpu_recover_needs_root_and_resets(vgpu_mount):
    """amdgpu_gpu_recover is 0444 as on Linux: root's read resets, nothing writes it."""
    path = "sys/kernel/debug/dri/0/amdgpu_gpu_recover"
    assert attempt(vgpu_mount, path, "w:" + path, uid=NOBODY) == ["EACCES", "EACCES"]
    assert attempt(vgpu_mount, "w:" + path) == ["EACCES"]
    assert "GPU reset begin" not in read_text(f"{vgpu_mount}/dev/kmsg")   # no reset happened
    assert read_text(f"{vgpu_mount}/{path}") == "0\n"
    assert "GPU reset succeeded" in read_text(f"{vgpu_mount}/dev/kmsg")


FAULT = """
import sys
from vgpu import uapi
from vgpu.sdma import SdmaIb
from tests.helpers import Drm
d = Drm(sys.argv[1])
a = uapi.drm_amdgpu_ctx(); a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
ctx = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id
ib = d.gem_create(4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
d.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(handle=ib, operation=uapi.AMDGPU_VA_OP_MAP,
        va_address=0x200000, map_size=4096, flags=uapi.AMDGPU_VM_PAGE_READABLE))
packets = SdmaIb().write_linear(0x7000000000, [1]).tobytes()
with open(d.bo_path(d.gem_mmap(ib)), "r+b") as f:
    f.write(packets)
c = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x200000, ib_bytes=len(packets), ip_type=uapi.AMDGPU_HW_IP_DMA)
h = uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB, length_dw=len(bytes(c)) // 4)
cs = uapi.drm_amdgpu_cs(); cs.in_.ctx_id, cs.in_.num_chunks = ctx, 1
seq = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, bytes(h) + bytes(c))[0].out.handle
w = uapi.drm_amdgpu_wait_cs(); w.in_.handle, w.in_.ip_type, w.in_.ctx_id, w.in_.timeout = seq, uapi.AMDGPU_HW_IP_DMA, ctx, (1 << 64) - 1
try:
    d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)
except OSError as e:
    print(e.errno)
"""


def test_devcoredump_data_is_root_only(vgpu_mount):
    run_client(FAULT, vgpu_mount, uid=NOBODY, check=True)         # nobody's own job faults
    dumps = os.listdir(f"{vgpu_mount}/sys/class/devcoredump")
    assert dumps == ["devcd0"]
    assert attempt(vgpu_mount, "sys/class/devcoredump/", "sys/class/devcoredump/devcd0/",
                   uid=NOBODY) == ["ok", "ok"]                       # listed, as on Linux
    assert attempt(vgpu_mount, "sys/class/devcoredump/devcd0/data", uid=NOBODY) == ["EACCES"]
    assert stat.S_IMODE(os.stat(f"{vgpu_mount}/sys/class/devcoredump/devcd0/data").st_mode) == 0o600
    assert "vgpu device coredump" in read_text(f"{vgpu_mount}/sys/class/devcoredump/devcd0/data")


def test_card0_is_group_video_and_render_is_for_everyone(vgpu_mount):
    card, render = (os.stat(f"{vgpu_mount}/dev/dri/{n}") for n in ("card0", "renderD128"))
    assert (stat.S_IMODE(card.st_mode), card.st_gid) == (0o660, video_gid())
    assert stat.S_IMODE(render.st_mode) == 0o666
    with Drm(vgpu_mount, "card0"):
        pass                                                       # root, so the name is cached
    assert attempt(vgpu_mount, "rw:dev/dri/card0", "rw:dev/dri/renderD128", uid=NOBODY) == ["EACCES", "ok"]
    if video_gid():
        assert attempt(vgpu_mount, "rw:dev/dri/card0", uid=NOBODY, groups=[video_gid()]) == ["ok"]


def test_sysfs_and_kmsg_stay_readable(vgpu_mount):
    assert attempt(vgpu_mount, *READABLE, uid=NOBODY) == ["ok"] * len(READABLE)
    assert attempt(vgpu_mount, "w:sys/class/drm/card0/device/vendor", uid=NOBODY) == ["EACCES"]


@pytest.fixture
def open_mount():
    yield from _mounted("--vram", "64M", "--mode", "0666", "--render-mode", "0660", "--group", "0")


def test_mode_and_group_are_mount_options(open_mount):
    card, render = (os.stat(f"{open_mount}/dev/dri/{n}") for n in ("card0", "renderD128"))
    assert (stat.S_IMODE(card.st_mode), stat.S_IMODE(render.st_mode), card.st_gid) == (0o666, 0o660, 0)
    assert attempt(open_mount, "rw:dev/dri/card0", "rw:dev/dri/renderD128", uid=NOBODY) == ["ok", "EACCES"]
