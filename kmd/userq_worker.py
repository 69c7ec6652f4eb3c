"""The engine side of a user queue: a worker that sleeps on the doorbell with a
futex, fetches new packets through the queue's VM and runs them on the queue's own
engine, then publishes the read pointer and wakes the futex waiters on the words
the packets' fences wrote (docs/userq.md).

One thread per queue, most of its life in FUTEX_WAIT (no GIL held). A client that
FUTEX_WAKEs the doorbell after writing it (libvgpu does) is served at once; one that
only writes the doorbell, or only the write pointer, as a program for real hardware
would, is noticed within POLL_S (POLL_IDLE_S after IDLE_AFTER_S without work); a
queue that ran work in the last SPIN_AFTER_S is polled for SPIN_S before the worker
sleeps, as the client's wait polls before its own sleep (docs/userq.md). The
packets between the read and the write pointer run as one "IB" on the engine (two
where they wrap: a packet must not straddle the ring's end, docs/userq.md). Each
queue has an engine of its own (an SdmaEngine, or a CommandProcessor with its own
compute units), as each hardware queue descriptor of an MI100's MEC is fetched on
its own; the kernel rings' engines are not shared, so neither waits for the other.

The device's watchdog thread (`_watch`) aborts a run longer than the ring timeout:
the queue is then 'hung', reported as a hung job is (kmsg, crash dump), its fences
fail with ETIME, and it runs nothing more; other queues and rings go on. A fault or
a bad packet makes it 'faulted' the same way (EFAULT / EINVAL).
"""
from __future__ import annotations

import errno
import threading
import time

from vgpu import futex, uapi

from . import devcoredump, hw, userq_sync
from .hw.cp import CommandProcessor
from .userq import DMA, read_u64

POLL_S = 0.001
SPIN_S = 100e-6                  # polled for before a sleep, while the queue is in use
SPIN_AFTER_S = 0.002             # "in use": work ran this recently
POLL_IDLE_S = 0.02
IDLE_AFTER_S = 0.2
SUSPEND_BOUND_S = 2.0            # how long a move waits for a queue to stop between packets
WATCH_S = 0.02


