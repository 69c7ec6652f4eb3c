"""End to end: PCI hot unplug and rescan through the mount's sysfs, as Linux does
them (kmd/pci_hotplug.py): `echo 1 > sys/bus/pci/devices/<slot>/remove` takes the
device away (its sysfs entries and nodes gone, open files ENODEV), `echo 1 >
sys/bus/pci/rescan` brings it back; and the same from a shell under `vgpu run`,
whose /sys/bus/pci/rescan is the mount's (IGT's amd_pci_unplug does exactly this)."""
import errno
import os
import subprocess

import pytest

from tests.helpers import Drm, _env
from vgpu.paths import PCI_PORT_PATH, PCI_PORT_SLOT, PCI_SLOT

PRELOAD = os.path.join(os.path.dirname(__file__), "..", "..", "preload", "libvgpu_preload.so")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def test_remove_and_rescan_through_sysfs(vgpu_mount):
    m = vgpu_mount
    dev_dir = f"{m}/sys/bus/pci/devices/{PCI_SLOT}"
    old = Drm(m)
    try:
        old.version()
        assert os.stat(f"{dev_dir}/remove").st_mode & 0o777 == 0o200       # write-only, as Linux's
        assert os.stat(f"{m}/sys/bus/pci/rescan").st_mode & 0o777 == 0o200
        with pytest.raises(OSError) as e:
            open(f"{dev_dir}/remove").read()
        assert e.value.errno == errno.EIO
        _write(f"{m}/sys/dev/char/226:128/device/remove", "1")   # the path IGT writes
        with pytest.raises(OSError) as e:
            old.version()
        assert e.value.errno == errno.ENODEV
        assert os.listdir(f"{m}/sys/bus/pci/devices") == [PCI_PORT_SLOT]   # the root port above it stays
        assert PCI_SLOT not in os.listdir(f"{m}/sys/devices/{PCI_PORT_PATH}")
        assert os.listdir(f"{m}/dev/dri") == []
        assert not [n for n in os.listdir(f"{m}/sys/class/drm") if n.startswith(("card", "renderD"))]
        with pytest.raises(OSError) as e:      # a stale node: drm_minor_acquire's ENODEV
            Drm(m)
        assert e.value.errno in (errno.ENODEV, errno.ENOENT)
        _write(f"{m}/sys/bus/pci/rescan", "1\n")
        assert sorted(os.listdir(f"{m}/sys/bus/pci/devices")) == sorted([PCI_PORT_SLOT, PCI_SLOT])
        assert os.path.realpath(dev_dir) == os.path.realpath(f"{m}/sys/devices/{PCI_PORT_PATH}/{PCI_SLOT}")
        assert sorted(os.listdir(f"{m}/dev/dri")) == ["card0", "renderD128"]
        with Drm(m) as new:
            new.version()
            assert new.gem_create(4096)
        with pytest.raises(OSError) as e:      # opened before the remove: stays dead
            old.version()
        assert e.value.errno == errno.ENODEV
        with open(f"{m}/dev/kmsg") as f:
            log = f.read()
        assert "amdgpu: finishing device." in log and "after a bus rescan" in log
        assert os.path.isdir(dev_dir)
        with pytest.raises(OSError) as e:
            _write(f"{m}/sys/bus/pci/rescan", "yes")
        assert e.value.errno == errno.EINVAL
    finally:
        old.close()   # the close of a dead file works and frees what it held


@pytest.mark.skipif(not os.path.exists(PRELOAD), reason="the preload library is not built (make build)")
def test_a_shell_under_vgpu_run_rescans_the_mounts_bus(vgpu_mount):
    m = vgpu_mount
    env = {**_env(m), "VGPU_MOUNT": os.path.realpath(m), "LD_PRELOAD": os.path.realpath(PRELOAD),
           "VGPU_PRELOAD_DEBUG": "1"}
    # first only look: the write below must never reach the host's bus
    r = subprocess.run(["sh", "-c", "test -e /sys/bus/pci/rescan"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert f"-> {os.path.realpath(m)}/sys/bus/pci/rescan" in r.stderr, r.stderr
    script = (f"echo 1 > /sys/bus/pci/devices/{PCI_SLOT}/remove && "
              f"! ls /sys/class/drm | grep -q renderD128 && echo 1 > /sys/bus/pci/rescan && "
              f"test -e /sys/class/drm/renderD128")
    env.pop("VGPU_PRELOAD_DEBUG")
    r = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with Drm(m) as d:
        d.version()
