"""Numba's device-level host API over umd's devices: ``umd.gpus``, ``is_available``,
``detect``, ``get_current_device``, ``current_context`` (docs/umd.md, "Device
queries"). The devices themselves and the current one live in umd/device.py."""
from __future__ import annotations

from .device import Device, get_device, list_devices
from .errors import UMDError


class DeviceList:
    """``umd.gpus``: the devices of the mount, listed when first used (importing umd
    opens nothing). ``len(umd.gpus)``, ``umd.gpus[i]``, iteration, ``.current``, and
    ``with umd.gpus[i]:`` to run a block on device i, as Numba's ``cuda.gpus``."""

    def __len__(self) -> int:
        return len(list_devices())

    def __getitem__(self, i: int) -> Device:
        return list_devices()[i]

    def __iter__(self):
        return iter(list_devices())

    @property
    def current(self) -> Device:
        return get_device()

    def __repr__(self) -> str:
        return f"<umd.gpus: {list_devices()!r}>"


gpus = DeviceList()


def is_available() -> bool:
    """True when the device at VGPU_MOUNT (or /tmp/vgpu) opens and this runtime can
    drive it (Numba's cuda.is_available)."""
    try:
        get_device()
    except UMDError:
        return False
    return True


def get_current_device() -> Device:
    """The current device (Numba's cuda.get_current_device)."""
    return get_device()


def current_context() -> Device:
    """The current device, which is also its context here: ``get_memory_info()``."""
    return get_device()


def detect() -> bool:
    """Print the devices and their main attributes as Numba's cuda.detect() does;
    True when at least one is supported (every vgpu device that opens is)."""
    devices = list_devices()
    print(f"Found {len(devices)} vgpu device{'s' if len(devices) != 1 else ''}")
    for dev in devices:
        print(f"id {dev.id}    {dev.name:>20} {'[SUPPORTED]':>40}")
        attrs = [("Compute Capability", "%d.%d" % dev.compute_capability),
                 ("PCI Slot", dev.pci_slot), ("Render node", str(dev.lv.node)),
                 ("Multiprocessors", dev.MULTIPROCESSOR_COUNT), ("Warp size", dev.WARP_SIZE),
                 ("Memory", f"{dev.get_memory_info().total} bytes")]
        for key, value in attrs:
            print(f"{key:>40}: {value}")
    print("Summary:")
    print(f"\t{len(devices)}/{len(devices)} devices are supported")
    return bool(devices)
