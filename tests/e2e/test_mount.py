"""End to end: mount life cycle, generated files, the control-file protocol."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from tests.helpers import (daemon_log, make_mount_dir, mount, read_text, run_client, unmount,
                           vgpu_cli, wait_for)
from kmd.shmem import clean_stale
from vgpu_tools.cli import _alive, state_paths
from vgpu.paths import PCI_SLOT

SYSFS = "sys/class/drm/card0/device"
SYSFS_TEXT = ["vendor", "device", "subsystem_vendor", "subsystem_device", "revision", "class", "uevent",
              "mem_info_vram_total", "mem_info_vram_used", "mem_info_gtt_total", "mem_info_gtt_used",
              "gpu_busy_percent", "product_name", "vgpu_num_evictions", "vgpu_num_bytes_moved",
              "vgpu_cache", "pp_dpm_sclk", "pp_dpm_mclk", "power_dpm_force_performance_level", "unique_id",
              "current_link_speed", "current_link_width", "max_link_speed", "max_link_width",
              "compute_reset_mask", "sdma_reset_mask"]
# config and gpu_metrics are binary; remove is write-only (PCI hot unplug, kmd/pci_hotplug.py)
SYSFS_NAMES = SYSFS_TEXT + ["config", "gpu_metrics", "drm", "subsystem", "driver", "vgpu_engines", "hwmon",
                            "remove"]

# Client prelude: raw os.write/os.read on a control file (tests.helpers.Drm).
PRELUDE = """
import ctypes, errno, os, sys
from vgpu import uapi
from vgpu.frame import encode_request
from tests.helpers import Drm
M = sys.argv[1]
"""


@pytest.fixture
def mount_dir():
    path = make_mount_dir()
    try:
        yield path
    finally:
        unmount(path)
        os.rmdir(path)


def daemon_pid(path) -> int:
    return int(state_paths(path)[1].read_text())


def test_mount_and_umount(mount_dir):
    mount(mount_dir, "--vram", "64M", "--gtt", "128M", "--timeout", "3")
    pid = daemon_pid(mount_dir)
    assert os.path.ismount(mount_dir) and _alive(pid)
    assert sorted(os.listdir(mount_dir)) == ["bo", "dev", "prime", "proc", "sync", "sys"]
    assert read_text(f"{mount_dir}/{SYSFS}/mem_info_vram_total") == f"{64 << 20}\n"
    assert read_text(f"{mount_dir}/{SYSFS}/mem_info_gtt_total") == f"{128 << 20}\n"
    r = vgpu_cli("umount", mount_dir)
    assert r.returncode == 0, r.stderr
    assert not os.path.ismount(mount_dir)
    assert not _alive(pid)
    assert "unmounted" in daemon_log(mount_dir)


def test_sigterm_unmounts_cleanly(mount_dir):
    mount(mount_dir, "--vram", "16M")
    pid = daemon_pid(mount_dir)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not _alive(pid), "the daemon to exit")
    assert not os.path.ismount(mount_dir)
    assert "unmounted" in daemon_log(mount_dir)


def test_mount_creates_missing_directory(mount_dir):
    path = os.path.join(mount_dir, "sub", "dir")
    try:
        mount(path, "--vram", "16M")
        assert os.path.ismount(path)
    finally:
        unmount(path)
        os.rmdir(path)
        os.rmdir(os.path.dirname(path))


def test_dead_mount_is_cleaned_then_mounted(mount_dir):
    mount(mount_dir, "--vram", "16M")
    pid = daemon_pid(mount_dir)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _alive(pid), "the daemon to die")
    with pytest.raises(OSError):
        os.listdir(mount_dir)  # ENOTCONN: the endpoint is gone
    r = vgpu_cli("mount", mount_dir, "--vram", "32M")
    assert r.returncode == 0, r.stderr
    assert "stale mount" in r.stderr
    assert read_text(f"{mount_dir}/{SYSFS}/mem_info_vram_total") == f"{32 << 20}\n"


def test_a_dead_daemons_bo_files_are_removed_by_the_next_umount(mount_dir):
    # Its own --shm-dir: any `vgpu mount` on the default one removes a dead daemon's
    # files there (a test run beside this one would, before the check below).
    shm = tempfile.mkdtemp(prefix="test-bo-store-", dir="/dev/shm")
    try:
        _dead_daemons_files_removed_by_umount(mount_dir, shm)
    finally:
        clean_stale(shm)  # if the test failed: its private tmpfs is still mounted there
        shutil.rmtree(shm, ignore_errors=True)


def _dead_daemons_files_removed_by_umount(mount_dir, shm):
    mount(mount_dir, "--vram", "16M", "--shm-dir", shm)
    pid = daemon_pid(mount_dir)
    r = run_client(PRELUDE + """
