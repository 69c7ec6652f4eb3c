"""Performance counters through the KMD's dispatch (docs/observability.md): per job, per
ring, per client; gpu_busy_percent as the busiest engine's; VGPU_INFO_JOB_COUNTERS."""
import ctypes
import errno
import time

import pytest

from kmd import perf
from kmd.errors import KmdError
from kmd.hw import SdmaIb
from vgpu import asm, uapi
from vgpu import pm4 as P
from vgpu.pm4 import Pm4Ib

from .conftest import call
from .test_cs import VA_A, VA_B, Setup
from .test_devcoredump import VA_CODE, VA_DATA, c  # noqa: F401  (fixture)

DMA, COMPUTE = uapi.AMDGPU_HW_IP_DMA, uapi.AMDGPU_HW_IP_COMPUTE


def job_counters(dev, f, ip, seq, ring=0):
    a = uapi.drm_amdgpu_info(return_size=ctypes.sizeof(uapi.vgpu_info_job_counters),
                             query=uapi.VGPU_INFO_JOB_COUNTERS)
    q = uapi.vgpu_info_job_query(ip_type=ip, ring=ring, seq_no=seq)
    ctypes.memmove(ctypes.addressof(a._u), bytes(q), ctypes.sizeof(q))
    reply = call(dev, f, "AMDGPU_INFO", a)
    return uapi.vgpu_info_job_counters.from_bytes(reply[1])


def test_sdma_job_counts_its_bytes_and_packets(dev, client):
    s = Setup(dev, client)
    seq = s.submit(SdmaIb().write_linear(VA_A, list(range(64)))
                   .constant_fill(VA_A + 4096, 0xDEADBEEF, 8192)
                   .copy_linear(VA_B + 100, VA_A, 4096 + 8192))
    assert s.wait(seq) == 0
    ring = dev.rings[(DMA, 0)]
    rec = ring.perf.job_record(seq)
    assert rec.client_id == client.id and rec.status == "ok" and rec.error == 0
    c = rec.counters
    assert c["bytes_read"] == 4096 + 8192
    assert c["bytes_written"] == 256 + 8192 + 4096 + 8192
    assert (c["pkt_WRITE"], c["pkt_CONST_FILL"], c["pkt_COPY"], c["packets"]) == (1, 1, 1, 3)
    assert c["busy_ns"] > 0 and rec.ended >= rec.started
    totals = ring.perf.snapshot(None, time.monotonic())
    assert totals["jobs"] == 1 and totals["bytes_read"] == 4096 + 8192
    assert client.usage.jobs_submitted == 1 and client.usage.engine_ns["sdma"] == c["busy_ns"]
    text = dev.debugfs_files()["vgpu_ring_sdma0"]()
    assert "bytes_written" in text and f"{rec.job_id} {s.ctx} {client.id}" in text
    answer = job_counters(dev, client, DMA, seq)
    assert (answer.seq_no, answer.bytes_read, answer.bytes_written, answer.packets) == \
        (seq, 4096 + 8192, 256 + 8192 + 4096 + 8192, 3)
    assert answer.busy_ns == c["busy_ns"]
    assert abs(answer.ended_ns - answer.started_ns - answer.busy_ns) <= 1     # each rounded to ns


def test_a_fault_is_counted_for_the_ring_and_the_client(dev, client):
    s = Setup(dev, client)
    seq = s.submit(SdmaIb().copy_linear(VA_B, VA_A, 64).copy_linear(0x7000_0000_0000, VA_A, 64))
    assert s.wait(seq, raw=True) is not None
    while not dev.rings[(DMA, 0)].fence(seq).signaled:
        time.sleep(0.01)
    rec = dev.rings[(DMA, 0)].perf.job_record(seq)
    assert rec.status == "fault" and rec.error == errno.EFAULT
    assert rec.counters["page_faults"] == 1 and rec.counters["bytes_read"] == 64
    assert client.usage.faults == 1 and client.usage.hangs == 0
    assert job_counters(dev, client, DMA, seq).error == errno.EFAULT


KERNEL = """.kernel k
    v_lshl_b32 v3, v0, 2
    v_add_u32 v4, v0, 1
    global_store_dword v3, v4, s[0:1]
    s_endpgm
"""


def dispatch(c, source, user_data, groups=1, threads=64):
    obj = asm.assemble(source, "k.s")
    c.f.bos[c.code].write(0, obj.code)
    ib = (Pm4Ib().set_program(VA_CODE, P.rsrc1(obj.vgprs, obj.sgprs), P.rsrc2(2))
          .set_num_threads(threads).set_user_data(user_data).dispatch_direct(groups)
          .release_mem(VA_DATA + 3072, 1))
    return c.submit(ib)


