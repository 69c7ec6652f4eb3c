"""User-mode queues through the dispatch (kmd/userq*.py): USERQ create/free and its
errnos, packets through SDMA and compute queues against the same packets through
CS, fences seen by futex, USERQ_SIGNAL/USERQ_WAIT with syncobjs and CS jobs, faults,
hangs, eviction while a queue runs, teardown with the file."""
import ctypes
import errno
import random
import struct
import time

import numpy as np
import pytest

from kmd.hw import SdmaIb
from vgpu import futex, pm4, sdma, uapi

from .conftest import call, fails, gem_create, gem_va
from .test_cs import VA_A, VA_B, Setup

COMPUTE, DMA = uapi.AMDGPU_HW_IP_COMPUTE, uapi.AMDGPU_HW_IP_DMA
GTT = uapi.AMDGPU_GEM_DOMAIN_GTT
VA_RING, VA_PTRS, VA_AREA = 0x40000000, 0x41000000, 0x42000000
RING_BYTES = 4096


def doorbell(dev, f) -> int:
    return gem_create(dev, f, 4096, uapi.AMDGPU_GEM_DOMAIN_DOORBELL)


def userq_args(ip=DMA, db=0, **kw) -> uapi.drm_amdgpu_userq:
    a = uapi.drm_amdgpu_userq()
    i = a.in_
    i.op, i.ip_type, i.doorbell_handle, i.doorbell_offset = uapi.AMDGPU_USERQ_OP_CREATE, ip, db, 0
    i.queue_va, i.queue_size, i.rptr_va, i.wptr_va = VA_RING, RING_BYTES, VA_PTRS, VA_PTRS + 8
    i.mqd_size = 8
    for k, v in kw.items():
        setattr(i, k, v)
    return a


def mqd(ip=DMA) -> bytes:
    return struct.pack("<Q", VA_AREA)


