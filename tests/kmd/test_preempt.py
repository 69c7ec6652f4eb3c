"""Mid-job preemption, time slicing, the job timeout on a job's own run time and the
engine heartbeat (kmd/ring.py, kmd/sched.py, kmd/heartbeat.py), through the dispatch.

The jobs that keep a ring busy poll a dword the test writes (SDMA POLL_REGMEM), so
what runs when is decided by the test, never by a sleep being long enough; the
checks are orders and results, never durations."""
import errno
import json
import re
import struct
import time

import pytest

from kmd import sched
from kmd.device import Device
from kmd.hw import SdmaIb
from vgpu import uapi

from .conftest import MiB
from .test_cs import VA_A, VA_B, Setup
from .test_sched import new_ctx

DMA = uapi.AMDGPU_HW_IP_DMA
LOW, HIGH = uapi.AMDGPU_CTX_PRIORITY_LOW, uapi.AMDGPU_CTX_PRIORITY_HIGH


def make_dev(timeout=1.0, **opts):
    return Device(vram_size=64 * MiB, gtt_size=64 * MiB, timeout=timeout, sched=sched.SchedOptions(**opts))


@pytest.fixture
def devs():
    made = []

    def make(**kw):
        made.append(make_dev(**kw))
        return made[-1]
    yield make
    for d in made:
        try:
            d.check_invariants()
        finally:
            d.shutdown()


def root(dev):
    return dev.open_file(pid=1, uid=0, comm="root", render=False)


def ring(dev, i=0):
    return dev.rings[(DMA, i)]


def until(cond, what, limit=30.0):
    """Wait for `cond()`; fail after `limit` seconds (a hang, not a speed check)."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.001)


def flag(s, index) -> int:
    """VA of poll flag `index` in BO A (a job polling it runs until set_flag)."""
    return VA_A + 4 * index


def set_flag(s, index):
    s.bo(s.a).write(4 * index, struct.pack("<I", 1))


def spin_then_fill(s, index, value, ctx):
    """A job that polls flag `index`, then writes `value` into B's dword `index`."""
    return s.submit(SdmaIb().poll_regmem(flag(s, index), 1).write_linear(VA_B + 4 * index, [value]), ctx=ctx)


def fence_of(dev, seq, i=0):
    return ring(dev, i).fence(seq)


def running(dev, seq, i=0):
    r = ring(dev, i)
    job = r.running
    return job is not None and job.fence.seq == seq and job.segment_start is not None


def b_dword(s, index):
    return struct.unpack("<I", s.bo(s.b).read(4 * index, 4))[0]


# -- preemption by priority -------------------------------------------------------------
def test_a_high_job_preempts_a_running_low_job_which_resumes_and_completes(devs):
    dev = devs()
    s = Setup(dev, root(dev))
    low, high = new_ctx(s, LOW), new_ctx(s, HIGH)
    lo = spin_then_fill(s, 0, 0x10, low)
    until(lambda: running(dev, lo), "the LOW job runs")
    hi = s.submit(SdmaIb().write_linear(VA_B + 4, [0x20]), ctx=high)
    until(lambda: fence_of(dev, hi).signaled, "the HIGH job completes")
    assert fence_of(dev, hi).error == 0 and b_dword(s, 1) == 0x20
    assert not fence_of(dev, lo).signaled           # LOW is still waiting for its flag
    assert ring(dev).preemptions["priority"] == 1
    set_flag(s, 0)
    assert s.wait(lo) == 0 and fence_of(dev, lo).error == 0
    assert b_dword(s, 0) == 0x10                     # LOW's result, after it resumed
    hist = [j for j, _ in ring(dev).history]
    job_lo = hist[0]
    assert hist == [job_lo, hist[1], job_lo]         # LOW, HIGH, LOW resumed
    kmsg = dev.kmsg.text()
    assert f"preempted job {job_lo} ctx {low}" in kmsg and "by priority" in kmsg
    text = ring(dev).describe()
    assert "preemptions:  1 (priority 1)" in text and f"last preempted: job {job_lo}" in text


