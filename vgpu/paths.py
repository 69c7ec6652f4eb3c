"""The one device-path rule (docs/design.md section 2): a device is named by its
mount point or by any node path under it (MOUNT/dev/dri/renderD128 or card0).
libvgpu, umd, the samples and the `vgpu` command all resolve names here."""
from __future__ import annotations

import os
from pathlib import Path

RENDER_NODE = Path("dev") / "dri" / "renderD128"
CARD_NODE = Path("dev") / "dri" / "card0"


def _is_node(p: Path) -> bool:
    # A mount point is a directory; a node is MOUNT/dev/dri/<file>.
    return not p.is_dir() and p.parent.name == "dri" and p.parent.parent.name == "dev"


def node_path(path: str | os.PathLike) -> Path:
    """The control file to open: ``path`` itself if it names a node, else the
    render node under the mount point ``path``."""
    p = Path(path)
    return p if _is_node(p) else p / RENDER_NODE


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of a device named by its mount point or a node under it."""
    p = Path(path)
    return p.parents[2] if _is_node(p) else p


# The emulated GPU's PCI address (docs/vdev.md, "The PCI address"). Tools that read the
# host's /sys/bus/pci (nvtop, lspci) must never take a host device for vgpu's, so the
# address is one no host has: PCI domain (ACPI segment) 0xffff. Firmware numbers its
# segments from 0 upward and servers use a handful; Intel VMD's domains start past
# 16 bits (0x10000) for the same reason of staying clear of them, but libdrm reads the
# domain as 4 hex digits (xf86drm.c, drmParsePciBusInfo: "%04x:%02x:%02x.%1u") into a
# uint16_t, so the top 16-bit segment is the one clear of hosts libdrm can still name.
# The GPU sits where an MI100 in a server does: behind a PCIe root port (device 0 on
# its host bridge's bus 0; kmd/pci.py), on the port's secondary bus 1, device 0, which
# is where nvtop and the like read its link. Partition N is function N there.
PCI_DOMAIN = 0xFFFF
PCI_ROOT_BUS = 0x00   # the host bridge's bus: the root port's
PCI_BUS = 0x01        # the GPU's: the root port's secondary bus
PCI_ROOT = f"pci{PCI_DOMAIN:04x}:{PCI_ROOT_BUS:02x}"  # its host bridge's directory: sys/devices/pciffff:00
PCI_PORT_SLOT = f"{PCI_DOMAIN:04x}:{PCI_ROOT_BUS:02x}:00.0"  # the root port: ffff:00:00.0
PCI_PORT_PATH = f"{PCI_ROOT}/{PCI_PORT_SLOT}"  # its directory under sys/devices


def pci_slot(function: int = 0) -> str:
    """The slot name of PCI function `function` of the GPU, as sysfs spells it
    (PCI_SLOT_NAME, the name under /sys/bus/pci/devices): "ffff:01:00.<function>"."""
    return f"{PCI_DOMAIN:04x}:{PCI_BUS:02x}:00.{function}"


PCI_SLOT = pci_slot(0)  # the whole (unpartitioned) GPU's
