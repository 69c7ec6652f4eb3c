"""The PCI device's sysfs attributes, as amdgpu's device shows them, live:
MOUNT/sys/devices/pciffff:00/ffff:00:00.0/ffff:01:00.0/* (vgpu.paths PCI_PORT_PATH and
PCI_SLOT: the GPU behind its root port, kmd/pci.py), also reached as
MOUNT/sys/class/drm/card0/device/*, MOUNT/sys/dev/char/226:N/device/* and
MOUNT/sys/bus/pci/devices/ffff:01:00.0/* (vdev builds the links, docs/vdev.md "sysfs").

The identity files (vendor, device, subsystem_*, revision, class, config, uevent)
are what libdrm's drmGetDevices2 and drmGetDevice2 read (xf86drm.c: drmParsePciBusInfo
takes PCI_SLOT_NAME from uevent, drmParsePciDeviceInfo the id files, or config); their
values are those of the part DEV_INFO reports, read from kmd/info.py at each open.
"""
import time

from vgpu import uapi
from vgpu.paths import PCI_SLOT

from . import info, partition, pci, pci_hotplug, pm_sysfs

PCI_SLOT_NAME = PCI_SLOT  # the whole GPU's; partition N is function N (kmd/partition.py)
# Board identity by PCI device id: (subsystem vendor, subsystem device, class), from
# the boards amdgpu drives with those ids (lspci -nnv): Vega 10 XT, a display
# controller; Arcturus, the Instinct MI100 accelerator, class "display controller,
# other" (0x0380) as compute-only parts are. kmd/info.py may name them itself
# (PCI_SUBSYSTEM_VENDOR, PCI_SUBSYSTEM_DEVICE, PCI_CLASS).
BOARDS = {0x687F: (0x1002, 0x0B36, 0x030000), 0x738C: (0x1002, 0x0C34, 0x038000)}
# product_name (amdgpu reads it from the board's FRU EEPROM): the marketing names
# libdrm's amdgpu.ids gives those ids.
PRODUCT_NAMES = {0x687F: "Radeon RX Vega", 0x738C: "AMD Instinct MI100"}


def pci_identity(dev) -> dict[str, int]:
    """vendor, device, revision, subsystem_vendor, subsystem_device, class: the values
    DEV_INFO (device_id, pci_rev) and kmd/info.py give now."""
    d = info.dev_info(dev)
    device = d.device_id or info.PCI_DEVICE
    sub_vendor, sub_device, pci_class = BOARDS.get(device, (info.PCI_VENDOR, 0, 0x030000))
    return {
        "vendor": info.PCI_VENDOR,
        "device": device,
        "revision": d.pci_rev or getattr(info, "PCI_REVISION", 0),
        "subsystem_vendor": getattr(info, "PCI_SUBSYSTEM_VENDOR", sub_vendor),
        "subsystem_device": getattr(info, "PCI_SUBSYSTEM_DEVICE", sub_device),
        "class": getattr(info, "PCI_CLASS", pci_class),
    }


def uevent(dev) -> str:
    """The PCI device's uevent, as the PCI core writes it (pci_uevent)."""
    return pci.uevent("amdgpu", pci_identity(dev), dev.partition.pci_slot)


def config(dev) -> bytes:
    """The first 256 bytes of PCI config space (a type 0 header, no BARs shown): what
    libdrm reads when it asks for the revision and the revision file is missing."""
    return bytes(pci.config_header(pci_identity(dev), 0)) + bytes(256 - 64)


class BusyMeter:
    """gpu_busy_percent: the busy share of the busiest engine over the last
    perf.BUSY_WINDOW seconds (amdgpu reports the SMU's average activity of the
    graphics engine; an average over every ring would read 1/6 of a saturated one)."""

    def __init__(self, dev):
        self.dev = dev

    def ring_percent(self, ring) -> int:
        return ring.perf.busy_percent(ring.running_since())

    def percent(self) -> int:
        """The busiest ring's or user queue's share (kmd/userq.py: a queue's runs keep
        its IP's engine busy as jobs do)."""
        queues = list(self.dev.userqs.by_slot.values())
        return max([*(self.ring_percent(r) for r in self.dev.rings.values()),
                    *(q.perf.busy_percent(q.running_since()) for q in queues)], default=0)


def engine_files(dev) -> dict:
    """vgpu_engines/<ring>/: per engine busy_percent (the window of gpu_busy_percent),
    busy_ns and jobs since the device started, and every counter ("name value")."""
    def counters(ring):
        now = time.monotonic()
        return "".join(f"{k} {v}\n" for k, v in ring.perf.snapshot(ring.running_since(), now).items())

    def snap(ring, key):
        return f"{ring.perf.snapshot(ring.running_since(), time.monotonic())[key]}\n"

    return {r.name: {"busy_percent": lambda r=r: f"{dev.busy_meter.ring_percent(r)}\n",
                     "busy_ns": lambda r=r: snap(r, "busy_ns"),
                     "jobs": lambda r=r: snap(r, "jobs"),
                     "counters": lambda r=r: counters(r)}
            for r in dev.rings.values()}