class Queue:
    """A client's queue: its ring, pointer and area BOs mapped, its doorbell, and
    the client side (write packets, bump wptr, ring the doorbell)."""

    def __init__(self, s: Setup, ip=DMA, flags=0):
        self.s, dev, f = s, s.dev, s.f
        self.ip = ip
        n = s.queues = getattr(s, "queues", 0) + 1
        self.va_ring, self.va_ptrs, self.va_area = (va + (n - 1) * 0x100000 for va in (VA_RING, VA_PTRS, VA_AREA))
        self.ring = gem_create(dev, f, RING_BYTES, GTT)
        self.ptrs = gem_create(dev, f, 4096, GTT)
        self.area = gem_create(dev, f, 4096, GTT)
        for h, va in ((self.ring, self.va_ring), (self.ptrs, self.va_ptrs), (self.area, self.va_area)):
            call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, va, 4096))
        self.db = doorbell(dev, f)
        out, _ = call(dev, f, "AMDGPU_USERQ", userq_args(ip, self.db, flags=flags, queue_va=self.va_ring,
                                                         rptr_va=self.va_ptrs, wptr_va=self.va_ptrs + 8),
                      struct.pack("<Q", self.va_area))
        self.id = out.out.queue_id
        self.wptr = 0

    @property
    def q(self):
        return self.s.f.userqs[self.id]

    def write(self, dwords, ring_doorbell=True, wake=True) -> int:
        """Append `dwords` at wptr (wrapping; first waiting for room, as a client
        must not overrun rptr), publish wptr, ring the doorbell."""
        if self.wptr + len(dwords) - self.rptr() > RING_BYTES // 4:
            self.wait_rptr(self.wptr + len(dwords) - RING_BYTES // 4)
        ring = self.s.bo(self.ring)
        for d in dwords:
            ring.write((self.wptr % (RING_BYTES // 4)) * 4, struct.pack("<I", d & 0xFFFFFFFF))
            self.wptr += 1
        self.s.bo(self.ptrs).write(8, struct.pack("<Q", self.wptr))
        if ring_doorbell:
            dbo = self.s.bo(self.db)
            dbo.write(0, struct.pack("<Q", self.wptr))
            if wake:
                futex.wake(dbo.storage.ctypes.data)
        return self.wptr

    def rptr(self) -> int:
        return struct.unpack("<Q", self.s.bo(self.ptrs).read(0, 8))[0]

    def wait_rptr(self, value: int, limit: float = 10.0) -> None:
        """Wait on the rptr word with a futex, as a client would."""
        end = time.monotonic() + limit
        while (r := self.rptr()) < value:
            assert time.monotonic() < end, f"rptr {r} < {value}: {self.q.describe()}"
            storage = self.s.bo(self.ptrs).storage   # None while evicted: the file only
            if storage is None:
                time.sleep(0.001)
            else:
                futex.wait(storage.ctypes.data, r & 0xFFFFFFFF, 0.05)


def wait_state(q, state, limit=10.0):
    end = time.monotonic() + limit
    while q.state != state:
        assert time.monotonic() < end, q.describe()
        time.sleep(0.005)


@pytest.fixture
def s(dev, client):
    return Setup(dev, client, domain=GTT)


# -- create / free: Linux's errnos, nothing leaked ------------------------------------
def test_create_and_free(s):
    q = Queue(s)
    assert q.id == 1 and q.q.state == "active"
    a = uapi.drm_amdgpu_userq()
    a.in_.op, a.in_.queue_id = uapi.AMDGPU_USERQ_OP_FREE, q.id
    call(s.dev, s.f, "AMDGPU_USERQ", a)
    assert not s.f.userqs and not s.dev.userqs.by_slot
    assert s.bo(q.db).pin_count == 1           # the doorbell's own pin, the queue's gone
    fails(errno.EINVAL, s.dev, s.f, "AMDGPU_USERQ", a)   # freed already


@pytest.mark.parametrize("change, err", [
    (dict(ip_type=uapi.AMDGPU_HW_IP_GFX), errno.EINVAL),
    (dict(ip_type=uapi.AMDGPU_HW_IP_UVD), errno.EINVAL),
    (dict(flags=1 << 7), errno.EINVAL),
    (dict(flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_SECURE), errno.EINVAL),
    (dict(flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH), errno.EACCES),
    (dict(queue_size=0), errno.EINVAL),
    (dict(queue_size=3000), errno.EINVAL),           # not a power of two
    (dict(queue_size=128), errno.EINVAL),            # under 256 bytes
    (dict(queue_va=VA_RING + 64), errno.EINVAL),     # misaligned
    (dict(queue_va=0x50000000), errno.EINVAL),       # unmapped ring
    (dict(queue_size=8192), errno.EINVAL),           # runs past the mapping
    (dict(rptr_va=VA_PTRS + 4), errno.EINVAL),       # misaligned
    (dict(wptr_va=0x50000000), errno.EINVAL),        # unmapped
    (dict(mqd_size=16), errno.EINVAL),               # wrong MQD size
    (dict(doorbell_handle=999), errno.ENOENT),
    (dict(doorbell_offset=512), errno.EINVAL),       # past the page's 512 slots
    (dict(op=7), errno.EINVAL),
])
def test_create_refusals(s, change, err):
    dev, f = s.dev, s.f
    for h, va in ((gem_create(dev, f, 4096, GTT), VA_RING), (gem_create(dev, f, 4096, GTT), VA_PTRS),
                  (gem_create(dev, f, 4096, GTT), VA_AREA)):
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, va, 4096))
    db = doorbell(dev, f)
    a = userq_args(DMA, db, **change)
    fails(err, dev, f, "AMDGPU_USERQ", a, mqd()[:a.in_.mqd_size] if a.in_.mqd_size <= 8 else mqd() + bytes(8))
    assert not f.userqs and not dev.userqs.by_slot and f.bos[db].pin_count == 1


def test_doorbell_must_be_a_doorbell_bo(s):
    dev, f = s.dev, s.f
    for h, va in ((gem_create(dev, f, 4096, GTT), VA_RING), (gem_create(dev, f, 4096, GTT), VA_PTRS),
                  (gem_create(dev, f, 4096, GTT), VA_AREA)):
        call(dev, f, "AMDGPU_GEM_VA", gem_va(dev, f, h, va, 4096))
    fails(errno.EINVAL, dev, f, "AMDGPU_USERQ", userq_args(DMA, s.a), mqd())
    fails(errno.EINVAL, dev, f, "AMDGPU_USERQ", userq_args(DMA, s.a), mqd())
    a = uapi.drm_amdgpu_gem_create()
    a.in_.bo_size, a.in_.domains = 4096, uapi.AMDGPU_GEM_DOMAIN_DOORBELL | GTT
    fails(errno.EINVAL, dev, f, "AMDGPU_GEM_CREATE", a)


def test_high_priority_is_for_root(dev, root_client):
    s = Setup(dev, root_client, domain=GTT)
    q = Queue(s, flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH)
    assert q.q.priority == 3


def test_per_file_cap(s, monkeypatch):
    from kmd import userq_ioctl
    monkeypatch.setattr(userq_ioctl, "MAX_QUEUES_PER_FILE", 2)
    Queue(s), Queue(s)
    fails(errno.ENOSPC, s.dev, s.f, "AMDGPU_USERQ", userq_args(DMA, doorbell(s.dev, s.f)), mqd())
    assert len(s.f.userqs) == 2


# -- work through queues ---------------------------------------------------------
def test_sdma_queue_runs_packets_and_fence_wakes_a_futex_waiter(s):
    q = Queue(s)
    ib = SdmaIb().write_linear(VA_A, [1, 2, 3]).fence(VA_A + 64, 0x1234)
    end = q.write(ib.dwords)
    addr = s.bo(s.a).storage.ctypes.data + 64
    deadline = time.monotonic() + 10
    while ctypes.c_uint32.from_address(addr).value != 0x1234:
        assert time.monotonic() < deadline
        futex.wait(addr, ctypes.c_uint32.from_address(addr).value, 1.0)
    q.wait_rptr(end)
    assert s.bo(s.a).read(0, 12) == struct.pack("<3I", 1, 2, 3)
    assert q.q.rptr == end and q.q.segments >= 1


def test_doorbell_without_wake_and_wptr_alone_are_noticed(s):
    q = Queue(s)
    end = q.write(SdmaIb().fence(VA_A, 5).dwords, wake=False)
    q.wait_rptr(end)
    end = q.write(SdmaIb().fence(VA_A, 6).dwords, ring_doorbell=False)
    q.wait_rptr(end)
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 6)


def test_ring_wraps(s):
    q = Queue(s)
    for i in range(600):                      # 600 x 4 dwords: the 1024-dword ring wraps twice
        end = q.write(SdmaIb().fence(VA_A, i).dwords)
    q.wait_rptr(end)
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 599)


