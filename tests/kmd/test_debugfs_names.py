"""debugfs under amdgpu's names and in Linux's formats (docs/observability.md,
"debugfs"), and the rings named as amdgpu names them.

Each format check formats the expected text with the printf format Linux uses
(quoted from the kernel file named beside it) and compares line by line."""
import re
import struct

import pytest

from kmd import partition, ring_buffer
from kmd.gpu import PartitionedGpu
from kmd.hw import SdmaIb
from vgpu import pm4, sdma, uapi

from .conftest import MiB, call, gem_create, info
from .test_cs import VA_A, VA_IB, Setup

AMDGPU_NAMES = {"name", "clients", "amdgpu_gem_info", "amdgpu_vm_info", "amdgpu_fence_info",
                "amdgpu_firmware_info", "amdgpu_pm_info", "amdgpu_gpu_recover"}
OLD_NAMES = {"gem_info", "vm_info", "fence_info", "gpu_reset", "ring_sdma0", "ring_sdma1", "ring_comp_0.0"}


def c_printf(fmt: str, *args) -> str:
    """`fmt`, a C printf format as the kernel writes it, applied to `args` (Python's %
    takes the same conversions once the C length modifiers are dropped)."""
    return re.sub(r"%(-?\*|-?\d*)(?:ll|l|z)?([dux])", r"%\1\2", fmt).replace("%u", "%d") % args


def lines(text: str) -> list[str]:
    assert text.endswith("\n") or not text
    return text.splitlines()


MI100_COMPUTE_RINGS = ["comp_1.0.0", "comp_1.1.0", "comp_1.2.0", "comp_1.3.0",
                       "comp_1.0.1", "comp_1.1.1", "comp_1.2.1", "comp_1.3.1"]


def test_ring_names_are_amdgpus(dev):
    """An MI100's amdgpu: sdma0, sdma1 and eight compute rings (amdgpu_num_kcq = 8)."""
    assert [r.name for r in dev.rings.values()] == ["sdma0", "sdma1", *MI100_COMPUTE_RINGS]


def test_compute_rings_go_across_the_pipes_of_mec1_first():
    """gfx_v9_0_sw_init gives its compute rings out "horizontally across pipes": ring k
    is queue k // 4 of pipe k % 4 on MEC1 (me 1), named "comp_%d.%d.%d"."""
    names = [partition.compute_ring_name(k) for k in range(8)]
    assert names == MI100_COMPUTE_RINGS
    with pytest.raises(ValueError):
        partition.compute_ring_name(partition.MEC_PIPES * partition.MEC_QUEUES_PER_PIPE)


def test_partitions_have_unique_ring_names():
    gpu = PartitionedGpu(2, vram_size=64 * MiB, gtt_size=64 * MiB, timeout=1.0)
    try:
        names = [[r.name for r in p.rings.values()] for p in gpu.partitions]
        # each partition has its share of the GPU's rings, as of its SDMA engines
        assert names == [["sdma0", *MI100_COMPUTE_RINGS[:4]], ["sdma1", *MI100_COMPUTE_RINGS[4:]]]
        assert {f"amdgpu_ring_{n}" for n in names[1]} <= set(gpu.partitions[1].debugfs_files())
    finally:
        gpu.shutdown()


def test_the_files_have_amdgpus_names_and_the_old_ones_are_gone(dev):
    names = set(dev.debugfs_files())
    rings = [r.name for r in dev.rings.values()]
    assert AMDGPU_NAMES <= names
    assert {f"amdgpu_ring_{r}" for r in rings} <= names
    assert not names & OLD_NAMES
    # Everything else is vgpu's own and says so in its name.
    extra = names - AMDGPU_NAMES - {f"amdgpu_ring_{r}" for r in rings}
    assert extra and all(n.startswith("vgpu_") for n in extra), extra


def test_name_is_drm_name_info(dev):
    slot = dev.partition.pci_slot
    # drm_debugfs.c drm_name_info: "%s", " dev=%s", " unique=%s", "\n"
    assert dev.debugfs_files()["name"]() in (f"amdgpu dev={slot} unique={slot}\n",
                                              c_printf("%s dev=%s unique=%s\n", "amdgpu", slot, slot))


def test_clients_is_drm_clients_info(dev, client, root_client):
    text = dev.debugfs_files()["clients"]()
    out = lines(text)
    # drm_debugfs.c drm_clients_info, DRM_CLIENT_NAME_MAX_LEN 64
    assert out[0] == c_printf("%20s %5s %3s master a %5s %10s %*s %20s",
                              "command", "tgid", "dev", "uid", "magic", 64, "name", "id")
    row = "%20s %5d %3d   %c    %c %5d %10u %*s %20llu"
    assert out[1:] == [
        c_printf(row, "test", 1000, 128, "n", "n", 1000, 0, 64, "<unset>", client.id),
        c_printf(row, "root", 1, 0, "y" if root_client.master else "n",
                 "y" if root_client.authenticated else "n", 0, root_client.magic, 64,
                 "<unset>", root_client.id)]