def test_a_preempted_job_whose_file_closes_is_dropped_not_resumed(devs):
    dev = devs()
    s1, s2 = Setup(dev, root(dev)), Setup(dev, root(dev))
    lo = spin_then_fill(s1, 0, 1, new_ctx(s1, LOW))
    until(lambda: running(dev, lo), "the LOW job runs")
    hi = spin_then_fill(s2, 0, 2, new_ctx(s2, HIGH))      # preempts it, and holds the ring
    until(lambda: running(dev, hi), "the HIGH job runs")
    low_fence = fence_of(dev, lo)
    dev.close_file(s1.f)
    set_flag(s2, 0)
    assert s2.wait(hi) == 0
    until(lambda: low_fence.signaled, "the dropped job's fence signals")
    assert low_fence.error != 0
    job_lo = ring(dev).history[0][0]
    rec = next(r for r in ring(dev).perf.records if r.job_id == job_lo)
    assert rec.status == errno.errorcode[low_fence.error]          # skipped: it never resumed


def test_a_normal_job_does_not_preempt_a_low_one(devs):
    """Only HIGH (or the KERNEL pulse) preempts; a NORMAL job waits for the job boundary."""
    dev = devs(timeslice=0)
    s = Setup(dev, root(dev))
    low, normal = new_ctx(s, LOW), new_ctx(s)
    lo = spin_then_fill(s, 0, 1, low)
    until(lambda: running(dev, lo), "the LOW job runs")
    no = s.submit(SdmaIb().write_linear(VA_B + 4, [2]), ctx=normal)
    time.sleep(0.05)  # room for a wrong preemption to happen; the check is an order, not a time
    assert not fence_of(dev, no).signaled
    set_flag(s, 0)
    assert s.wait(no) == 0 and fence_of(dev, lo).error == 0
    assert ring(dev).preemptions == {}


def test_no_preempt_keeps_the_job_boundary_order(devs):
    """--no-preempt: the HIGH job waits for the running LOW job to end, as before."""
    dev = devs(preempt=False, timeout=30.0)
    s = Setup(dev, root(dev))
    low, high = new_ctx(s, LOW), new_ctx(s, HIGH)
    lo = spin_then_fill(s, 0, 1, low)
    until(lambda: running(dev, lo), "the LOW job runs")
    hi = s.submit(SdmaIb().write_linear(VA_B + 4, [2]), ctx=high)
    time.sleep(0.05)
    assert not fence_of(dev, hi).signaled            # no preemption: HIGH waits
    set_flag(s, 0)
    assert s.wait(hi) == 0
    assert fence_of(dev, lo).signaled and fence_of(dev, lo).error == 0
    assert [c for _, c in ring(dev).history] == [low, high]
    assert "preemption off" in ring(dev).describe()


# -- time slicing -------------------------------------------------------------------------
def test_two_entities_of_one_priority_share_the_ring_in_time_slices(devs):
    dev = devs(timeslice=0.002)
    s = Setup(dev, root(dev))
    a, b = new_ctx(s), new_ctx(s)
    ja = spin_then_fill(s, 0, 0xA, a)
    jb = spin_then_fill(s, 1, 0xB, b)
    until(lambda: len(ring(dev).history) >= 6, "the two jobs alternate")
    ctxs = [c for _, c in list(ring(dev).history)[:6]]
    assert ctxs == [a, b, a, b, a, b]                 # round-robin, mid-job
    assert not fence_of(dev, ja).signaled and not fence_of(dev, jb).signaled
    set_flag(s, 0)
    set_flag(s, 1)
    assert s.wait(ja) == 0 and s.wait(jb) == 0
    assert (b_dword(s, 0), b_dword(s, 1)) == (0xA, 0xB)
    assert ring(dev).preemptions["timeslice"] >= 5


def test_without_time_slicing_a_job_keeps_the_ring(devs):
    dev = devs(timeslice=0)
    s = Setup(dev, root(dev))
    a, b = new_ctx(s), new_ctx(s)
    ja = spin_then_fill(s, 0, 0xA, a)
    until(lambda: running(dev, ja), "A runs")
    jb = spin_then_fill(s, 1, 0xB, b)
    time.sleep(0.05)
    assert [c for _, c in ring(dev).history] == [a]
    set_flag(s, 1)
    set_flag(s, 0)
    assert s.wait(jb) == 0 and fence_of(dev, ja).error == 0