def test_compute_queue_release_mem(s):
    q = Queue(s, ip=COMPUTE)
    ib = pm4.Pm4Ib().write_data(VA_A, [7, 8]).release_mem(VA_A + 16, 0xABCDEF, data_sel=pm4.DATA_SEL_32)
    q.wait_rptr(q.write(ib.dwords))
    assert s.bo(s.a).read(0, 8) == struct.pack("<2I", 7, 8)
    assert s.bo(s.a).read(16, 4) == struct.pack("<I", 0xABCDEF)


def random_sdma(rng, n=12) -> SdmaIb:
    ib = SdmaIb()
    for _ in range(n):
        k = rng.randrange(4)
        off = rng.randrange(0, 4096, 4)
        if k == 0:
            ib.write_linear(VA_A + off, [rng.getrandbits(32) for _ in range(rng.randrange(1, 8))])
        elif k == 1:
            ib.fence(VA_A + off, rng.getrandbits(32))
        elif k == 2:
            ib.constant_fill(VA_A + off, rng.getrandbits(32), 4 * rng.randrange(1, 64))
        else:
            ib.copy_linear(VA_A + rng.randrange(0, 4096, 4), VA_A + off, 4 * rng.randrange(1, 32))
    return ib


@pytest.mark.parametrize("seed", range(4))
def test_differential_random_streams_queue_vs_cs(s, seed):
    """The same random packet streams through a queue and through CS leave the same memory."""
    rng = random.Random(seed)
    ibs = [random_sdma(rng) for _ in range(6)]
    q = Queue(s)
    for ib in ibs:
        end = q.write(ib.dwords)
    q.wait_rptr(end)
    by_queue = s.bo(s.a).read(0, 8192)
    s.bo(s.a).write(0, bytes(8192))
    for ib in ibs:
        seq = s.submit(ib)
    assert s.wait(seq) == 0
    assert s.bo(s.a).read(0, 8192) == by_queue


