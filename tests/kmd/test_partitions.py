"""Partitions (`vgpu mount --partitions N`, kmd/partition.py, kmd/gpu.py): each
partition's share in the INFO queries and sysfs, and MIG-style isolation: a fault,
a hang with its reset, an on-demand reset and an out-of-memory in one partition
while a job of the other is in flight; that job completes with the right data, its
context is neither guilty nor reset, its VRAM keeps its bytes. Through the real
dispatch of each partition's Device."""
import errno
import struct
import time

import pytest

from kmd.device import Device
from kmd.errors import KmdError
from kmd.gpu import PartitionedGpu
from kmd.hw import SdmaIb
from kmd import info as kmd_info
from kmd.partition import TOTAL_CUS, TOTAL_SDMA, compute_ring_name, split
from vgpu import uapi
from vgpu.paths import PCI_SLOT, pci_slot

from .conftest import MiB, call, info
from .test_compute_faults import dispatch
from .test_cs import VA_A, VA_B, Setup
from .test_devcoredump import VA_DATA, Client

DMA, COMPUTE = uapi.AMDGPU_HW_IP_DMA, uapi.AMDGPU_HW_IP_COMPUTE
PATTERN = bytes(range(256)) * 256  # 64 KiB the victim keeps in VRAM
FLAG = 0x5A5A


def make_gpu(count=2, timeout=1.0):
    return PartitionedGpu(count, vram_size=64 * MiB, gtt_size=64 * MiB, timeout=timeout)


@pytest.fixture
def gpu():
    g = make_gpu()
    try:
        yield g
        for d in g.partitions:
            d.check_invariants()
    finally:
        g.shutdown()


def open_client(dev, pid):
    return dev.open_file(pid=pid, uid=1000, comm=f"p{pid}", render=True)


def dev_info(dev, f) -> uapi.drm_amdgpu_info_device:
    return uapi.drm_amdgpu_info_device.from_buffer_copy(
        info(dev, f, uapi.AMDGPU_INFO_DEV_INFO, 2048)[:uapi.ctypes.sizeof(uapi.drm_amdgpu_info_device)])


def hw_ip(dev, f, ip) -> uapi.drm_amdgpu_info_hw_ip:
    raw = info(dev, f, uapi.AMDGPU_INFO_HW_IP_INFO, 512, query_hw_ip__type=ip)
    return uapi.drm_amdgpu_info_hw_ip.from_buffer_copy(raw[:uapi.ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip)])


def reset_status(dev, s) -> int:
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_QUERY_STATE, s.ctx
    return call(dev, s.f, "AMDGPU_CTX", a)[0].out.state.reset_status


class Victim:
    """A client of the untouched partition: 64 KiB of PATTERN in VRAM, and a job in
    flight that polls a flag (so it is running when the other partition fails),
    then copies the pattern and writes a fence value."""

    def __init__(self, dev):
        self.dev = dev
        self.s = Setup(dev, open_client(dev, 2000))
        self.s.bo(self.s.a).write(4096, PATTERN[:65536 - 4096])

    def start(self):
        s = self.s
        self.seq = s.submit(SdmaIb().poll_regmem(VA_A, FLAG).copy_linear(VA_B, VA_A + 4096, 65536 - 4096)
                            .fence(VA_B + 65536 - 8, 77))
        ring = self.dev.rings[(DMA, 0)]
        while ring.running is None:   # the engine has it (bounded by the ring timeout)
            time.sleep(0.001)
        assert ring.running.fence.seq == self.seq

    def finish(self):
        s = self.s
        assert not s.dev.rings[(DMA, 0)].fence(self.seq).signaled, "the victim's job ended early"
        s.bo(s.a).write(0, struct.pack("<I", FLAG))
        assert s.wait(self.seq) == 0
        assert s.bo(s.b).read(0, 65536 - 4096 - 8) == PATTERN[:65536 - 4096 - 8]
        assert s.bo(s.b).read(65536 - 8, 8) == struct.pack("<Q", 77)
        assert s.bo(s.a).read(4096, 65536 - 4096) == PATTERN[:65536 - 4096]  # its VRAM untouched
        assert not s.f.contexts[s.ctx].guilty
        assert reset_status(self.dev, s) == uapi.AMDGPU_CTX_NO_RESET
        assert self.dev.reset_counter == 0


