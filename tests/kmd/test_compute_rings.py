"""Eight compute rings, as an MI100's amdgpu has (kmd/info.py RINGS): every one runs
PM4, and a bad job on one ring stops neither the good job of another context on
another ring nor that context (the shape of IGT's amd_queue_reset COMPUTE subtests:
a good and a bad job on two rings of one IP)."""
import errno
import struct

from vgpu import uapi
from vgpu.pm4 import Pm4Ib

from .conftest import KmdError, call
from .test_cs import chunk
from .test_devcoredump import VA_DATA, VA_IB, Client as DumpClient
from .test_partitions import hw_ip

COMPUTE = uapi.AMDGPU_HW_IP_COMPUTE


class Client(DumpClient):
    """A context with IB, code and data BOs mapped (test_devcoredump's), submitting to
    any compute ring."""

    slot = 0

    def submit(self, ib: Pm4Ib, ring: int) -> int:
        va = VA_IB + 1024 * self.slot
        self.slot += 1
        self.f.bos[self.ib].write(va - VA_IB, ib.tobytes())
        c = uapi.drm_amdgpu_cs_chunk_ib()
        c.va_start, c.ib_bytes, c.ip_type, c.ring = va, len(ib.tobytes()), COMPUTE, ring
        a = uapi.drm_amdgpu_cs()
        a.in_.ctx_id, a.in_.num_chunks = self.ctx, 1
        return call(self.dev, self.f, "AMDGPU_CS", a, chunk(uapi.AMDGPU_CHUNK_ID_IB, bytes(c)))[0].out.handle

    def wait(self, seq: int, ring: int) -> int:
        a = uapi.drm_amdgpu_wait_cs()
        a.in_.handle, a.in_.ip_type, a.in_.ip_instance, a.in_.ring = seq, COMPUTE, 0, ring
        a.in_.ctx_id, a.in_.timeout = self.ctx, (1 << 64) - 1
        try:
            call(self.dev, self.f, "AMDGPU_WAIT_CS", a)
            return 0
        except KmdError as e:
            return e.errno

    def word(self, i: int) -> int:
        return struct.unpack_from("<I", self.f.bos[self.data].read(4 * i, 4))[0]

    def reset_state(self) -> int:
        a = uapi.drm_amdgpu_ctx()
        a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_QUERY_STATE2, self.ctx
        return call(self.dev, self.f, "AMDGPU_CTX", a)[0].out.state.flags


def test_hw_ip_info_reports_eight_compute_rings(dev, client):
    info = hw_ip(dev, client, COMPUTE)
    assert info.available_rings == 0xff
    assert (info.hw_ip_version_major, info.hw_ip_version_minor) == (9, 0)


def test_every_compute_ring_runs_its_own_jobs(dev, client):
    c = Client(dev, client)
    seqs = [(ring, c.submit(Pm4Ib().write_data(VA_DATA + 4 * ring, [0x100 + ring]), ring)) for ring in range(8)]
    assert [c.wait(seq, ring) for ring, seq in seqs] == [0] * 8
    assert [c.word(i) for i in range(8)] == [0x100 + i for i in range(8)]
    # each job went to the ring it named: one job completed on each
    names = [dev.rings[(COMPUTE, i)].name for i in range(8)]
    assert names == ["comp_1.0.0", "comp_1.1.0", "comp_1.2.0", "comp_1.3.0",
                     "comp_1.0.1", "comp_1.1.1", "comp_1.2.1", "comp_1.3.1"]
    fence_info = dev.debugfs_files()["amdgpu_fence_info"]()
    for name in names:
        block = fence_info.split(f"({name}) ---\n", 1)[1]
        assert block.startswith("Last signaled fence          0x00000001\n"), (name, block[:80])


def test_a_ring_past_the_eighth_is_einval(dev, client):
    c = Client(dev, client)
    try:
        c.submit(Pm4Ib().nop(), 8)
    except KmdError as e:
        assert e.errno == errno.EINVAL
    else:
        raise AssertionError("CS on compute ring 8 was accepted")


def test_a_bad_job_on_one_ring_leaves_the_good_one_on_another(dev, client, root_client):
    good, bad = Client(dev, root_client), Client(dev, client)
    bad_seq = bad.submit(Pm4Ib().raw(0xC0FF1000 | (0x7F << 8)), 1)   # an opcode PM4 has not
    good_seq = good.submit(Pm4Ib().write_data(VA_DATA, [0xC0DE]), 0)
    assert bad.wait(bad_seq, 1) == errno.EINVAL
    assert good.wait(good_seq, 0) == 0 and good.word(0) == 0xC0DE
    assert bad.reset_state() & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    assert not good.reset_state() & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY
    # the ring that ran the bad job serves the next one
    assert good.wait(good.submit(Pm4Ib().write_data(VA_DATA + 4, [7]), 1), 1) == 0 and good.word(1) == 7