# -- faults, hangs, eviction, teardown ----------------------------------------------------
def test_illegal_packet_stops_the_queue_and_dumps(s):
    q = Queue(s)
    dumps = len(s.dev.coredumps.snapshot())
    q.write([0xFF, 0, 0, 0])
    wait_state(q.q, "faulted")
    log = s.dev.kmsg.text() if hasattr(s.dev.kmsg, "text") else "\n".join(s.dev.kmsg.lines())
    assert "user queue 1" in log and "faulted" in log and "crash dump devcd" in log
    assert len(s.dev.coredumps.snapshot()) == dumps + 1
    # other work goes on: CS on the same file and a new queue
    seq = s.submit(SdmaIb().fence(VA_B, 9))
    assert s.wait(seq) == 0
    q2 = Queue(s)
    q2.wait_rptr(q2.write(SdmaIb().fence(VA_B, 10).dwords))


def test_page_fault_is_recorded_in_the_vm(s):
    q = Queue(s)
    q.write(SdmaIb().fence(0x7000_0000, 1).dwords)
    wait_state(q.q, "faulted")
    assert s.f.vm.fault_info.addr == 0x7000_0000


def test_hung_queue_is_reset_within_the_timeout(s):
    q = Queue(s)
    t0 = time.monotonic()
    q.write(SdmaIb().poll_regmem(VA_A + 128, 1).dwords)    # waits forever
    wait_state(q.q, "hung", limit=s.dev.timeout + 5)
    assert time.monotonic() - t0 < s.dev.timeout + 2
    q2 = Queue(s)
    q2.wait_rptr(q2.write(SdmaIb().fence(VA_B, 3).dwords))


def test_bos_evicted_and_brought_back_while_the_queue_runs(s):
    q = Queue(s)
    data = bytes(range(256)) * 16
    s.bo(s.b).write(0, data)
    for i in range(50):
        end = q.write(SdmaIb().copy_linear(VA_A, VA_B, 4096).fence(VA_A + 8192, i).dwords)
        if i % 10 == 5:
            with s.dev.lock:
                for h in (q.ring, q.ptrs, s.a, s.b):
                    s.dev.residency.evict(s.bo(h))
    q.wait_rptr(end)
    assert s.bo(s.a).read(0, 4096) == data
    assert s.bo(s.a).read(8192, 4) == struct.pack("<I", 49)
    assert q.q.state == "active"


def test_closing_the_file_tears_its_queues_down(dev, client):
    s = Setup(dev, client, domain=GTT)
    q = Queue(s)
    q.write(SdmaIb().poll_regmem(VA_A + 128, 1).dwords)    # busy when the file closes
    time.sleep(0.05)
    worker = q.q.worker
    dev.close_file(client)
    assert not dev.userqs.by_slot
    worker.thread.join(5)
    assert not worker.thread.is_alive()


# -- USERQ_SIGNAL / USERQ_WAIT ---------------------------------------------------------
def syncobj(dev, f) -> int:
    a = uapi.drm_syncobj_create()
    return call(dev, f, "SYNCOBJ_CREATE", a)[0].handle