# -- the split -------------------------------------------------------------------------

def test_the_split_counts_what_the_gpu_reports():
    assert TOTAL_CUS == kmd_info.NUM_SHADER_ENGINES * kmd_info.NUM_SH_PER_SE * kmd_info.NUM_CU_PER_SH
    assert TOTAL_SDMA == kmd_info.RINGS[DMA]


@pytest.mark.parametrize("count", [0, -1, 3, 4, 8, 2.0, True])
def test_a_count_the_gpu_cannot_take_is_refused_with_what_it_can(count):
    with pytest.raises(ValueError) as e:
        split(count, 64 * MiB, 64 * MiB)
    msg = str(e.value)
    assert f"--partitions {count}" in msg and "1 or 2" in msg and "2 compute units" in msg, msg


def test_one_partition_is_the_whole_gpu_as_before():
    d = Device(vram_size=64 * MiB, gtt_size=64 * MiB)
    try:
        f = open_client(d, 1)
        assert [r.name for r in d.rings.values()] == ["sdma0", "sdma1"] + [compute_ring_name(k)
                                                                            for k in range(8)]
        i = dev_info(d, f)
        assert (i.cu_active_number, i.cu_bitmap[0][0], i.num_cu_per_sh) == (2, 0b11, 2)
        assert hw_ip(d, f, DMA).available_rings == 0b11 and hw_ip(d, f, COMPUTE).available_rings == 0xff
        assert d.partitions == [d] and d.partition.count == 1
        sysfs = d.sysfs_files()
        assert "current_compute_partition" not in sysfs and "vgpu_partition" not in sysfs  # as an MI100
        assert f"PCI_SLOT_NAME={PCI_SLOT}\n" in sysfs["uevent"]()
        assert "partition" not in d.kmsg.text()
        d.close_file(f)
    finally:
        d.shutdown()


def test_each_partition_reports_its_own_share(gpu):
    p0, p1 = gpu.partitions
    assert [r.name for r in p0.rings.values()] == ["sdma0", "comp_1.0.0", "comp_1.1.0", "comp_1.2.0", "comp_1.3.0"]
    assert [r.name for r in p1.rings.values()] == ["sdma1", "comp_1.0.1", "comp_1.1.1", "comp_1.2.1", "comp_1.3.1"]
    for d, cu, sdma in ((p0, "0", "sdma0"), (p1, "1", "sdma1")):
        f = open_client(d, 1)
        i = dev_info(d, f)
        assert (i.cu_active_number, i.cu_bitmap[0][0], i.cu_ao_mask, i.num_cu_per_sh) == (1, 1, 1, 1)
        assert hw_ip(d, f, DMA).available_rings == 0b1
        assert hw_ip(d, f, COMPUTE).available_rings == 0b1111
        v = uapi.drm_amdgpu_info_vram_gtt.from_buffer_copy(info(d, f, uapi.AMDGPU_INFO_VRAM_GTT, 24))
        assert (v.vram_size, v.gtt_size) == (32 * MiB, 32 * MiB)
        m = uapi.drm_amdgpu_memory_info.from_buffer_copy(
            info(d, f, uapi.AMDGPU_INFO_MEMORY, uapi.ctypes.sizeof(uapi.drm_amdgpu_memory_info)))
        assert m.vram.total_heap_size == 32 * MiB and m.gtt.total_heap_size == 32 * MiB
        sysfs = d.sysfs_files()
        part = sysfs["vgpu_partition"]
        assert part["compute_units"]() == cu + "\n" and part["sdma_engines"]() == sdma + "\n"
        assert part["vram_size"]() == f"{32 * MiB}\n" and part["count"]() == "2\n"
        assert sysfs["mem_info_vram_total"]() == f"{32 * MiB}\n"
        assert sysfs["current_compute_partition"]() == "DPX\n"
        assert sysfs["available_compute_partition"]() == "SPX, DPX\n"
        assert sysfs["current_memory_partition"]() == "NPS2\n"
        assert f"PCI_SLOT_NAME={pci_slot(d.partition.index)}\n" in sysfs["uevent"]()
        assert set(sysfs["vgpu_engines"]) == {sdma, *(compute_ring_name(d.partition.index * 4 + k)
                                                      for k in range(4))}
        d.close_file(f)
    log = gpu.kmsg.text()
    assert f"vgpu {pci_slot(1)}: vgpu: partition 1 of 2 (DPX, NPS2): CUs 1, sdma1" in log


