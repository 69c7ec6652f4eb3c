"""End to end: the daemon killed with SIGKILL. Clients holding open files learn it
at once (ENOTCONN for a new request, ECONNABORTED for one in flight), and the next
`vgpu mount` on the same directory works and removes what the dead daemon left (its
BO store). The times are printed, not asserted: the limit only bounds a hang."""
import os
import signal
import tempfile
import time

import pytest

from tests.helpers import make_mount_dir, mount, read_text, start_client, unmount, vgpu_cli, wait_for
from vgpu_tools.cli import _alive, state_paths

# Holds an open file and a mapped BO; says "ready", then sends VERSION in a loop
# (or, with "wait", blocks in a WAIT_CS on a job that polls forever) until the
# daemon is gone, and prints the errno it got and how long after the kill it came.
HOLDER = """
import errno, mmap, os, sys, time
from vgpu import uapi
from vgpu.sdma import SdmaIb
from tests.helpers import Drm
M, mode, stamp = sys.argv[1], sys.argv[2], sys.argv[3]
d = Drm(M)
h = d.gem_create(4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
with open(d.bo_path(d.gem_mmap(h)), "r+b") as f:
    m = mmap.mmap(f.fileno(), 4096)
m[:4] = b"mine"
if mode == "wait":
    a = uapi.drm_amdgpu_ctx(); a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
    ctx = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id
    d.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(handle=h, operation=uapi.AMDGPU_VA_OP_MAP,
            va_address=0x200000, map_size=4096, flags=0xE))
    ib = SdmaIb().poll_regmem(0x200000 + 64, 1).tobytes()
    m[256:256 + len(ib)] = ib
    c = uapi.drm_amdgpu_cs_chunk_ib(va_start=0x200000 + 256, ib_bytes=len(ib), ip_type=uapi.AMDGPU_HW_IP_DMA)
    hd = uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB, length_dw=len(bytes(c)) // 4)
    cs = uapi.drm_amdgpu_cs(); cs.in_.ctx_id, cs.in_.num_chunks = ctx, 1
    seq = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, bytes(hd) + bytes(c))[0].out.handle
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ip_type, w.in_.ctx_id, w.in_.timeout = seq, uapi.AMDGPU_HW_IP_DMA, ctx, (1 << 64) - 1
    print("ready", flush=True)
    try:
        d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)
        print("answered")
    except OSError as e:
        print(errno.errorcode[e.errno], time.time() - float(open(stamp).read() or 0))
else:
    print("ready", flush=True)
    while True:
        try:
            d.version()
        except OSError as e:
            print(errno.errorcode[e.errno], time.time() - float(open(stamp).read() or 0))
            break
        time.sleep(0.01)
print(bytes(m[:4]).decode())       # the mapping outlives the daemon
"""


@pytest.fixture
def shm_base():
    # A base of our own on the tmpfs (not named vgpu-*), so that no other mount's
    # cleanup of dead stores touches this test's.
    path = tempfile.mkdtemp(prefix="killtest-", dir="/dev/shm")
    yield path
    os.system(f"rm -rf {path}")


def test_a_killed_daemon_fails_its_clients_at_once_and_the_next_mount_cleans_up(shm_base):
    mount_dir = make_mount_dir()
    stamp = os.path.join(shm_base, "killed-at")
    open(stamp, "w").close()
    try:
        mount(mount_dir, "--vram", "32M", "--gtt", "64M", "--timeout", "60", "--shm-dir", shm_base)
        pid = int(state_paths(mount_dir)[1].read_text())
        stores = [n for n in os.listdir(shm_base) if n.startswith("vgpu-")]
        assert len(stores) == 1
        dead_files = os.path.join(shm_base, stores[0], "bo")
        # As root the BO files sit on a private huge-page tmpfs (docs/memory.md).
        assert os.path.ismount(dead_files) == (os.geteuid() == 0)
        holders = [start_client(HOLDER, mount_dir, mode, stamp) for mode in ("loop", "wait")]
        for h in holders:
            assert h.stdout.readline().split() == ["ready"]
        with open(stamp, "w") as f:
            f.write(repr(time.time()))
        os.kill(pid, signal.SIGKILL)
        outs = [h.communicate(timeout=60)[0].split() for h in holders]
        wait_for(lambda: not _alive(pid), "the daemon to die")
        (loop_err, loop_after, loop_data), (wait_err, wait_after, wait_data) = outs
        print(f"\nafter SIGKILL: a new request failed with {loop_err} after {float(loop_after):.3f} s, "
              f"a blocked WAIT_CS with {wait_err} after {float(wait_after):.3f} s")
        assert loop_err in ("ENOTCONN", "ECONNABORTED") and wait_err in ("ENOTCONN", "ECONNABORTED")
        assert loop_data == wait_data == "mine"
        assert os.path.isdir(os.path.join(shm_base, stores[0]))       # what the dead daemon left

        r = vgpu_cli("mount", mount_dir, "--vram", "32M", "--gtt", "64M", "--shm-dir", shm_base)
        assert r.returncode == 0, r.stderr
        assert "stale mount" in r.stderr and "removed the BO files of a dead daemon" in r.stderr
        assert not os.path.exists(os.path.join(shm_base, stores[0]))
        assert dead_files not in _mount_points()     # its tmpfs detached, not just hidden
        assert len([n for n in os.listdir(shm_base) if n.startswith("vgpu-")]) == 1   # the new one
        assert read_text(f"{mount_dir}/sys/class/drm/card0/device/mem_info_vram_used") == "0\n"
    finally:
        unmount(mount_dir)
        os.rmdir(mount_dir)
    assert not [m for m in _mount_points() if m.startswith(shm_base)]


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]
