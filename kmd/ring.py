"""Rings: a drm_sched-style scheduler feeding one engine from a worker thread
(amdgpu_ring.c + drm_sched_main).

The worker picks the next ready job (kmd/sched.py), runs its IBs on the engine
(which releases the GIL), then does what the ring's end-of-job packets do on real
hardware: writes the sequence number to the ring's fence write-back slot and raises
a trap interrupt. The KMD's interrupt handler reads the slot and signals fences
from there (kmd/irq.py).

The ring's timer thread (`_watch`, drm_sched's timeout work and i915's timeslice
timer in one) aborts a job that has run past the ring timeout, counting only its
own time on the engine (Device.job_failed then does the reset, TDR), and, when
preemption is on (kmd.sched.SchedOptions), asks the engine to preempt the running
job (`engine.preempt()`) when a HIGH job is ready and the running one is of a lower
priority, when its time slice is over and another entity of its priority is ready,
or when the heartbeat's pulse waits (kmd/heartbeat.py). A preempted job's engine
state (`result.resume`, and the context save area on compute rings) stays with the
job, which goes back to the head of its entity and resumes from there when it is
picked again (docs/preemption.md).
"""
import collections
import errno
import math
import threading
import time

from vgpu import pm4, uapi

from . import direct_run, hw, perf, userptr
from .ring_buffer import RingBuffer
from .fence import Fence
from .heartbeat import EngineHeartbeat
from .job import Job
from .sched import LEVEL_NAMES, RingScheduler, SchedOptions, level_of

FENCE_HISTORY = 4096  # fences remembered for WAIT_CS after they signaled
# An engine may refuse a preemption request when its IB has not started yet, or has
# just ended: the timer asks again after this long while the reason holds.
PREEMPT_RETRY_S = 0.0005
# The timer of a ring that ran a job less than this long ago, and has nothing due,
# still wakes by itself every time slice (or timeout): a job started meanwhile is due
# no sooner than that wake-up, so the worker need not wake the timer for it. After
# that long idle the timer parks (waits for a wake-up), as an idle engine's would.
TIMER_PARK_S = 0.1