class QueueWorker:
    """The thread of one queue. `cv` guards `running`, `suspends`, `stopping`."""

    def __init__(self, dev, q) -> None:
        self.dev, self.q = dev, q
        if q.ip_type == DMA:
            self.engine = hw.SdmaEngine(q.name, dev.ih)
        else:
            self.engine = CommandProcessor(q.name, dev.ih, cus=len(dev.partition.cus), l2=dev.l2)
        self.engine.on_wait = self._waiting
        self._segment = None         # (page table, VA) of the run in progress
        self.cv = threading.Condition()
        self.running = False
        self.run_started: float | None = None
        self.suspends = 0
        self.revalidate = False
        self.stopping = False
        self.pending = None          # a preempted run: (va, dwords, resume)
        self.last_work = time.monotonic()
        db = q.doorbell_bo
        self.db_addr = db.storage.ctypes.data + q.doorbell_offset * 8
        self.thread = threading.Thread(target=self._loop, name=f"vgpu-{q.name}", daemon=True)

    # -- the loop ---------------------------------------------------------------
    def _loop(self) -> None:
        q = self.q
        arbiter = self.dev.userqs.arbiter
        while True:
            with self.cv:
                while self.suspends and not self.stopping:
                    self.cv.wait()
                if self.stopping or q.state != "active":
                    return
                revalidate, self.revalidate = self.revalidate, False
            if revalidate:
                self._validate()
                continue
            pt = q.file.vm.page_table
            wptr = -1                     # -1: a preempted run to finish, or wptr unreadable
            if self.pending is None:
                wptr = hw.userq_wait(pt, self.db_addr, q.wptr_va, q.rptr, 0.0)
                if wptr == -1:            # nothing new: let others of the IP run, then sleep
                    arbiter.idle(q)
                    idle = time.monotonic() - self.last_work
                    wptr = hw.userq_wait(pt, self.db_addr, q.wptr_va, q.rptr,
                                         POLL_S if idle < IDLE_AFTER_S else POLL_IDLE_S,
                                         SPIN_S if idle < SPIN_AFTER_S else 0.0)
                    if wptr == -1:
                        continue
                if wptr == -2:            # unreachable: moved out (the restore may be due), retry once
                    self._validate()
                    wptr = -1             # _step reads it again and reports a real fault
            # A queue with work says so to the arbiter, which preempts the running
            # queues of its IP of a lower priority, and waits while a higher one has work.
            if arbiter.contended(q):
                arbiter.want(q)
                if arbiter.outranked(q):
                    arbiter.wait_turn(POLL_S)
                    continue
            # The handshake with suspend() needs no lock (each step is atomic under the
            # GIL): running is set before suspends is read here, suspends is set before
            # running is read there, so one of the two sides always sees the other.
            self.running = True
            if self.suspends or self.stopping or self.revalidate:   # (revalidate: at the loop's top)
                self._not_running()
                continue
            try:
                self._step(wptr)
            except Exception as e:  # an engine or KMD bug must not leave the queue silent
                self._stopped("faulted", errno.EIO, f"internal error {e!r}")
            finally:
                self._not_running()
            self.last_work = time.monotonic()

    def _not_running(self) -> None:
        self.running = False
        self.run_started = None
        if self.suspends:
            with self.cv:
                self.cv.notify_all()

    def _validate(self) -> None:
        """After a move: bring the VM's BOs back where engines reach them (amdgpu's
        restore worker) before the next packets."""
        dev = self.dev
        with dev.lock:
            try:
                dev.residency.validate(self.q.file.vm.bos())
            except Exception as e:  # no room: the queue's packets will fault, and say so
                dev.kmsg.log(f"[{self.q.name}] cannot bring its BOs back: {e}")

    def _step(self, wptr: int) -> bool:
        """Run what is new on the ring, up to `wptr` (-1: read it, or finish the
        preempted run). False when there was nothing to run."""
        q = self.q
        pt = q.file.vm.page_table
        if self.pending is not None:
            va, n, resume = self.pending
            self.pending = None
            return self._run(pt, va, n, resume)
        if wptr < 0:
            try:
                wptr = read_u64(pt, q.wptr_va)
            except hw.GpuFault as e:
                self._stopped("faulted", errno.EFAULT, f"wptr unreadable: {e}")
                return False
        if wptr == q.rptr:
            return False
        n = wptr - q.rptr
        if n < 0 or n > q.ring_dwords:
            self._stopped("faulted", errno.EINVAL,
                          f"wptr {wptr} is {'behind rptr' if n < 0 else 'more than the ring ahead of rptr'} {q.rptr}")
            return False
        pos = q.rptr % q.ring_dwords
        first = min(n, q.ring_dwords - pos)
        for va, cnt in ((q.queue_va + pos * 4, first), (q.queue_va, n - first)):
            if cnt and not self._run(pt, va, cnt, None):
                return True
        return True

    def _run(self, pt, va: int, n: int, resume) -> bool:
        """Run `n` dwords at `va`; on success publish rptr and wake the waiters.
        False when the queue stopped (fault, hang, preempted: retried later)."""
        q = self.q
        trace = self.dev.trace
        if trace.on:
            trace.userq_run(q, n)
        start = self.run_started = time.monotonic()
        self._segment = (pt, va)
        res = self.engine.run(pt, va, n, q.id, q.ring_id, resume=resume)
        self._segment = None
        end = time.monotonic()
        q.busy_time += end - start
        q.perf.ran(start, end)
        # The engine is idle from here: say so before rptr tells a waiter the run is
        # done, so a status read after the wait sees it idle (GRBM, gpu_busy_percent).
        self.run_started = None
        if trace.on:
            trace.userq_done(q, n, q.rptr + n if res.status == "ok" else q.rptr, res.status, start, end)
        if res.status == "preempted":
            self.pending = (va, n, res.resume)
            q.preemptions += 1
            return False
        if res.status != "ok":
            if res.status == "aborted":
                self._stopped("hung", errno.ETIME, f"ran past the {self.dev.timeout:g} s timeout", res, va, n)
            else:
                self._stopped("faulted", errno.EFAULT if res.fault is not None else errno.EINVAL,
                              devcoredump.fault_summary(res), res, va, n)
            return False
        q.rptr += n
        q.segments += 1
        q.dwords_done += n
        # rptr published and every word the run's fence packets wrote woken, in one
        # call without the GIL (kmd/hw/_userq.pxi); no BO moves while the queue runs
        # (suspend waits for `running` to clear).
        hw.userq_done(pt, va, n, q.ip_type == DMA, q.rptr_va, q.rptr)
        if q.fences:
            userq_sync.signal_fences(q)
        return True

    def _waiting(self, pos: int) -> None:
        """The engine waits at dword `pos` of the run (a POLL_REGMEM or WAIT_REG_MEM
        not yet satisfied): the packets before it are done, so rptr moves to it and
        the words their fences wrote are woken, as a CP's read pointer and its fence
        writes are seen while it polls. Another queue waiting on this rptr can then go
        on (docs/userq.md, "Read pointer")."""
        q, seg = self.q, self._segment
        if seg is None or pos <= 0:
            return
        pt, va = seg
        hw.userq_done(pt, va, pos, q.ip_type == DMA, q.rptr_va, q.rptr + pos)

    # -- failures -----------------------------------------------------------------
    def _stopped(self, state: str, err: int, why: str, res=None, va: int = 0, n: int = 0) -> None:
        """The queue stops for good: logged as amdgpu logs a job's failure, a crash
        dump when the engine gave a result, its fences fail with `err`."""
        q, dev = self.q, self.dev
        f = q.file
        with q.lock:
            if q.state != "active" or q.reason:
                return
            q.reason = why            # reported once; `state` changes once the report is whole
        n_dump = None
        with dev.lock:
            if state == "hung":
                dev.kmsg.log(f"ring {q.name} timeout, signaled rptr={q.rptr}, queue {q.id} of client {f.id}")
            dev.kmsg.log(f"[{q.name}] user queue {q.id} of client {f.id} pid {f.pid} ({f.comm}) {state}: {why}")
            if res is not None:
                if res.fault is not None:
                    f.vm.record_fault(res.fault)
                snap = devcoredump.capture(dev, _DumpRing(q), _DumpJob(q, res, va, n))
                n_dump = dev.coredumps.add(lambda k: devcoredump.format_dump(snap, k))
                dev.kmsg.log(f"[{q.name}] crash dump devcd{n_dump}")
            dev.kmsg.log(f"[{q.name}] queue reset: it runs nothing more; free it and create another")
        if n_dump is not None:
            dev.coredumps.render(n_dump)
        with q.lock:
            q.state, q.error = state, err
            if n_dump is not None:
                q.devcd = n_dump
        userq_sync.fail_fences(q, err)
        addr, _ = f.vm.page_table.translate(q.rptr_va)
        if addr is not None:
            futex.wake(addr)          # a waiter on rptr sees no progress and asks why


