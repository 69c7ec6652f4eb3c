"""End to end: two processes share a BO by its flink name through a real mount
(GEM_FLINK / GEM_OPEN on card0, docs/kmd.md), and a card0 client of another user
needs the master's AUTH_MAGIC first, as on Linux."""
import grp
import subprocess

import pytest

from tests.helpers import NOBODY, _drop_to, _env, client_python, run_client, start_client

PRELUDE = """
import mmap, os, sys
from vgpu import uapi
from tests.helpers import Drm
M = sys.argv[1]

def bo_map(d, handle, size):
    fd = os.open(f"{M}/bo/{d.gem_mmap(handle):x}", os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
"""

# The master: the first card0 open of the mount. Writes into a GTT BO, prints its
# name, then authenticates the magics it reads on stdin ("auth N"), until "exit".
MASTER = PRELUDE + """
d = Drm(M, "card0")
h = d.gem_create(8192, uapi.AMDGPU_GEM_DOMAIN_GTT)
view = bo_map(d, h, 8192)
view[0:11] = b"from master"
print(d.ioctl(uapi.DRM_IOCTL_GEM_FLINK, uapi.drm_gem_flink(handle=h))[0].name, flush=True)
for line in sys.stdin:
    cmd, *a = line.split()
    if cmd == "auth":
        d.ioctl(uapi.DRM_IOCTL_AUTH_MAGIC, uapi.drm_auth(magic=int(a[0])))
        print("authenticated", flush=True)
    elif cmd == "check":
        print(bytes(view[4096:4096 + int(a[0])]), flush=True)
    elif cmd == "exit":
        break
"""

# Opens the name on its own card0 file; with "wait", first prints its magic and
# waits for a line on stdin (the master's AUTH_MAGIC of it).
OPENER = PRELUDE + """
import errno
name, tag = int(sys.argv[2]), sys.argv[3].encode()
d = Drm(M, "card0")
if len(sys.argv) > 4:
    try:
        d.ioctl(uapi.DRM_IOCTL_GEM_OPEN, uapi.drm_gem_open(name=name))
    except OSError as e:
        print("before", errno.errorcode[e.errno], flush=True)
    print(d.ioctl(uapi.DRM_IOCTL_GET_MAGIC, uapi.drm_auth())[0].magic, flush=True)
    sys.stdin.readline()
out = d.ioctl(uapi.DRM_IOCTL_GEM_OPEN, uapi.drm_gem_open(name=name))[0]
print("size", out.size)
view = bo_map(d, out.handle, out.size)
print("read", bytes(view[0:11]))
view[4096:4096 + len(tag)] = tag
"""


def test_two_processes_share_a_bo_by_flink_name(vgpu_mount):
    master = start_client(MASTER, vgpu_mount)
    try:
        name = int(master.stdout.readline())
        assert name == 1
        r = run_client(OPENER, vgpu_mount, name, "from root", check=True)   # root: authenticated
        assert r.stdout.splitlines() == ["size 8192", "read b'from master'"]
        master.stdin.write("check 9\n")
        master.stdin.flush()
        assert master.stdout.readline().strip() == "b'from root'"
    finally:
        master.stdin.write("exit\n")
        master.stdin.close()
        master.wait(timeout=30)


def test_another_user_on_card0_needs_the_masters_auth_magic(vgpu_mount):
    """uid 65534 in group video opens card0 (0660 root:video): not authenticated, so
    GEM_OPEN is EACCES until the master AUTH_MAGICs the magic it passes on."""
    try:
        video = grp.getgrnam("video").gr_gid
    except KeyError:
        pytest.skip("no group video: a user other than root cannot open card0")
    master = start_client(MASTER, vgpu_mount)
    opener = None
    try:
        name = master.stdout.readline().strip()
        opener = subprocess.Popen([client_python(NOBODY), "-c", OPENER, vgpu_mount, name, "from nobody", "wait"],
                                  env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd="/", preexec_fn=_drop_to(NOBODY, [video]))
        assert opener.stdout.readline().split() == ["before", "EACCES"]
        magic = int(opener.stdout.readline())
        master.stdin.write(f"auth {magic}\n")
        master.stdin.flush()
        assert master.stdout.readline().strip() == "authenticated"
        opener.stdin.write("go\n")
        opener.stdin.flush()
        assert opener.stdout.read().splitlines() == ["size 8192", "read b'from master'"]
        assert opener.wait(timeout=30) == 0
        master.stdin.write("check 11\n")
        master.stdin.flush()
        assert master.stdout.readline().strip() == "b'from nobody'"
    finally:
        if opener is not None:
            opener.kill()
            opener.wait()
        master.stdin.write("exit\n")
        master.stdin.close()
        master.wait(timeout=30)


# Real ioctl() calls (tests/raw_ioctl.py): the master ioctls, DRM_IO ones included,
# with Linux's errno on each node; a print per call.
RAW = r"""
import sys
from vgpu import uapi
from tests.raw_ioctl import Raw
M = sys.argv[1]
master, other, render = Raw(M, "card0"), Raw(M, "card0"), Raw(M, "renderD128")
a = uapi.drm_auth()
print(master.errno(uapi.DRM_IOCTL_GET_MAGIC, a), a.magic >= 1)
print(render.errno(uapi.DRM_IOCTL_GET_MAGIC, uapi.drm_auth()))                  # EACCES
print(master.errno(uapi.DRM_IOCTL_SET_MASTER, 0))                               # already master
print(other.errno(uapi.DRM_IOCTL_SET_MASTER, 0))                                # EBUSY
print(other.errno(uapi.DRM_IOCTL_DROP_MASTER, 0))                               # EINVAL
print(master.errno(uapi.DRM_IOCTL_AUTH_MAGIC, uapi.drm_auth(magic=0)))          # EINVAL: drmIsMaster's probe
print(other.errno(uapi.DRM_IOCTL_AUTH_MAGIC, uapi.drm_auth(magic=0)))           # EACCES: not master
print(master.errno(uapi.DRM_IOCTL_DROP_MASTER, 0), other.errno(uapi.DRM_IOCTL_SET_MASTER, 0))
print(render.errno(uapi.DRM_IOCTL_SET_MASTER, 0), render.errno(uapi.DRM_IOCTL_GEM_FLINK, uapi.drm_gem_flink()))
"""


def test_master_ioctls_by_real_ioctl(vgpu_mount):
    r = run_client(RAW, vgpu_mount, check=True)
    assert r.stdout.splitlines() == ["0 True", "13", "0", "16", "22", "22", "13", "0 0", "13 13"]