# -- the timeout counts a job's own run time ----------------------------------------------
def test_the_timeout_counts_only_the_time_a_job_ran(devs):
    """A LOW job preempted by HIGH jobs for longer than the timeout does not time out:
    it has run for less than the timeout. (Before preemption, it timed out at 1 s.)"""
    dev = devs(timeout=1.0)
    s = Setup(dev, root(dev))
    low, high = new_ctx(s, LOW), new_ctx(s, HIGH)
    lo = spin_then_fill(s, 0, 0x10, low)
    until(lambda: running(dev, lo), "the LOW job runs")
    his = [spin_then_fill(s, 1 + i, 0x20 + i, high) for i in range(3)]
    until(lambda: running(dev, his[0]), "the first HIGH job runs")
    waited_from = time.monotonic()
    for i, hi in enumerate(his):  # each HIGH job runs about 0.45 s, well within its own timeout
        until(lambda hi=hi: running(dev, hi), "the HIGH job runs")
        time.sleep(0.45)
        set_flag(s, 1 + i)
        assert s.wait(hi) == 0
    assert time.monotonic() - waited_from > dev.timeout  # LOW waited longer than the timeout...
    assert not fence_of(dev, lo).signaled                # ...and was not timed out for it
    job = ring(dev).running
    assert job is not None and job.fence.seq == lo and job.run_time < dev.timeout
    set_flag(s, 0)
    assert s.wait(lo) == 0 and b_dword(s, 0) == 0x10


def test_a_job_still_times_out_on_its_own_run_time(devs):
    dev = devs(timeout=0.3)
    s = Setup(dev, root(dev))
    lo = spin_then_fill(s, 0, 1, new_ctx(s, LOW))
    until(lambda: fence_of(dev, lo).signaled, "the job times out")
    assert fence_of(dev, lo).error == errno.ETIME
    assert "ring sdma0 timeout" in "\n".join(dev.kmsg.lines())


# -- the heartbeat ------------------------------------------------------------------------
def test_heartbeat_declares_a_non_preemptible_stuck_engine_hung(devs):
    """A job stuck in a POLL_REGMEM with preemption off and a long job timeout: the
    pulses are missed, after 3 the engine is declared hung and reset (the job fails
    with ETIME, its context is guilty); the 60 s timeout never fired."""
    dev = devs(preempt=False, timeout=60.0, heartbeat=0.05, heartbeat_misses=3)
    s = Setup(dev, root(dev))
    stuck = spin_then_fill(s, 0, 1, s.ctx)
    until(lambda: fence_of(dev, stuck).signaled, "the heartbeat resets the engine")
    assert fence_of(dev, stuck).error == errno.ETIME
    log = "\n".join(dev.kmsg.lines())
    assert "[sdma0] heartbeat: pulse" in log and "missed, 3 of 3" in log
    assert "[sdma0] stopped heartbeat: engine hung, resetting" in log
    assert "ring sdma0 hung (stopped heartbeat)" in log and "ring sdma0 timeout" not in log
    assert "GPU reset succeeded" in log and dev.reset_counter == 1
    assert s.f.contexts[s.ctx].guilty
    assert ring(dev).hb.hangs == 1 and "hangs 1" in ring(dev).describe()
    # the ring works again and serves its pulse
    ok = s.submit(SdmaIb().write_linear(VA_B + 8, [7]), ctx=new_ctx(s))
    assert s.wait(ok) == 0 and b_dword(s, 2) == 7
    until(lambda: not ring(dev).hb.pending, "the outstanding pulse is served")