class _DumpRing:
    """The queue as devcoredump.capture's `ring`."""

    def __init__(self, q) -> None:
        self.name, self.ip_type, self._q = q.name, q.ip_type, q

    def describe(self) -> str:
        return self._q.describe()


#: A queue's priority as the context priority a crash dump names (kmd/sched.py levels).
_CTX_PRIORITY = {uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW: uapi.AMDGPU_CTX_PRIORITY_LOW,
                 uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW: uapi.AMDGPU_CTX_PRIORITY_NORMAL,
                 uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH: uapi.AMDGPU_CTX_PRIORITY_NORMAL,
                 uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH: uapi.AMDGPU_CTX_PRIORITY_HIGH}


class _DumpCtx:
    """The queue as the dump's context: a queue has no CTX, so its "ctx" line names the
    queue id and the priority level of the queue's own priority."""

    def __init__(self, q) -> None:
        self.id, self.guilty, self.hangs = q.id, True, int(q.state == "hung")
        self.priority = _CTX_PRIORITY[q.priority]


class _DumpJob:
    """The failed run as devcoredump.capture's `job`: its packets are the one IB."""

    def __init__(self, q, res, va: int, n: int) -> None:
        self.file, self.ctx, self.result = q.file, _DumpCtx(q), res
        self.id, self.fence, self.hw_seq = q.segments + 1, None, q.rptr
        self.ibs = [(va, n)]
        self.started_at = time.monotonic()
        self.bos = q.file.vm.bos()


# -- control from the KMD ------------------------------------------------------------
def start(dev, q) -> None:
    """Give `q` its worker and start it; the device's watchdog runs from the first."""
    q.worker = QueueWorker(dev, q)
    q.worker.thread.start()
    uq = dev.userqs
    if uq.watchdog is None:
        uq.watchdog = threading.Thread(target=_watch, args=(dev,), name="vgpu-userq-watch", daemon=True)
        uq.watchdog.start()


def stop(q) -> None:
    """Ask `q`'s worker to end (it finishes or abandons the run in hand); no join:
    the caller may hold the device lock, which a worker between runs may want."""
    w = q.worker
    if w is None:
        return
    with w.cv:
        w.stopping = True
        w.cv.notify_all()
    w.dev.userqs.arbiter.idle(q)
    w.engine.abort()
    futex.wake(w.db_addr)


def suspend(q) -> None:
    """Hold `q` between packets (preempting the run in hand). MemoryError when it
    has not stopped within SUSPEND_BOUND_S (a cooperative dispatch, say)."""
    w = q.worker
    with w.cv:
        w.suspends += 1               # before running is read: see QueueWorker._loop
        if w.running:
            w.engine.preempt()
        if not w.cv.wait_for(lambda: not w.running, SUSPEND_BOUND_S):
            w.suspends -= 1
            w.cv.notify_all()
            raise MemoryError(f"{q.name} did not stop between packets within {SUSPEND_BOUND_S:g} s")


def resume(q, revalidate: bool) -> None:
    w = q.worker
    with w.cv:
        w.suspends -= 1
        w.revalidate = w.revalidate or revalidate
        w.cv.notify_all()
    futex.wake(w.db_addr)


def _watch(dev) -> None:
    """Abort a queue's run that has lasted past the ring timeout (drm_sched's
    timeout work for queues). Ends with the device's last queue."""
    uq = dev.userqs
    while True:
        time.sleep(min(WATCH_S, dev.timeout / 4))
        now = time.monotonic()
        with dev.lock:   # start() makes a new watchdog under the lock once this one is gone
            queues = list(uq.by_slot.values())
            if not queues:
                uq.watchdog = None
                return
        for q in queues:
            w = q.worker
            started = w.run_started if w is not None else None
            if started is not None and now - started > dev.timeout:
                w.engine.abort()
