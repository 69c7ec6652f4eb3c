"""Device: the whole KMD behind one mounted vgpu (see docs/internals.md).

Every ioctl runs under one device lock (the handlers are short; blocking waits are
returned as PendingReply and run outside it). Engines, when they exist, report back
through the interrupt ring and take the same lock to update state. Work that grows
with a client's objects (closing a file, releasing the BOs a job held) runs in slices
of at most SLICE seconds under the lock, which is released in between (run_sliced),
so one client's 100,000 BOs never stall the others.
"""
import collections
import errno
import threading
import time

from vgpu import uapi

from . import csa as _csa, ctx as _ctx, debugfs as _debugfs, devcoredump as _devcoredump, fdinfo as _fdinfo, hw
from . import drm_auth as _drm_auth, gem_flink as _gem_flink
from . import info as _info, pci_hotplug as _pci_hotplug
from . import prime as _prime, sched as _sched, syncobj as _syncobj, sysfs as _sysfs, userq as _userq, userq_ioctl as _userq_ioctl
from .cs import lookup_fence
from .drm_file import DrmFile
from .errors import KmdError
from .fence import Fence
from .heartbeat import Heartbeat
from .gem import DOMAIN_NAMES, BufferObject, random_mmap_offset
from .hw.cp import CommandProcessor
from .ioctl import PendingReply, dispatch, permit, request_name
from .ioctl_table import TABLE as IOCTL_TABLE
from .irq import InterruptHandler
from .job import Job
from .kmsg import KernelLog
from .limits import Limiter, Limits
from .memory import DeviceMemory
from .residency import Residency
from .partition import Partition, Shared
from .power import PowerModel
from .ring import Ring
from .trace import Stream, Tracer

MiB = 1 << 20
# The longest the device lock is held at a stretch by teardown work (closing a file,
# releasing many BOs); between slices it is released for SLICE_PAUSE seconds so a
# waiting ioctl takes it.
SLICE = 0.002
SLICE_PAUSE = 0.0002
# INFO's permission flags (DRM_AUTH | DRM_RENDER_ALLOW), for timestamp_query


class _Waiting:
    """Closed BOs whose memory waits for a set of jobs in flight (Device.free_bo):
    the BOs a file drops at its last close share one, so freeing N BOs costs
    O(N + jobs), not O(N x jobs)."""

    __slots__ = ("jobs", "bos")

    def __init__(self, jobs):
        self.jobs = set(jobs)
        self.bos: list[BufferObject] = []