def test_gem_info_is_amdgpu_debugfs_gem_info(dev, client):
    vram = gem_create(dev, client, 8192)
    gtt = gem_create(dev, client, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT,
                     flags=uapi.AMDGPU_GEM_CREATE_CPU_GTT_USWC | uapi.AMDGPU_GEM_CREATE_VRAM_CLEARED)
    a = uapi.drm_prime_handle()
    a.handle = gtt
    token = call(dev, client, "PRIME_HANDLE_TO_FD", a)[0].fd
    out = lines(dev.debugfs_files()["amdgpu_gem_info"]())
    # amdgpu_gem.c amdgpu_debugfs_gem_info_show, amdgpu_object.c amdgpu_bo_print_info
    assert out == [c_printf("pid %8d command %s:", 1000, "test"),
                   c_printf("\t\t0x%08x: %12lld byte %s", vram, 8192, "VRAM VISIBLE"),
                   c_printf("\t\t0x%08x: %12lld byte %s", gtt, 4096, "GTT")
                   + c_printf(" exported as ino:%lu", token) + " CPU_GTT_USWC VRAM_CLEARED"]


def test_vm_info_is_amdgpu_debugfs_vm_info(dev, client):
    s = Setup(dev, client)
    out = lines(dev.debugfs_files()["amdgpu_vm_info"]())
    # amdgpu_debugfs.c amdgpu_debugfs_vm_info_show, amdgpu_vm.c amdgpu_debugfs_vm_bo_info
    assert out[0] == c_printf("pid:%d\tProcess:%s ----------", 1000, "test")
    done = [c_printf("\t\t0x%08x: %12lld byte %s", i, size, place)
            for i, (size, place) in enumerate([(65536, "GTT"), (65536, "VRAM VISIBLE"), (65536, "VRAM VISIBLE")])]
    assert out[1:] == ["\tIdle BOs:", "\tEvicted BOs:", "\tRelocated BOs:", "\tMoved BOs:",
                       "\tInvalidated BOs:", "\tDone BOs:", *done,
                       c_printf("\tTotal idle size:        %12lld\tobjs:\t%d", 0, 0),
                       c_printf("\tTotal evicted size:     %12lld\tobjs:\t%d", 0, 0),
                       c_printf("\tTotal relocated size:   %12lld\tobjs:\t%d", 0, 0),
                       c_printf("\tTotal moved size:       %12lld\tobjs:\t%d", 0, 0),
                       c_printf("\tTotal invalidated size: %12lld\tobjs:\t%d", 0, 0),
                       c_printf("\tTotal done size:        %12lld\tobjs:\t%d", 3 * 65536, 3)]
    assert s.ib in client.bos


def test_fence_info_is_amdgpu_debugfs_fence_info(dev, client):
    s = Setup(dev, client)
    for _ in range(3):
        seq = s.submit(SdmaIb().fence(VA_A, 7), ring=1)
    assert s.wait(seq, ring=1) == 0
    out = lines(dev.debugfs_files()["amdgpu_fence_info"]())
    # amdgpu_fence.c amdgpu_debugfs_fence_info_show: the trailing fence of SDMA rings
    # counts preemptions (amdgpu_ring_preempt_ib); compute rings have none.
    want = []
    for i, (name, done) in enumerate([("sdma0", 0), ("sdma1", 3)] + [(n, 0) for n in MI100_COMPUTE_RINGS]):
        want += [c_printf("--- ring %d (%s) ---", i, name),
                 c_printf("Last signaled fence          0x%08x", done),
                 c_printf("Last emitted                 0x%08x", done)]
        if name.startswith("sdma"):
            want += [c_printf("Last signaled trailing fence 0x%08x", 0),
                     c_printf("Last emitted                 0x%08x", 0)]
    assert out == want