d = Drm(M)
print(os.readlink(d.bo_path(d.gem_mmap(d.gem_create(1 << 20)))))
os.kill(int(sys.argv[2]), 9)   # the daemon dies while this client holds the BO
""", mount_dir, pid, check=True)
    store = os.path.dirname(r.stdout.strip())
    wait_for(lambda: not _alive(pid), "the daemon to die")
    assert os.path.isdir(store)  # nobody cleaned up yet
    vgpu_cli("umount", mount_dir)
    assert not os.path.exists(store)


def test_a_bo_store_too_small_for_vram_and_gtt_is_a_clear_error(mount_dir):
    r = vgpu_cli("mount", mount_dir, "--vram", "64T")
    assert r.returncode == 1
    assert "VRAM + GTT need" in r.stderr and "--shm-dir" in r.stderr
    assert not os.path.ismount(mount_dir)


def test_live_mount_is_refused(vgpu_mount):
    r = vgpu_cli("mount", vgpu_mount)
    assert r.returncode == 1
    assert "already mounted" in r.stderr
    assert read_text(f"{vgpu_mount}/{SYSFS}/vendor").strip()  # the first daemon still serves


def test_bad_size_is_refused(mount_dir):
    r = vgpu_cli("mount", mount_dir, "--vram", "lots")
    assert r.returncode == 2 and "--vram" in r.stderr
    assert not os.path.ismount(mount_dir)


def test_daemon_failing_at_start_reports_its_log(mount_dir):
    # /proc is no tmpfs: the daemon refuses it as a BO store (`vgpu mount` checks only
    # that --shm-dir is a directory; a bad --vram is refused before the daemon starts).
    r = vgpu_cli("mount", mount_dir, "--shm-dir", "/proc")
    assert r.returncode == 1
    assert "failed to mount" in r.stderr and "cannot start: BO store /proc" in r.stderr
    assert not os.path.ismount(mount_dir)


def test_tree(vgpu_mount):
    assert sorted(os.listdir(f"{vgpu_mount}/dev/dri")) == ["card0", "renderD128"]
    assert sorted(os.listdir(f"{vgpu_mount}/{SYSFS}")) == sorted(SYSFS_NAMES)
    assert os.listdir(f"{vgpu_mount}/prime") == os.listdir(f"{vgpu_mount}/sync") == []
    assert os.path.isdir(f"{vgpu_mount}/sys/class/devcoredump")
    assert {"name", "clients", "amdgpu_gem_info", "amdgpu_vm_info", "amdgpu_fence_info", "amdgpu_firmware_info",
            "amdgpu_gpu_recover", "amdgpu_ring_comp_1.0.0"} <= set(os.listdir(f"{vgpu_mount}/sys/kernel/debug/dri/0"))
    st = os.stat(f"{vgpu_mount}/dev/dri/renderD128")
    assert st.st_mode & 0o777 == 0o666


def test_generated_files_work_with_cat_and_grep(vgpu_mount):
    for name in SYSFS_TEXT:
        out = subprocess.run(["cat", f"{vgpu_mount}/{SYSFS}/{name}"], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.endswith("\n"), name
    assert read_text(f"{vgpu_mount}/{SYSFS}/vendor").strip() == "0x1002"
    with open(f"{vgpu_mount}/{SYSFS}/gpu_metrics", "rb") as f:   # gpu_metrics_v1_3: size 120, format 1.3
        assert f.read()[:4] == bytes([120, 0, 1, 3])
    for path in os.listdir(f"{vgpu_mount}/sys/kernel/debug/dri/0"):
        assert subprocess.run(["cat", f"{vgpu_mount}/sys/kernel/debug/dri/0/{path}"],
                              capture_output=True).returncode == 0, path
    grep = subprocess.run(["grep", "initialized", f"{vgpu_mount}/dev/kmsg"], capture_output=True, text=True)
    assert grep.returncode == 0 and f"vgpu {PCI_SLOT}" in grep.stdout


def test_generated_files_are_read_only(vgpu_mount):
    with pytest.raises(PermissionError):
        open(f"{vgpu_mount}/{SYSFS}/vendor", "w")


def test_kmsg_larger_than_a_page_reads_whole(vgpu_mount):
    run_client(PRELUDE + """
