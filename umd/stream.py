"""Streams: in-order queues of GPU work, batched into IBs.

A stream belongs to one Device, given when it is made (else the current device),
and owns a context on it (its priority is the stream's). It appends commands to an
open *segment*: one IB on one ring, SDMA packets for sdma0, PM4 for comp_1.0.0, in an
IB buffer of the device's IbPool (umd/memory.py). A command for the other ring opens
a new segment; a full IB (IB_BYTES) closes its segment. Segments are submitted, in
order, at sync points (synchronize, a host copy in either direction, an event query
or synchronize, wait_event) or when an IB fills: each is one CS with a
BO list of the buffers it touches, and a DEPENDENCIES chunk on the stream's
previous submission when that ran on the other ring (same ring, same context: the
scheduler's entity keeps the order already). Kernel arguments live at the top of the
compute IB's buffer, so they live exactly as long as the IB.

Cache actions (docs/cache.md), as a HIP runtime's acquire and release fences do: a
compute IB starts with an ACQUIRE_MEM that invalidates the L2 (the CPU or SDMA may
have written a kernel's inputs since it last ran), and every dispatch is followed by
a RELEASE_MEM that writes the L2 back, so what a kernel stored is in memory before
anything after it in the stream (a copy, an event, the host) can look.

Positions in a stream are *marks* (a count of commands); events and freed memory
blocks remember a mark and wait for it.

This module is the CS path. Where the device offers user queues (and VGPU_USERQ is
not 0), ``Stream(...)`` makes a :class:`umd.userq_stream.UserqStream` instead: the
same contract, with commands written into user queues and no ioctl per command.
"""
from __future__ import annotations

import collections
import contextlib
import errno as E
from dataclasses import dataclass, field

import libvgpu
from vgpu import pm4 as P
from vgpu import uapi

from . import debug
from .debug import DebugFlag
from .device import Device, get_device
from .errors import GPUError, UMDError
from .fault import gpu_error
from .memory import IB_BYTES, IbBuffer
from .trace import traced

MAX_INFLIGHT = 32          # the KMD makes a 65th job per context wait for room; stay well below
DMA, COMPUTE = "sdma0", "comp_1.0.0"
_IP = {DMA: uapi.AMDGPU_HW_IP_DMA, COMPUTE: uapi.AMDGPU_HW_IP_COMPUTE}
KERNARG_ALIGN = 64

#: Stream priorities: CUDA-style numbers (lower is more urgent) or names, mapped
#: to the context priority the KMD schedules by (kmd/sched.py run queues).
PRIORITIES = {"low": uapi.AMDGPU_CTX_PRIORITY_LOW, "normal": uapi.AMDGPU_CTX_PRIORITY_NORMAL,
              "high": uapi.AMDGPU_CTX_PRIORITY_HIGH}
_NUMERIC = {1: "low", 0: "normal", -1: "high"}


def context_priority(priority) -> int:
    """The AMDGPU_CTX_PRIORITY_* for a stream priority (``"high"``/-1, ``"normal"``/0,
    ``"low"``/1)."""
    name = _NUMERIC.get(priority, priority) if isinstance(priority, int) else str(priority).lower()
    if name not in PRIORITIES:
        raise ValueError(f"stream priority {priority!r}: use 'high' (-1), 'normal' (0) or 'low' (1)")
    return PRIORITIES[name]


@dataclass(eq=False)
class Segment:
    """Commands for one ring in one IB, not yet submitted."""
    ring: str
    ib: IbBuffer
    builder: object                  # libvgpu.SdmaIb or Pm4Ib
    deps: list = field(default_factory=list)     # CsFences of other streams (events)
    bos: dict = field(default_factory=dict)      # handle -> Bo for the BO list
    keep: list = field(default_factory=list)     # objects that must live until it retires
    notes: list = field(default_factory=list)    # one line per command (VGPU_DEBUG=cmd)
    programs: list = field(default_factory=list)  # kernels dispatched (fault reports)
    on_retire: list = field(default_factory=list)  # called once the host saw it complete
    kernarg_top: int = IB_BYTES
    mark_end: int = 0

    def room(self) -> int:
        return self.kernarg_top - len(self.builder) * 4


@dataclass(eq=False)
class Submission:
    """A submitted segment: its fence and the mark of its last command."""
    seg: Segment
    fence: libvgpu.CsFence
    mark_end: int


