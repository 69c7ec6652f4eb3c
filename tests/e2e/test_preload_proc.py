"""The preload's /proc (docs/libdrm.md, "fdinfo and /proc"): readlink of a device fd
reads as /dev/dri/renderD128, fstatat in /proc/<pid>/fd sees the character device, and
/proc/<pid>/fdinfo/<fd> carries the daemon's drm-usage-stats of the DRM file behind
that very fd, for the process itself and for another process reading it."""
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, vgpu_cli
from vgpu.paths import PCI_PORT_PATH, PCI_PORT_SLOT, PCI_SLOT

LIBRARY = os.path.join(ROOT, "preload", "libvgpu_preload.so")
pytestmark = pytest.mark.skipif(not os.path.isfile(LIBRARY), reason=f"{LIBRARY} is not built (make build)")

# Two DRM files in one process (8 KiB and 64 KiB of VRAM), a dup of the second, and a
# card0 file between them; each fd's fdinfo must be its own file's.
TWO_FDS = r"""
import os, stat, sys
from tests.helpers import Drm
from vgpu import uapi
import fcntl
def gem(fd, size):
    c = uapi.drm_amdgpu_gem_create()
    c.in_.bo_size, c.in_.alignment, c.in_.domains = size, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM
    buf = bytearray(bytes(c))
    fcntl.ioctl(fd, uapi.DRM_IOCTL_AMDGPU_GEM_CREATE, buf)
a = os.open("/dev/dri/renderD128", os.O_RDWR | os.O_CLOEXEC)
card = os.open("/dev/dri/card0", os.O_RDWR)
b = os.open("/dev/dri/renderD128", os.O_RDWR)
gem(a, 8192)
gem(b, 65536)
b2 = os.dup(b)
print("fds", a, b, b2, card)
for fd in (a, b, b2, card):
    print("link", fd, os.readlink(f"/proc/self/fd/{fd}"))
    st = os.stat(str(fd), dir_fd=os.open(f"/proc/{os.getpid()}/fd", os.O_RDONLY | os.O_DIRECTORY))
    print("chr", fd, stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev))
    with open(f"/proc/self/fdinfo/{fd}") as f:
        print(f"fdinfo {fd}\n" + f.read() + "end")
sys.stdout.flush()
sys.stdin.readline()
"""


def fdinfos(text: str) -> dict[int, dict[str, str]]:
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith("fdinfo "):
            cur = out[int(line.split()[1])] = {}
        elif line == "end":
            cur = None
        elif cur is not None and ":" in line:
            k, v = line.split(":", 1)
            cur[k] = v.strip()
    return out


def test_two_fds_in_one_process_each_show_their_own_client(vgpu_mount):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "vgpu_tools", "run", "--mount", vgpu_mount, "--", sys.executable, "-c", TWO_FDS]
    p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        while not (lines and lines[-1] == "end" and sum(x == "end" for x in lines) == 4):
            line = p.stdout.readline()
            assert line, "\n".join(lines)
            lines.append(line.rstrip("\n"))
        text = "\n".join(lines)
        a, b, b2, card = map(int, lines[0].split()[1:])
        assert f"link {a} /dev/dri/renderD128" in text and f"link {card} /dev/dri/card0" in text, text
        assert f"chr {a} True 226 128" in text and f"chr {card} True 226 0" in text, text
        info = fdinfos(text)
        for fd in (a, b, b2, card):
            i = info[fd]
            assert {"pos", "flags", "mnt_id", "ino"} <= set(i), i      # the kernel's own lines
            assert i["drm-driver"] == "amdgpu" and i["drm-pdev"] == PCI_SLOT, i
        assert info[a]["drm-memory-vram"] == "8 KiB" and info[b]["drm-memory-vram"] == "64 KiB", info
        assert info[b2] == info[b], info                                # a dup is the same DRM file
        assert info[card]["drm-memory-vram"] == "0 KiB"
        ids = {fd: info[fd]["drm-client-id"] for fd in (a, b, card)}
        assert len(set(ids.values())) == 3, ids
        assert not any(k.startswith("vgpu-") for k in info[a]), info[a]
        # another process (cat, under the preload too) reads the same answer
        r = vgpu_cli("run", "--mount", vgpu_mount, "--", "cat", f"/proc/{p.pid}/fdinfo/{b}")
        assert r.returncode == 0, r.stderr
        assert f"drm-client-id:\t{ids[b]}\n" in r.stdout and "drm-memory-vram:\t64 KiB\n" in r.stdout, r.stdout
    finally:
        p.stdin.close()
        p.wait(timeout=30)


def test_a_shell_the_program_starts_reads_the_mounts_pci_device_and_proc(vgpu_mount):
    """LD_PRELOAD and VGPU_MOUNT survive exec: sh, cat and readlink see the mount's
    /sys/bus/pci/devices/<slot> (the GPU's and its root port's), /sys/devices/pci<root>,
    hwmon and drm parameters, and /proc/<pid>/fd of a device fd reads as the node."""
    script = (f"cat /sys/bus/pci/devices/{PCI_SLOT}/vendor "
              f"/sys/devices/{PCI_PORT_PATH}/{PCI_SLOT}/hwmon/hwmon0/name; "
              "cat /sys/class/drm/renderD128/device/hwmon/hwmon0/temp1_crit; "
              f"cat /sys/bus/pci/devices/{PCI_PORT_SLOT}/current_link_speed; "
              f"basename $(readlink /sys/bus/pci/devices/{PCI_SLOT}/../driver); "
              "exec 3</dev/dri/renderD128; readlink /proc/$$/fd/3; cat /sys/module/drm/parameters/debug")
    r = vgpu_cli("run", "--mount", vgpu_mount, "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0x1002", "amdgpu", "94000", "16.0 GT/s PCIe", "pcieport",
                                     "/dev/dri/renderD128", "0"], r.stdout
    # the host's own devices stay where they are
    if os.path.isdir("/sys/bus/pci/devices") and os.listdir("/sys/bus/pci/devices"):
        host = sorted(os.listdir("/sys/bus/pci/devices"))[0]
        r = vgpu_cli("run", "--mount", vgpu_mount, "--", "cat", f"/sys/bus/pci/devices/{host}/vendor")
        assert r.returncode == 0 and r.stdout == open(f"/sys/bus/pci/devices/{host}/vendor").read()
