"""`vgpu mount --partitions 2` on a real mount: the nodes and sysfs of each partition
in Linux's shape, `vgpu info`, libvgpu's and libdrm's (drmdevice) enumeration, one
client process per partition seeing its own share, isolation between processes of
two partitions, samples/partitions.py, and counts the GPU cannot take refused."""
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import make_mount_dir, run_client, vgpu_cli
from kmd.partition import compute_ring_name
from vgpu.paths import PCI_PORT_PATH, PCI_PORT_SLOT, pci_slot

from .test_preload import run
from .test_samples import passed, run_sample

MiB = 1 << 20

# Each partition's share of the GPU's eight compute rings (kmd/partition.py).
COMP = {i: [compute_ring_name(i * 4 + k) for k in range(4)] for i in (0, 1)}


def test_each_partition_has_its_nodes_and_sysfs(partitions_mount):
    m = Path(partitions_mount)
    assert sorted(os.listdir(m / "dev/dri")) == ["card0", "card1", "renderD128", "renderD129"]
    for i in (0, 1):
        slot = pci_slot(i)
        for node, minor in ((f"card{i}", i), (f"renderD{128 + i}", 128 + i)):
            target = f"../../devices/{PCI_PORT_PATH}/{slot}/drm/{node}"
            assert os.readlink(m / "sys/class/drm" / node) == target
            assert os.readlink(m / f"sys/dev/char/226:{minor}") == target
            assert (m / "sys/class/drm" / node / "dev").read_text() == f"226:{minor}\n"
            assert f"DEVNAME=dri/{node}\n" in (m / "sys/class/drm" / node / "uevent").read_text()
        dev = m / f"sys/class/drm/card{i}/device"
        assert os.path.realpath(dev) == str(m / f"sys/devices/{PCI_PORT_PATH}/{slot}")   # behind the one root port
        assert f"PCI_SLOT_NAME={slot}\n" in (dev / "uevent").read_text()
        assert (dev / "current_compute_partition").read_text() == "DPX\n"
        assert (dev / "current_memory_partition").read_text() == "NPS2\n"
        assert (dev / "mem_info_vram_total").read_text() == f"{32 * MiB}\n"
        assert (dev / "vgpu_partition/compute_units").read_text() == f"{i}\n"
        assert (dev / "vgpu_partition/sdma_engines").read_text() == f"sdma{i}\n"
        assert sorted(os.listdir(dev / "vgpu_engines")) == sorted([f"sdma{i}", *COMP[i]])
        assert os.path.realpath(m / f"sys/bus/pci/devices/{slot}") == os.path.realpath(dev)
    assert sorted(os.listdir(m / "sys/bus/pci/devices")) == sorted([PCI_PORT_SLOT, pci_slot(0), pci_slot(1)])
    if os.geteuid() == 0:
        assert sorted(os.listdir(m / "sys/kernel/debug/dri")) == ["0", "1"]
        assert "ring sdma1" in (m / "sys/kernel/debug/dri/1/vgpu_ring_sdma1").read_text()


def test_vgpu_info_prints_the_split(partitions_mount):
    r = vgpu_cli("info", "--mount", partitions_mount)
    assert r.returncode == 0, r.stderr
    assert "card0: partition 0 of 2: compute units 0, SDMA engines sdma0, VRAM 32.0 MiB" in r.stdout
    assert "card1: partition 1 of 2: compute units 1, SDMA engines sdma1, VRAM 32.0 MiB" in r.stdout
    assert r.stdout.count("mem_info_vram_total: 33554432 (32.0 MiB)") == 2


def test_one_client_per_partition_sees_its_own_share(partitions_mount):
    code = """
import sys, libvgpu
from vgpu import uapi
from vgpu.paths import pci_slot
devs = libvgpu.get_devices(sys.argv[1])
assert [(d.pci_slot, d.primary.name, d.render.name) for d in devs] == [
    (pci_slot(0), "card0", "renderD128"), (pci_slot(1), "card1", "renderD129")], devs
for d in devs:
    with libvgpu.device_initialize(d.render) as dev:
        dma = libvgpu.query_hw_ip_info(dev, uapi.AMDGPU_HW_IP_DMA)
        vram = libvgpu.query_heap_info(dev, uapi.AMDGPU_GEM_DOMAIN_VRAM)
        print(d.render.name, dev.info.cu_active_number, dma.available_rings, vram.total_heap_size)
"""
    r = run_client(code, partitions_mount, check=True)
    assert r.stdout.splitlines() == [f"renderD128 1 1 {32 * MiB}", f"renderD129 1 1 {32 * MiB}"]


