"""MOUNT/sys/class/drm/card0/device/*: the sysfs attributes amdgpu exposes, live."""
import time

from . import info


class BusyMeter:
    """gpu_busy_percent as amdgpu reports it: the share of time the engines were
    busy since the previous read (the first read covers the time since start)."""

    def __init__(self, dev):
        self.dev = dev
        self._last = (time.monotonic(), 0.0)

    def busy_seconds(self) -> float:
        now = time.monotonic()
        total = 0.0
        for ring in self.dev.rings.values():
            total += ring.busy_time
            run = ring.running
            if run is not None and run.started_at is not None:
                total += now - run.started_at  # the job in progress counts too
        return total

    def percent(self) -> int:
        now, busy = time.monotonic(), self.busy_seconds()
        t0, b0 = self._last
        self._last = (now, busy)
        elapsed = (now - t0) * max(len(self.dev.rings), 1)
        return max(0, min(100, round(100 * (busy - b0) / elapsed))) if elapsed > 0 else 0


def files(dev) -> dict:
    m = dev.memory
    meter = dev.busy_meter
    return {
        "vendor": lambda: f"{info.PCI_VENDOR:#06x}\n",
        "device": lambda: f"{info.PCI_DEVICE:#06x}\n",
        "uevent": lambda: (f"DRIVER=vgpu\nPCI_CLASS=30000\nPCI_ID={info.PCI_VENDOR:04X}:"
                           f"{info.PCI_DEVICE:04X}\nPCI_SLOT_NAME=0000:00:00.0\n"),
        "mem_info_vram_total": lambda: f"{m.vram_allocator.size}\n",
        "mem_info_vram_used": lambda: f"{m.vram_allocator.used}\n",
        "mem_info_gtt_total": lambda: f"{m.gtt_size}\n",
        "mem_info_gtt_used": lambda: f"{m.gtt_used}\n",
        "gpu_busy_percent": lambda: f"{meter.percent()}\n",
    }