def test_compute_job_counts_lanes_from_the_kernel(dev, c):
    seq = dispatch(c, KERNEL, [VA_DATA, 0], groups=4, threads=64)   # 4 x 64 lanes, 8 waves
    assert c.wait(seq) == 0
    rec = dev.rings[(COMPUTE, 0)].perf.job_record(seq)
    k = rec.counters
    assert k["dispatches"] == 1 and k["waves"] == 8
    assert k["instructions"] == 4 * 8 and k["lane_instructions"] == 4 * 8 * 32
    assert (k["valu"], k["vmem"], k["salu"]) == (16, 8, 8)
    # Every group stores its 64 dwords to the same 256 bytes: 4 x 256 stored.
    assert k["bytes_stored"] == 4 * 256 and k["bytes_loaded"] == 0
    assert k["pkt_DISPATCH_DIRECT"] == 1 and k["pkt_RELEASE_MEM"] == 1
    assert k["tlb_misses"] >= 1
    answer = job_counters(dev, c.f, COMPUTE, seq)
    assert (answer.lane_instructions, answer.valu, answer.waves) == (4 * 8 * 32, 16, 8)


def test_job_counters_query_refuses_what_it_cannot_answer(dev, c, root_client):
    seq = dispatch(c, KERNEL, [VA_DATA, 0])
    assert c.wait(seq) == 0
    for ip, ring, s, err in ((COMPUTE, 0, seq + 5, errno.EINVAL), (COMPUTE, 9, seq, errno.EINVAL),
                             (uapi.AMDGPU_HW_IP_UVD, 0, seq, errno.EINVAL)):
        with pytest.raises(KmdError) as e:
            job_counters(dev, c.f, ip, s, ring)
        assert e.value.errno == err
    with pytest.raises(KmdError) as e:        # another file's job
        job_counters(dev, root_client, COMPUTE, seq)
    assert e.value.errno == errno.ENOENT


def test_job_counters_query_is_busy_while_the_job_runs(dev, c):
    seq = dispatch(c, ".kernel k\nspin:\ns_branch spin\n", [0, 0])
    ring = dev.rings[(COMPUTE, 0)]
    while ring.running is None:
        time.sleep(0.005)
    with pytest.raises(KmdError) as e:
        job_counters(dev, c.f, COMPUTE, seq)
    assert e.value.errno == errno.EBUSY
    assert c.wait(seq) == errno.ETIME          # the ring timeout (1 s) ends it
    assert job_counters(dev, c.f, COMPUTE, seq).error == errno.ETIME
    assert c.f.usage.hangs == 1


def test_gpu_busy_percent_is_the_busiest_engine(dev, c):
    """A compute ring busy for the whole window reads ~100 %, not 100 / 6 (the
    average over every ring that gpu_busy_percent was before)."""
    seq = dispatch(c, ".kernel k\nspin:\ns_branch spin\n", [0, 0])
    ring = dev.rings[(COMPUTE, 0)]
    while ring.running is None or ring.running.started_at is None:
        time.sleep(0.005)
    time.sleep(perf.BUSY_WINDOW * 0.95 - (time.monotonic() - ring.running.started_at))
    sysfs = dev.sysfs_files()
    busy = int(sysfs["gpu_busy_percent"]())
    engine = int(sysfs["vgpu_engines"]["comp_1.0.0"]["busy_percent"]())
    idle = int(sysfs["vgpu_engines"]["sdma0"]["busy_percent"]())
    pm = dev.debugfs_files()["amdgpu_pm_info"]()
    assert c.wait(seq) == errno.ETIME
    assert busy >= 90 and engine >= 90 and idle == 0
    assert "GPU Load: " in pm and "comp_1.0.0: " in pm


def test_busy_window_adds_up_intervals():
    r = perf.RingPerf("sdma")
    r.created -= 10
    now = time.monotonic()
    r._intervals.extend([(now - 0.9, now - 0.6), (now - 0.5, now - 0.25)])
    assert r.busy_percent(None, now) == round(100 * 0.55 / perf.BUSY_WINDOW)
    assert r.busy_percent(now - 0.1, now) == round(100 * 0.65 / perf.BUSY_WINDOW)


def test_fdinfo_lists_memory_to_the_byte_and_usage(dev, client, root_client):
    s = Setup(dev, client, size=12288)
    seq = s.submit(SdmaIb().fence(VA_A, 1))
    assert s.wait(seq) == 0
    tree = dev.client_files()
    entry = tree[str(client.pid)]["fdinfo"][str(client.id)]
    assert entry.uid == client.uid
    fields = dict(line.split(":\t", 1) for line in entry.read().splitlines())
    assert fields["drm-driver"] == "amdgpu" and fields["drm-client-id"] == str(client.id)
    assert int(fields["drm-memory-vram"]) == 2 * 12288          # a and b (VRAM by default)
    assert int(fields["drm-memory-gtt"]) == 65536               # the IB
    assert fields["vgpu-jobs-submitted"] == "1" and fields["vgpu-contexts"] == "1"
    assert fields["vgpu-jobs-in-flight"] == "0" and fields["vgpu-faults"] == "0"
    assert int(fields["drm-engine-dma"].split()[0]) > 0
