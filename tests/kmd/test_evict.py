"""VRAM eviction and oversubscription (kmd/residency.py), through the dispatch: idle
BOs make room for new ones and come back at submission, with their bytes; pinned and
busy BOs stay; a job whose BOs cannot all be placed gets ENOMEM; CPU mappings keep
working across moves; the counters and the views say where every BO lives."""
import ctypes
import errno
import hashlib
import mmap
import struct

import numpy as np
import pytest

from kmd.device import Device
from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import MiB, call, fails, gem_create, gem_va
from .test_cs import Setup, chunk

VRAM, GTT, SYSTEM = uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT, uapi.AMDGPU_GEM_DOMAIN_CPU
BIG = 64 * MiB


@pytest.fixture
def make_dev():
    made = []

    def make(vram, gtt):
        d = Device(vram_size=vram, gtt_size=gtt, timeout=2.0)
        made.append(d)
        return d, d.open_file(pid=1000, uid=1000, comm="evict", render=True)
    yield make
    for d in made:
        for f in list(d.files.values()):
            d.close_file(f)
        d.check_invariants()
        d.shutdown()


def info_u64(dev, f, query) -> int:
    a = uapi.drm_amdgpu_info()
    a.return_size, a.query = 8, query
    return int.from_bytes(call(dev, f, "AMDGPU_INFO", a)[1], "little")


def domain_now(dev, f, handle) -> int:
    """GEM_WAIT_IDLE's out.domain: where the BO lives now."""
    a = uapi.drm_amdgpu_gem_wait_idle()
    a.in_.handle, a.in_.timeout = handle, 0
    return call(dev, f, "AMDGPU_GEM_WAIT_IDLE", a)[0].out.domain


def fill(bo, seed: int) -> str:
    """Write seed-dependent bytes over the whole BO through its file (a CPU mapping);
    returns their digest."""
    data = np.random.default_rng(seed).integers(0, 256, bo.size, dtype=np.uint8).tobytes()
    with open(bo.path, "r+b") as fobj, mmap.mmap(fobj.fileno(), bo.size) as m:
        m[:] = data
    return hashlib.sha256(data).hexdigest()


def digest(bo) -> str:
    return hashlib.sha256(bo.read(0, bo.size)).hexdigest()


def test_the_issues_three_64_mib_bos_fit_by_evicting_the_oldest(make_dev):
    # The issue's learner: 3 BOs of 64 MiB on a 256 MiB mount (128 MiB of VRAM, 128
    # of GTT). The third used to be a hard ENOMEM; now the least recently used BO
    # goes to GTT with its bytes, and the new one takes its place in VRAM.
    dev, f = make_dev(128 * MiB, 128 * MiB)
    h1, h2 = gem_create(dev, f, BIG), gem_create(dev, f, BIG)
    b1, b2 = f.bos[h1], f.bos[h2]
    d1, d2 = fill(b1, 1), fill(b2, 2)
    old_offset = b1.gpu_offset
    h3 = gem_create(dev, f, BIG)
    b3 = f.bos[h3]
    assert (b1.domain, b2.domain, b3.domain) == (GTT, VRAM, VRAM)
    assert b3.gpu_offset == old_offset                      # the range b1 gave back
    assert (digest(b1), digest(b2)) == (d1, d2)
    assert digest(b3) == hashlib.sha256(bytes(BIG)).hexdigest()   # a new BO starts zeroed
    assert [domain_now(dev, f, h) for h in (h1, h2, h3)] == [GTT, VRAM, VRAM]
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_EVICTIONS) == 1
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED) == BIG
    assert info_u64(dev, f, uapi.AMDGPU_INFO_VRAM_USAGE) == 2 * BIG
    assert info_u64(dev, f, uapi.AMDGPU_INFO_GTT_USAGE) == BIG
    # GEM_OP's creation info still says what was asked for, as amdgpu's does.
    op = uapi.drm_amdgpu_gem_op(handle=h1, op=uapi.AMDGPU_GEM_OP_GET_GEM_CREATE_INFO)
    info = uapi.drm_amdgpu_gem_create_in.from_buffer_copy(call(dev, f, "AMDGPU_GEM_OP", op)[1])
    assert info.domains == VRAM and info.bo_size == BIG
    gem_info = dev.debugfs_files()["amdgpu_gem_info"]()
    assert f"0x{h1:08x}: {BIG:12d} byte GTT\n" in gem_info and f"0x{h3:08x}: {BIG:12d} byte VRAM VISIBLE\n" in gem_info
    sysfs = dev.sysfs_files()
    assert (sysfs["vgpu_num_evictions"](), sysfs["vgpu_num_bytes_moved"]()) == ("1\n", f"{BIG}\n")