def test_a_preemptible_long_job_answers_the_heartbeat(devs):
    """With preemption on, the pulse preempts the long job, runs, and the job resumes:
    no miss, no reset, the job's result is right."""
    dev = devs(timeout=60.0, heartbeat=0.02, heartbeat_misses=2)
    s = Setup(dev, root(dev))
    long = spin_then_fill(s, 0, 0x33, s.ctx)
    until(lambda: ring(dev).hb.served >= 5, "pulses are served while the job runs")
    assert not fence_of(dev, long).signaled
    set_flag(s, 0)
    assert s.wait(long) == 0 and b_dword(s, 0) == 0x33
    assert ring(dev).hb.total_misses == 0 and dev.reset_counter == 0
    assert ring(dev).preemptions["heartbeat"] >= 5


def test_an_idle_engine_gets_no_pulse(devs):
    dev = devs(heartbeat=0.01)
    s = Setup(dev, root(dev))
    assert s.wait(s.submit(SdmaIb().nop())) == 0
    time.sleep(0.1)
    sent = ring(dev).hb.pulses
    time.sleep(0.1)
    assert ring(dev).hb.pulses == sent and not ring(dev).hb.pending
    assert ring(dev, 1).hb.pulses == 0
    assert "last pulse sent never" in ring(dev, 1).describe()


def test_heartbeat_off(devs):
    dev = devs(heartbeat=0)
    assert "heartbeat:    off" in ring(dev).describe()
    assert dev.heartbeat._thread is None


def test_invalid_options():
    for bad in ({"timeslice": -1}, {"heartbeat": -0.5}, {"heartbeat_misses": 0}):
        with pytest.raises(ValueError):
            sched.SchedOptions(**bad)


# -- what shows a preemption: tracepoints and the timeline ---------------------------------
def test_tracepoints_and_timeline_show_the_preemption(devs):
    from vgpu_tools import timeline
    from .test_trace import FIELDS, enable_all, parse
    dev = devs()
    s = Setup(dev, root(dev))
    pipe = dev.trace.open_pipe()
    enable_all(dev)
    rec = dev.open_timeline()
    low, high = new_ctx(s, LOW), new_ctx(s, HIGH)
    lo = spin_then_fill(s, 0, 1, low)
    until(lambda: running(dev, lo), "the LOW job runs")
    hi = s.submit(SdmaIb().write_linear(VA_B + 4, [2]), ctx=high)
    assert s.wait(hi) == 0
    set_flag(s, 0)
    assert s.wait(lo) == 0
    job_lo = ring(dev).history[0][0]
    events = parse(pipe.read(1 << 20).decode())
    mine = [e for e in events if e["event"] in ("vgpu_job_preempt", "vgpu_job_resume")]
    assert [e["event"] for e in mine] == ["vgpu_job_preempt", "vgpu_job_resume"]
    for e in mine:
        assert re.fullmatch(FIELDS[e["event"]], e["fields"]), e
    assert mine[0]["fields"].startswith(f"sched_job={job_lo}, ring_name=sdma0, seqno={lo}, reason=priority")
    assert mine[1]["fields"] == f"sched_job={job_lo}, ring_name=sdma0, seqno={lo}, preemptions=1"
    runs = [e for e in events if e["event"] == "drm_run_job" and f"id={job_lo}," in e["fields"]]
    assert len(runs) == 1                      # a resumed run is not a new drm_run_job
    records = [json.loads(line) for line in rec.read(1 << 22).decode().splitlines()]
    rec.close()
    trace = timeline.build(records)["traceEvents"]
    spans = [e for e in trace if e.get("cat") == "job" and e["args"]["job"] == job_lo]
    assert [e["name"].endswith("(resumed)") for e in spans] == [False, True]
    assert spans[0]["args"]["preempted_by"] == "priority" and spans[1]["args"]["run"] == "2 of 2"
    assert spans[0]["ts"] + spans[0]["dur"] <= spans[1]["ts"]
    hi_span = next(e for e in trace if e.get("cat") == "job" and e["args"]["seq"] == hi)
    assert spans[0]["ts"] + spans[0]["dur"] <= hi_span["ts"] <= spans[1]["ts"]  # HIGH ran in the gap
    assert any(e.get("ph") == "i" and e["name"] == "preempted (priority)" for e in trace)
