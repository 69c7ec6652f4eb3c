"""What Linux's PCI core shows in sysfs beside amdgpu's own files (kmd/sysfs.py): a
function's uevent, the PCIe link attributes both ends of the GPU's link have, and the
PCIe root port the GPU sits behind, bound to the pcieport driver (vgpu.paths):

    MOUNT/sys/devices/pciffff:00/           the host bridge: an empty uevent, no driver
        ffff:00:00.0/                       the root port: root_port_files()
            ffff:01:00.0/                   the GPU (kmd/sysfs.py), on the port's secondary bus

Tools that report a GPU's link read it from the bridges above it: nvtop walks the
GPU's parent devices, keeps those whose driver is pcieport and takes the smallest
current_link_speed and current_link_width among them (src/device_discovery_linux.c,
pcie_walker_helper); with no such parent it shows "PCIe GEN 0@4294967295x".

The port is an AMD EPYC 7002 ("Rome") root port, as in the EPYC servers the MI100
shipped in: the I/O die's GPP bridge 1022:1483 (pci.ids: "Starship/Matisse GPP
Bridge"), revision 00, subsystem 1022:1234 as lspci shows it, a PCIe 4.0 port. The
link between it and the GPU trains at the MI100's best, 16 GT/s x16.
"""
from __future__ import annotations

import struct

from vgpu.paths import PCI_BUS, PCI_PORT_SLOT, PCI_ROOT_BUS

# The GPU's link as pci-sysfs.c prints it at either end: current_link_speed and
# max_link_speed are pci_speed_string() ("16.0 GT/s PCIe"), the widths a lane count.
LINK_SPEED = "16.0 GT/s PCIe"
LINK_SPEED_DECI_GTS = 160   # the same in 0.1 GT/s, as the SMU's gpu_metrics gives it (kmd/gpu_metrics.py)
LINK_WIDTH = 16
# The same in the PCI Express capability (pci_regs.h): PCI_EXP_LNKCAP_SLS and
# PCI_EXP_LNKSTA_CLS 4 = 16 GT/s in bits 3:0, the width in bits 9:4; LNKCAP2's
# supported-speeds vector (bits 1-4: 2.5, 5, 8, 16 GT/s), which pcie_get_speed_cap reads first.
_LINK_CODE = 4 | (LINK_WIDTH << 4)
_LINK_SPEEDS_VECTOR = 0b11110

#: The root port's identity (sysfs vendor, device, ..., class: a PCI-to-PCI bridge, 0x0604).
ROOT_PORT = {"vendor": 0x1022, "device": 0x1483, "revision": 0x00,
             "subsystem_vendor": 0x1022, "subsystem_device": 0x1234, "class": 0x060400}
# Where its capabilities sit in config space: PCI Express, then the bridge's
# subsystem ids (PCI_CAP_ID_SSVID, where Linux reads a bridge's subsystem_vendor).
_EXPRESS_AT, _SSVID_AT = 0x58, 0xC0
_CAP_ID_EXP, _CAP_ID_SSVID = 0x10, 0x0D
_EXP_FLAGS = 2 | (4 << 4)   # capability version 2, PCI_EXP_TYPE_ROOT_PORT


def uevent(driver: str, ids: dict[str, int], slot: str) -> str:
    """A PCI function's uevent: the driver core's DRIVER=, then pci_uevent's lines."""
    c = ids["class"]
    return (f"DRIVER={driver}\n"
            f"PCI_CLASS={c:X}\n"
            f"PCI_ID={ids['vendor']:04X}:{ids['device']:04X}\n"
            f"PCI_SUBSYS_ID={ids['subsystem_vendor']:04X}:{ids['subsystem_device']:04X}\n"
            f"PCI_SLOT_NAME={slot}\n"
            f"MODALIAS=pci:v{ids['vendor']:08X}d{ids['device']:08X}sv{ids['subsystem_vendor']:08X}"
            f"sd{ids['subsystem_device']:08X}bc{c >> 16:02X}sc{(c >> 8) & 0xFF:02X}i{c & 0xFF:02X}\n")