class Big(Setup):
    """Setup (an IB BO, two 64 KiB BOs, all in GTT) on a device with little VRAM,
    plus BIG BOs mapped at VA_BIG + i * BIG."""

    VA_BIG = 0x100000000

    def __init__(self, dev, f):
        super().__init__(dev, f, domain=GTT)
        self.big = []

    def add(self, domains=VRAM, flags=0) -> int:
        h = gem_create(self.dev, self.f, BIG, domains, flags)
        call(self.dev, self.f, "AMDGPU_GEM_VA", gem_va(self.dev, self.f, h, self.va(len(self.big)), BIG))
        self.big.append(h)
        return h

    def va(self, i: int) -> int:
        return self.VA_BIG + i * BIG

    def use(self, handles, ib: SdmaIb, wait=True):
        """Submit `ib` with a BO list of the IB BO and `handles`."""
        self.list = self.bo_list([self.ib, *handles])
        seq = self.submit(ib)
        if wait:
            assert self.wait(seq) == 0
        return seq


def test_a_job_gets_its_bo_back_in_vram_with_its_bytes(make_dev):
    dev, f = make_dev(128 * MiB, 256 * MiB)   # two BIG BOs
    s = Big(dev, f)
    h0, h1 = s.add(), s.add()
    d0 = fill(f.bos[h0], 10)
    h2 = s.add()                               # evicts h0, the least recently used
    assert domain_now(dev, f, h0) == GTT
    moved = info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED)
    # A job that names h0 gets it back in VRAM (h1, now the oldest idle BO, leaves) and
    # reads and writes it through the same VAs: the PTEs follow the BO.
    s.use([h0, s.a], SdmaIb().copy_linear(VA_A_, s.va(0) + 4096, 4096)
          .constant_fill(s.va(0), 0x5A5A5A5A, 4096))
    assert (domain_now(dev, f, h0), domain_now(dev, f, h1), domain_now(dev, f, h2)) == (VRAM, GTT, VRAM)
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED) == moved + 2 * BIG
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_EVICTIONS) == 2
    b0 = f.bos[h0]
    assert b0.read(0, 4096) == struct.pack("<I", 0x5A5A5A5A) * 1024
    assert s.bo(s.a).read(0, 4096) == b0.read(4096, 4096)
    assert hashlib.sha256(b0.read(4096, BIG - 4096)).hexdigest() == \
        hashlib.sha256(np.random.default_rng(10).integers(0, 256, BIG, dtype=np.uint8).tobytes()[4096:]).hexdigest()
    assert dev.kmsg.text().count("GPU fault") == 0


VA_A_ = 0x20000000   # test_cs's VA_A


def test_a_cpu_mapping_kept_across_evictions_loses_no_write(make_dev):
    dev, f = make_dev(128 * MiB, 256 * MiB)
    s = Big(dev, f)
    h0 = s.add()
    b0 = f.bos[h0]
    fobj = open(b0.path, "r+b")
    m = mmap.mmap(fobj.fileno(), BIG)          # kept across both moves
    m[0:8] = b"before.."
    s.add(), s.add()                            # h0 goes to GTT
    assert b0.domain == GTT
    m[8:16] = b"evicted."                       # a store while it lives in GTT
    s.use([h0], SdmaIb().copy_linear(s.va(0) + 4096, s.va(0), 16))   # back to VRAM, the GPU reads both
    assert b0.domain == VRAM
    m[16:24] = b"back...."
    assert m[4096:4112] == b"before..evicted."   # the GPU's copy, seen through the old mapping
    assert b0.read(0, 24) == b"before..evicted.back...."
    m.close()
    fobj.close()