def userq_signal(s, q, handles=(), bos=()):
    a = uapi.drm_amdgpu_userq_signal()
    a.queue_id, a.num_syncobj_handles, a.num_bo_write_handles = q.id, len(handles), len(bos)
    call(s.dev, s.f, "AMDGPU_USERQ_SIGNAL", a, struct.pack(f"<{len(handles)}I", *handles)
         + struct.pack(f"<{len(bos)}I", *bos))


def userq_wait(s, q, handles=(), num=8):
    a = uapi.drm_amdgpu_userq_wait()
    a.waitq_id, a.num_syncobj_handles, a.num_fences = q.id, len(handles), num
    out, data = call(s.dev, s.f, "AMDGPU_USERQ_WAIT", a, struct.pack(f"<{len(handles)}I", *handles))
    return out.num_fences, [struct.unpack_from("<QQ", data, 16 * i) for i in range(len(data) // 16)]


def syncobj_wait(s, h, timeout_s=10.0):
    a = uapi.drm_syncobj_wait()
    a.count_handles, a.timeout_nsec = 1, time.monotonic_ns() + int(timeout_s * 1e9)
    return call(s.dev, s.f, "SYNCOBJ_WAIT", a, struct.pack("<I", h))


def test_signal_a_syncobj_that_a_cs_job_waits_for(s):
    q = Queue(s)
    h = syncobj(s.dev, s.f)
    q.write(SdmaIb().poll_regmem(VA_A + 256, 1).fence(VA_A, 11).dwords)   # held until we say
    userq_signal(s, q, [h])
    n, pairs = userq_wait(s, q, [h])
    assert n == 1 and pairs[0] == (q.va_ptrs, q.wptr)
    s.bo(s.a).write(256, struct.pack("<I", 1))
    syncobj_wait(s, h)
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 11)


def test_queue_waits_for_a_cs_jobs_syncobj(s):
    """A CS job's fence behind a syncobj: USERQ_WAIT gives a seq64 slot the KMD writes
    when the job's fence signals; the queue polls it."""
    q = Queue(s)
    h = syncobj(s.dev, s.f)
    blocker = s.submit(SdmaIb().poll_regmem(VA_B + 256, 1))
    seq_fence = s.dev.rings[(DMA, 0)].fence(blocker)
    s.f.syncobjs[h].replace_fence(seq_fence)
    n, pairs = userq_wait(s, q, [h], num=0)
    assert n == 1
    n, [(va, value)] = userq_wait(s, q, [h])
    end = q.write(SdmaIb().poll_regmem(va, value, func=5).fence(VA_A, 21).dwords)
    time.sleep(0.05)
    assert q.rptr() < end
    s.bo(s.b).write(256, struct.pack("<I", 1))
    assert s.wait(blocker) == 0
    q.wait_rptr(end)
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 21)


def test_signal_on_a_faulted_queue_fails_the_fence(s):
    q = Queue(s)
    h = syncobj(s.dev, s.f)
    q.write([0xFF])
    wait_state(q.q, "faulted")
    userq_signal(s, q, [h])
    assert s.f.syncobjs[h].fence.error == errno.ECANCELED


def test_signal_and_wait_refusals(s):
    q = Queue(s)
    a = uapi.drm_amdgpu_userq_signal()
    a.queue_id = 99
    fails(errno.ENOENT, s.dev, s.f, "AMDGPU_USERQ_SIGNAL", a)
    a.queue_id, a.num_syncobj_handles = q.id, 1
    fails(errno.ENOENT, s.dev, s.f, "AMDGPU_USERQ_SIGNAL", a, struct.pack("<I", 77))
    w = uapi.drm_amdgpu_userq_wait()
    w.waitq_id = 99
    fails(errno.ENOENT, s.dev, s.f, "AMDGPU_USERQ_WAIT", w)


