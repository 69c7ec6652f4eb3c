"""vgpu.paths: the one device-path rule (a mount point, or a node under it), and the
PCI address."""
import os
import re

from vgpu.paths import PCI_BUS, PCI_PORT_PATH, PCI_PORT_SLOT, PCI_ROOT, PCI_SLOT, mount_point, node_path, pci_slot


def test_a_mount_point_and_its_nodes_name_the_same_device(tmp_path):
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    for node in ("renderD128", "card0"):
        (tmp_path / "dev" / "dri" / node).touch()
    assert node_path(tmp_path) == tmp_path / "dev" / "dri" / "renderD128"
    assert node_path(tmp_path / "dev" / "dri" / "card0") == tmp_path / "dev" / "dri" / "card0"
    for name in (tmp_path, tmp_path / "dev" / "dri" / "renderD128", tmp_path / "dev" / "dri" / "card0"):
        assert mount_point(name) == tmp_path


def test_the_pci_address_is_one_no_host_device_has():
    """vgpu's slot is in PCI domain 0xffff, spelt as sysfs and libdrm spell a slot, and
    the host has nothing there (tools reading the real /sys/bus/pci cannot confuse it)."""
    assert PCI_SLOT == pci_slot(0) == "ffff:01:00.0" and pci_slot(1) == "ffff:01:00.1"
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", PCI_SLOT)
    assert PCI_ROOT == "pciffff:00"
    if os.path.isdir("/sys/bus/pci/devices"):
        assert not any(s.startswith("ffff:") for s in os.listdir("/sys/bus/pci/devices"))
        assert not os.path.exists(f"/sys/devices/{PCI_ROOT}")


def test_the_gpu_sits_behind_a_root_port_of_its_host_bridge():
    """As an MI100 in a server: a PCIe root port at device 0 of the host bridge's bus 0,
    the GPU on the port's secondary bus, 1 (sysfs nests the GPU's directory,
    PCI_PORT_PATH/PCI_SLOT, in the port's)."""
    assert PCI_PORT_SLOT == "ffff:00:00.0" and PCI_BUS == 1
    assert PCI_PORT_PATH == f"{PCI_ROOT}/{PCI_PORT_SLOT}" == "pciffff:00/ffff:00:00.0"