def test_a_partition_has_no_ring_of_another(gpu):
    s = Setup(gpu.partitions[1], open_client(gpu.partitions[1], 1))
    with pytest.raises(KmdError) as e:
        s.submit(SdmaIb().fence(VA_A, 1), ring=1)   # sdma0 belongs to partition 0
    assert e.value.errno == errno.EINVAL


def test_compute_runs_on_the_partitions_own_compute_units(gpu):
    for d in gpu.partitions:
        c = Client(d, open_client(d, 3))
        src = "v_lshl_b32 v3, v0, 2\nglobal_store_dword v3, v0, s[0:1]\ns_endpgm\n"
        assert c.wait(dispatch(c, src, [VA_DATA, 0])) == 0
        assert c.f.bos[c.data].read(0, 8) == bytes([0, 0, 0, 0, 1, 0, 0, 0])
        assert d.rings[(COMPUTE, 0)].engine.compute.threads == 1


# -- isolation ---------------------------------------------------------------------------

def test_a_fault_in_one_partition_leaves_the_other_running(gpu):
    bad_dev, good_dev = gpu.partitions
    victim = Victim(good_dev)
    victim.start()
    bad = Setup(bad_dev, open_client(bad_dev, 1000))
    assert_fails(errno.EFAULT, bad, bad.submit(SdmaIb().write_linear(0x7000000000, [1, 2, 3])))
    assert bad.f.contexts[bad.ctx].guilty
    assert f"vgpu {PCI_SLOT}: [sdma0] GPU fault" in gpu.kmsg.text()
    victim.finish()


def test_a_hang_and_its_reset_leave_the_other_partition_running():
    gpu = make_gpu(timeout=3.0)
    try:
        bad_dev, good_dev = gpu.partitions
        bad = Setup(bad_dev, open_client(bad_dev, 1000))
        bystander = Setup(bad_dev, open_client(bad_dev, 1001))
        hung = bad.submit(SdmaIb().poll_regmem(VA_A, 1234))
        time.sleep(1.5)   # the victim's job starts later, so its own deadline is after the hang's
        victim = Victim(good_dev)
        victim.start()
        assert_fails(errno.ETIME, bad, hung)
        log = gpu.kmsg.text()
        assert f"vgpu {PCI_SLOT}: ring sdma0 timeout" in log and "GPU reset succeeded" in log
        assert reset_status(bad_dev, bystander) == uapi.AMDGPU_CTX_UNKNOWN_RESET  # same partition
        assert bad_dev.reset_counter == 1
        victim.finish()
        assert f"{pci_slot(1)}: GPU reset" not in gpu.kmsg.text()
    finally:
        gpu.shutdown()


def test_an_on_demand_reset_aborts_only_its_partitions_jobs(gpu):
    bad_dev, good_dev = gpu.partitions
    victim = Victim(good_dev)
    victim.start()
    bad = Setup(bad_dev, open_client(bad_dev, 1000))
    running = bad.submit(SdmaIb().poll_regmem(VA_A, 1234))
    ring = bad_dev.rings[(DMA, 0)]
    while ring.running is None:
        time.sleep(0.001)
    assert bad_dev.debugfs_files()["amdgpu_gpu_recover"]() == "0\n"   # a read resets
    assert_fails(errno.ETIME, bad, running)
    assert bad_dev.reset_counter >= 2   # the request, then the aborted job's own reset
    victim.finish()
    assert good_dev.reset_counter == 0