#: sysfs's identity attributes of a PCI function (pci-sysfs.c), in its formats.
_IDENTITY_FORMATS = {"vendor": "#06x", "device": "#06x", "subsystem_vendor": "#06x",
                     "subsystem_device": "#06x", "revision": "#04x", "class": "#08x"}


def identity_files(ids) -> dict:
    """vendor, device, subsystem_vendor, subsystem_device, revision and class of a
    function whose ids ``ids()`` gives (read at each open: the GPU's follow its
    partition and revision)."""
    return {name: (lambda name=name, fmt=fmt: f"{ids()[name]:{fmt}}\n") for name, fmt in _IDENTITY_FORMATS.items()}


def config_header(ids: dict[str, int], header_type: int, secondary: tuple[int, int] | None = None) -> bytearray:
    """The first 64 bytes of config space: ids, command (I/O, memory, bus master),
    status (a capability list), class, header type (0: a device, 1: a bridge). A type
    0 header has its subsystem ids at 0x2c; a bridge's ``secondary`` (primary bus,
    secondary bus) go at 0x18, with the subordinate bus the secondary one."""
    c = ids["class"]
    head = bytearray(64)
    struct.pack_into("<HHHHBBBBBBBB", head, 0, ids["vendor"], ids["device"], 0x0007, 0x0010, ids["revision"],
                     c & 0xFF, (c >> 8) & 0xFF, c >> 16, 0x10, 0, header_type, 0)
    if header_type == 0:
        struct.pack_into("<HH", head, 0x2C, ids["subsystem_vendor"], ids["subsystem_device"])
    elif secondary is not None:
        struct.pack_into("<BBBB", head, 0x18, secondary[0], secondary[1], secondary[1], 0)
    return head


def link_files() -> dict:
    """current_link_speed, current_link_width, max_link_speed, max_link_width
    (pci-sysfs.c's pcie_dev_attrs), the same at the GPU and at its root port."""
    return {
        "current_link_speed": lambda: f"{LINK_SPEED}\n",
        "current_link_width": lambda: f"{LINK_WIDTH}\n",
        "max_link_speed": lambda: f"{LINK_SPEED}\n",
        "max_link_width": lambda: f"{LINK_WIDTH}\n",
    }


def root_port_config() -> bytes:
    """The root port's 256 bytes of config space: a type 1 (bridge) header from bus
    PCI_ROOT_BUS to PCI_BUS (no windows, no BARs), a PCI Express capability whose
    link capability and status are the link's, and the subsystem-id capability."""
    p = ROOT_PORT
    config = config_header(p, 1, (PCI_ROOT_BUS, PCI_BUS)) + bytearray(256 - 64)
    config[0x34] = _EXPRESS_AT
    struct.pack_into("<BBH", config, _EXPRESS_AT, _CAP_ID_EXP, _SSVID_AT, _EXP_FLAGS)
    struct.pack_into("<I", config, _EXPRESS_AT + 0x0C, _LINK_CODE)            # PCI_EXP_LNKCAP
    struct.pack_into("<H", config, _EXPRESS_AT + 0x12, _LINK_CODE)            # PCI_EXP_LNKSTA
    struct.pack_into("<I", config, _EXPRESS_AT + 0x2C, _LINK_SPEEDS_VECTOR)   # PCI_EXP_LNKCAP2
    struct.pack_into("<BBHHH", config, _SSVID_AT, _CAP_ID_SSVID, 0, 0, p["subsystem_vendor"], p["subsystem_device"])
    return bytes(config)


def root_port_files() -> dict:
    """The root port's directory: its identity, config and uevent (driver pcieport),
    its bridge's bus numbers (pci-sysfs.c, secondary_bus_number and
    subordinate_bus_number) and the link. Fixed: nothing here changes while the
    device runs, is removed or comes back (the port stays on the bus)."""
    p = ROOT_PORT
    return {
        **identity_files(lambda: p),
        "config": root_port_config,
        "uevent": lambda: uevent("pcieport", p, PCI_PORT_SLOT),
        "secondary_bus_number": lambda: f"{PCI_BUS}\n",
        "subordinate_bus_number": lambda: f"{PCI_BUS}\n",
        **link_files(),
    }