def test_pinned_and_busy_bos_are_never_evicted(make_dev):
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0, h1 = s.add(), s.add()
    f.bos[h0].pin_count += 1                   # what amdgpu_bo_pin does for the kernel
    # h1 is in the BO list of a job still waiting (POLL_REGMEM on a flag in A)
    seq = s.use([h1, s.a], SdmaIb().poll_regmem(VA_A_, 1), wait=False)
    h2 = s.add()                               # no idle VRAM BO: it falls back to GTT
    assert (f.bos[h0].domain, f.bos[h1].domain, f.bos[h2].domain) == (VRAM, VRAM, GTT)
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_EVICTIONS) == 0
    # A job that wants h2 in VRAM cannot evict them either: it runs with h2 in GTT.
    seq2 = s.use([h2], SdmaIb().constant_fill(s.va(2), 7, 4096), wait=False)
    assert f.bos[h2].domain == GTT
    s.bo(s.a).write(0, struct.pack("<I", 1))  # release the waiting job
    assert s.wait(seq) == 0 and s.wait(seq2) == 0
    assert f.bos[h2].read(0, 4) == struct.pack("<I", 7)
    # Unpinned and idle, h0 makes room for h2 at h2's next job.
    f.bos[h0].pin_count -= 1
    s.use([h2], SdmaIb().constant_fill(s.va(2) + 4, 8, 4))
    assert (f.bos[h0].domain, f.bos[h2].domain) == (GTT, VRAM)
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_EVICTIONS) == 1
    assert f.bos[h2].read(0, 8) == struct.pack("<II", 7, 8)


def test_a_bo_the_running_job_did_not_list_may_go_as_in_amdgpu(make_dev):
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0, h1 = s.add(), s.add()
    seq = s.use([s.a], SdmaIb().poll_regmem(VA_A_, 1), wait=False)   # lists neither h0 nor h1
    other = dev.open_file(pid=1001, uid=1000, comm="other", render=True)
    h = gem_create(dev, other, BIG)
    assert other.bos[h].domain == VRAM and (f.bos[h0].domain, f.bos[h1].domain) == (GTT, VRAM)
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seq) == 0
    # A job without a BO list holds every BO of its VM: none of them is evicted under it.
    s.list = 0
    seq = s.submit(SdmaIb().poll_regmem(VA_A_, 2))
    assert f.bos[h0].domain == VRAM            # validated back (other's BO made room)
    h2 = gem_create(dev, other, BIG)
    assert other.bos[h2].domain == GTT and (f.bos[h0].domain, f.bos[h1].domain) == (VRAM, VRAM)
    s.bo(s.a).write(0, struct.pack("<I", 2))
    assert s.wait(seq) == 0
    dev.close_file(other)


def test_enomem_when_a_jobs_bos_cannot_all_be_placed(make_dev):
    # 64 MiB of VRAM and 65 of GTT: the second BIG BO evicts the first to GTT; the
    # third evicts the second, and GTT being full, out of both apertures (to SYSTEM:
    # its file only, amdgpu_evict_flags' fallback). A job naming all three cannot run.
    dev, f = make_dev(64 * MiB, 64 * MiB + 1 * MiB)
    s = Setup(dev, f, size=4096)               # small BOs, GTT IB: 1 MiB of GTT holds them
    hs = []
    for i in range(3):
        h = gem_create(dev, f, BIG, VRAM)
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, Big.VA_BIG + i * BIG, BIG))
        hs.append(h)
    digests = [fill(f.bos[h], 20 + i) for i, h in enumerate(hs)]
    assert [f.bos[h].domain for h in hs] == [GTT, SYSTEM, VRAM]
    assert f.bos[hs[1]].where == "cpu"
    fdinfo = dev.client_files()[str(f.pid)]["fdinfo"][str(f.id)].read()
    assert f"drm-memory-cpu:\t{BIG}\n" in fdinfo and f"drm-memory-vram:\t{BIG}\n" in fdinfo
    assert [digest(f.bos[h]) for h in hs] == digests    # read from the file in SYSTEM
    s.list = s.bo_list([s.ib, *hs])
    fails(errno.ENOMEM, dev, f, "AMDGPU_CS", cs_of(s, SdmaIb().constant_fill(Big.VA_BIG, 1, 4096)),
          ib_chunk_of(s, SdmaIb().constant_fill(Big.VA_BIG, 1, 4096)))
    assert "the job's BOs do not all fit" in dev.kmsg.text()
    # One of them at a time fits: the SYSTEM BO comes back, an idle one makes room.
    s.list = s.bo_list([s.ib, hs[1]])
    seq = s.submit(SdmaIb().constant_fill(Big.VA_BIG + BIG + 8, 0xAB, 4))
    assert s.wait(seq) == 0
    b1 = f.bos[hs[1]]
    assert b1.domain == VRAM and f.bos[hs[2]].domain in (GTT, SYSTEM)
    want = bytearray(np.random.default_rng(21).integers(0, 256, BIG, dtype=np.uint8).tobytes())
    want[8:12] = struct.pack("<I", 0xAB)
    assert digest(b1) == hashlib.sha256(want).hexdigest()
    assert [digest(f.bos[h]) for h in (hs[0], hs[2])] == [digests[0], digests[2]]


