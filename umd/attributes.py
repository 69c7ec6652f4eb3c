"""Numba's device attributes (``dev.MULTIPROCESSOR_COUNT``, the CUdevice_attribute
names Numba's Device answers), read from what the KMD reports.

Each attribute is one function of the open device. Those the amdgpu uapi answers come
from its INFO queries: DEV_INFO (kept by libvgpu from device_initialize), HW_IP_INFO
and the PCI slot sysfs shows (libvgpu.get_devices). amdgpu's INFO has no field for
the dispatch limits (threads per workgroup, LDS per workgroup, grid size: a HIP
runtime reads them from KFD's topology, which vgpu does not have), so those are the
vISA's limits (vgpu/isa.py), the ones the compiler and umd.launch_kernel enforce.
docs/umd.md, "Device queries", lists them all.
"""
from __future__ import annotations

import libvgpu
from vgpu import isa, uapi

#: amdgpu's chip family (DEV_INFO.family) -> its GFX major version, which stands for
#: Numba's compute capability (as a HIP runtime's hipDeviceProp major, minor does).
GFX_MAJOR = {uapi.AMDGPU_FAMILY_SI: 6, uapi.AMDGPU_FAMILY_CI: 7, uapi.AMDGPU_FAMILY_KV: 7,
             uapi.AMDGPU_FAMILY_VI: 8, uapi.AMDGPU_FAMILY_CZ: 8, uapi.AMDGPU_FAMILY_AI: 9,
             uapi.AMDGPU_FAMILY_RV: 9, uapi.AMDGPU_FAMILY_NV: 10, uapi.AMDGPU_FAMILY_VGH: 10,
             uapi.AMDGPU_FAMILY_YC: 10}
MAX_GRID_DIM = (1 << 32) - 1        # DISPATCH_DIRECT's 32-bit workgroup counts


def compute_capability(info: uapi.drm_amdgpu_info_device) -> tuple[int, int]:
    """(GFX major, 0) of the chip family DEV_INFO reports."""
    try:
        return GFX_MAJOR[info.family], 0
    except KeyError:
        raise ValueError(f"unknown amdgpu chip family {info.family}") from None


def _pci(field: int):
    """PCI domain (0), bus (1) or device (2) number from the slot ``DDDD:BB:DD.F``."""
    def read(device) -> int:
        domain, bus, rest = device.pci_slot.split(":")
        return int((domain, bus, rest.split(".")[0])[field], 16)
    return read


def _rings(ip: int):
    return lambda device: libvgpu.query_hw_ip_info(device.lv, ip).available_rings.bit_count()


def _info(field: str):
    return lambda device: int(getattr(device.lv.info, field))


def _limit(value: int):
    return lambda device: value


#: Attribute name -> its reader (CUdevice_attribute's names, without the prefix).
ATTRIBUTES = {
    "MULTIPROCESSOR_COUNT": _info("cu_active_number"),
    "WARP_SIZE": _info("wave_front_size"),
    "CLOCK_RATE": _info("max_engine_clock"),               # kHz, both
    "MEMORY_CLOCK_RATE": _info("max_memory_clock"),
    "GLOBAL_MEMORY_BUS_WIDTH": _info("vram_bit_width"),
    "ASYNC_ENGINE_COUNT": _rings(uapi.AMDGPU_HW_IP_DMA),
    "PCI_DOMAIN_ID": _pci(0),
    "PCI_BUS_ID": _pci(1),
    "PCI_DEVICE_ID": _pci(2),
    "MAX_THREADS_PER_BLOCK": _limit(isa.MAX_BLOCK_THREADS),
    "MAX_BLOCK_DIM_X": _limit(isa.MAX_BLOCK_THREADS),
    "MAX_BLOCK_DIM_Y": _limit(isa.MAX_BLOCK_THREADS),
    "MAX_BLOCK_DIM_Z": _limit(isa.MAX_BLOCK_THREADS),
    "MAX_GRID_DIM_X": _limit(MAX_GRID_DIM),
    "MAX_GRID_DIM_Y": _limit(MAX_GRID_DIM),
    "MAX_GRID_DIM_Z": _limit(MAX_GRID_DIM),
    "MAX_SHARED_MEMORY_PER_BLOCK": _limit(isa.MAX_LDS_BYTES),
    # Every buffer is in one GPU VA space the CPU maps too (docs/memory.md), and GTT
    # memory is host memory kernels use in place (umd.mapped_array).
    "UNIFIED_ADDRESSING": _limit(1),
    "CAN_MAP_HOST_MEMORY": _limit(1),
}


def device_attribute(device, name: str) -> int:
    """The value of attribute ``name`` of an open umd Device; AttributeError naming
    the known ones otherwise."""
    reader = ATTRIBUTES.get(name)
    if reader is None:
        raise AttributeError(f"umd.Device has no attribute {name!r}; the device attributes are "
                             f"{', '.join(sorted(ATTRIBUTES))}")
    return reader(device)