def cache_file(dev) -> str:
    """vgpu_cache: `model none` without the L2 model (vgpu mount --cache-model), else
    `model l2`, its size and line in bytes and its counters since the device started
    (docs/cache.md), one `name value` a line."""
    if dev.l2 is None:
        return "model none\n"
    lines = {"model": "l2", "size": dev.l2.size, "line": 128, **dev.l2.counters()}
    return "".join(f"{k} {v}\n" for k, v in lines.items())


def partition_files(dev) -> dict:
    """How the GPU is split and what this device holds of it: amdgpu's
    current_compute_partition / available_compute_partition (SPX, DPX...) and
    current_memory_partition / available_memory_partition (NPS1, NPS2...), and
    vgpu_partition/, one value per file: the partition's index and count, its
    compute units and SDMA engines (physical numbers), its VRAM and GTT sizes."""
    p = dev.partition
    counts = partition.supported_counts()
    return {
        "current_compute_partition": lambda: f"{p.compute_mode}\n",
        "available_compute_partition": lambda: ", ".join(partition.COMPUTE_MODES[n] for n in counts) + "\n",
        "current_memory_partition": lambda: f"{p.memory_mode}\n",
        "available_memory_partition": lambda: ", ".join(f"NPS{n}" for n in counts) + "\n",
        "vgpu_partition": {
            "index": lambda: f"{p.index}\n",
            "count": lambda: f"{p.count}\n",
            "compute_units": lambda: " ".join(map(str, p.cus)) + "\n",
            "sdma_engines": lambda: " ".join(p.sdma_names) + "\n",
            "vram_size": lambda: f"{p.vram_size}\n",
            "gtt_size": lambda: f"{p.gtt_size}\n",
        },
    }


# amdgpu_show_reset_mask's words for the AMDGPU_RESET_TYPE_* bits, in its order.
RESET_WORDS = (("soft", 1 << 1), ("queue", 1 << 2), ("pipe", 1 << 3), ("full", 1 << 0))
# What vgpu's KMD does on a hang or a fault: the ring's running job alone is stopped
# and its context's queued jobs cancelled while every other ring and context runs on
# (Device.job_failed, gpu_reset with a guilty context: a per-queue reset, which
# bumps the reset counter as amdgpu_job_timedout does after a ring reset), and
# amdgpu_gpu_recover resets the whole GPU (full). No soft recovery, no pipe reset.
RING_RESETS = (1 << 2) | (1 << 0)


def reset_mask(supported: int) -> str:
    """amdgpu_show_reset_mask: each supported type's word and a space, then a newline."""
    return "".join(f"{w} " for w, bit in RESET_WORDS if supported & bit) + "\n"


def reset_mask_files(dev) -> dict:
    """compute_reset_mask and sdma_reset_mask (amdgpu_gfx_sysfs_reset_mask_init,
    amdgpu_sdma_sysfs_reset_mask_init), created for an IP that has rings; no
    gfx_reset_mask on a part without GFX rings."""
    ips = {r.ip_type for r in dev.rings.values()}
    out = {}
    if uapi.AMDGPU_HW_IP_COMPUTE in ips:
        out["compute_reset_mask"] = lambda: reset_mask(RING_RESETS)
    if uapi.AMDGPU_HW_IP_DMA in ips:
        out["sdma_reset_mask"] = lambda: reset_mask(RING_RESETS)
    return out


def files(dev) -> dict:
    if dev.unplugged:   # removed from the bus (kmd/pci_hotplug.py): its directory is gone
        return {}
    m = dev.memory
    meter = dev.busy_meter
    return {
        # An unpartitioned GPU shows what an MI100 shows: no partition files.
        **(partition_files(dev) if dev.partition.count > 1 else {}),
        **pci.identity_files(lambda: pci_identity(dev)),
        "config": lambda: config(dev),
        "product_name": lambda: f"{PRODUCT_NAMES.get(pci_identity(dev)['device'], 'vgpu')}\n",
        "uevent": lambda: uevent(dev),
        "mem_info_vram_total": lambda: f"{m.vram_allocator.size}\n",
        "mem_info_vram_used": lambda: f"{m.vram_allocator.used}\n",
        "mem_info_gtt_total": lambda: f"{m.gtt_size}\n",
        "mem_info_gtt_used": lambda: f"{m.gtt_used}\n",
        # vgpu's own: what AMDGPU_INFO_NUM_EVICTIONS / NUM_BYTES_MOVED answer (kmd/residency.py)
        "vgpu_num_evictions": lambda: f"{dev.residency.evictions}\n",
        "vgpu_num_bytes_moved": lambda: f"{dev.residency.bytes_moved}\n",
        "gpu_busy_percent": lambda: f"{meter.percent()}\n",
        **pm_sysfs.files(dev),   # hwmon/, pp_dpm_*, unique_id (kmd/pm_sysfs.py)
        **pci.link_files(),      # current_link_speed ...: the end of the link its root port shows too
        "vgpu_engines": engine_files(dev),
        "vgpu_cache": lambda: cache_file(dev),
        **reset_mask_files(dev),
        "remove": pci_hotplug.remove_file(dev),   # echo 1 > remove: PCI hot unplug
    }