class Stream:
    """An in-order queue of GPU work on ``device`` (the current device if None; see
    the module docstring). The stream keeps its device: every command, wait and
    buffer it uses is that device's.

    ``userq``: None picks the device's path (user queues where offered and
    VGPU_USERQ is not 0, umd/userq_stream.py), False the CS path of this class."""

    #: (the user-queue Stream class, its "enabled for this device" test), set by
    #: umd/userq_stream.py when it is imported (umd/__init__.py imports it), so that
    #: this module, which it builds on, does not import it back.
    user_queue_variant: tuple | None = None

    def __new__(cls, device: Device | None = None, priority="normal", name: str | None = None,
                userq: bool | None = None):
        variant = Stream.user_queue_variant
        if cls is Stream and userq is not False and variant is not None:
            userq_cls, enabled = variant
            if enabled(device if device is not None else get_device()):
                return super().__new__(userq_cls)
        return super().__new__(cls)

    def __init__(self, device: Device | None = None, priority="normal", name: str | None = None,
                 userq: bool | None = None):
        self.device = device if device is not None else get_device()
        self.priority = priority
        self.ctx_priority = context_priority(priority)
        self.name = name or f"stream{id(self):x}"
        self.ctx = libvgpu.cs_ctx_create(self.device.lv, self.ctx_priority)
        self._pending: list[Segment] = []
        self._inflight: collections.deque[Submission] = collections.deque()
        self._next_deps: list = []
        self._last: Submission | None = None      # the latest submission (even retired)
        self.mark = 0             # commands enqueued so far
        self.submitted_mark = 0   # commands submitted
        self.completed_mark = 0   # commands known complete
        self.device.streams.add(self)
        debug.log(DebugFlag.API, f"Stream({self.name}, priority={priority!r}) -> context {self.ctx.id} "
                                 f"priority {self.ctx_priority}")

    # -- enqueueing -----------------------------------------------------------------
    def _segment(self, ring: str, nbytes: int, kernarg_bytes: int = 0) -> Segment:
        """The open segment for ``ring`` with room for ``nbytes`` of packets and
        ``kernarg_bytes`` of kernargs; opens a new one (submitting a full one) if needed."""
        seg = self._pending[-1] if self._pending else None
        need = nbytes + kernarg_bytes + KERNARG_ALIGN
        if seg is not None and seg.ring == ring and not self._next_deps and seg.room() >= need:
            return seg
        if need > IB_BYTES - 64:
            raise UMDError(f"a command of {need} bytes does not fit an IB of {IB_BYTES}")
        if seg is not None and seg.ring == ring and seg.room() < need:
            self.flush()      # the IB is full: submit what is queued
        builder = libvgpu.SdmaIb() if ring == DMA else libvgpu.Pm4Ib().acquire_mem(P.ACQUIRE_INV)
        seg = Segment(ring, self.device.ib_pool.acquire(), builder, deps=self._next_deps)
        self._next_deps = []
        self._pending.append(seg)
        return seg

    def _added(self, seg: Segment, note: str, bos=()) -> int:
        for bo in bos:
            if bo is not None:
                seg.bos[bo.handle] = bo
        seg.notes.append(note)
        self.mark += 1
        seg.mark_end = self.mark
        return self.mark

    def sdma(self, emit, ndwords: int, note: str, bos=(), keep=()) -> int:
        """Append SDMA packets: ``emit(SdmaIb)`` adds at most ``ndwords`` dwords."""
        seg = self._segment(DMA, ndwords * 4)
        emit(seg.builder)
        seg.keep.extend(keep)
        return self._added(seg, note, bos)

    def dispatch(self, loaded, grid, block, kernarg: bytes, note: str, bos=(), program=None,
                 on_retire=None) -> int:
        """Append a dispatch of ``loaded`` (a libvgpu LoadedKernel) with ``kernarg``
        copied to the top of the IB buffer and its VA in user data s[0:1];
        ``on_retire()`` runs when the host sees it done (a kernel's prints)."""
        seg = self._segment(COMPUTE, 256, len(kernarg))
        top = (seg.kernarg_top - len(kernarg)) // KERNARG_ALIGN * KERNARG_ALIGN
        seg.ib.cpu[top:top + len(kernarg)] = kernarg
        seg.kernarg_top = top
        user_data = libvgpu.kernarg_user_data(seg.ib.va + top) if kernarg else []
        libvgpu.emit_dispatch(seg.builder, loaded, grid, block, user_data)
        # The kernel's end-of-kernel release: write the L2 back, nothing else written.
        seg.builder.release_mem(0, 0, P.DATA_SEL_NONE, event=P.EVENT_BOTTOM_OF_PIPE_TS, cache=P.RELEASE_WB)
        seg.programs.append((loaded.code_va, program))
        if on_retire is not None:
            seg.on_retire.append(on_retire)
        return self._added(seg, note, bos)

    def timestamp(self, va: int, bo, note: str) -> int:
        """Append a write of the GPU clock (ns) to ``va``, on the ring of the stream's
        last command: RELEASE_MEM DATA_SEL 3 on compute, TIMESTAMP on SDMA."""
        ring = self._pending[-1].ring if self._pending else (self._last.seg.ring if self._last else DMA)
        seg = self._segment(ring, 32)
        if ring == COMPUTE:
            seg.builder.release_mem(va, 0, P.DATA_SEL_TIMESTAMP)
        else:
            seg.builder.timestamp(va)
        return self._added(seg, note, [bo])

    def wait_fence(self, fence) -> None:
        """Make the stream's next commands wait for ``fence`` (of another stream): a
        CsFence becomes a dependency; a user queue stream's fence is waited for here,
        on the host (the two paths meet only there)."""
        if isinstance(fence, libvgpu.CsFence):
            self._next_deps.append(fence)
        else:
            fence.wait()

    # -- submission -------------------------------------------------------------------
    def flush(self) -> None:
        """Submit every pending segment, in order (each one CS)."""
        while self._pending:
            seg = self._pending.pop(0)
            if len(seg.builder) == 0:
                self.device.ib_pool.release(seg.ib)
                continue
            while len(self._inflight) >= MAX_INFLIGHT:
                self._wait(self._inflight[0])
            self._submit(seg)

    def _submit(self, seg: Segment) -> None:
        lv = self.device.lv
        builder = seg.builder
        data = builder.tobytes()
        seg.ib.cpu[:len(data)] = data
        deps = list(seg.deps)
        if self._last is not None and self._last.seg.ring != seg.ring \
                and self._last.mark_end > self.completed_mark:
            deps.append(self._last.fence)
        bos = list(seg.bos.values()) or [seg.ib.bo]
        req = libvgpu.CsRequest(_IP[seg.ring], [libvgpu.IbInfo(seg.ib.va, len(builder))], dependencies=deps)
        with libvgpu.bo_list_create(lv, bos) as bo_list:
            req.resources = bo_list
            try:
                libvgpu.cs_submit(self.ctx, req)
            except libvgpu.VgpuCanceled as e:
                self._pending.clear()
                self._reset_context()
                raise GPUError(f"stream {self.name}: its context was reset after an earlier GPU error; "
                               f"the queued work was dropped", E.ECANCELED) from e
        sub = Submission(seg, libvgpu.fence_of(self.ctx, req), seg.mark_end)
        self._inflight.append(sub)
        self._last = sub
        self.submitted_mark = seg.mark_end
        debug.log(DebugFlag.SYNC, f"{self.name}: submitted {seg.ring} seq {req.seq_no} "
                                  f"(marks ..{seg.mark_end}, deps {[d.fence for d in deps]})")
        if debug.enabled(DebugFlag.CMD):
            self._dump(seg, req, deps, bos)

    def _dump(self, seg: Segment, req, deps, bos) -> None:
        lines = [f"IB {seg.ring} ctx {self.ctx.id} seq {req.seq_no}: {len(seg.builder)} dwords at "
                 f"{seg.ib.va:#x}, deps {[(d.ip_type, d.fence) for d in deps]}, BO list "
                 f"{[b.handle for b in bos]}"]
        if seg.ring == COMPUTE:
            lines += ["  " + line.strip() for line in P.disasm_pm4(seg.builder.dwords)]
        else:
            lines += ["  " + note for note in seg.notes]
        debug.log(DebugFlag.CMD, "\n".join(lines))

    # -- waiting ----------------------------------------------------------------------
    def _retire_through(self, sub: Submission) -> None:
        hooks = []
        while self._inflight and self._inflight[0].mark_end <= sub.mark_end:
            done = self._inflight.popleft()
            self.device.ib_pool.release(done.seg.ib)
            done.seg.keep.clear()
            hooks += done.seg.on_retire
            done.seg.on_retire = []
        self.completed_mark = max(self.completed_mark, sub.mark_end)
        for hook in hooks:              # after the bookkeeping: a hook that raises leaves it whole
            hook()

    def _wait(self, sub: Submission) -> None:
        debug.log(DebugFlag.SYNC, f"{self.name}: wait {sub.seg.ring} seq {sub.fence.fence}")
        try:
            libvgpu.cs_query_fence_status(sub.fence, libvgpu.AMDGPU_TIMEOUT_INFINITE)
        except libvgpu.VgpuError as e:
            self._fail(sub, e)
        self._retire_through(sub)

    def _fail(self, sub: Submission, err: libvgpu.VgpuError):
        """Raise the GPU error of the stream's first failed submission (a later one
        failed with ECANCELED because a dependency did); the stream gets a fresh context."""
        culprit, cause = sub, err
        for s in list(self._inflight):
            if s is sub:
                break
            try:
                libvgpu.cs_query_fence_status(s.fence, 0)
            except libvgpu.VgpuError as e:
                culprit, cause = s, e
                break
        exc = gpu_error(self, culprit, cause)
        self._pending.clear()
        self._inflight.clear()    # the guilty context's jobs are done or cancelled
        self._reset_context()
        raise exc from cause

    def _reset_context(self) -> None:
        """A guilty context refuses work (ECANCELED): continue on a new one."""
        old, old_id = self.ctx, self.ctx.id
        self.ctx = libvgpu.cs_ctx_create(self.device.lv, self.ctx_priority)
        self._last = None
        self.completed_mark = self.submitted_mark = self.mark
        try:
            old.free()
        except OSError:
            pass
        debug.log(DebugFlag.SYNC, f"{self.name}: context {old_id} was reset; now context {self.ctx.id}")

    def submission_of(self, mark: int) -> Submission | None:
        """The in-flight submission that holds command ``mark`` (flushing it if needed)."""
        if mark <= self.completed_mark:
            return None
        if mark > self.submitted_mark:
            self.flush()
        for sub in self._inflight:
            if sub.mark_end >= mark:
                return sub
        return None

    def fence_of(self, mark: int):
        """A fence another stream can wait for that signals once command ``mark`` is
        done (the CsFence of its submission), or None when it is already done."""
        sub = self.submission_of(mark)
        return sub.fence if sub is not None else None

    def wait_mark(self, mark: int) -> None:
        """Wait until the stream's command ``mark`` is done."""
        sub = self.submission_of(mark)
        if sub is not None:
            self._wait(sub)

    def query_mark(self, mark: int) -> bool:
        """True if command ``mark`` is done (submits it if it was only queued)."""
        sub = self.submission_of(mark)
        if sub is None:
            return True
        try:
            done = libvgpu.cs_query_fence_status(sub.fence, 0)
        except libvgpu.VgpuError as e:
            self._fail(sub, e)
        if done:
            self._retire_through(sub)
        return done

    def wait_queued(self) -> None:
        """Wait for every command queued so far, and for the events the stream was
        told to wait for (a host copy's order)."""
        if self._next_deps:     # wait_event() with no command after it yet: a NOP carries the dependency
            self.sdma(lambda ib: ib.nop(), 1, "NOP (a host copy waits for the events the stream waits for)")
        mark = self.busy_mark()
        if mark is not None:
            self.wait_mark(mark)

    def profiling_stream(self) -> "Stream":
        """The stream a profiled launch of this one runs on (umd/profiler.py): itself."""
        return self

    def busy_mark(self) -> int | None:
        """The mark of the latest command if it may not be done yet, else None."""
        return self.mark if self.mark > self.completed_mark else None

    @traced("sync", lambda self: f"{self.name}.synchronize")
    def synchronize(self) -> None:
        """Submit everything queued and wait for it; raises GPUFault/GPUHang."""
        debug.log(DebugFlag.API, f"{self.name}.synchronize()")
        self.flush()
        if self._inflight:
            self._wait(self._inflight[-1])

    def query(self) -> bool:
        """True when all work queued so far is done."""
        return self.query_mark(self.mark)

    @contextlib.contextmanager
    def auto_synchronize(self):
        """``with stream.auto_synchronize():`` synchronizes the stream when the block
        ends (Numba's), also when it raised."""
        try:
            yield self
        finally:
            self.synchronize()

    def wait_event(self, event) -> None:
        """Make later work on this stream wait for ``event`` (recorded on any stream)."""
        debug.log(DebugFlag.API, f"{self.name}.wait_event({event!r})")
        fence = event.fence()
        if fence is not None:
            self.wait_fence(fence)

    def destroy(self) -> None:
        """Free the stream's context (after synchronize; queued work is dropped)."""
        self._pending.clear()
        self.device.streams.discard(self)
        if self.ctx is not None and self.device.lv.fd >= 0:
            self.ctx.free()

    def __repr__(self) -> str:
        return f"<Stream {self.name} ctx {self.ctx.id} priority {self.priority!r} mark {self.mark}>"


def default_stream(device: Device | None = None) -> Stream:
    """The default stream of ``device`` (default: the current device), as CUDA's
    legacy default stream; made on first use and kept by the device."""
    if device is None:
        device = get_device()
    if device._default_stream is None:
        device._default_stream = Stream(device, name="default")
    return device._default_stream


def current_stream(stream: Stream | None = None) -> Stream:
    """``stream``, or the current device's default stream: what a call without a
    stream (memcpy_*, memset, launch_kernel) runs on. Numba's ``stream=0`` is the
    default stream too."""
    return stream or default_stream()        # None, or Numba's 0


def stream(priority="normal") -> Stream:
    """Numba's cuda.stream(): a new stream on the current device."""
    return Stream(priority=priority)