for _ in range(100):
    with Drm(M): pass
""", vgpu_mount, check=True)
    text = subprocess.run(["cat", f"{vgpu_mount}/dev/kmsg"], capture_output=True, text=True).stdout
    assert len(text) > 8192
    assert text.count("opened renderD128") == 100 and text.endswith("\n")


def test_dmesg_and_info_commands(vgpu_mount):
    r = vgpu_cli("dmesg", "--mount", vgpu_mount)
    assert r.returncode == 0 and "initialized" in r.stdout
    r = vgpu_cli("info", "--mount", vgpu_mount)
    assert r.returncode == 0
    assert "mem_info_vram_total: 67108864 (64.0 MiB)" in r.stdout


def test_version_and_gem_create_with_raw_write_read(vgpu_mount):
    r = run_client(PRELUDE + """
fd = os.open(M + "/dev/dri/renderD128", os.O_RDWR)
v = uapi.drm_version(); v.name_len = 16
frame = encode_request(uapi.DRM_IOCTL_VERSION, bytes(v))
assert os.write(fd, frame) == len(frame)
reply = os.read(fd, 4096)
hdr = uapi.vgpu_reply_header.from_buffer_copy(reply[:16])
assert hdr.result == 0 and hdr.arg_size == ctypes.sizeof(uapi.drm_version), (hdr.result, hdr.arg_size)
assert hdr.extra_size == 16 and len(reply) == 16 + hdr.arg_size + 16
print(reply[16 + hdr.arg_size:].rstrip(b"\\0").decode())

c = uapi.drm_amdgpu_gem_create(); c.in_.bo_size = 65536; c.in_.domains = uapi.AMDGPU_GEM_DOMAIN_VRAM
os.write(fd, encode_request(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, bytes(c)))
reply = os.read(fd, 4096)
out = uapi.drm_amdgpu_gem_create.from_buffer_copy(reply[16:])
print(out.out.handle)
print(open(M + "/sys/class/drm/card0/device/mem_info_vram_used").read().strip())
""", vgpu_mount, check=True)
    name, handle, used = r.stdout.split()
    assert name == "amdgpu" and int(handle) > 0 and int(used) == 65536


@pytest.mark.parametrize("case,err", [("bad_magic", "EINVAL"), ("short", "EINVAL"),
                                      ("sizes", "EINVAL"), ("ioc_size", "EINVAL"),
                                      ("unknown", "ENOTTY"), ("too_big", "E2BIG")])
def test_bad_requests_fail_the_write(vgpu_mount, case, err):
    r = run_client(PRELUDE + """
d = Drm(M)
arg = bytes(ctypes.sizeof(uapi.drm_version))
good = encode_request(uapi.DRM_IOCTL_VERSION, arg)
frames = {
    "bad_magic": b"XXXX" + good[4:],
    "short": good[:10],
    "sizes": good + b"junk",
    "ioc_size": encode_request(uapi.DRM_IOCTL_VERSION, arg + bytes(8)),
    "unknown": encode_request(uapi._IOC(3, uapi.DRM_IOCTL_BASE, 0x9E, 8), bytes(8)),
    "too_big": encode_request(uapi.DRM_IOCTL_VERSION, arg, bytes(uapi.VGPU_MAX_FRAME)),
}
try:
    os.write(d.fd, frames[sys.argv[2]])
except OSError as e:
    print(errno.errorcode[e.errno])
else:
    print("written")