def test_out_of_memory_in_one_partition_leaves_the_other_its_share(partitions_mount):
    code = """
import sys, libvgpu
from vgpu import uapi
mount = sys.argv[1]
held = []
with libvgpu.device_initialize(mount + "/dev/dri/renderD128") as a, \\
        libvgpu.device_initialize(mount + "/dev/dri/renderD129") as b:
    try:
        while True:
            held.append(libvgpu.bo_alloc(a, 4 << 20, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM))
    except libvgpu.VgpuOutOfMemory:
        pass
    # VRAM, then GTT by eviction, then as much again out of both (docs/memory.md, "Eviction")
    share = sum(libvgpu.query_heap_info(a, d).total_heap_size for d in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT))
    print("A", len(held) == 2 * share // (4 << 20))
    for i in range(7):    # B's whole share (less a little) still fits
        held.append(libvgpu.bo_alloc(b, 4 << 20, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM))
    print("B", libvgpu.query_heap_info(b, uapi.AMDGPU_GEM_DOMAIN_VRAM).heap_usage)
    for bo in held:
        bo.free()
"""
    r = run_client(code, partitions_mount, check=True)
    assert r.stdout.splitlines() == ["A True", f"B {28 * MiB}"]


def test_the_partitions_sample(partitions_mount):
    out = passed(run_sample("partitions", partitions_mount))
    assert f"{pci_slot(1)}: card1 + renderD129: 1 compute unit(s), 1 SDMA ring(s), VRAM 32 MiB" in out
    assert "A's hung job ended with ETIME" in out and ", 0 of them wrong" in out
    assert "A's bystander context 2: INNOCENT_RESET" in out and "B's worker context 1: NO_RESET" in out
    assert "B's VRAM buffer kept its bytes" in out


def test_the_sample_needs_partitions(vgpu_mount):
    r = run_sample("partitions", vgpu_mount)
    assert r.returncode == 1 and "vgpu mount" in r.stdout and "--partitions 2" in r.stdout


@pytest.mark.skipif(shutil.which("drmdevice") is None, reason="needs drmdevice (Debian libdrm-tests)")
def test_drmdevice_lists_every_partition(partitions_mount):
    r = run(partitions_mount, "drmdevice")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--- Devices reported 2 ---" in r.stdout and "Failed" not in r.stdout
    for node in ("card0", "renderD128", "card1", "renderD129"):
        assert f"--- Retrieving device info, for node /dev/dri/{node} ---" in r.stdout
    assert "+-> func   1" in r.stdout


@pytest.mark.parametrize("count", ["0", "3", "x"])
def test_a_count_the_gpu_cannot_take_is_refused(count):
    path = make_mount_dir()
    try:
        r = vgpu_cli("mount", path, "--partitions", count)
        assert r.returncode == 2 and "--partitions" in r.stderr, r.stderr
        if count != "x":
            assert "1 or 2 partition(s)" in r.stderr
        assert not os.path.ismount(path)
    finally:
        os.rmdir(path)


def test_smi_shows_each_partition_its_engines_and_processes(partitions_mount):
    from .test_smi_e2e import HOLD, smi_json
    from tests.helpers import start_client
    client = start_client(HOLD, os.path.join(partitions_mount, "dev/dri/renderD129"))
    try:
        assert client.stdout.readline().strip() == "ready"
        s = smi_json(partitions_mount)
        assert [(d["index"], d["pci_slot"]) for d in s["devices"]] == [(0, pci_slot(0)), (1, pci_slot(1))]
        assert s["device"] == s["devices"][0]
        assert s["devices"][1]["vram_used_bytes"] >= 12288 + (1 << 20)
        assert sorted((e["gpu"], e["name"]) for e in s["engines"]) == \
            sorted([(i, n) for i in (0, 1) for n in (f"sdma{i}", *COMP[i])])
        row, = [p for p in s["processes"] if p["pid"] == client.pid]
        assert row["gpu"] == 1 and row["vram_bytes"] == 12288 + (1 << 20)
        screen = vgpu_cli("smi", "--mount", partitions_mount).stdout
        assert "  0  AMD" in screen and "  1  AMD" in screen and f"PCI {pci_slot(1)}" in screen
        assert f"  1{client.pid:>7}  python" in screen
        r = vgpu_cli("smi", "dmon", "-d", "0.2", "-c", "2", "--mount", partitions_mount)
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
        assert [row[0] for row in rows] == ["0", "1", "0", "1"]  # one line per device per interval
        names = r.stdout.splitlines()[0].split()[2:12]
        assert names == ["sdma0", *sorted(COMP[0]), "sdma1", *sorted(COMP[1])]  # by device
        for row in rows:  # a device's line has "-" for the other device's engines
            own = {"0": ("sdma0", *COMP[0]), "1": ("sdma1", *COMP[1])}[row[0]]
            assert [(n in own) == (v != "-") for n, v in zip(names, row[1:11])] == [True] * 10
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(timeout=30)
