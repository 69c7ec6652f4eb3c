"""Direct runs: a light job runs in the thread that submitted it.

A NOP, a fence write or a few WRITE_LINEAR dwords is over in microseconds on the
engine, but handing it to the ring's worker thread, and its fence back to the
waiter, costs two thread wake-ups, each tens to hundreds of microseconds on a
loaded host: most of a CS -> WAIT_CS round trip (docs/bench.md, (b)). So when a job
is submitted to an idle ring, nothing else is queued there, its dependencies have
signalled and its IBs do only bounded work, the request that submitted it runs it
before returning, through the same steps the worker takes (kmd/ring.py: pick, run,
account, fence write-back, interrupt), but for the ring's timer: the job cannot hang
or outlast a time slice, so its run arms neither a timeout nor a slice end. Its CS
then returns a sequence number that has signalled already, as on a GPU that is
simply fast (through ioctl() the reply goes first and the job runs right after it,
in the same thread: Device.ioctl's ``direct_runs``); every rule of the
scheduler still holds, since the ring is idle and the job is the one it would pick.

Bounded work is SdmaEngine.bounded (the Cython core's held_ib; sdma.bounded_ib in
the reference): SDMA IBs of at most SDMA_HELD_IB_DW dwords with no COPY_LINEAR, CONSTANT_FILL or POLL_REGMEM, so a
direct run can neither hang the submitting thread nor hold the device lock for
long. Compute jobs, jobs of a file with userptr BOs (begin_job may copy pages) and
a ring whose heartbeat pulse is pending always go to the worker.
"""
from __future__ import annotations

from . import userptr


def eligible(ring, job) -> bool:
    """Whether `job`, just pushed on idle `ring` (ring lock held), may run directly:
    what its submission knows at once. Its IBs are looked at by :func:`bounded` when
    the run comes (Ring.run_direct), so that reading them is not part of the CS's
    answer where the run follows the reply."""
    if ring.kind != "sdma" or ring.running is not None or ring.hb.pending or len(ring.sched) != 1:
        return False
    return not (job.error or (job.deps and any(not d.signaled for d in job.deps)) or userptr.has_bos(job.file))


def bounded(ring, job) -> bool:
    """Whether `job`'s IBs do only bounded work (ring lock held), as `ring`'s engine
    reads them (SdmaEngine.bounded): else, or if they cannot be read, the worker runs
    it (and reports the fault)."""
    pt, check = job.file.vm.page_table, ring.engine.bounded
    for va, size_dw in job.ibs:
        if not check(pt, va, size_dw):
            return False
    return True
