"""PCI hot unplug and rescan, as Linux does them for amdgpu.

``echo 1 > /sys/bus/pci/devices/<slot>/remove`` (drivers/pci/pci-sysfs.c,
remove_store) stops and removes the PCI device: amdgpu_pci_remove calls
drm_dev_unplug, after which every ioctl on a file still open answers -ENODEV
(drm_ioctl: drm_dev_is_unplugged), an open of a stale node fails with -ENODEV
(drm_minor_acquire), the device's sysfs directory and its nodes go away, and
amdgpu_device_fini_hw stops the schedulers: jobs not yet run never run, the running
one is stopped, and their fences signal (here with ENODEV). A file still open can be
closed; its BOs are freed then. ``echo 1 > /sys/bus/pci/rescan`` (rescan_store)
probes the bus again and the device comes back with its nodes: new opens work,
files opened before the remove stay dead (on Linux they belong to the old
drm_device).

vgpu keeps the one KMD object across a remove and a rescan (a new "generation" of
the device, not a new Device): the BO store, the rings and their workers stay, the
reset counter and the logs go on. What a client sees is Linux's.
"""
from __future__ import annotations

import errno

from . import userq_ioctl as _userq_ioctl
from .errors import KmdError


def parse_value(data: bytes) -> int:
    """kstrtoul(buf, 0, &val) as sysfs store functions call it: a number in C's
    notation (0x.. hex, 0.. octal), one trailing newline allowed; EINVAL otherwise."""
    text = bytes(data).decode("ascii", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    try:
        if text.lower().startswith("0x"):
            return int(text[2:], 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text[1:], 8)
        if not text.isdigit():
            raise ValueError(text)
        return int(text, 10)
    except ValueError:
        raise KmdError(errno.EINVAL, f"not a number: {text!r}") from None


def remove(dev) -> bool:
    """Unplug `dev` (one PCI function). False if it was already removed."""
    with dev.lock:
        if dev.unplugged:
            return False
        dev.unplugged = True
        files = list(dev.files.values())
        for f in files:
            f.unplugged = True
        dev._drop_backlog(lambda j: True, errno.ENODEV)
    dev.kmsg.log("amdgpu: finishing device.")
    with dev.lock:   # as a file's last close stops its queues (device lock held)
        for q in list(dev.userqs.by_slot.values()):
            _userq_ioctl.destroy(dev, q, "stopped: device removed")
    stopped = []
    for ring in dev.rings.values():
        ring.cancel(lambda j: True, errno.ENODEV)
        if ring.abort_running():   # ends through Device.job_failed, with ENODEV
            stopped.append(ring.name)
    dev.kmsg.log(f"[drm] device removed from the bus: {len(files)} open file(s) now get ENODEV"
                 + (f", running job stopped on {', '.join(stopped)}" if stopped else ""))
    return True


def rescan(dev) -> int:
    """Probe `dev` again if it was removed: 1 if it came back, 0 if it was there."""
    with dev.lock:
        if not dev.unplugged:
            return 0
        dev.unplugged = False
        dev.generation += 1
    p = dev.partition
    dev.kmsg.log(f"[drm] Initialized amdgpu for {p.pci_slot} on minor {p.index} "
                 f"(after a bus rescan, generation {dev.generation})")
    return 1


def remove_file(dev):
    """The device's `remove` attribute: (read, write, 0200), write-only as Linux's
    (a read is EIO); a write of a nonzero number removes the device, of 0 does
    nothing, of anything else is EINVAL."""
    def read():
        raise KmdError(errno.EIO, "remove is write-only")

    def write(data: bytes) -> None:
        if parse_value(data):
            remove(dev)

    return read, write, 0o200


def bus_files(gpu) -> dict:
    """sys/bus/pci/: `rescan` (0200 on Linux), whose write of a nonzero number
    probes every removed function of `gpu` again (its pci_rescan)."""
    def read():
        raise KmdError(errno.EIO, "rescan is write-only")

    def write(data: bytes) -> None:
        if parse_value(data):
            gpu.pci_rescan()

    return {"rescan": (read, write, 0o200)}