d.version()  # the file still works afterwards
""", vgpu_mount, case, check=True)
    assert r.stdout.split() == [err]


def test_read_without_request_is_einval(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
for _ in range(2):
    try:
        os.read(d.fd, 4096)
    except OSError as e:
        print(errno.errorcode[e.errno])
d.version()
try:
    os.read(d.fd, 4096)  # the reply was consumed
except OSError as e:
    print(errno.errorcode[e.errno])
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["EINVAL"] * 3


def test_small_read_is_einval_and_keeps_the_reply(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
v = uapi.drm_version(); v.name_len = v.date_len = v.desc_len = 32
d.send(uapi.DRM_IOCTL_VERSION, bytes(v))
full = 16 + ctypes.sizeof(v) + 96
print(os.read(d.fd, 0) == b"")  # a zero-byte read never reaches the file system
for size in (16, full - 1):
    try:
        os.read(d.fd, size)
    except OSError as e:
        print(errno.errorcode[e.errno])
print(len(os.read(d.fd, full)) == full)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True", "EINVAL", "EINVAL", "True"]


def test_new_write_replaces_unread_reply(vgpu_mount):
    r = run_client(PRELUDE + """
d = Drm(M)
v = uapi.drm_version()
d.send(uapi.DRM_IOCTL_VERSION, bytes(v))       # its reply is never read
d.send(uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, bytes(uapi.drm_amdgpu_gem_create(
    in_=uapi.drm_amdgpu_gem_create_in(bo_size=4096, domains=uapi.AMDGPU_GEM_DOMAIN_GTT))))
reply = d.recv()
print(len(reply.arg) == ctypes.sizeof(uapi.drm_amdgpu_gem_create))
try:
    os.read(d.fd, 4096)
except OSError as e:
    print(errno.errorcode[e.errno])
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True", "EINVAL"]


def test_each_open_is_its_own_drm_file(vgpu_mount):
    r = run_client(PRELUDE + """
a, b = Drm(M), Drm(M, "card0")
h = a.gem_create(4096)
print(a.gem_mmap(h) > 0)
try:
    b.gem_mmap(h)
except OSError as e:
    print(errno.errorcode[e.errno])
dup = os.dup(a.fd)       # a dup is the same open file, the same handles
os.close(a.fd); a.fd = dup
print(a.gem_mmap(h) > 0)
""", vgpu_mount, check=True)
    assert r.stdout.split() == ["True", "ENOENT", "True"]


def test_clients_listed_in_debugfs_with_their_comm(vgpu_mount):
    proc_code = PRELUDE + """
d = Drm(M)
print(open(M + "/sys/kernel/debug/dri/0/clients").read())
"""
    r = run_client(proc_code, vgpu_mount, check=True)
    # drm_clients_info's columns: command, tgid, dev (the minor: 128 is renderD128), ...
    assert re.search(r"^ +python3 +\d+ +128 +n +[yn] ", r.stdout, re.M), r.stdout   # a: root is authenticated


def test_daemon_survives_garbage(vgpu_mount):
    r = run_client(PRELUDE + """
import random
rng = random.Random(1)
d = Drm(M)
for i in range(300):
    n = rng.choice([0, 1, 15, 16, 17, 40, 200])
    junk = bytes(rng.getrandbits(8) for _ in range(n))
    if rng.random() < 0.5 and n >= 16:
        junk = encode_request(rng.getrandbits(32), b"")[:4] + junk[4:]
    try:
        os.write(d.fd, junk)
    except OSError:
        pass
print(d.version()[1].split(b"\\0")[0].decode())
""", vgpu_mount, check=True)
    assert r.stdout.strip() == "amdgpu"
    assert "internal error" not in read_text(f"{vgpu_mount}/dev/kmsg")


