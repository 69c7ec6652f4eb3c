"""The drm_sched-style scheduler: priorities, round-robin, starvation bound, the
per-context cap, SCHED, on-demand reset."""
import errno
import struct
import time

import pytest

from kmd import perf, sched
from kmd.errors import KmdError
from kmd.hw import SdmaIb
from kmd.ioctl import PendingReply
from vgpu import uapi

from .conftest import call, fails
from .test_cs import VA_A, VA_B, Setup


def new_ctx(s, priority=0):
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.priority = uapi.AMDGPU_CTX_OP_ALLOC_CTX, priority
    return call(s.dev, s.f, "AMDGPU_CTX", a)[0].out.alloc.ctx_id


def block_ring(s):
    """Run a job that polls VA_A until the test writes 1 there: the ring is busy.
    Returns once the ring is running it, so later jobs queue behind it."""
    seq = s.submit(SdmaIb().poll_regmem(VA_A, 1))
    ring = s.dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)]
    deadline = time.monotonic() + 30
    while ring.running is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return seq


def release(s):
    s.bo(s.a).write(0, struct.pack("<I", 1))


def drain(s, ring=0):
    """Wait for every job submitted on the ring (they may complete out of seq order)."""
    for seq in range(1, s.dev.rings[(uapi.AMDGPU_HW_IP_DMA, ring)].emitted_seq + 1):
        try:
            s.wait(seq, ring=ring)
        except KmdError:
            pass


def order(dev, ring=0):
    return [ctx for _, ctx in dev.rings[(uapi.AMDGPU_HW_IP_DMA, ring)].history]


def test_high_priority_first(dev, root_client):
    s = Setup(dev, root_client)
    low, high = new_ctx(s, uapi.AMDGPU_CTX_PRIORITY_LOW), new_ctx(s, uapi.AMDGPU_CTX_PRIORITY_HIGH)
    block_ring(s)
    for _ in range(3):
        s.submit(SdmaIb().nop(), ctx=low)
    last = [s.submit(SdmaIb().nop(), ctx=high) for _ in range(3)][-1]
    release(s)
    drain(s)
    # the blocker (NORMAL) may be preempted by the HIGH jobs and resume after them
    assert [c for c in order(dev)[1:] if c != s.ctx] == [high] * 3 + [low] * 3


def test_round_robin_within_a_priority(dev, client):
    s = Setup(dev, client)
    a, b = new_ctx(s), new_ctx(s)
    block_ring(s)
    for _ in range(3):
        s.submit(SdmaIb().nop(), ctx=a)
    for _ in range(3):
        s.submit(SdmaIb().nop(), ctx=b)
    release(s)
    drain(s)
    assert order(dev)[1:] == [a, b, a, b, a, b]


def test_starvation_bound(dev, root_client):
    s = Setup(dev, root_client)
    low, high = new_ctx(s, uapi.AMDGPU_CTX_PRIORITY_LOW), new_ctx(s, uapi.AMDGPU_CTX_PRIORITY_HIGH)
    block_ring(s)
    s.submit(SdmaIb().nop(), ctx=low)
    for _ in range(sched.STARVATION_LIMIT + 4):
        s.submit(SdmaIb().nop(), ctx=high)
    release(s)
    drain(s)
    ran = [c for c in order(dev)[1:] if c != s.ctx]  # without the blocker, maybe preempted and resumed
    assert ran.index(low) == sched.STARVATION_LIMIT  # served after exactly LIMIT higher jobs


def cs_reply_seq(reply) -> int:
    return uapi.drm_amdgpu_cs.from_buffer_copy(reply.arg).out.handle


def test_past_the_per_context_cap_cs_waits_for_room_in_order(dev, client, monkeypatch):
    """amdgpu_ctx_wait_prev_fence: a CS beyond the cap is not refused; its reply
    waits (a PendingReply: the write never blocks) until an older job of the context
    completes, and the waiting jobs are queued in submission order."""
    monkeypatch.setattr(sched, "MAX_JOBS_PER_CONTEXT", 4)
    s = Setup(dev, client)
    block_ring(s)
    for _ in range(3):
        s.submit(SdmaIb().nop())
    waiting = [s.submit(SdmaIb().fence(VA_B + 8 * i, i + 1), raw=True) for i in range(3)]
    assert all(isinstance(p, PendingReply) and not p.ready() for p in waiting)
    assert dev.rings[(uapi.AMDGPU_HW_IP_DMA, 0)].emitted_seq == 4   # not queued yet
    assert s.bo(s.ib).busy_jobs == 7                                 # but their references are taken
    other = new_ctx(s)  # another context is not held up
    assert s.submit(SdmaIb().nop(), ctx=other) == 5
    release(s)
    assert [cs_reply_seq(p.wait()) for p in waiting] == [6, 7, 8]
    drain(s)
    assert s.bo(s.b).read(0, 24) == struct.pack("<3Q", 1, 2, 3)
    assert s.submit(SdmaIb().nop()) == 9  # room again