def cs_of(s, ib):
    a = uapi.drm_amdgpu_cs()
    a.in_.ctx_id, a.in_.bo_list_handle, a.in_.num_chunks = s.ctx, s.list, 1
    return a


def ib_chunk_of(s, ib):
    s.bo(s.ib).write(0, ib.tobytes())
    c = uapi.drm_amdgpu_cs_chunk_ib()
    c.va_start, c.ib_bytes, c.ip_type = 0x10000000, len(ib) * 4, uapi.AMDGPU_HW_IP_DMA
    return chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c))


def test_a_job_without_a_bo_list_validates_every_mapped_bo(make_dev):
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0 = s.add()
    s.add(), s.add()                            # h0 to GTT
    gem_close(dev, f, s.big[2])                 # room in VRAM again
    s.list = 0                                  # no list: the VM's BOs are the job's
    seq = s.submit(SdmaIb().constant_fill(s.va(0), 3, 4096))
    assert s.wait(seq) == 0
    assert f.bos[h0].domain == VRAM and f.bos[h0].read(0, 4) == struct.pack("<I", 3)


def gem_close(dev, f, h):
    c = uapi.drm_gem_close()
    c.handle = h
    call(dev, f, "GEM_CLOSE", c)


def test_per_vm_bos_are_part_of_every_job(make_dev):
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0 = s.add(flags=uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID)
    s.add(), s.add()
    assert f.bos[h0].domain == GTT
    gem_close(dev, f, s.big[2])
    s.use([s.a], SdmaIb().constant_fill(VA_A_, 1, 4))   # h0 not listed, but per-VM
    assert f.bos[h0].domain == VRAM


def test_set_placement_moves_the_bo_at_its_next_job(make_dev):
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0 = s.add()
    op = uapi.drm_amdgpu_gem_op(handle=h0, op=uapi.AMDGPU_GEM_OP_SET_PLACEMENT, value=GTT)
    call(dev, f, "AMDGPU_GEM_OP", op)
    assert f.bos[h0].domain == VRAM             # nothing moves before a job needs it
    s.use([h0], SdmaIb().constant_fill(s.va(0), 9, 4))
    assert f.bos[h0].domain == GTT and f.bos[h0].read(0, 4) == struct.pack("<I", 9)
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_EVICTIONS) == 0   # a move, not an eviction
    assert info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED) == BIG


def test_a_gtt_bo_that_prefers_both_is_not_moved_back(make_dev):
    # TTM keeps a BO whose placement is one of its preferred domains where it is.
    dev, f = make_dev(128 * MiB, 512 * MiB)
    s = Big(dev, f)
    h0 = s.add(VRAM | GTT)
    s.add(), s.add(VRAM | GTT)
    assert f.bos[h0].domain == VRAM and f.bos[s.big[2]].domain == GTT   # fits in GTT: no eviction
    moved = info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED)
    s.use([s.big[2]], SdmaIb().constant_fill(s.va(2), 1, 4))
    assert f.bos[s.big[2]].domain == GTT and info_u64(dev, f, uapi.AMDGPU_INFO_NUM_BYTES_MOVED) == moved


def test_a_bo_list_naming_a_closed_bo_still_submits(make_dev):
    # A BO list keeps naming a BO whose last handle was closed while a job held it.
    dev, f = make_dev(64 * MiB, 64 * MiB)
    s = Setup(dev, f)
    seq = s.submit(SdmaIb().poll_regmem(VA_A_, 1))
    gem_close(dev, f, s.b)                      # held by the job: waits to be freed
    assert id(s.bo(s.a)) not in dev.zombie_bos and len(dev.zombie_bos) == 1
    seq2 = s.submit(SdmaIb().constant_fill(VA_A_ + 64, 5, 4))
    s.bo(s.a).write(0, struct.pack("<I", 1))
    assert s.wait(seq) == 0 and s.wait(seq2) == 0
    assert s.bo(s.a).read(64, 4) == struct.pack("<I", 5)
