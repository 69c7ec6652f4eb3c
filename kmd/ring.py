"""Rings: a job queue and a worker thread driving one engine (amdgpu_ring.c plus a
first-in-first-out scheduler; the drm_sched-style one replaces the queue later).

The worker runs each job's IBs on the engine (which releases the GIL), then does
what the ring's end-of-job packets do on real hardware: writes the sequence number
to the ring's fence write-back slot and raises a trap interrupt. The KMD's
interrupt handler reads the slot and signals fences from there (kmd/irq.py).
A watchdog aborts a job running past the ring timeout (kmd/reset.py handles it).
"""
import collections
import errno
import threading
import time

from . import hw
from .fence import Fence
from .job import Job

FENCE_HISTORY = 4096  # fences remembered for WAIT_CS after they signaled


class Ring:
    def __init__(self, dev, name: str, ip_type: int, index: int, ring_id: int, engine):
        self.dev = dev
        self.name, self.ip_type, self.index, self.ring_id = name, ip_type, index, ring_id
        self.engine = engine
        self.emitted_seq = 0
        self.fence_wb = 0              # last seq the "hardware" completed
        self.signaled_seq = 0          # last seq the KMD signaled
        self.fences: "collections.OrderedDict[int, Fence]" = collections.OrderedDict()
        self.pending: dict[int, Job] = {}      # seq -> job, until its fence signals
        self.queue: collections.deque[Job] = collections.deque()
        self.running: Job | None = None
        self.busy_time = 0.0
        self.jobs_done = 0
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._worker, name=f"ring-{name}", daemon=True)
        self._thread.start()

    # -- submission (called under the device lock) ---------------------------
    def submit(self, job: Job) -> int:
        self.emitted_seq += 1
        job.fence = Fence(self.name, self.emitted_seq)
        self.fences[job.fence.seq] = job.fence
        while len(self.fences) > FENCE_HISTORY and next(iter(self.fences)) <= self.signaled_seq:
            self.fences.popitem(last=False)
        self.pending[job.fence.seq] = job
        with self._cv:
            self.queue.append(job)
            self._cv.notify()
        return job.fence.seq

    def fence(self, seq: int) -> Fence | None:
        """The fence of `seq`; None if it signaled long ago (treat as signaled, no error)."""
        return self.fences.get(seq)

    def cancel(self, pred, err: int = errno.ECANCELED) -> int:
        """Mark queued (not yet running) jobs matching `pred` as failed with `err`.
        They stay in order: the worker skips their IBs and signals their fences."""
        with self._cv:
            gone = [j for j in self.queue if pred(j) and not j.error]
            for j in gone:
                j.error = err
        return len(gone)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self.engine.abort()
        self._thread.join(timeout=5)

    # -- the "hardware" side ---------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cv:
                while not self.queue and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                job = self.queue.popleft()
                self.running = job
            self._run(job)
            with self._cv:
                self.running = None
            # End of job: fence write-back, then the trap interrupt (sdma_v4_0_ring_emit_fence).
            self.fence_wb = job.fence.seq
            self.dev.ih.push(hw.ih.IH_SRC_TRAP, self.ring_id, job.ctx.id, 0)

    def _run(self, job: Job) -> None:
        for dep in job.deps:  # inter-ring dependencies: wait for the other ring's fence
            dep.wait(None)
            if dep.error:
                job.error = errno.ECANCELED  # drm_sched skips jobs whose dependency failed
                return
        if job.error:  # cancelled while queued behind a hang
            return
        job.started_at = time.monotonic()
        watchdog = threading.Timer(self.dev.timeout, self._timeout, args=(job,))
        watchdog.daemon = True
        watchdog.start()
        try:
            for va, size_dw in job.ibs:
                job.result = self.engine.run(job.file.vm.page_table, va, size_dw, job.ctx.id, self.ring_id)
                if job.result.status != "ok":
                    break
        except Exception as e:  # an engine bug must not kill the ring
            job.error = errno.EIO
            self.dev.kmsg.log(f"ring {self.name}: engine error {e!r} in job {job.id}")
        finally:
            watchdog.cancel()
            self.busy_time += time.monotonic() - job.started_at
            self.jobs_done += 1
        if job.result is not None and job.result.status != "ok":
            self.dev.job_failed(self, job)

    def _timeout(self, job: Job) -> None:
        if self.running is job:
            job.timed_out = True
            self.engine.abort()

    def describe(self) -> str:
        run = self.running
        lines = [f"ring {self.name} (ip {self.ip_type} instance 0 ring {self.index})",
                 f"emitted seq:  {self.emitted_seq}",
                 f"completed seq: {self.fence_wb}",
                 f"signaled seq: {self.signaled_seq}",
                 f"queued jobs:  {len(self.queue)}",
                 f"running:      " + (f"job {run.id} ctx {run.ctx.id} client {run.file.id} pid {run.file.pid} "
                                     f"seq {run.fence.seq}" if run else "idle"),
                 f"jobs done:    {self.jobs_done}",
                 f"busy time:    {self.busy_time:.6f} s"]
        return "\n".join(lines) + "\n"