class Device:
    """The KMD of one virtual GPU."""

    def __init__(self, vram_size: int = 512 * MiB, gtt_size: int = 1024 * MiB, timeout: float = 2.0,
                 shm_dir: str | None = None, limits: Limits | None = None, huge_pages: bool = False,
                 partition: Partition | None = None, shared: Shared | None = None,
                 sched: _sched.SchedOptions | None = None, cache_model: bool = False):
        """Raises kmd.shmem.StoreError when the BO store (a tmpfs under ``shm_dir``,
        default /dev/shm) cannot hold VRAM + GTT. ``limits``: the object caps per
        file and per device (kmd/limits.py; the defaults when None). ``huge_pages``:
        BO files on a private huge-page tmpfs when root (kmd/shmem.py; the daemon's
        default). ``sched``: preemption, time slicing and the heartbeat
        (kmd.sched.SchedOptions; the defaults when None, docs/preemption.md).
        ``partition``: the share of the GPU this device drives (its CUs, SDMA
        engines, VRAM and GTT sizes; the whole GPU when None), with ``shared``,
        what it shares with the other partitions (kmd/partition.py, kmd/gpu.py).
        ``cache_model``: the compute engines share a write-back L2 that RELEASE_MEM /
        ACQUIRE_MEM must write back and invalidate (docs/cache.md; a partition has
        its own); off, compute memory is coherent with the CPU and SDMA."""
        self.partition = partition = partition or Partition.whole(vram_size, gtt_size)
        self.lock = threading.RLock()
        # Direct runs (kmd/direct_run.py): while a request dispatches (device lock held,
        # so no other thread submits meanwhile), the rings that kept a light job for it.
        self.collect_direct = False
        self.direct_rings: list[Ring] = []
        self.kmsg = shared.kmsg.for_device(f"vgpu {partition.pci_slot}") if shared else KernelLog()
        self.trace = shared.trace if shared else Tracer()  # tracepoints and timeline recordings (kmd/trace.py)
        self.memory = DeviceMemory(vram_size, gtt_size, shm_dir, huge_pages,
                                   store=shared.store if shared else None, share=partition.count)
        self.residency = Residency(self)  # LRU, eviction, validation, move counters
        self.timeout = timeout
        self.sched_opts = sched or _sched.SchedOptions()
        self.files: dict[int, DrmFile] = {}
        self.bos_by_offset: dict[int, BufferObject] = {}
        self.sync_tokens = _syncobj.SyncTokens()  # MOUNT/sync/<token-hex>
        self.prime = _prime.PrimeTokens()         # MOUNT/prime/<token-hex>
        self.flink = _gem_flink.FlinkNames()      # GEM_FLINK's global names
        self.drm_master = None  # the current kmd.drm_auth.DrmMaster (dev->master), None: no master
        self.reset_counter = 0
        self.pstate = _ctx.StablePstate()   # CTX GET/SET_STABLE_PSTATE (amdgpu_ctx.c)
        self.reserved_vmid = None           # the DrmFile holding AMDGPU_VM RESERVE_VMID (kmd/vm.py)
        self._t0 = time.monotonic()
        # PCI hot unplug (kmd/pci_hotplug.py): removed from the bus, and how many
        # times a rescan brought it back
        self.unplugged = False
        self.generation = 0
        # Closed BOs whose memory a job may still touch: {id(bo): bo}; for each job in
        # flight the groups of zombies waiting for it (see free_bo); zombies whose
        # jobs are done, released in slices by the IH thread (_release_ready).
        self.zombie_bos: dict[int, BufferObject] = {}
        self._waiting_by_job: dict[int, list[_Waiting]] = {}
        self._ready_zombies: collections.deque[BufferObject] = collections.deque()
        self._bus_repairs_seen = hw.bus_repairs()[0]
        # Submissions waiting for room on their context (queue_job), in order:
        # {(file id, ctx id): deque of (ring, job)}.
        self._backlog: dict[tuple[int, int], collections.deque] = {}
        self.ih = hw.InterruptRing()
        # The partition's SDMA engines, and the compute rings of its own command
        # processor, named as amdgpu names them (comp_<me>.<pipe>.<queue>, numbered
        # across the partitions: kmd/partition.py), whose dispatches run on its
        # compute units only.
        self.rings: dict[tuple[int, int], Ring] = {}
        for i, name in enumerate(partition.sdma_names):
            ring = Ring(self, name, uapi.AMDGPU_HW_IP_DMA, i, len(self.rings), hw.SdmaEngine(name, self.ih),
                        self.sched_opts)
            self.rings[(ring.ip_type, i)] = ring
        self.l2 = hw.L2Cache() if cache_model else None
        for i, name in enumerate(partition.compute_ring_names(_info.RINGS[uapi.AMDGPU_HW_IP_COMPUTE])):
            ring = Ring(self, name, uapi.AMDGPU_HW_IP_COMPUTE, i, len(self.rings),
                        CommandProcessor(name, self.ih, cus=len(partition.cus), l2=self.l2), self.sched_opts)
            self.rings[(ring.ip_type, i)] = ring
        # MOUNT/sys/class/devcoredump/
        self.coredumps = shared.coredumps if shared else _devcoredump.CoredumpStore()
        self.rings_by_id = {r.ring_id: r for r in self.rings.values()}
        self.userqs = _userq.UserQueues(self)   # user-mode queues (kmd/userq.py)
        self.irq = InterruptHandler(self)
        self.busy_meter = _sysfs.BusyMeter(self)
        self.power = PowerModel(lambda: self.busy_meter.percent() / 100)   # AMDGPU_INFO_SENSOR (kmd/power.py)
        o = self.sched_opts
        self.kmsg.log(f"vgpu: initialized, VRAM {vram_size // MiB} MiB, GTT {gtt_size // MiB} MiB, "
                      f"ring timeout {timeout:g} s, {o.describe()}, heartbeat "
                      + (f"every {o.heartbeat * 1e3:g} ms (hung after {o.heartbeat_misses} missed pulses)"
                         if o.heartbeat else "off")
                      + (f", L2 cache model {self.l2.size // MiB} MiB" if self.l2 is not None else ""))
        if partition.count > 1:
            self.kmsg.log(f"vgpu: {partition.describe()}")
        self.heartbeat = Heartbeat(self.rings.values(), o.heartbeat, o.heartbeat_misses)
        self.limiter = Limiter(limits or Limits(), self.kmsg, bo_count=lambda: self.memory.bo_count,
                               bo_bound=lambda: self.memory.max_bos)
        if self.limiter.limits.changes():
            self.kmsg.log(f"vgpu: limits set at mount: {self.limiter.limits.changes()}")

    # -- files ---------------------------------------------------------------
    def open_file(self, pid: int, uid: int, comm: str = "?", render: bool = True) -> DrmFile:
        with self.lock:
            if self.unplugged:   # a stale node of a removed device (drm_minor_acquire)
                raise KmdError(errno.ENODEV, "device removed from the bus")
            f = DrmFile(pid, uid, comm, render, self.limiter)
            f.vm.trace, f.vm.owner = self.trace, f
            _drm_auth.file_opened(self, f)  # master and authentication (kmd/drm_auth.py)
            self.files[f.id] = f
        self.kmsg.log(f"client {f.id} opened {f.node}: {f.describe()}")
        return f

    def close_file(self, f: DrmFile) -> None:
        """Last close: free every VA mapping, context and GEM handle the file held.
        The file refuses ioctls at once (EBADF); the teardown runs in slices
        (run_sliced), so the cost of a file with many objects is O(objects) and
        other clients' ioctls get the device lock in between."""
        with self.lock:
            if f.closed:
                return
            f.closed = True
            _drm_auth.file_closed(self, f)  # a closing master leaves the device without one
            self._drop_backlog(lambda j: j.file is f, errno.EBADF)
        self.run_sliced(self._teardown(f))
        self.kmsg.log(f"client {f.id} closed {f.node}: {f.describe()}")

    def _teardown(self, f: DrmFile):
        """close_file's work as short steps, each run under the device lock (a yield
        is where the lock may be released). Queued jobs are cancelled first; a BO a
        running job may still touch outlives its handle (free_bo)."""
        _userq_ioctl.close_file(self, f)   # its queues stop before their VM goes
        for ring in self.rings.values():
            ring.cancel(lambda j: j.file is f)
            yield
        yield from f.vm.clear_all_steps()
        if f.seq64 is not None:   # kmd/userq_sync.py: unmapped with the VM just now
            self.memory.free(f.seq64.bo.placement)
            f.seq64 = None
        while f.bo_lists:
            f.bo_lists.popitem()
            yield
        yield from _syncobj.close_file_steps(self, f)
        for ctx in list(f.contexts.values()):
            self.free_ctx(f, ctx)
            yield
        waiting = self._waiting(f.jobs) if f.jobs else None
        for handle in list(f.bos):
            self.close_handle(f, handle, waiting)
            yield
        _prime.close_file(self, f)
        del self.files[f.id]

    def run_sliced(self, steps) -> None:
        """Run the generator `steps` under the device lock, SLICE seconds of it per
        hold, releasing the lock (and the GIL) for SLICE_PAUSE between holds. From a
        thread that already holds the lock this runs it all in one go."""
        steps = iter(steps)
        while True:
            with self.lock:
                end = time.monotonic() + SLICE
                for _ in steps:
                    if time.monotonic() >= end:
                        break
                else:
                    return
            time.sleep(SLICE_PAUSE)

    # -- ioctl ---------------------------------------------------------------
    def ioctl(self, f: DrmFile, request: int, arg: bytes, extra: bytes = b"", tid: int = 0,
              tag: int | None = None, direct_runs: list | None = None):
        """Run one request for file `f` through the ioctl table (kmd/ioctl_table.py,
        dispatched by kmd.ioctl.dispatch). Refusals are logged. While tracing, the
        request goes to the recordings when it completes (_traced), with the calling
        thread `tid` (0: unknown) or, for a frame request, its `tag`.

        The light jobs the request submitted (kmd/direct_run.py) run before it
        returns, or, given a list `direct_runs`, are appended to it as rings whose
        ``run_direct()`` the caller must call (each exactly once, soon: until then
        the job waits, and its ring's worker was not told): a transport that can
        answer first runs them after the reply."""
        t0 = time.monotonic() if self.trace.on else 0.0
        direct: list[Ring] = []
        try:
            with self.lock:
                if f.closed:
                    raise KmdError(errno.EBADF, "file is closed")
                if f.unplugged:   # drm_ioctl: drm_dev_is_unplugged -> -ENODEV
                    e = KmdError(errno.ENODEV, "device removed from the bus")
                    e.quiet = True   # said once in kmsg at the remove
                    raise e
                self.collect_direct = True
                try:
                    out = dispatch(IOCTL_TABLE, self, f, request, arg, extra)
                finally:
                    self.collect_direct = False
                    direct, self.direct_rings = self.direct_rings, []
        except KmdError as e:
            if not getattr(e, "quiet", False):  # a LimitError was logged once already
                self.kmsg.log(f"{request_name(IOCTL_TABLE, request)} refused for client {f.id} (pid {f.pid}): {e}")
            if t0:
                self.trace.ioctl(f, request, request_name(IOCTL_TABLE, request), arg, extra, t0, error=e.errno,
                                 tid=tid, tag=tag)
            raise
        finally:
            # The light jobs this request submitted (kmd/direct_run.py), outside the
            # device lock as the worker runs them: the end of a job takes the IRQ
            # lock, and the IRQ thread takes the device lock under that one.
            if direct_runs is not None:
                direct_runs += direct
            else:
                for ring in direct:
                    ring.run_direct()
        return self._traced(f, request, arg, extra, t0, out, tid, tag) if t0 else out

    def check_permission(self, f: DrmFile, request: int) -> None:
        """Refuse `request` for `f` (KmdError, logged as ioctl() logs a refusal) where
        drm_ioctl would before its handler runs: EBADF for a closed file, ENODEV once
        unplugged, ENOTTY/EOPNOTSUPP for an ioctl the table lacks, EACCES from
        drm_ioctl_permit. For a transport whose copy of the request's pointed-to data
        failed: Linux copies that data in the handler, after these checks, so their
        errno comes first. Returns when none applies."""
        try:
            if f.closed:
                raise KmdError(errno.EBADF, "file is closed")
            if f.unplugged:
                e = KmdError(errno.ENODEV, "device removed from the bus")
                e.quiet = True
                raise e
            permit(IOCTL_TABLE, f, request)
        except KmdError as e:
            if not getattr(e, "quiet", False):
                self.kmsg.log(f"{request_name(IOCTL_TABLE, request)} refused for client {f.id} (pid {f.pid}): {e}")
            raise

    def refused_before_dispatch(self, f: DrmFile, request: int, arg: bytes, error: int, tid: int = 0) -> None:
        """A request the transport refused before dispatch (its pointers could not be
        read: EFAULT, E2BIG...) goes to the recordings all the same, so that vgpu trace
        decodes the struct of a bad call."""
        if self.trace.on:
            self.trace.ioctl(f, request, request_name(IOCTL_TABLE, request), arg, b"", time.monotonic(),
                             error=error, tid=tid)

    def _traced(self, f: DrmFile, request: int, arg: bytes, extra: bytes, t0: float, out, tid: int = 0,
                tag: int | None = None):
        """Record a finished request, or make a pending one record itself when it
        finishes (its read()), with the fences it waited for."""
        name = request_name(IOCTL_TABLE, request)
        if not isinstance(out, PendingReply):
            self.trace.ioctl(f, request, name, arg, extra, t0, out, tid=tid, tag=tag)
            return out
        pending = out

        def finish():
            fences = pending.fences() if callable(pending.fences) else pending.fences
            try:
                reply = pending.finish()
            except KmdError as e:
                self.trace.ioctl(f, request, name, arg, extra, t0, error=e.errno, fences=fences, tid=tid, tag=tag)
                raise
            self.trace.ioctl(f, request, name, arg, extra, t0, reply, fences=fences, tid=tid, tag=tag)
            return reply

        return PendingReply(ready=pending.ready, subscribe=pending.subscribe, finish=finish,
                            deadline=pending.deadline, fences=pending.fences)

    # -- GEM -----------------------------------------------------------------
    def create_bo(self, f: DrmFile, size: int, align: int, domains: int, flags: int) -> BufferObject:
        """Place a BO as TTM does (kmd/residency.py): VRAM first when allowed, then GTT,
        evicting idle BOs when neither has room; a VRAM-only BO falls back to GTT.
        ENOMEM when nothing fits (or the device's BO limit is reached, or its file
        cannot be made); logged. ENOSPC: the file holds its limit of handles
        (kmd/limits.py)."""
        self.limiter.check(f, "bos")
        try:
            placement = self.residency.place_new(size, align, domains, f)
        except (MemoryError, OSError) as e:
            self.kmsg.log(f"out of memory: cannot allocate {size} bytes in "
                          f"{'|'.join(n for d, n in DOMAIN_NAMES.items() if d & domains)} "
                          f"for client {f.id} (pid {f.pid}): {e}")
            raise KmdError(errno.ENOMEM, f"out of memory ({size} bytes)") from None
        bo = BufferObject(size, align, domains, flags, placement, self.memory.storage(placement),
                          f.uid, f.pid)
        while bo.mmap_offset in self.bos_by_offset:   # a repeat would hide a live BO
            bo.mmap_offset = random_mmap_offset()
        self.bos_by_offset[bo.mmap_offset] = bo
        self.residency.added(bo)
        if flags & uapi.AMDGPU_GEM_CREATE_VM_ALWAYS_VALID:
            f.per_vm_bos[id(bo)] = bo
        if self.trace.on:
            self.trace.bo_create(f, bo, self.memory)
        return bo

    def validate(self, job: Job) -> None:
        """Make the job's BOs reachable, each in a domain it prefers where it can
        (kmd/residency.py, amdgpu_cs_bo_validate). ENOMEM: they do not all fit, or
        a BO file could not be mapped at its new place (vm.max_map_count)."""
        try:
            self.residency.validate(job.bos, job.file)
        except OSError as e:
            raise KmdError(errno.ENOMEM, f"moving a BO of the job failed: {e}") from None

    def close_handle(self, f: DrmFile, handle: int, waiting: "_Waiting | None" = None) -> None:
        """Drop one GEM handle of `f`; the BO goes with its last handle (free_bo).
        `waiting`: the group a closing file's BOs share (see _teardown)."""
        bo, last_here = f.remove_bo(handle)
        if last_here:
            f.per_vm_bos.pop(id(bo), None)
            f.vm.unmap_bo(bo)  # amdgpu_gem_object_close: the file's bo_va goes
            _prime.handle_closed(self, f, bo)
        if bo.handle_count == 0:
            self.flink.handles_gone(bo)  # drm_gem_object_handle_free: its name goes
        if bo.handle_count == 0 and bo.export is None:  # an export holds the BO too
            self.free_bo(bo, f.jobs, waiting)

    def free_bo(self, bo: BufferObject, vm_jobs: set[int] = frozenset(),
                waiting: "_Waiting | None" = None) -> None:
        """Release a BO's memory and file, or defer it while a job may still touch it:
        a job whose BO list names it (busy_jobs), or one of `vm_jobs`, the jobs in
        flight of the file whose VM mapped it (a packet under way keeps the host
        pointers it translated before the unmap). Their fences guard the memory, as
        the reservation objects of the BO and the VM do in Linux. A CPU mapping that
        outlives the BO keeps its (unlinked) pages, which are no longer the GPU's.
        `waiting` (a _Waiting whose jobs are `vm_jobs`) groups the BOs of one close."""
        if bo.freed or id(bo) in self.zombie_bos:
            return
        self.bos_by_offset.pop(bo.mmap_offset, None)
        self.residency.forget(bo)
        if not (bo.busy_jobs or vm_jobs):
            self._release_bo(bo)
            return
        self.zombie_bos[id(bo)] = bo
        if vm_jobs:
            if waiting is None or not waiting.jobs:
                waiting = self._waiting(vm_jobs)
            waiting.bos.append(bo)
            bo.awaiting = waiting.jobs  # shared: emptied as the jobs complete

    def _waiting(self, jobs) -> _Waiting:
        """A new group of zombies waiting for `jobs` (device lock held)."""
        w = _Waiting(jobs)
        for job_id in w.jobs:
            self._waiting_by_job.setdefault(job_id, []).append(w)
        return w

    def _release_bo(self, bo: BufferObject) -> None:
        self.zombie_bos.pop(id(bo), None)
        bo.freed = True
        self.memory.free(bo.placement)
        if self.trace.on:
            self.trace.memory_changed(self.memory, bo.owner_pid)

    def _job_done(self, job: Job) -> None:
        """Drop a finished job's references (device lock held); the zombies that
        waited only for it go to _ready_zombies, released by _release_ready."""
        for bo in job.bos:
            bo.busy_jobs -= 1
            if bo.busy_jobs == 0 and not bo.awaiting and id(bo) in self.zombie_bos:
                self._ready_zombies.append(bo)
        for w in self._waiting_by_job.pop(job.id, ()):
            w.jobs.discard(job.id)
            if not w.jobs:
                self._ready_zombies.extend(bo for bo in w.bos if bo.busy_jobs == 0)
                w.bos = []
        job.file.jobs.discard(job.id)
        job.pin.release()
        if job.fence is not None:  # it was on a ring, not only in a backlog (queue_job)
            for bo in job.bos:
                bo.fences.discard(job.fence)
            job.ctx.inflight -= 1
            self._queue_backlog(job.file, job.ctx)

    def _release_ready(self) -> None:
        """Release the zombies whose jobs are done, in slices (the IH thread, before
        the fences of those jobs signal)."""
        def steps():
            while self._ready_zombies:
                bo = self._ready_zombies.popleft()
                if not bo.freed:
                    self._release_bo(bo)
                yield
        self.run_sliced(steps())

    def bo_by_offset(self, offset: int) -> BufferObject | None:
        with self.lock:
            return self.bos_by_offset.get(offset)

    def prime_by_token(self, token: int):
        """The kmd.prime.PrimeExport behind MOUNT/prime/<token-hex>, or None."""
        with self.lock:
            ex = self.prime.get(token)
            return ex if ex is not None and not ex.dead else None

    def sync_file_by_token(self, token: int):
        """The kmd.syncobj.SyncExport behind MOUNT/sync/<token-hex>, or None."""
        with self.lock:
            return self.sync_tokens.get(token)

    # -- submission and completion --------------------------------------------
    def queue_job(self, ring: Ring, job: Job, signals=()) -> int | None:
        """Take the job's references and queue it on `ring` (device lock held); then
        `signals`, (syncobj, point) pairs, get its fence. Returns its seq.

        A context has at most MAX_JOBS_PER_CONTEXT jobs on the rings. Past that, as
        amdgpu_ctx_wait_prev_fence makes the CS wait, the job (references taken)
        joins its context's backlog and None is returned: the write() must not block.
        The backlog is queued in order as the context's jobs complete (_job_done),
        and `job.queued` signals when this job is (with ECANCELED or EBADF instead if
        a reset or the file's close drops it first; see _drop_backlog).
        ENOMEM: the file's or the device's limit of jobs in flight (kmd/limits.py)."""
        self.limiter.check(job.file, "jobs")
        for bo in job.bos:
            bo.busy_jobs += 1
        job.pin = job.file.vm.page_table.pin()
        job.file.jobs.add(job.id)
        job.signals = list(signals)
        key = (job.file.id, job.ctx.id)
        if key in self._backlog or job.ctx.inflight >= _sched.MAX_JOBS_PER_CONTEXT:
            job.queued = Fence("backlog", job.id)
            self._backlog.setdefault(key, collections.deque()).append((ring, job))
            return None
        return self._submit(ring, job)

    def _submit(self, ring: Ring, job: Job) -> int:
        job.ctx.inflight += 1
        seq = ring.submit(job)
        for bo in job.bos:
            bo.fences.add(job.fence)
        for s, point in job.signals:
            s.signal_point(job.fence, point)
        return seq

    def file_fences(self, f: DrmFile) -> list:
        """The unsignalled fences of `f`'s jobs on the rings, queued or running (device
        lock held): what its VM's reservation holds and amdgpu_vm_wait_idle waits
        for. A job still waiting for room (queue_job) has no fence yet."""
        fences = []
        for ring in self.rings.values():
            with ring._cv:
                jobs = [*ring.sched.jobs(), *ring.hw_pending.values()]
            fences += [j.fence for j in jobs if j.file is f and not j.fence.signaled]
        return fences

    def _queue_backlog(self, file: DrmFile, ctx) -> None:
        """Queue what the backlog of (file, ctx) has room for (device lock held)."""
        key = (file.id, ctx.id)
        backlog = self._backlog.get(key)
        while backlog and ctx.inflight < _sched.MAX_JOBS_PER_CONTEXT:
            ring, job = backlog.popleft()
            self._submit(ring, job)
            job.queued.signal()
        if backlog is not None and not backlog:
            del self._backlog[key]

    def _drop_backlog(self, pred, err: int) -> int:
        """Drop the waiting submissions whose job matches `pred` (device lock held):
        their references go and `job.queued` signals with `err`, which the CS's
        read() returns. Returns how many."""
        dropped = []
        for key, backlog in list(self._backlog.items()):
            keep = collections.deque(e for e in backlog if not pred(e[1]))
            dropped += [job for _, job in backlog if pred(job)]
            if keep:
                self._backlog[key] = keep
            else:
                del self._backlog[key]
        for job in dropped:
            self._job_done(job)
            job.queued.signal(err)
        if self._ready_zombies:
            self._release_ready()
        return len(dropped)

    def job_failed(self, ring: Ring, job: Job) -> None:
        """Called by a ring worker when an IB faulted or was aborted by the watchdog,
        before the job's fence signals. The crash dump is captured under the device
        lock and formatted after it is released, still in this thread, so that the
        dump is whole when the fence signals and no other client's ioctl waits for it."""
        r = job.result
        f, ctx = job.file, job.ctx
        who = f"ctx {ctx.id} client {f.id} pid {f.pid} ({f.comm})"
        with self.lock:
            if self.unplugged and r.status == "aborted":   # stopped by the remove (kmd/pci_hotplug.py)
                job.error = errno.ENODEV
                return
            ctx.guilty = True
            if r.status == "aborted":
                job.error = errno.ETIME
                ctx.hangs += 1
                if job.hung_by == "heartbeat":
                    self.kmsg.log(f"ring {ring.name} hung (stopped heartbeat), signaled seq={ring.signaled_seq}, "
                                  f"emitted seq={ring.hw_emitted}")
                else:
                    self.kmsg.log(f"ring {ring.name} timeout, signaled seq={ring.signaled_seq}, "
                                  f"emitted seq={ring.hw_emitted}")
                self.kmsg.log(f"Process information: process {f.comm} pid {f.pid} thread {f.comm} "
                              f"pid {f.pid}, job {job.id} {who}")
                n = self._crash_dump(ring, job, who)
                self.gpu_reset(ring, guilty=ctx)
            else:
                job.error = errno.EFAULT if r.fault is not None else errno.EINVAL
                where = (f"{r.fault.access} of VA {r.fault.va:#x} ({r.fault.reason})" if r.fault
                         else f"{r.reason}")
                ctx.errors.append(where)
                if r.fault is not None:
                    # Linux records it from the fault interrupt (gmc_v9_0_process_interrupt);
                    # here it is recorded before the fence signals, so a client whose wait
                    # failed with EFAULT finds it with AMDGPU_INFO_GPUVM_FAULT at once.
                    f.vm.record_fault(r.fault)
                n = self._crash_dump(ring, job, who)
            f.last_fault = uapi.vgpu_info_last_fault(
                seq_no=job.fence.seq, ctx_id=ctx.id, ip_type=ring.ip_type, ip_instance=0, ring=ring.index,
                error=job.error, devcd=n)
        self.coredumps.render(n)

    def _crash_dump(self, ring: Ring, job: Job, who: str) -> int:
        """Register devcd<N> for a failed job from a snapshot of what it needs, and
        say so in one kmsg line (device lock held). Returns N; the text is made by
        `coredumps.render(N)` once the lock is released, or by its first reader."""
        snap = _devcoredump.capture(self, ring, job)
        n = self.coredumps.add(lambda n: _devcoredump.format_dump(snap, n))
        self.kmsg.log(f"[{ring.name}] GPU fault in job {job.id} seq {job.fence.seq} {who}: "
                      f"{_devcoredump.fault_summary(job.result)} {_devcoredump.location(ring, job.result)}; "
                      f"context marked guilty; GPU crash dump triggered (devcd{n})")
        return n

    def devcoredumps(self) -> dict[int, str]:
        """MOUNT/sys/class/devcoredump/devcd<N>/data: {N: dump text}, the last few."""
        return self.coredumps.snapshot()

    def gpu_reset(self, ring: Ring | None = None, guilty=None) -> str:
        """Reset the GPU (amdgpu_device_gpu_recover): cancel the guilty context's
        queued jobs, bump the reset counter so every context reports the reset, log
        it. Called for a timed-out job, or by a read of debugfs `amdgpu_gpu_recover`
        with no culprit (then any running job is aborted and its context becomes
        guilty)."""
        with self.lock:
            self.kmsg.log("GPU reset begin!")
            n = 0
            if guilty is not None:
                for r in self.rings.values():
                    n += r.cancel(lambda j: j.ctx is guilty)
                n += self._drop_backlog(lambda j: j.ctx is guilty, errno.ECANCELED)
            else:
                aborted = [r.name for r in self.rings.values() if r.abort_running()]
                if aborted:
                    self.kmsg.log(f"reset requested: aborting the running job on {', '.join(aborted)}")
            self.reset_counter += 1
            self.kmsg.log(f"GPU reset succeeded, {n} queued job(s) of the guilty context cancelled, "
                          f"reset counter {self.reset_counter}")
            return f"reset {self.reset_counter}\n"

    def process_fences(self, ring: Ring) -> None:
        """Signal every fence up to the ring's write-back slot, in order (IH thread).
        GPU writes went straight into the BOs' shared pages, so a woken waiter sees
        them through its mapping with no further step."""
        with self.lock:
            done = []
            while ring.signaled_seq < ring.fence_wb:
                ring.signaled_seq += 1
                job = ring.hw_pending.pop(ring.signaled_seq, None)
                if job is not None:
                    done.append(job)
            # One job without a user fence (nothing to do between the two): its
            # references go in this hold of the lock.
            released = len(done) == 1 and done[0].user_fence is None
            if released:
                self._job_done(done[0])
        for job in done:
            if job.user_fence is not None and not job.error:
                bo, off = job.user_fence
                if not bo.freed:   # one of the job's BOs: busy, so not moved under us
                    bo.write(off, job.fence.seq.to_bytes(8, "little"))
            if not released:
                with self.lock:
                    self._job_done(job)
            if self._ready_zombies:
                self._release_ready()
            if self.trace.on:
                self.trace.job_signaled(ring, job)
            job.fence.signal(job.error)
        self._log_truncated_bo_files()

    def _log_truncated_bo_files(self) -> None:
        """Say in kmsg when an engine touched BO pages whose file its owner truncated
        (kmd.hw repaired the SIGBUS with a zero page; those pages are no longer shared)."""
        count, address = hw.bus_repairs()
        if count != self._bus_repairs_seen:
            self._bus_repairs_seen = count
            self.kmsg.log(f"BO file truncated under the GPU: {count} page(s) past the end of a "
                          f"shrunk BO file now read as zero (last host address {address:#x}); "
                          f"a client must not ftruncate its BO files")

    def pci_rescan(self) -> int:
        """sys/bus/pci/rescan: probe the device again if it was removed (1), else 0."""
        return _pci_hotplug.rescan(self)

    def pci_bus_files(self) -> dict:
        """MOUNT/sys/bus/pci/'s files (rescan), kmd/pci_hotplug.py."""
        return _pci_hotplug.bus_files(self)

    @property
    def partitions(self) -> list["Device"]:
        """The devices of the mount (vdev.kmd_interface.KmdGpu): this one alone. A
        partitioned GPU is a kmd.gpu.PartitionedGpu."""
        return [self]

    def shutdown(self) -> None:
        """Stop the rings and the interrupt handler, remove the BO files (daemon exit, tests)."""
        self.heartbeat.stop()
        for q in list(self.userqs.by_slot.values()):
            _userq_ioctl.destroy(self, q, "stopped with the device")
        for ring in self.rings.values():
            ring.stop()
        self.irq.stop()
        self.memory.close()

    # -- contexts ------------------------------------------------------------
    def free_ctx(self, f: DrmFile, ctx) -> None:
        f.contexts.pop(ctx.id, None)
        ctx.freed = True
        _ctx.release_stable_pstate(self, ctx)
        _csa.free_csa(self, f, ctx)

    # -- clocks and views ----------------------------------------------------
    def gpu_timestamp(self) -> int:
        """The device clock in nanoseconds since the device came up."""
        return self.device_ns(time.monotonic())

    def timestamp_query(self, f: DrmFile) -> int | None:
        """What AMDGPU_INFO TIMESTAMP answers file `f` now (gpu_timestamp), or None
        when that request must go through ioctl(): `f` closed or its device unplugged,
        `f` not allowed INFO (as the dispatch's permit), or tracing on
        (it records every request). Takes no lock and changes nothing: it lets a
        transport answer the clock read without the dispatch (vdev/ioctl/fast.pyx),
        as amdgpu reads its clock register without sleeping."""
        if not self._answerable_in_c(f, uapi.DRM_IOCTL_AMDGPU_INFO):
            return None
        return self.gpu_timestamp()

    def _answerable_in_c(self, f: DrmFile, request: int) -> bool:
        """Whether a transport may answer `request` of file `f` without the dispatch
        (timestamp_query, wait_cs_done): `f` open on a present device, allowed the
        request as dispatch would allow it (kmd.ioctl.permit), and no tracing (which
        records every request)."""
        if f.closed or f.unplugged or self.trace.on:
            return False
        try:
            permit(IOCTL_TABLE, f, request)
        except KmdError:
            return False
        return True

    def wait_cs_done(self, f: DrmFile, ctx_id: int, ip_type: int, ip_instance: int, ring: int,
                     seq: int) -> bool:
        """True when AMDGPU_WAIT_CS of file `f` for `seq` on that ring and context
        would answer at once, status 0, with nothing to record: the fence signalled
        without an error (or long ago), through the same checks as the dispatch
        (kmd.ioctl.permit, kmd.cs.lookup_fence). False for everything the dispatch
        must answer: `f` closed or its device unplugged, tracing on, an unknown
        context or ring, a sequence number never emitted, a fence still busy or
        failed. Takes no lock and changes nothing (vdev/ioctl/fast.pyx answers the
        request without the dispatch when True, as timestamp_query lets it)."""
        if not self._answerable_in_c(f, uapi.DRM_IOCTL_AMDGPU_WAIT_CS):
            return False
        try:
            fence = lookup_fence(self, f, ctx_id, ip_type, ip_instance, ring, seq)
        except KmdError:
            return False
        return fence is None or (fence.signaled and not fence.error)

    def device_ns(self, t: float) -> int:
        """A time.monotonic() instant on the device clock (gpu_timestamp)."""
        return int((t - self._t0) * 1e9)

    def sysfs_files(self) -> dict:
        """MOUNT/sys/class/drm/card0/device/*: name -> callable returning the text."""
        return _sysfs.files(self)

    def client_files(self) -> dict:
        """MOUNT/proc/<pid>/fdinfo/<client-id>: each DRM file's usage (kmd/fdinfo.py),
        an OwnedText its client's uid may read."""
        return _fdinfo.files(self)

    def debugfs_files(self) -> dict:
        """MOUNT/sys/kernel/debug/dri/<i>/*, amdgpu's files and vgpu's (kmd/debugfs.py):
        name -> callable returning the text (bytes for amdgpu_ring_<name>)."""
        return _debugfs.files(self)

    def tracing_files(self) -> dict:
        """MOUNT/sys/kernel/debug/tracing/*: ftrace's files for the events of kmd/trace.py,
        and vgpu_timeline, the recordings of `vgpu timeline`."""
        return {**self.trace.files(), "vgpu_timeline": Stream(self.open_timeline)}

    def open_timeline(self):
        """A new recording for MOUNT/sys/kernel/debug/tracing/vgpu_timeline (kmd.trace.Reader):
        first a header (the clock, rings, memory and clients now), then every record."""
        with self.lock:
            return self.trace.open_recording(self.timeline_header())

    def timeline_header(self) -> dict:
        """The header of a timeline recording: the clock, rings, memory and clients now."""
        with self.lock:
            return {"type": "header", "ts": time.monotonic(), "clock": "CLOCK_MONOTONIC",
                    "rings": [r.name for r in self.rings.values()],
                    "vram_total": self.memory.vram_allocator.size, "gtt_total": self.memory.gtt_size,
                    "vram_used": self.memory.vram_allocator.used, "gtt_used": self.memory.gtt_used,
                    "clients": [{"client": f.id, "pid": f.pid, "comm": f.comm} for f in self.files.values()]}

    # -- consistency (tests and the fuzzer) ----------------------------------
    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent: allocator invariants, handle counts
        match the handles held, every live BO is reachable, usage adds up."""
        with self.lock:
            self.memory.check()
            held: dict[int, int] = {}
            for f in self.files.values():
                for bo in f.bos.values():
                    held[id(bo)] = held.get(id(bo), 0) + 1
                    assert not bo.freed, "a handle names a freed BO"
            live = list(self.bos_by_offset.values())
            for bo in live:
                if id(bo) in self.zombie_bos:
                    continue
                assert held.get(id(bo), 0) == bo.handle_count, "handle_count mismatch"
                assert bo.handle_count > 0 or bo.export is not None, "a BO without handles or export is still alive"
            live += self.zombie_bos.values()
            live += [bo for f in self.files.values() for _, bo in _csa.kernel_bos(f)]
            # GDS/GWS/OA BOs have no BO file and their own heaps (kmd/onchip.py).
            on_chip = {id(bo): bo for bo in live if bo.on_chip}
            on_chip.update((id(bo), bo) for f in self.files.values() for bo in f.bos.values() if bo.on_chip)
            for domain, heap in self.memory.onchip.heaps.items():
                used = sum(bo.placement.block.size for bo in on_chip.values() if bo.domain == domain)
                assert used == heap.used, f"{heap.name} used {heap.used} != BOs {used}"
            live = [bo for bo in live if not bo.on_chip]
            vram = sum(bo.size for bo in live if bo.vram)
            gtt = sum(bo.size for bo in live if bo.domain == uapi.AMDGPU_GEM_DOMAIN_GTT)
            for domain, lru in self.residency.lru.items():
                want = {id(bo) for bo in live if bo.domain == domain and id(bo) not in self.zombie_bos}
                assert set(lru) == want, (f"the LRU list of domain {domain} is not its live BOs: "
                                          f"{len(set(lru) - want)} listed but not live, "
                                          f"{len(want - set(lru))} live but not listed")
            assert len(live) == self.memory.bo_count, f"{self.memory.bo_count} BO files for {len(live)} BOs"
            assert vram == self.memory.vram_allocator.used, f"VRAM used {self.memory.vram_allocator.used} != BOs {vram}"
            assert gtt == self.memory.gtt_used, f"GTT used {self.memory.gtt_used} != BOs {gtt}"