def test_dmesg_follow_prints_new_lines(vgpu_mount):
    from tests.helpers import _env
    p = subprocess.Popen([sys.executable, "-m", "vgpu_tools", "dmesg", "-w", "--mount", vgpu_mount],
                         stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert "initialized" in p.stdout.readline()
        run_client(PRELUDE + "Drm(M).close()\n", vgpu_mount, check=True)
        assert "opened renderD128" in p.stdout.readline()
    finally:
        p.terminate()
        p.wait(timeout=60)


# Client A: a job that polls its BO until it reads 7, then writes 0x600d after it;
# A then waits for it with WAIT_CS, which blocks in read().
POLLING_CLIENT = PRELUDE + """
import mmap, struct
d = Drm(M)
VA_IB, VA_A, DMA = 0x10000000, 0x20000000, uapi.AMDGPU_HW_IP_DMA
a = uapi.drm_amdgpu_ctx(); a.in_.op = uapi.AMDGPU_CTX_OP_ALLOC_CTX
ctx = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CTX, a)[0].out.alloc.ctx_id
ib, buf = d.gem_create(4096, uapi.AMDGPU_GEM_DOMAIN_GTT), d.gem_create(4096)
for h, va in ((ib, VA_IB), (buf, VA_A)):
    d.ioctl(uapi.DRM_IOCTL_AMDGPU_GEM_VA, uapi.drm_amdgpu_gem_va(
        handle=h, operation=uapi.AMDGPU_VA_OP_MAP, va_address=va, map_size=4096,
        flags=uapi.AMDGPU_VM_PAGE_READABLE | uapi.AMDGPU_VM_PAGE_WRITEABLE))
# SDMA POLL_REGMEM (op 8, func EQ, memory poll, retry forever), WRITE_LINEAR (op 2).
words = [0xB0000008, VA_A, 0, 7, 0xFFFFFFFF, 0x0FFF000A, 2, VA_A + 8, 0, 0, 0x600D]
os.pwrite(os.open(d.bo_path(d.gem_mmap(ib)), os.O_RDWR), struct.pack(f"<{len(words)}I", *words), 0)
bl = uapi.drm_amdgpu_bo_list()
bl.in_.operation, bl.in_.bo_number, bl.in_.bo_info_size = uapi.AMDGPU_BO_LIST_OP_CREATE, 2, 8
lst = d.ioctl(uapi.DRM_IOCTL_AMDGPU_BO_LIST, bl, struct.pack("<IIII", ib, 0, buf, 0))[0].out.list_handle
c = uapi.drm_amdgpu_cs_chunk_ib(va_start=VA_IB, ib_bytes=4 * len(words), ip_type=DMA)
chunk = bytes(uapi.drm_amdgpu_cs_chunk(chunk_id=uapi.AMDGPU_CHUNK_ID_IB,
                                       length_dw=ctypes.sizeof(c) // 4)) + bytes(c)
cs = uapi.drm_amdgpu_cs(); cs.in_.ctx_id, cs.in_.bo_list_handle, cs.in_.num_chunks = ctx, lst, 1
seq = d.ioctl(uapi.DRM_IOCTL_AMDGPU_CS, cs, chunk)[0].out.handle
path = d.bo_path(d.gem_mmap(buf))
m = mmap.mmap(os.open(path, os.O_RDWR), 4096, mmap.MAP_SHARED)
print(path, flush=True)
w = uapi.drm_amdgpu_wait_cs(); w.in_.handle, w.in_.ip_type, w.in_.ctx_id = seq, DMA, ctx
w.in_.timeout = (1 << 64) - 1
print(d.ioctl(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w)[0].out.status, hex(struct.unpack("<I", m[8:12])[0]))
"""


def test_a_client_blocked_in_a_wait_does_not_hold_up_others(mount_dir):
    from tests.helpers import start_client
    mount(mount_dir, "--vram", "16M", "--timeout", "600")  # no TDR during the test
    waiter = start_client(POLLING_CLIENT, mount_dir)
    try:
        path = waiter.stdout.readline().strip()
        assert path, "the polling client failed"
        # Another process gets through while A waits, then releases A's job by
        # writing the polled value into A's BO through its file.
        r = run_client(PRELUDE + """
print(Drm(M).version()[1].split(b"\\0")[0].decode())
os.pwrite(os.open(sys.argv[2], os.O_RDWR), (7).to_bytes(4, "little"), 0)
""", mount_dir, path, check=True)
        assert r.stdout.strip() == "amdgpu"
        out, _ = waiter.communicate(timeout=120)
        assert out.split() == ["0", "0x600d"]
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
