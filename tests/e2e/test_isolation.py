"""End to end: BO files are capabilities of their owner; a client's death frees
everything it held."""
import os
import signal

from tests.helpers import NOBODY, read_text, run_client, start_client, wait_for

PRELUDE = """
import errno, mmap, os, sys
from vgpu import uapi
from tests.helpers import Drm
M = sys.argv[1]
"""

# Allocates a BO, maps and writes it, reports its path, then waits for a line on stdin.
HOLDER = PRELUDE + """
d = Drm(M)
h = d.gem_create(int(sys.argv[2]))
path = d.bo_path(d.gem_mmap(h))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, int(sys.argv[2]), mmap.MAP_SHARED)
m[:5] = b"owned"
print(path, flush=True)
sys.stdin.readline()
"""

TRY_OPEN = PRELUDE + """
for flags in (os.O_RDONLY, os.O_RDWR):
    try:
        os.close(os.open(sys.argv[2], flags))
        print("opened")
    except OSError as e:
        print(errno.errorcode[e.errno])
"""

LIST = """
import errno, os, sys
try:
    print(len(os.listdir(sys.argv[1])))
except OSError as e:
    print(errno.errorcode[e.errno])
"""

# Names in the store are 128 random bits: a guess, even of the right length, fails.
GUESS = PRELUDE + """
import secrets
for name in (secrets.token_hex(16), "0" * 32, "f" * 32):
    try:
        os.close(os.open(os.path.join(sys.argv[2], name), os.O_RDWR))
        print("opened")
    except OSError as e:
        print(errno.errorcode[e.errno])
"""


def vram_used(mount) -> int:
    return int(read_text(f"{mount}/sys/class/drm/card0/device/mem_info_vram_used"))


def test_other_uid_cannot_open_a_root_bo(vgpu_mount):
    holder = start_client(HOLDER, vgpu_mount, 65536)
    try:
        path = holder.stdout.readline().strip()
        r = run_client(TRY_OPEN, vgpu_mount, path, uid=NOBODY, check=True)
        assert r.stdout.split() == ["EACCES", "EACCES"]
        # The shared-memory file itself: 0600 root, in a directory nobody else lists.
        target = os.readlink(path)
        r = run_client(TRY_OPEN, vgpu_mount, target, uid=NOBODY, check=True)
        assert r.stdout.split() == ["EACCES", "EACCES"]
        r = run_client(LIST, os.path.dirname(target), uid=NOBODY, check=True)
        assert r.stdout.split() == ["EACCES"]
        r = run_client(TRY_OPEN, vgpu_mount, path, check=True)  # the owner's uid (root)
        assert r.stdout.split() == ["opened", "opened"]
    finally:
        holder.communicate("\n", timeout=60)
    assert f"access by uid {NOBODY}" in read_text(f"{vgpu_mount}/dev/kmsg")


def test_guessed_shared_memory_names_fail(vgpu_mount):
    holder = start_client(HOLDER, vgpu_mount, 4096, uid=NOBODY)
    try:
        store = os.path.dirname(os.readlink(holder.stdout.readline().strip()))
        r = run_client(GUESS, vgpu_mount, store, uid=NOBODY, check=True)
        assert r.stdout.split() == ["ENOENT"] * 3
    finally:
        holder.communicate("\n", timeout=60)


def test_unprivileged_client_owns_its_bos(vgpu_mount):
    holder = start_client(HOLDER, vgpu_mount, 4096, uid=NOBODY)
    try:
        path = holder.stdout.readline().strip()
        assert os.stat(path).st_uid == NOBODY
        r = run_client(TRY_OPEN, vgpu_mount, path, uid=NOBODY, check=True)
        assert r.stdout.split() == ["opened", "opened"]
        r = run_client(TRY_OPEN, vgpu_mount, path, check=True)  # root may open any BO
        assert r.stdout.split() == ["opened", "opened"]
    finally:
        holder.communicate("\n", timeout=60)


def test_vram_returns_to_baseline_after_exit_without_freeing(vgpu_mount):
    baseline = vram_used(vgpu_mount)
    r = run_client(PRELUDE + """
d = Drm(M)
for _ in range(4):
    d.gem_create(1 << 20)
print(open(M + "/sys/class/drm/card0/device/mem_info_vram_used").read().strip())
""", vgpu_mount, uid=NOBODY, check=True)
    assert int(r.stdout) == baseline + (4 << 20)
    # FUSE delivers release() after the process is gone: wait for it.
    wait_for(lambda: vram_used(vgpu_mount) == baseline, "VRAM to return to its baseline")


def test_vram_returns_to_baseline_after_sigkill(vgpu_mount):
    baseline = vram_used(vgpu_mount)
    holder = start_client(HOLDER, vgpu_mount, 2 << 20)
    try:
        target = os.readlink(holder.stdout.readline().strip())
        assert vram_used(vgpu_mount) == baseline + (2 << 20)
        assert os.path.exists(target)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    wait_for(lambda: vram_used(vgpu_mount) == baseline, "VRAM to return to its baseline")
    assert not os.path.exists(target)  # the killed client's BO file is gone
    assert "closed renderD128" in read_text(f"{vgpu_mount}/dev/kmsg")


def test_handles_do_not_cross_files(vgpu_mount):
    r = run_client(PRELUDE + """
a = Drm(M)
h = a.gem_create(4096)
b = Drm(M)  # another process would get a file just like this one
for op in (b.gem_mmap, b.gem_close):
    try:
        op(h)
        print("reached")
    except OSError as e:
        print(errno.errorcode[e.errno])
print(a.gem_mmap(h) > 0)
""", vgpu_mount, uid=NOBODY, check=True)
    assert r.stdout.split() == ["ENOENT", "ENOENT", "True"]