# -- INFO ----------------------------------------------------------------------------
def info(s, query, ip=0, size=512):
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size = query, size
    a.query_hw_ip.type = ip
    return call(s.dev, s.f, "AMDGPU_INFO", a)[1]


def test_info_reports_user_queues(s):
    d = uapi.drm_amdgpu_info_device_userq.from_buffer_copy(
        info(s, uapi.AMDGPU_INFO_DEV_INFO, size=ctypes.sizeof(uapi.drm_amdgpu_info_device_userq)))
    assert d.userq_ip_mask == 1 << COMPUTE | 1 << DMA
    for ip in (COMPUTE, DMA):
        h = uapi.drm_amdgpu_info_hw_ip_userq.from_buffer_copy(
            info(s, uapi.AMDGPU_INFO_HW_IP_INFO, ip, ctypes.sizeof(uapi.drm_amdgpu_info_hw_ip_userq)))
        assert h.userq_num_slots == 8 and h.base.available_rings
    m = uapi.drm_amdgpu_info_uq_metadata.from_buffer_copy(info(s, uapi.AMDGPU_INFO_UQ_FW_AREAS, COMPUTE, 16))
    assert (m.compute.eop_size, m.compute.eop_alignment) == (2048, 256)


def test_info_userq_state(s):
    q = Queue(s)
    st = uapi.vgpu_info_userq_state.from_buffer_copy(info(s, uapi.VGPU_INFO_USERQ_STATE, q.id, 24))
    assert (st.state, st.error, st.devcd) == (uapi.VGPU_USERQ_STATE_ACTIVE, 0, uapi.VGPU_USERQ_NO_DEVCD)
    q.write([0xFF])
    wait_state(q.q, "faulted")
    st = uapi.vgpu_info_userq_state.from_buffer_copy(info(s, uapi.VGPU_INFO_USERQ_STATE, q.id, 24))
    assert st.state == uapi.VGPU_USERQ_STATE_FAULTED and st.error == errno.EINVAL and st.devcd != uapi.VGPU_USERQ_NO_DEVCD
    a = uapi.drm_amdgpu_info()
    a.query, a.return_size, a.query_hw_ip.type = uapi.VGPU_INFO_USERQ_STATE, 24, 42
    fails(errno.ENOENT, s.dev, s.f, "AMDGPU_INFO", a)


# -- priorities ----------------------------------------------------------------------
def test_higher_priority_queue_preempts_a_lower_one(s):
    """A NORMAL_HIGH queue's work runs while a LOW queue's long poll is preempted; the
    LOW queue resumes where it stopped once the high one is idle."""
    low = Queue(s, flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW)
    high = Queue(s, flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH)
    end_low = low.write(SdmaIb().poll_regmem(VA_B + 512, 1).fence(VA_B, 1).dwords)
    time.sleep(0.05)
    assert low.q.worker.running
    for i in range(20):
        end_high = high.write(SdmaIb().fence(VA_A, 100 + i).dwords)
    high.wait_rptr(end_high)
    # The preemption is asked for at once but noted when the low engine's poll step
    # sees it and its worker gets the GIL back, which may come after the high work.
    deadline = time.monotonic() + 10
    while low.q.preemptions == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert low.q.preemptions >= 1 and low.rptr() < end_low
    s.bo(s.b).write(512, struct.pack("<I", 1))
    low.wait_rptr(end_low)
    assert s.bo(s.b).read(0, 4) == struct.pack("<I", 1)
    assert s.bo(s.a).read(0, 4) == struct.pack("<I", 119)


def test_a_lower_priority_queue_waits_while_a_higher_one_has_work(s):
    low = Queue(s, flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW)
    high = Queue(s, flags=uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH)
    high.write(SdmaIb().poll_regmem(VA_B + 512, 1).dwords)   # high busy: polls
    time.sleep(0.05)
    end_low = low.write(SdmaIb().fence(VA_A, 5).dwords)
    time.sleep(0.1)
    assert low.rptr() < end_low                               # held back
    s.bo(s.b).write(512, struct.pack("<I", 1))
    low.wait_rptr(end_low)


