"""Rings: a drm_sched-style scheduler feeding one engine from a worker thread
(amdgpu_ring.c + drm_sched_main).

The worker picks the next ready job (kmd/sched.py), runs its IBs on the engine
(which releases the GIL), then does what the ring's end-of-job packets do on real
hardware: writes the sequence number to the ring's fence write-back slot and raises
a trap interrupt. The KMD's interrupt handler reads the slot and signals fences
from there (kmd/irq.py). A watchdog thread aborts a job still running past the
ring timeout; Device.job_failed then does the reset (TDR).
"""
import collections
import errno
import threading
import time

from vgpu import pm4, uapi

from . import hw, perf, userptr
from .fence import Fence
from .job import Job
from .sched import RingScheduler

FENCE_HISTORY = 4096  # fences remembered for WAIT_CS after they signaled


class Ring:
    def __init__(self, dev, name: str, ip_type: int, index: int, ring_id: int, engine):
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
        self.history: collections.deque = collections.deque(maxlen=256)  # (job id, ctx id), run order
        self._cv = threading.Condition()
        self._stop = False
        self._deadline: float | None = None    # watchdog: when the running job times out
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
            self._cv.notify_all()
        for dep in job.deps:  # a signalled dependency may make the job ready
            dep.add_callback(self._wake)
        return job.fence.seq

    def entity_jobs(self, job: Job) -> int:
        """Jobs queued on `job`'s entity now (drm_sched trace events' job count)."""
        ent = self.sched.entities.get((job.file.id, job.ctx.id))
        return len(ent.jobs) if ent is not None else 0

    def _wake(self, _fence=None) -> None:
        with self._cv:
            self._cv.notify_all()

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
            self._cv.notify_all()
        return len(gone)

    def queued(self) -> int:
        with self._cv:
            return len(self.sched)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self.engine.abort()
        self._thread.join(timeout=5)
        self._watchdog.join(timeout=5)

    # -- the "hardware" side ---------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cv:
                job = None
                while not self._stop and (job := self.sched.pick()) is None:
                    self._cv.wait()
                if self._stop:
                    return
                self.running = job
                self.hw_emitted += 1
                job.hw_seq = self.hw_emitted
                self.hw_pending[job.hw_seq] = job
                self.history.append((job.id, job.ctx.id))
            if self.dev.trace.on:
                self.dev.trace.job_run(self, job, self.entity_jobs(job))
            self._run(job)
            self._account(job)
            if self.dev.trace.on:
                self.dev.trace.job_done(self, job)
            with self._cv:
                self.running = None
                self._deadline = None
            # End of job: fence write-back, then the trap interrupt (sdma_v4_0_ring_emit_fence),
            # handled at once on this thread (kmd/irq.py says why).
            self.fence_wb = job.hw_seq
            self.dev.ih.push(hw.ih.IH_SRC_TRAP, self.ring_id, job.ctx.id, 0, wake=False)
            self.dev.irq.service()

    def _run(self, job: Job) -> None:
        failed_dep = next((d for d in job.deps if d.error), None)
        if failed_dep is not None and not job.error:
            job.error = errno.ECANCELED  # drm_sched skips jobs whose dependency failed
        if job.error:
            return
        err = userptr.begin_job(self.dev, job)  # copy in its userptr BOs' pages (kmd/userptr.py)
        if err:
            job.error = err
            return
        job.started_at = time.monotonic()
        with self._cv:
            self._deadline = job.started_at + self.dev.timeout
            self._cv.notify_all()  # arm the watchdog
        # With an L2 model, the job runs in amdgpu's frame of cache actions: the
        # ACQUIRE_MEM gfx_v9_0_emit_mem_sync puts before the IBs, and the write-back
        # and invalidate of the fence's RELEASE_MEM (gfx_v9_0_ring_emit_fence), even
        # after a fault, so a waiter on the fence sees what the job wrote (docs/cache.md).
        l2_frame = getattr(self.engine, "l2", None) is not None
        try:
            if l2_frame:
                perf.add(job.counters, self.engine.cache_sync(pm4.acquire_mem_l2_actions(pm4.ACQUIRE_WB_INV)))
            for va, size_dw in job.ibs:
                job.result = self.engine.run(job.file.vm.page_table, va, size_dw, job.ctx.id, self.ring_id)
                perf.add(job.counters, perf.ib_counters(self.kind, job.result))
                if job.result.status != "ok":
                    break
        except Exception as e:  # an engine bug must not kill the ring
            job.error = errno.EIO
            self.dev.kmsg.log(f"ring {self.name}: engine error {e!r} in job {job.id}")
        finally:
            if l2_frame:
                perf.add(job.counters, self.engine.cache_sync(pm4.release_mem_l2_actions(pm4.RELEASE_WB_INV)))
            job.ended_at = time.monotonic()
            self.busy_time += job.ended_at - job.started_at
            self.jobs_done += 1
            userptr.end_job(self.dev, job)  # write back what it changed, before the fence
        if job.result is not None and job.result.status != "ok":
            self.dev.job_failed(self, job)

    def _account(self, job: Job) -> None:
        """The job's counters into the ring's and its file's, before its fence signals
        (so a client that waited for the fence finds its record)."""
        if job.result is not None and job.result.status != "ok":
            status = job.result.status                      # 'fault' or 'aborted'
        else:
            status = errno.errorcode.get(job.error, str(job.error)) if job.error else "ok"
        self.perf.job_done(job, job.started_at, job.ended_at or time.monotonic(), status)

    def running_since(self) -> float | None:
        """When the job in progress started, or None when idle."""
        run = self.running
        return run.started_at if run is not None else None

    def _watch(self) -> None:
        """The TDR watchdog (drm_sched_job_timedout): abort a job past its deadline."""
        with self._cv:
            while not self._stop:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                job, self._deadline = self.running, None
                if job is not None:
                    job.timed_out = True
                    self.engine.abort()

    def abort_running(self) -> bool:
        """Stop the running job now (an on-demand GPU reset). True if one was running."""
        with self._cv:
            if self.running is None:
                return False
            self._deadline = time.monotonic()
            self._cv.notify_all()
        return True

    def describe(self) -> str:
        with self._cv:
            run = self.running
            entities = self.sched.describe()
            queued = len(self.sched)
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
                 f"timeout:      {self.dev.timeout:g} s",
                 *entities]
        return "\n".join(lines + perf.describe(self.perf, self.running_since())) + "\n"