def test_firmware_info_is_amdgpu_debugfs_firmware_info(dev, client):
    def fw(fw_type, index=0):   # what INFO FW_VERSION answers (amdgpu_firmware_info, for both)
        got = uapi.drm_amdgpu_info_firmware.from_buffer_copy(info(
            dev, client, uapi.AMDGPU_INFO_FW_VERSION, 8, query_fw__fw_type=fw_type, query_fw__index=index))
        return got.feature, got.ver

    out = lines(dev.debugfs_files()["amdgpu_firmware_info"]())
    # amdgpu_kms.c amdgpu_debugfs_firmware_info_show, in its order
    plain = "%s feature version: %u, firmware version: 0x%08x"
    want = [c_printf(plain, n, *fw(t, i)) for n, t, i in [
        ("VCE", uapi.AMDGPU_INFO_FW_VCE, 0), ("UVD", uapi.AMDGPU_INFO_FW_UVD, 0),
        ("MC", uapi.AMDGPU_INFO_FW_GMC, 0), ("ME", uapi.AMDGPU_INFO_FW_GFX_ME, 0),
        ("PFP", uapi.AMDGPU_INFO_FW_GFX_PFP, 0), ("CE", uapi.AMDGPU_INFO_FW_GFX_CE, 0),
        ("RLC", uapi.AMDGPU_INFO_FW_GFX_RLC, 0),
        ("RLC SRLC", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL, 0),
        ("RLC SRLG", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM, 0),
        ("RLC SRLS", uapi.AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM, 0),
        ("MEC", uapi.AMDGPU_INFO_FW_GFX_MEC, 0), ("MEC2", uapi.AMDGPU_INFO_FW_GFX_MEC, 1),
        ("SOS", uapi.AMDGPU_INFO_FW_SOS, 0), ("ASD", uapi.AMDGPU_INFO_FW_ASD, 0)]]
    want += [c_printf("TA %s feature version: 0x%08x, firmware version: 0x%08x", n, *fw(uapi.AMDGPU_INFO_FW_TA, i))
             for i, n in enumerate(["XGMI", "RAS", "HDCP", "DTM", "RAP", "SECUREDISPLAY"])]
    feature, ver = fw(uapi.AMDGPU_INFO_FW_SMC)
    want.append(c_printf("SMC feature version: %u, firmware version: 0x%08x (%d.%d.%d)",
                         feature, ver, (ver >> 16) & 0xFFFF, (ver >> 8) & 0xFF, ver & 0xFF))
    want += [c_printf("SDMA%d feature version: %u, firmware version: 0x%08x", i, *fw(uapi.AMDGPU_INFO_FW_SDMA, i))
             for i in range(2)]
    want += [c_printf(plain, n, *fw(t)) for n, t in [
        ("VCN", uapi.AMDGPU_INFO_FW_VCN), ("DMCU", uapi.AMDGPU_INFO_FW_DMCU),
        ("DMCUB", uapi.AMDGPU_INFO_FW_DMCUB), ("TOC", uapi.AMDGPU_INFO_FW_TOC)]]
    assert out[:-1] == want
    assert re.fullmatch(r"VBIOS version: \S+", out[-1])


def test_gpu_recover_resets_on_read_and_prints_the_result(dev, client):
    entry = dev.debugfs_files()["amdgpu_gpu_recover"]
    assert callable(entry)   # 0444 as on Linux: no write
    before = dev.reset_counter
    # amdgpu_fence.c: DEFINE_DEBUGFS_ATTRIBUTE(..., gpu_recover_get, NULL, "%lld\n"),
    # the reset domain's result, 0 for a reset that succeeded.
    assert entry() == c_printf("%lld\n", 0)
    assert dev.reset_counter == before + 1 and "GPU reset begin!" in dev.kmsg.text()


def test_ring_file_is_amdgpu_debugfs_ring_read(dev, client):
    """amdgpu_ring.c amdgpu_debugfs_ring_read: 12 bytes (rptr, wptr, the driver's wptr,
    in dwords masked to the ring), then the ring's dwords; the ring holds the frames
    the KMD emits for each run (sdma_v4_0_ring_emit_ib/_fence)."""
    empty = dev.debugfs_files()["amdgpu_ring_sdma0"]()
    assert isinstance(empty, bytes) and len(empty) == 12 + 4 * ring_buffer.RING_DW
    assert struct.unpack_from("<3I", empty) == (0, 0, 0)
    s = Setup(dev, client)
    ib = SdmaIb().fence(VA_A, 5)
    assert s.wait(s.submit(ib)) == 0
    data = dev.debugfs_files()["amdgpu_ring_sdma0"]()
    rptr, wptr, driver_wptr = struct.unpack_from("<3I", data)
    assert rptr == wptr == driver_wptr > 0
    ring = struct.unpack_from(f"<{wptr}I", data, 12)
    at = ring.index(sdma.sdma_header(ring_buffer.SDMA_OP_INDIRECT))
    assert at % 8 == 2   # sdma_v4_0_ring_emit_ib: the IB packet ends on an 8-dword boundary
    assert ring[at + 1:at + 4] == (VA_IB & 0xFFFFFFE0, VA_IB >> 32, len(ib))
    assert sdma.sdma_header(sdma.SDMA_OP_FENCE) in ring[at + 6:] and sdma.sdma_header(sdma.SDMA_OP_TRAP) in ring


def test_compute_frame_is_gfx_v9_0s(dev):
    rb = ring_buffer.RingBuffer("compute")
    rb.emit([(0x1234_5678_9A00, 16)], seq=3)
    ring = struct.unpack_from("<12I", rb.dump(), 12)
    # gfx_v9_0_ring_emit_ib_compute, then gfx_v9_0_ring_emit_fence
    assert ring[:4] == (pm4.pm4_type3_header(pm4.PKT3_INDIRECT_BUFFER, 3), 0x5678_9A00, 0x1234, pm4.IB_VALID | 16)
    assert ring[4] == pm4.pm4_type3_header(pm4.PKT3_RELEASE_MEM, 7) and ring[9] == 3


def test_vgpu_ring_file_keeps_the_scheduler_view(dev):
    assert dev.debugfs_files()["vgpu_ring_sdma0"]().startswith("ring sdma0 ")