def test_debugfs_lists_the_queues(s):
    from kmd import debugfs
    assert debugfs.files(s.dev)["vgpu_userqs"]() == "no user queues\n"
    q = Queue(s)
    q.wait_rptr(q.write(SdmaIb().fence(VA_A, 1).dwords))
    line = debugfs.files(s.dev)["vgpu_userqs"]()
    assert line.startswith(f"sdma_userq0: client {s.f.id} queue 1 normal-low active, ring 0x40000000 size 4096, rptr 4")


def test_fdinfo_counts_queue_engine_time(s):
    from kmd import fdinfo
    before = fdinfo.engine_ns(s.dev, s.f).get("sdma", 0)
    q = Queue(s)
    q.wait_rptr(q.write(SdmaIb().constant_fill(VA_A, 7, 65536).dwords))
    assert fdinfo.engine_ns(s.dev, s.f)["sdma"] > before


def test_queue_work_keeps_the_engine_busy(s):
    """gpu_busy_percent, GRBM/SDMA status and the SMU model see a queue's run as they
    see a ring job (radeontop and nvtop read them)."""
    from kmd import info
    q = Queue(s)
    q.write(SdmaIb().poll_regmem(VA_A + 128, 1).dwords)       # runs until we say
    # The meter's window is the last second or the device's life if shorter: on a
    # slow machine the setup itself can be half of it, so wait for the run to fill
    # the window (a watchdog, not a timing check: it is 100 % a second later).
    deadline = time.monotonic() + 10
    while s.dev.busy_meter.percent() <= 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.dev.busy_meter.percent() > 50
    assert info._busy(s.dev, DMA, 0) and not info._busy(s.dev, DMA, 1)
    s.bo(s.a).write(128, struct.pack("<I", 1))
    q.wait_rptr(q.wptr)
    assert not info._busy(s.dev, DMA, 0)


# -- rptr at a wait: the packets before it are done ----------------------------------
@pytest.mark.parametrize("ip", [DMA, COMPUTE])
def test_rptr_reaches_a_waiting_packet_before_the_run_ends(s, ip):
    """A queue stopped in a wait (SDMA POLL_REGMEM, PM4 WAIT_REG_MEM) publishes rptr up
    to the waiting packet, and wakes the fence words written before it: a client or
    another queue sees the packets before the wait done while it waits."""
    q = Queue(s, ip=ip)
    if ip == DMA:
        ib = SdmaIb().fence(VA_A, 5).poll_regmem(VA_A + 128, 1)
    else:
        ib = pm4.Pm4Ib().release_mem(VA_A, 5, data_sel=pm4.DATA_SEL_32).wait_reg_mem(VA_A + 128, 1)
    before = len(ib.dwords) - (6 if ip == DMA else 7)       # the wait's position
    end = q.write(ib.dwords)
    q.wait_rptr(before)
    assert q.rptr() == before and s.bo(s.a).read(0, 4) == struct.pack("<I", 5)
    s.bo(s.a).write(128, struct.pack("<I", 1))
    q.wait_rptr(end)


def test_two_queues_wait_on_each_others_rptr(s):
    """Compute: a NOP, then wait until the SDMA queue's rptr passed its poll; SDMA: the
    poll, until compute's rptr passed its NOP. Both finish (rptr moves as packets
    complete, not once per run)."""
    c, d = Queue(s, ip=COMPUTE), Queue(s, ip=DMA)
    poll = SdmaIb().poll_regmem(c.va_ptrs, 1, func=sdma.SDMA_FUNC_GE)
    c.write(pm4.Pm4Ib().nop().wait_reg_mem(d.va_ptrs, len(poll.dwords), func=pm4.WAIT_FUNC_GE).dwords)
    d.write(poll.nop().dwords)
    c.wait_rptr(c.wptr)
    d.wait_rptr(d.wptr)
