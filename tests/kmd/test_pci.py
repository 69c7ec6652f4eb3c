"""kmd/pci.py: what the PCI core shows beside amdgpu's files: the PCIe link both ends
of the GPU's link report, and the root port the GPU sits behind (its identity, its
uevent, its type-1 config header)."""
import struct

from kmd import pci
from vgpu.paths import PCI_PORT_SLOT

LINK = {"current_link_speed": "16.0 GT/s PCIe\n", "current_link_width": "16\n",
        "max_link_speed": "16.0 GT/s PCIe\n", "max_link_width": "16\n"}


def test_the_link_is_pcie_4_x16_in_pci_sysfs_words():
    """pci-sysfs.c: current_link_speed is pci_speed_string() ("16.0 GT/s PCIe"), the
    width a bare number; an MI100's link is PCIe 4.0 x16 and runs at its best."""
    assert {name: read() for name, read in pci.link_files().items()} == LINK


def test_the_gpu_and_its_root_port_show_the_same_link(dev):
    gpu, port = dev.sysfs_files(), pci.root_port_files()
    assert {name: gpu[name]() for name in LINK} == {name: port[name]() for name in LINK} == LINK


def test_the_root_port_is_an_amd_gpp_bridge_bound_to_pcieport():
    f = pci.root_port_files()
    assert [f[n]() for n in ("vendor", "device", "subsystem_vendor", "subsystem_device", "revision", "class")] == [
        "0x1022\n", "0x1483\n", "0x1022\n", "0x1234\n", "0x00\n", "0x060400\n"]
    assert f["uevent"]() == ("DRIVER=pcieport\nPCI_CLASS=60400\nPCI_ID=1022:1483\nPCI_SUBSYS_ID=1022:1234\n"
                             f"PCI_SLOT_NAME={PCI_PORT_SLOT}\n"
                             "MODALIAS=pci:v00001022d00001483sv00001022sd00001234bc06sc04i00\n")
    assert (f["secondary_bus_number"](), f["subordinate_bus_number"]()) == ("1\n", "1\n")


def _capabilities(config: bytes) -> dict[int, int]:
    """{capability id: offset} along the list that starts at 0x34."""
    caps, at = {}, config[0x34]
    while at:
        caps[config[at]] = at
        at = config[at + 1]
    return caps


def test_the_root_ports_config_space_is_a_type_1_header_with_its_link():
    """What lspci decodes from `config`: a bridge from bus 0 to bus 1, a PCI Express
    root port whose link capability and status say 16 GT/s x16, its subsystem ids in
    the bridge's subsystem-id capability (where Linux reads a bridge's)."""
    config = pci.root_port_files()["config"]()
    assert len(config) == 256
    vendor, device, _command, status, revision = struct.unpack_from("<HHHHB", config)
    assert (vendor, device, revision) == (0x1022, 0x1483, 0)
    assert status & 0x10   # a capability list
    assert config[0x09:0x0C] == bytes([0x00, 0x04, 0x06]) and config[0x0E] == 0x01   # class 060400, type 1
    assert tuple(config[0x18:0x1B]) == (0, 1, 1)   # primary, secondary, subordinate bus
    caps = _capabilities(config)
    express, ssvid = caps[0x10], caps[0x0D]
    flags, = struct.unpack_from("<H", config, express + 2)
    assert (flags >> 4) & 0xF == 4   # PCI_EXP_TYPE_ROOT_PORT
    link_cap, = struct.unpack_from("<I", config, express + 0x0C)
    link_status, = struct.unpack_from("<H", config, express + 0x12)
    for word in (link_cap, link_status):
        assert word & 0xF == 4 and (word >> 4) & 0x3F == 16   # 16 GT/s (PCIe 4.0), x16
    assert struct.unpack_from("<HH", config, ssvid + 4) == (0x1022, 0x1234)