def test_a_reset_drops_the_guilty_contexts_waiting_submissions(dev, client, monkeypatch):
    monkeypatch.setattr(sched, "MAX_JOBS_PER_CONTEXT", 2)
    s = Setup(dev, client)
    block_ring(s)           # times out (1 s): its context is guilty, the GPU reset
    s.submit(SdmaIb().nop())
    waiting = s.submit(SdmaIb().nop(), raw=True)
    assert isinstance(waiting, PendingReply)
    with pytest.raises(KmdError) as e:
        waiting.wait()
    assert e.value.errno == errno.ECANCELED
    assert "2 queued job(s) of the guilty context cancelled" in dev.kmsg.text()  # the nop, the waiting CS
    drain(s)
    assert s.bo(s.ib).busy_jobs == 0 and not client.jobs


def test_closing_the_file_drops_its_waiting_submissions(dev, client, monkeypatch):
    monkeypatch.setattr(sched, "MAX_JOBS_PER_CONTEXT", 2)
    s = Setup(dev, client)
    block_ring(s)
    s.submit(SdmaIb().nop())
    waiting = s.submit(SdmaIb().nop(), raw=True)
    flag = s.bo(s.a)
    dev.close_file(client)
    with pytest.raises(KmdError) as e:
        waiting.wait()
    assert e.value.errno == errno.EBADF
    flag.storage[:4] = memoryview(struct.pack("<I", 1))   # the running job ends; nothing is left behind
    deadline = time.monotonic() + 10
    while (dev.memory.bo_count or dev.zombie_bos) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not dev.zombie_bos and dev.memory.bo_count == 0


def sched_args(op, priority, ctx_id=0, fd=0):
    a = uapi.drm_amdgpu_sched()
    a.in_.op, a.in_.priority, a.in_.ctx_id, a.in_.fd = op, priority, ctx_id, fd
    return a


def test_sched_ioctl_overrides_priority(dev, client, root_client):
    s = Setup(dev, client)
    call(dev, root_client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_CONTEXT_PRIORITY_OVERRIDE, uapi.AMDGPU_CTX_PRIORITY_HIGH, s.ctx, client.id))
    assert client.contexts[s.ctx].priority == uapi.AMDGPU_CTX_PRIORITY_HIGH
    call(dev, root_client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE, uapi.AMDGPU_CTX_PRIORITY_LOW, 0, client.id))
    assert client.contexts[s.ctx].priority == uapi.AMDGPU_CTX_PRIORITY_LOW
    fails(errno.EACCES, dev, client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE, uapi.AMDGPU_CTX_PRIORITY_LOW))
    fails(errno.EINVAL, dev, root_client, "AMDGPU_SCHED", sched_args(9, 0))
    fails(errno.EINVAL, dev, root_client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE, 77))
    fails(errno.ENOENT, dev, root_client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_CONTEXT_PRIORITY_OVERRIDE, 0, 99, client.id))
    fails(errno.ENOENT, dev, root_client, "AMDGPU_SCHED", sched_args(
        uapi.AMDGPU_SCHED_OP_PROCESS_PRIORITY_OVERRIDE, 0, 0, 4242))


def test_debugfs_gpu_recover_aborts_the_running_job(dev, client):
    s = Setup(dev, client)
    hung = block_ring(s)
    behind = s.submit(SdmaIb().fence(VA_B, 9), ctx=new_ctx(s))
    assert dev.debugfs_files()["amdgpu_gpu_recover"]() == "0\n"   # a read resets
    with pytest.raises(Exception) as e:
        s.wait(hung)
    assert e.value.errno == errno.ETIME
    assert s.wait(behind) == 0 and s.bo(s.b).read(0, 4) == struct.pack("<I", 9)  # innocent job ran
    assert dev.reset_counter >= 1 and "GPU reset begin!" in dev.kmsg.text()
    a = uapi.drm_amdgpu_ctx()
    a.in_.op, a.in_.ctx_id = uapi.AMDGPU_CTX_OP_QUERY_STATE2, s.ctx
    assert call(dev, client, "AMDGPU_CTX", a)[0].out.state.flags & uapi.AMDGPU_CTX_QUERY2_FLAGS_GUILTY


def test_ring_debugfs_lists_entities(dev, client):
    s = Setup(dev, client)
    block_ring(s)
    s.submit(SdmaIb().nop())
    text = dev.debugfs_files()["vgpu_ring_sdma0"]()
    assert "entity client" in text and "NORMAL" in text
    release(s)


def test_gpu_busy_percent_is_live(dev, client):
    """The busiest engine's share of the last BUSY_WINDOW seconds (kmd/perf.py)."""
    s = Setup(dev, client)
    busy = dev.sysfs_files()["gpu_busy_percent"]
    block_ring(s)
    time.sleep(0.05)
    assert int(busy()) > 0
    release(s)
    drain(s)
    time.sleep(perf.BUSY_WINDOW + 0.05)
    assert int(busy()) == 0     # nothing ran in the whole window