class Ring:
    def __init__(self, dev, name: str, ip_type: int, index: int, ring_id: int, engine,
                 opts: SchedOptions = SchedOptions()):
        self.dev = dev
        self.name, self.ip_type, self.index, self.ring_id = name, ip_type, index, ring_id
        self.engine = engine
        # Two numberings, as in amdgpu: the sequence number a CS returns is given at
        # submission (the scheduler fence); the hardware sequence is given when the
        # scheduler hands the job to the engine, so it grows in execution order and
        # the fence write-back slot can signal "everything up to N" (amdgpu_fence.c).
        self.emitted_seq = 0           # last seq returned by CS
        self.hw_emitted = 0            # last hardware seq handed to the engine
        self.fence_wb = 0              # last hardware seq completed
        self.signaled_seq = 0          # last hardware seq signaled by the KMD
        self.fences: "collections.OrderedDict[int, Fence]" = collections.OrderedDict()
        self.hw_pending: dict[int, Job] = {}   # hardware seq -> job, until signaled
        self.sched = RingScheduler()
        self.running: Job | None = None
        self.busy_time = 0.0
        self.jobs_done = 0
        self.kind = "sdma" if ip_type == uapi.AMDGPU_HW_IP_DMA else "compute"
        self.perf = perf.RingPerf(self.kind)   # counters, busy window, job records
        self.buffer = RingBuffer(self.kind)    # the frames amdgpu would emit (debugfs amdgpu_ring_<name>)
        self.history: collections.deque = collections.deque(maxlen=256)  # (job id, ctx id), run order
        # One lock, two condition variables: the worker waits on `_cv`, the timer on
        # `_timer_cv`, so a submission wakes the worker alone. The timer is woken only
        # when it has something to do sooner than it planned: `_timer_at` is when it
        # wakes by itself (math.inf: never), set under the lock before each wait. A
        # deadline or slice end that moves later needs no wake-up: the timer wakes at
        # the earlier time it planned, finds nothing due and waits again (lazily).
        lock = threading.RLock()
        self._cv = threading.Condition(lock)
        self._timer_cv = threading.Condition(lock)
        self._timer_at = math.inf
        self._last_end = -math.inf             # when the last run on the engine ended
        self._stop = False
        self._deadline: float | None = None    # watchdog: when the running job times out
        # Preemption (kmd/sched.py SchedOptions): on when asked and the engine can.
        self.opts = opts
        self.preemptible = opts.preempt and hasattr(engine, "preempt")
        self._slice_end: float | None = None   # when the running job's time slice is over
        self._asked: tuple[Job, str] | None = None  # the job the engine was asked to preempt, why
        self.preemptions: collections.Counter = collections.Counter()  # by reason
        self.last_preemption = ""
        self.hb = EngineHeartbeat()
        self._direct: Job | None = None    # a light job its submitter runs (kmd/direct_run.py)
        self._failed: Job | None = None    # a direct run that failed, for the worker to report
        self._thread = threading.Thread(target=self._worker, name=f"ring-{name}", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name=f"tdr-{name}", daemon=True)
        self._thread.start()
        self._watchdog.start()

    # -- submission (called under the device lock) ---------------------------
    def submit(self, job: Job) -> int:
        job.file.usage.submitted()
        self.perf.submitted()
        self.emitted_seq += 1
        job.fence = Fence(self.name, self.emitted_seq)
        self.fences[job.fence.seq] = job.fence
        while len(self.fences) > FENCE_HISTORY and next(iter(self.fences.values())).signaled:
            self.fences.popitem(last=False)
        with self._cv:
            self.sched.push(job)
            if self.dev.trace.on:  # under the ring's lock: before the worker may run it
                self.dev.trace.job_queued(self, job, self.entity_jobs(job))
            if self._direct is None and self.dev.collect_direct and direct_run.eligible(self, job):
                self._direct = job  # run by the submitting request itself (run_direct)
                self.dev.direct_rings.append(self)
            else:
                self._cv.notify_all()  # the worker
            reason = self._preempt_reason(self.running, time.monotonic()) if self.running is not None else None
            if reason == "priority" and self._preempt("priority"):
                pass  # here, not a wake-up of the timer later
            elif reason is not None:
                self._timer_cv.notify_all()  # the timer acts on it now (or retries the request)
        for dep in job.deps:  # a signalled dependency may make the job ready
            dep.add_callback(self._wake)
        return job.fence.seq

    def entity_jobs(self, job: Job) -> int:
        """Jobs queued on `job`'s entity now (drm_sched trace events' job count)."""
        ent = self.sched.entities.get((job.file.id, job.ctx.id))
        return len(ent.jobs) if ent is not None else 0

    def _wake(self, _fence=None) -> None:
        with self._cv:
            self._notify()

    def _notify(self) -> None:
        """Wake the worker and the timer (ring lock held)."""
        self._cv.notify_all()
        self._timer_cv.notify_all()

    def fence(self, seq: int) -> Fence | None:
        """The fence of `seq`; None if it signaled long ago (treat as signaled, no error)."""
        return self.fences.get(seq)

    def cancel(self, pred, err: int = errno.ECANCELED) -> int:
        """Mark queued (not yet running) jobs matching `pred` as failed with `err`.
        They are skipped in order: no IBs run, their fences signal with the error."""
        with self._cv:
            gone = [j for j in self.sched.jobs() if pred(j) and not j.error]
            for j in gone:
                j.error = err
            self._notify()
        return len(gone)

    def queued(self) -> int:
        with self._cv:
            return len(self.sched)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._notify()
        self.engine.abort()
        self._thread.join(timeout=5)
        self._watchdog.join(timeout=5)

    # -- the "hardware" side ---------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cv:
                job = None
                failed = None
                while not self._stop:
                    if (failed := self._failed) is not None:  # a direct run's failure to report
                        self._failed = None
                        break
                    if self.hb.pending:  # the heartbeat's KERNEL pulse runs before any job
                        self.hb.serve(time.monotonic())
                    # (running: a direct run of a submitter's is on the engine)
                    if self.running is None and (job := self.sched.pick()) is not None:
                        break
                    self._cv.wait()
                if self._stop:
                    return
                if failed is None:
                    resumed = self._begin(job)
            if failed is not None:
                self.dev.job_failed(self, failed)
                self._end(failed)
                continue
            self._carry_out(job, resumed)

    def run_direct(self) -> None:
        """Run the light job that submit() kept for its submitter (kmd/direct_run.py)
        in the calling thread, as the worker would; if the ring is no longer idle, or
        picks another job, the worker gets it after all."""
        with self._cv:
            job, self._direct = self._direct, None
            if job is None:
                return
            picked = (self.sched.pick() if self.running is None and not self._stop and not self.hb.pending
                      and direct_run.bounded(self, job) else None)
            if picked is not job:
                if picked is not None:
                    self.sched.requeue(picked)
                self._cv.notify_all()  # the worker
                return
            resumed = self._begin(job)
        self._carry_out(job, resumed, direct=True)

    def _begin(self, job: Job) -> bool:
        """`job` goes on the engine (ring lock held). True: it resumes a preempted run."""
        resumed = job.ib_index > 0 or job.resume is not None
        self.running = job
        # A run of a job emits its hardware fence; a preempted run's fence is given up
        # and the resumed run emits a new one, so the write-back slot still grows in
        # the order runs complete.
        self.hw_emitted += 1
        job.hw_seq = self.hw_emitted
        self.hw_pending[job.hw_seq] = job
        self.buffer.emit(job.ibs[job.ib_index:], job.hw_seq)
        self.history.append((job.id, job.ctx.id))
        self._asked = None
        return resumed

    def _carry_out(self, job: Job, resumed: bool, direct: bool = False) -> None:
        """Run `job` (begun) on the engine and end it: requeue it if preempted, else
        report a failure (Device.job_failed), account it and emit its fence and
        interrupt. A `direct` run (kmd/direct_run.py) hands a failure to the worker,
        so the crash dump and reset do not run in the submitting request."""
        if self.dev.trace.on:
            self.dev.trace.job_run(self, job, self.entity_jobs(job), resumed)
        if self._run(job, direct):
            self._requeue(job)
            return
        if job.result is not None and job.result.status != "ok":
            if direct:
                with self._cv:
                    self._failed = job  # still `running`: nothing else starts before it is reported
                    self._cv.notify_all()
                return
            self.dev.job_failed(self, job)
        self._end(job, direct)

    def _end(self, job: Job, direct: bool = False) -> None:
        """Account `job`, which ran to its end, and emit its fence and interrupt. A
        `direct` run leaves the timer's plan alone (it armed nothing, see _run)."""
        self._account(job)
        if self.dev.trace.on:
            self.dev.trace.job_done(self, job)
        with self._cv:
            self.running = None
            self._deadline = self._slice_end = None
            if not direct:
                self._last_end = job.ended_at or time.monotonic()
            if len(self.sched):
                self._cv.notify_all()  # after a direct run the worker may be asleep
        # End of job: fence write-back, then the trap interrupt (sdma_v4_0_ring_emit_fence),
        # handled at once on this thread (kmd/irq.py says why).
        self.fence_wb = job.hw_seq
        self.buffer.completed(job.hw_seq)
        self.dev.ih.push(hw.ih.IH_SRC_TRAP, self.ring_id, job.ctx.id, 0, wake=False)
        self.dev.irq.service()

    def _requeue(self, job: Job) -> None:
        """`job` was preempted: back to the head of its entity, logged and traced."""
        with self._cv:
            reason = self._asked[1] if self._asked is not None and self._asked[0] is job else "ib boundary"
            self._asked = None
            self.running = None
            self._deadline = self._slice_end = None
            self.hw_pending.pop(job.hw_seq, None)
            self.sched.requeue(job)
            self.preemptions[reason] += 1
            self._notify()
        where = f"IB {job.ib_index + 1} of {len(job.ibs)}"
        self.last_preemption = (f"job {job.id} ctx {job.ctx.id} client {job.file.id} "
                                f"({LEVEL_NAMES[level_of(job.ctx.priority)]}) at {where}, by {reason}, "
                                f"after {job.run_time * 1e3:.3f} ms of run time")
        self.dev.kmsg.log(f"[{self.name}] preempted {self.last_preemption}")
        if self.dev.trace.on:
            self.dev.trace.job_preempted(self, job, reason)

    def _run(self, job: Job, direct: bool = False) -> bool:
        """Run (or resume) `job`'s IBs. True when it was preempted: it has not ended.
        A `direct` run (kmd/direct_run.py: bounded work, over in microseconds) arms
        no timeout or time slice: it can neither hang nor outlast a slice, and arming
        the timer for it woke the ring's timer thread, which then took the GIL from
        the request that runs the job."""
        if job.deps and job.ib_index == 0 and job.resume is None:  # its first run
            failed_dep = next((d for d in job.deps if d.error), None)
            if failed_dep is not None and not job.error:
                job.error = errno.ECANCELED  # drm_sched skips jobs whose dependency failed
        if job.error:  # cancelled (a reset, its file closed), maybe while it waited preempted
            if job.result is not None and job.result.status == "preempted":
                job.result = None  # its saved state is dropped: it never resumes
            return False
        err = userptr.begin_job(self.dev, job)  # copy in its userptr BOs' pages (kmd/userptr.py)
        if err:
            job.error = err
            return False
        start = job.segment_start = time.monotonic()
        if job.started_at is None:
            job.started_at = start
        if not direct:
            self._arm(job, start)
        # With an L2 model, each run of the job is in amdgpu's frame of cache actions:
        # the ACQUIRE_MEM gfx_v9_0_emit_mem_sync puts before the IBs, and the write-back
        # and invalidate of the fence's RELEASE_MEM (gfx_v9_0_ring_emit_fence), even
        # after a fault or a preemption, so a waiter on the fence (and the userptr copy
        # back) sees what the job wrote (docs/cache.md).
        l2_frame = getattr(self.engine, "l2", None) is not None
        preempted = False
        try:
            if l2_frame:
                perf.add(job.counters, self.engine.cache_sync(pm4.acquire_mem_l2_actions(pm4.ACQUIRE_WB_INV)))
            while job.ib_index < len(job.ibs):
                va, size_dw = job.ibs[job.ib_index]
                if job.resume is None and not self.preemptible:
                    job.result = self.engine.run(job.file.vm.page_table, va, size_dw, job.ctx.id, self.ring_id)
                else:
                    job.result = self.engine.run(job.file.vm.page_table, va, size_dw, job.ctx.id, self.ring_id,
                                                 resume=job.resume, csa=self._csa(job))
                perf.add_ib(job.counters, self.kind, job.result)
                if job.result.status == "preempted":
                    job.resume, preempted = job.result.resume, True
                    break
                job.resume = None
                if job.result.status != "ok":
                    break
                job.ib_index += 1
                if job.ib_index < len(job.ibs) and self._asked is not None and self._asked[0] is job:
                    preempted = True  # the request came as the IB ended: stop at the IB boundary
                    break
        except Exception as e:  # an engine bug must not kill the ring
            job.error = errno.EIO
            preempted = False
            self.dev.kmsg.log(f"ring {self.name}: engine error {e!r} in job {job.id}")
        finally:
            if l2_frame:
                perf.add(job.counters, self.engine.cache_sync(pm4.release_mem_l2_actions(pm4.RELEASE_WB_INV)))
            end = time.monotonic()
            job.run_time += end - start
            job.segment_start = None
            self.busy_time += end - start
            self.perf.ran(start, end)
            if not preempted:
                job.ended_at = end
                self.jobs_done += 1
            userptr.end_job(self.dev, job)  # write back what it changed, before the fence
        if preempted:
            job.preemptions += 1
            return True
        return False

    def _arm(self, job: Job, start: float) -> None:
        """Arm the timer for `job`, starting its run at `start`: wake it only if it
        would sleep past the new deadline or slice end, or if it has to preempt the
        job now."""
        with self._cv:
            # The timeout counts the job's own run time, not its waits while preempted.
            self._deadline = start + max(0.0, self.dev.timeout - job.run_time)
            self._slice_end = start + self.opts.timeslice if self.preemptible and self.opts.timeslice else None
            due = self._deadline if self._slice_end is None else min(self._deadline, self._slice_end)
            # (_preempt_reason is None without a pulse pending or another entity queued.)
            if due < self._timer_at or ((self.hb.pending or self.sched.order)
                                        and self._preempt_reason(job, start) is not None):
                self._timer_cv.notify_all()

    def _csa(self, job: Job):
        """The context save area a compute ring's engine saves waves to (kmd/csa.py)."""
        if self.kind != "compute":
            return None
        from . import csa  # the context save areas (kmd/csa.py)
        try:
            return csa.csa_for(self.dev, job.ctx)
        except MemoryError:  # logged by csa_for; the engine keeps the state in host memory
            return None

    def _account(self, job: Job) -> None:
        """The job's counters into the ring's and its file's, before its fence signals
        (so a client that waited for the fence finds its record)."""
        if job.result is not None and job.result.status != "ok":
            status = job.result.status                      # 'fault' or 'aborted'
        else:
            status = errno.errorcode.get(job.error, str(job.error)) if job.error else "ok"
        self.perf.job_done(job, job.started_at, job.ended_at or time.monotonic(), status, job.run_time)

    def running_since(self) -> float | None:
        """When the run in progress on the engine started, or None when idle."""
        run = self.running
        return run.segment_start if run is not None else None

    def _watch(self) -> None:
        """The ring's timer (drm_sched_job_timedout, i915's timeslice timer): abort a
        job past its deadline; ask the engine to preempt the running job when
        `_preempt_reason` says so."""
        with self._cv:
            while not self._stop:
                job, now = self.running, time.monotonic()
                if job is not None and self._deadline is not None and now >= self._deadline:
                    self._deadline = None
                    job.timed_out = True
                    job.hung_by = job.hung_by or "timeout"
                    self._unlocked(self.engine.abort)
                    continue
                reason = self._preempt_reason(job, now)
                if reason is not None:
                    if not self._preempt(reason):
                        self._timer_at = now + PREEMPT_RETRY_S
                        self._timer_cv.wait(PREEMPT_RETRY_S)
                    continue
                wake = [t for t in (self._deadline, self._slice_end) if t is not None and t > now]
                if wake:
                    self._timer_at = min(wake)
                elif now - self._last_end < TIMER_PARK_S:
                    self._timer_at = now + self._timer_period()
                else:
                    self._timer_at = math.inf
                self._timer_cv.wait(None if self._timer_at == math.inf else self._timer_at - now)

    def _timer_period(self) -> float:
        """The shortest time from a job's start to its deadline or slice end (the
        timer's period while the ring is busy; a resumed job's deadline may be sooner,
        which the worker's arming sees and wakes the timer for)."""
        period = self.dev.timeout
        if self.preemptible and self.opts.timeslice:
            period = min(period, self.opts.timeslice)
        return max(period, 0.001)

    def _preempt(self, reason: str) -> bool:
        """Ask the engine to preempt the running job (ring lock held, so the job
        cannot change under the request: the worker takes the lock to start the next
        one). False when the engine had no IB running: the caller may ask again."""
        if not self.engine.preempt():
            return False
        self._asked = (self.running, reason)
        return True

    def _unlocked(self, fn):
        """Call `fn` without the ring's lock (an engine call may wait for the engine)."""
        self._cv.release()
        try:
            return fn()
        finally:
            self._cv.acquire()

    def _preempt_reason(self, job: Job | None, now: float) -> str | None:
        """Why the running `job` should be preempted now (ring lock held), or None."""
        if (job is None or not self.preemptible or job.segment_start is None
                or (self._asked is not None and self._asked[0] is job)):
            return None
        if self.hb.pending:
            return "heartbeat"
        slice_over = self._slice_end is not None and now >= self._slice_end
        return self.sched.preempt_reason(job, slice_over)

    def beat(self, misses_allowed: int) -> None:
        """One heartbeat of this engine (the heartbeat thread, kmd/heartbeat.py): send
        a pulse if the engine is busy, count a miss if the last one is still pending,
        and declare the engine hung after `misses_allowed` misses in a row."""
        with self._cv:
            now, job = time.monotonic(), self.running
            if not self.hb.pending:
                if job is not None or len(self.sched):
                    self.hb.send(now)
                    self._notify()  # the worker serves it, the timer preempts for it
                return
            n = self.hb.miss()
            hung = n >= misses_allowed
            if hung:
                self.hb.hangs += 1
                self.hb.misses = 0
        who = (f"job {job.id} ctx {job.ctx.id} client {job.file.id} pid {job.file.pid}, "
               f"run time {job.run_time + (now - (job.segment_start or now)):.3f} s" if job is not None else "no job")
        self.dev.kmsg.log(f"[{self.name}] heartbeat: pulse {self.hb.pulses} missed, {n} of {misses_allowed} "
                          f"({who}{'' if self.preemptible else '; preemption off'})")
        if not hung:
            return
        self.dev.kmsg.log(f"[{self.name}] stopped heartbeat: engine hung, resetting")
        if job is not None and job is self.running:
            job.hung_by = "heartbeat"
            job.timed_out = True
            self.engine.abort()  # the job fails through Device.job_failed: crash dump, reset
        else:
            self.dev.gpu_reset()

    def abort_running(self) -> bool:
        """Stop the running job now (an on-demand GPU reset). True if one was running."""
        with self._cv:
            if self.running is None:
                return False
            self._deadline = time.monotonic()
            self._notify()
        return True

    def describe(self) -> str:
        with self._cv:
            run = self.running
            entities = self.sched.describe()
            queued = len(self.sched)
            waiting = [j for j in self.sched.jobs() if j.preemptions]
            preemptions = dict(self.preemptions)
            hb = self.hb.describe(self.opts.heartbeat, self.opts.heartbeat_misses, time.monotonic())
        lines = [f"ring {self.name} (ip {self.ip_type} instance 0 ring {self.index})",
                 f"emitted seq:  {self.emitted_seq}",
                 f"hw emitted:   {self.hw_emitted}",
                 f"hw completed: {self.fence_wb}",
                 f"hw signaled:  {self.signaled_seq}",
                 f"queued jobs:  {queued}",
                 "running:      " + (f"job {run.id} ctx {run.ctx.id} client {run.file.id} pid {run.file.pid} "
                                     f"seq {run.fence.seq}" if run else "idle"),
                 f"jobs done:    {self.jobs_done}",
                 f"busy time:    {self.busy_time:.6f} s",
                 f"timeout:      {self.dev.timeout:g} s of a job's own run time",
                 "scheduling:   " + (self.opts.describe() if self.preemptible or not self.opts.preempt
                                     else "preemption unavailable on this engine"),
                 f"preemptions:  {sum(preemptions.values())}"
                 + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(preemptions.items())) + ")" if preemptions else ""),
                 *([f"last preempted: {self.last_preemption}"] if self.last_preemption else []),
                 *[f"  preempted, waiting: job {j.id} ctx {j.ctx.id} seq {j.fence.seq}, {j.preemptions} "
                   f"preemption(s), run time {j.run_time:.6f} s" for j in waiting],
                 *hb,
                 *entities]
        return "\n".join(lines + perf.describe(self.perf, self.running_since())) + "\n"