def test_out_of_memory_in_one_partition_leaves_the_others_memory(gpu):
    bad_dev, good_dev = gpu.partitions
    victim = Victim(good_dev)
    victim.start()
    bad = open_client(bad_dev, 1000)
    held = []
    for domain in (uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT):
        with pytest.raises(KmdError) as e:
            while True:
                held.append(gem_create_raw(bad_dev, bad, 4 * MiB, domain))
        assert e.value.errno == errno.ENOMEM
    # 32 MiB of VRAM and 32 MiB of GTT, its share, and as much again evicted out of
    # both apertures (SYSTEM holds VRAM + GTT's size; docs/memory.md, "Eviction")
    assert len(held) == 32
    assert "out of memory" in gpu.kmsg.text()
    victim.finish()
    # The other partition still has its share: half of it in one BO, then the rest.
    good = open_client(good_dev, 2001)
    gem_create_raw(good_dev, good, 16 * MiB, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    while good_dev.memory.vram_allocator.used < 32 * MiB - 128 * 1024:
        gem_create_raw(good_dev, good, 64 * 1024, uapi.AMDGPU_GEM_DOMAIN_VRAM)


def gem_create_raw(dev, f, size, domain):
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.alignment, a.in_.domains = size, 4096, domain
    return call(dev, f, "AMDGPU_GEM_CREATE", a)[0].out.handle


def assert_fails(err, s, seq):
    with pytest.raises(KmdError) as e:
        s.wait(seq)
    assert e.value.errno == err


# -- what the partitions share --------------------------------------------------------------

def test_mount_wide_views_cover_every_partition(gpu):
    p0, p1 = gpu.partitions
    s0, s1 = Setup(p0, open_client(p0, 10)), Setup(p1, open_client(p1, 11))
    for s in (s0, s1):
        bo = s.bo(s.a)
        assert gpu.bo_by_offset(bo.mmap_offset) is bo
    procs = gpu.client_files()
    assert str(s0.f.id) in procs["10"]["fdinfo"] and str(s1.f.id) in procs["11"]["fdinfo"]
    assert_fails(errno.EFAULT, s1, s1.submit(SdmaIb().write_linear(0x7000000000, [1])))
    assert len(gpu.devcoredumps()) == 1
    reader = gpu.tracing_files()["vgpu_timeline"].open_reader()
    head = reader.read(1 << 16)
    reader.close()
    assert b"comp_1.0.1" in head and b"sdma0" in head


def test_no_prime_or_sync_file_crosses_partitions(gpu):
    """As CUDA IPC does not cross MIG instances: a token of one partition is unknown
    to the other (ENOENT), and still imports on its own."""
    p0, p1 = gpu.partitions
    f0, f1 = open_client(p0, 20), open_client(p1, 21)
    handle = Setup(p0, f0).a
    token = call(p0, f0, "PRIME_HANDLE_TO_FD", uapi.drm_prime_handle(handle=handle))[0].fd
    with pytest.raises(KmdError) as e:
        call(p1, f1, "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))
    assert e.value.errno == errno.ENOENT
    assert call(p0, open_client(p0, 22), "PRIME_FD_TO_HANDLE", uapi.drm_prime_handle(fd=token))[0].handle
    sync = call(p0, f0, "SYNCOBJ_CREATE", uapi.drm_syncobj_create())[0].handle
    exported = call(p0, f0, "SYNCOBJ_HANDLE_TO_FD", uapi.drm_syncobj_handle(handle=sync))[0].fd
    with pytest.raises(KmdError) as e:
        call(p1, f1, "SYNCOBJ_FD_TO_HANDLE", uapi.drm_syncobj_handle(fd=exported))
    assert e.value.errno == errno.ENOENT
    assert gpu.sync_file_by_token(exported) is p0.sync_file_by_token(exported)
