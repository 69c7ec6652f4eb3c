"""The per-job path's shortcuts keep its behaviour: the ring's timer (kmd/ring.py
`_watch`: job timeouts, time slices) is woken only when something is due sooner than
it planned, not for every job, and jobs started while it sleeps lazily still time out
on time; a job's IB counters are added in place as they were through a dict."""
import errno
import time

import pytest

from kmd import perf
from kmd.device import Device
from kmd.hw import SdmaIb, SdmaResult
from kmd.hw.mmu import GpuFault
from kmd.sched import SchedOptions

from .conftest import MiB
from .test_cs import DMA, VA_A, Setup


def _count_timer_waits(ring) -> list:
    """Record each wait of the ring's timer from its next one on (the timer looks its
    condition variable's `wait` up at every turn of its loop)."""
    waits, orig = [], ring._timer_cv.wait

    def counting(timeout=None):
        waits.append(timeout)
        return orig(timeout)

    ring._timer_cv.wait = counting
    return waits


def test_nop_jobs_do_not_wake_the_timer_each(dev, client):
    s = Setup(dev, client)
    ring = dev.rings[(DMA, 0)]
    assert s.wait(s.submit(SdmaIb().nop())) == 0
    waits = _count_timer_waits(ring)
    n = 200
    t0 = time.monotonic()
    for _ in range(n):
        assert s.wait(s.submit(SdmaIb().nop())) == 0
    elapsed = time.monotonic() - t0
    # At most one wake-up per time slice while busy (plus one when it parks and is
    # armed again); before, every job woke the timer once or twice.
    bound = 2 * elapsed / dev.sched_opts.timeslice + 10
    assert len(waits) <= bound < n, (len(waits), elapsed)


@pytest.mark.parametrize("sched", [SchedOptions(), SchedOptions(preempt=False)], ids=["preempt", "no-preempt"])
def test_hang_after_nop_times_out_on_time(sched):
    """A hang submitted right after a NOP job (the timer then sleeps until a wake-up
    it planned, nobody wakes it for the new job) fails with ETIME after the timeout."""
    dev = Device(vram_size=64 * MiB, gtt_size=64 * MiB, timeout=0.3, sched=sched)
    try:
        f = dev.open_file(pid=1000, uid=1000, comm="test")
        s = Setup(dev, f)
        for _ in range(3):
            assert s.wait(s.submit(SdmaIb().nop())) == 0
        t0 = time.monotonic()
        seq = s.submit(SdmaIb().poll_regmem(VA_A, 1234))
        with pytest.raises(Exception) as e:
            s.wait(seq)
        took = time.monotonic() - t0
        assert e.value.errno == errno.ETIME
        assert 0.3 <= took < 0.3 + 0.5, took
        assert "ring sdma0 timeout" in dev.kmsg.text()
        dev.close_file(f)
    finally:
        dev.shutdown()


def test_add_ib_adds_what_ib_counters_gives():
    results = [SdmaResult("ok", packets=3, bytes_read=8, bytes_written=16, pt_walks=4, packet_ops={0: 2, 2: 1}),
               SdmaResult("fault", GpuFault(0x1000, "write", "unmapped"), "unmapped", packets=1, pt_walks=1,
                          packet_ops={0: 1, 0x7F: 1}),
               SdmaResult("ok")]
    for start in ({}, {"ibs": 2, "pkt_NOP": 5, "busy_ns": 7}):
        via_dict, in_place = dict(start), dict(start)
        for r in results:
            perf.add(via_dict, perf.ib_counters("sdma", r))
            perf.add_ib(in_place, "sdma", r)
            assert in_place == via_dict and list(in_place) == list(via_dict)
