"""Streams on user queues: kernel launches, copies, fills and events with no ioctl
(docs/umd.md "User queues", docs/userq.md).

Where the device offers COMPUTE and DMA user queues (DEV_INFO's userq_ip_mask) and
``VGPU_USERQ`` is not ``0``, ``umd.Stream(...)`` is a :class:`UserqStream`. It owns a
COMPUTE queue (PM4) and, once it has SDMA work, a DMA queue (SDMA packets), each
made on first use. A command is written into its queue's ring and committed at once
(a store of wptr, the doorbell, one FUTEX_WAKE): the engine starts it while the host
goes on, and nothing is batched or submitted later.

- A dispatch is SET_SH_REG + DISPATCH_DIRECT (libvgpu.emit_dispatch) with the
  kernarg segment in a kernarg arena (an IB buffer of the device's IbPool, reused
  once the queue passed its last dispatch), then the end-of-kernel RELEASE_MEM (L2
  write-back) that also writes the command's sequence number. An ACQUIRE_MEM
  (invalidate) precedes the first dispatch after the host waited, or after a wait on
  other work (the CPU or SDMA may have written the kernel's inputs), as the CS path
  starts each IB with one.
- Commands are numbered 1, 2, ... per queue. Where another queue must wait for
  command N, the queue gets a *done write* after it: N into the queue's *done word* (a
  u32 in a GTT page of the stream; RELEASE_MEM DATA_SEL 1 on compute, SDMA FENCE on
  DMA). The word moves as packets run, where the queue's rptr moves only at the end
  of the worker's whole run (kmd/userq_worker.py publishes rptr once per run): two
  queues that waited on each other's rptr inside runs that each hold the other's
  awaited work would wait for ever. Done writes are made only where needed (the
  worker FUTEX_WAKEs every word a run's fence packets wrote): before a switch to the
  other queue, with every event record, and for ``fence_of`` of a command that has
  none (that one also covers the queue's later commands: a waiter may wait longer).
- In-stream order across the two queues: a command on one queue after the stream's
  last command went to the other waits for that one's done word (PM4 WAIT_REG_MEM /
  SDMA POLL_REGMEM, function >=), unless the host already sees it passed. Event waits
  (``wait_event``) are the same wait on the recording stream's done word.
- Host waits (synchronize, host copies, Event.synchronize) are UserQueue.wait on the
  queue's rptr: a FUTEX_WAIT, no ioctl. A queue stopped by a fault or a hang raises
  there, and becomes GPUFault / GPUHang (umd/fault.py) from its crash dump
  (VGPU_INFO_USERQ_STATE names devcd<N>); the stream then frees its queues and makes
  new ones on its next command, and sets each done word to the last number issued so
  no waiter (another queue or stream) waits for work that will never run.
- Profiled launches (``umd.profile()``) run through a CS stream of the same device
  and priority (their counters are a CS job's), after the stream's queued work; the
  stream's next command waits for it on the host.

A CS stream's fence given to ``wait_fence`` (the two paths on one device) is waited
for on the host, as a queue fence given to a CS stream is.
"""
from __future__ import annotations

import collections
import ctypes
import errno as E
import os
import weakref

import libvgpu
from libvgpu.userq import UserQueue, userq_supported
from vgpu import pm4 as P
from vgpu import sdma as S
from vgpu import uapi

from . import debug
from .debug import DebugFlag
from .device import Device, get_device
from .errors import GPUError, UMDError
from .fault import dump_path_of, error_from_dump
from .memory import IB_BYTES, GpuBuffer
from .stream import KERNARG_ALIGN, Stream, context_priority
from .trace import traced

ENV = "VGPU_USERQ"
CQ, DQ = 0, 1                      # the stream's queues: compute (PM4), DMA (SDMA)
_IP = (uapi.AMDGPU_HW_IP_COMPUTE, uapi.AMDGPU_HW_IP_DMA)
_NAMES = ("COMPUTE", "DMA")
RING_BYTES = (256 * 1024, 64 * 1024)   # a compute command is ~40 dwords, a copy ~12
WAIT_SLICE_S = 0.1                 # a host wait checks the stream's other queue this often
_UQ_PRIORITY = {uapi.AMDGPU_CTX_PRIORITY_LOW: uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_LOW,
                uapi.AMDGPU_CTX_PRIORITY_NORMAL: uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_LOW,
                uapi.AMDGPU_CTX_PRIORITY_HIGH: uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_HIGH}


_ACQUIRE = libvgpu.Pm4Ib().acquire_mem(P.ACQUIRE_INV).dwords
_USER_DATA_HDR = P.pm4_type3_header(P.PKT3_SET_SH_REG, 3)
_DISPATCH_HDR = P.pm4_type3_header(P.PKT3_DISPATCH_DIRECT, 4)
# The end-of-kernel release (as the CS path's): write the L2 back, write nothing.
_END_OF_KERNEL = libvgpu.Pm4Ib().release_mem(0, 0, P.DATA_SEL_NONE, event=P.EVENT_BOTTOM_OF_PIPE_TS,
                                              cache=P.RELEASE_WB).dwords


def dispatch_packets(loaded, grid, block, kernarg_va: int, prefixes: dict) -> list:
    """The PM4 of one dispatch as umd queues it: what ``libvgpu.emit_dispatch(ib,
    loaded, grid, block, kernarg_user_data(kernarg_va))`` (no user data when
    ``kernarg_va`` is 0) then ``release_mem(0, 0, DATA_SEL_NONE, BOTTOM_OF_PIPE_TS,
    RELEASE_WB)`` append, with the program, resource and block registers taken from
    ``prefixes`` (a cache the caller keeps) after the first."""
    nud = 2 if kernarg_va else 0
    key = (loaded.code_va, loaded.rsrc1, loaded.rsrc2(nud), block)
    prefix = prefixes.get(key)
    if prefix is None:
        ib = libvgpu.Pm4Ib()
        ib.set_program(loaded.code_va, loaded.rsrc1, key[2])
        ib.set_num_threads(*block)
        prefix = prefixes[key] = ib.dwords
    out = prefix[:]
    if nud:
        out += (_USER_DATA_HDR, P.COMPUTE_USER_DATA_0, kernarg_va & 0xFFFFFFFF, kernarg_va >> 32)
    out += (_DISPATCH_HDR, grid[0], grid[1], grid[2], P.DISPATCH_INITIATOR_COMPUTE_SHADER_EN)
    out += _END_OF_KERNEL
    return out


def userq_enabled(device: Device) -> bool:
    """Whether ``device``'s streams run on user queues: ``VGPU_USERQ`` is not ``0``
    (read when the device's first stream is made) and the device offers COMPUTE and
    DMA queues. Decided once per device."""
    on = device.__dict__.get("_userq")
    if on is None:
        on = os.environ.get(ENV, "1").strip() != "0"
        if on:
            try:
                on = all(userq_supported(device.lv, ip) for ip in _IP)
            except (OSError, ValueError):     # a KMD without the query (or a short answer): no queues
                on = False
        device._userq = on
        debug.log(DebugFlag.API, f"{device.mount}: streams run on {'user queues' if on else 'CS'}")
    return on


class QueueFence:
    """Command ``mark`` of a queue stream, waitable in memory: done once the u32 at
    ``va`` (the queue's done word) is >= ``value``. ``wait()`` waits on the host."""

    __slots__ = ("stream", "mark", "va", "value", "_word")

    def __init__(self, stream: "UserqStream", mark: int, va: int, value: int, word) -> None:
        self.stream, self.mark, self.va, self.value, self._word = stream, mark, va, value, word

    def signalled(self) -> bool:
        return self._word.value >= self.value

    def wait(self) -> None:
        self.stream.wait_mark(self.mark)

    def __repr__(self) -> str:
        return f"<QueueFence {self.stream.name} mark {self.mark}: u32 at {self.va:#x} >= {self.value}>"


class _Cmd:
    """One command in flight: its mark, queue, the wptr after it and the other queue's
    wptr then (both passed = it is done), what dies with it."""

    __slots__ = ("mark", "qi", "wptr", "other", "seq", "note", "program", "hook", "keep")

    def __init__(self, mark, qi, wptr, other, seq, note, program, hook, keep) -> None:
        self.mark, self.qi, self.wptr, self.other, self.seq = mark, qi, wptr, other, seq
        self.note, self.program, self.hook, self.keep = note, program, hook, keep


def _free_queues(queues: list, device: Device) -> None:
    """Free the stream's queues (also from its finalizer: a dropped stream must not
    keep two workers in the daemon)."""
    for i, q in enumerate(queues):
        queues[i] = None
        if q is not None and device.lv.fd >= 0:
            try:
                q.free()
            except OSError:
                pass


class UserqStream(Stream):
    """A Stream (umd/stream.py's contract) whose commands go into user queues; see the
    module docstring. Made by ``umd.Stream(...)`` where :func:`userq_enabled`."""

    def __init__(self, device: Device | None = None, priority="normal", name: str | None = None,
                 userq: bool | None = None):
        self.device = device if device is not None else get_device()
        self.priority = priority
        self.ctx_priority = context_priority(priority)
        self.name = name or f"stream{id(self):x}"
        self._queues: list = [None, None]          # libvgpu UserQueue per CQ / DQ
        self._done_page = None         # the done words' GTT page, with the first queue
        self._done_va = self._done = (None, None)
        self._seq = [0, 0]             # the last command number issued per queue
        self._fenced = [0, 0]          # the highest number a done write was queued for
        self._entries: collections.deque[_Cmd] = collections.deque()
        self._hooks: list = []         # on_retire hooks of retired commands, run at sync points
        self._next_deps: list = []     # fences the next command waits for (wait_event)
        self._last_q: int | None = None
        self._acquire = True           # the next dispatch invalidates the L2 first
        self._arena = None             # kernarg arena in use (an IbBuffer), its fill, last wptr
        self._arena_top = self._arena_wptr = 0
        self._busy_arenas: collections.deque = collections.deque()   # (IbBuffer, compute wptr)
        self._twin: Stream | None = None   # the CS stream of profiled launches
        self._twin_busy = False
        self.mark = self.submitted_mark = 0
        self._completed = 0
        self.device.streams.add(self)
        self._finalizer = weakref.finalize(self, _free_queues, self._queues, self.device)
        debug.log(DebugFlag.API, f"Stream({self.name}, priority={priority!r}) -> user queues")

    # -- queues -----------------------------------------------------------------------
    def _queue(self, qi: int) -> UserQueue:
        q = self._queues[qi]
        if q is None:
            if self._done_page is None:
                # Made with the first queue, not the stream: a stream made by a host copy
                # must not put a page of its own between two arrays of the pool.
                page = GpuBuffer(self.device.lv, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT, cpu=True)
                self._done_page, self._done_va = page, (page.address, page.address + 64)
                self._done = (ctypes.c_uint32.from_buffer(page.bo._map, 0),
                              ctypes.c_uint32.from_buffer(page.bo._map, 64))
            prio = _UQ_PRIORITY.get(self.ctx_priority, 0)
            try:
                q = UserQueue(self.device.lv, _IP[qi], RING_BYTES[qi], prio)
            except libvgpu.VgpuError as e:
                if e.errno != E.EACCES:
                    raise UMDError(f"stream {self.name}: cannot make its {_NAMES[qi]} user queue: {e} "
                                   f"(each stream takes up to two of a file's 32 queues; VGPU_USERQ=0 "
                                   f"runs streams on CS)") from e
                # HIGH is the admin's (CAP_SYS_NICE): the queue runs at normal-high instead.
                q = UserQueue(self.device.lv, _IP[qi], RING_BYTES[qi],
                              uapi.AMDGPU_USERQ_CREATE_FLAGS_QUEUE_PRIORITY_NORMAL_HIGH)
            self._queues[qi] = q
            debug.log(DebugFlag.SYNC, f"{self.name}: {_NAMES[qi]} user queue {q.id} (ring {q.size:#x} at "
                                      f"{q.ring_va:#x}, rptr at {q.ptr_va:#x})")
        return q

    @property
    def queues(self) -> tuple:
        """The stream's (COMPUTE, DMA) UserQueues; None for one not made yet."""
        return tuple(self._queues)

    @property
    def ctx(self):
        """The CS context of the stream's profiled launches (made on first use)."""
        return self.profiling_twin().ctx

    def profiling_twin(self) -> Stream:
        """The CS stream (same device and priority) that runs this stream's profiled
        launches."""
        if self._twin is None:
            self._twin = Stream(self.device, self.priority, f"{self.name}.cs", userq=False)
        return self._twin

    def profiling_stream(self) -> Stream:
        """Where a profiled launch goes (umd/profiler.py): the CS twin, once the work
        queued here is done; the next command here waits for the twin."""
        self.wait_queued()
        self._twin_busy = True
        return self.profiling_twin()

    # -- enqueueing -------------------------------------------------------------------
    def _prelude(self, qi: int, ib) -> list:
        """The waits a command on queue ``qi`` needs before it, appended to ``ib``: the
        stream's last command when it went to the other queue, and the events the
        stream was told to wait for. Returns them, as (va, value)."""
        if self._twin_busy:
            self._twin_busy = False
            self._twin.synchronize()
        waits = []
        other = 1 - qi
        if self._last_q == other and self._done[other].value < self._seq[other]:
            oq = self._queues[other]
            if oq.rptr < oq.wptr:         # not known done: wait for its number on the GPU
                self._fence(other)
                waits.append((self._done_va[other], self._seq[other]))
        for f in self._next_deps:
            if isinstance(f, QueueFence) and f.stream.device is self.device:
                if not f.signalled():
                    waits.append((f.va, f.value))
            else:                      # a CS stream's fence, or another file's: on the host
                f.wait() if isinstance(f, QueueFence) else self._host_wait_cs(f)
        self._next_deps = []
        for va, value in waits:
            if qi == CQ:
                ib.wait_reg_mem(va, value, func=P.WAIT_FUNC_GE)
            else:
                ib.poll_regmem(va, value, func=S.SDMA_FUNC_GE)
        if waits and qi == CQ:
            self._acquire = True
        return waits

    @staticmethod
    def _host_wait_cs(fence) -> None:
        try:
            libvgpu.cs_query_fence_status(fence, libvgpu.AMDGPU_TIMEOUT_INFINITE)
        except libvgpu.VgpuError:
            pass                       # the CS stream that owns it reports its error

    def _done_write(self, qi: int, value: int) -> list:
        """The packet that writes ``value`` to queue ``qi``'s done word once the queue's
        earlier packets ran."""
        if qi == CQ:
            return libvgpu.Pm4Ib().release_mem(self._done_va[CQ], value, P.DATA_SEL_32,
                                               event=P.EVENT_BOTTOM_OF_PIPE_TS).dwords
        return libvgpu.SdmaIb().fence(self._done_va[DQ], value).dwords

    def _fence(self, qi: int) -> None:
        """Make sure a done write of queue ``qi``'s last command number is queued."""
        if self._fenced[qi] >= self._seq[qi]:
            return
        q = self._queues[qi]
        try:
            q.write(self._done_write(qi, self._seq[qi]))
            q.commit(wake=None)
        except libvgpu.VgpuError as e:
            self._fail(qi, e)
        self._fenced[qi] = self._seq[qi]

    def _commit(self, qi: int, dwords, note: str, program=None, hook=None, keep=(), waits=()) -> int:
        """Write ``dwords`` (command number ``self._seq[qi] + 1``) into queue ``qi`` and
        commit them; the command's mark."""
        q = self._queues[qi]
        try:
            q.write(dwords)
            wptr = q.commit(wake=None)      # no FUTEX_WAKE while the engine has work in hand
        except libvgpu.VgpuError as e:       # waiting for ring room saw the queue stopped
            self._fail(qi, e)
        self._seq[qi] += 1
        self.mark += 1
        other = self._queues[1 - qi]
        self._entries.append(_Cmd(self.mark, qi, wptr, other.wptr if other is not None else 0,
                                  self._seq[qi], note, program, hook, keep))
        self._last_q = qi
        self.submitted_mark = self.mark
        if debug.FLAGS:             # the hot path formats nothing when no switch is on
            debug.log(DebugFlag.SYNC, f"{self.name}: committed {_NAMES[qi]} queue {q.id} wptr {wptr} "
                                      f"(mark {self.mark}, seq {self._seq[qi]})")
            if debug.enabled(DebugFlag.CMD):
                self._dump(qi, q, wptr, dwords, note, waits)
        if len(self._entries) > 64:
            self._poll()
        return self.mark

    def _dump(self, qi: int, q, wptr: int, dwords, note: str, waits) -> None:
        lines = [f"user queue {q.id} ({_NAMES[qi]}) of stream {self.name}: {len(dwords)} dwords "
                 f"to wptr {wptr}, ring at {q.ring_va:#x}"]
        if qi == CQ:
            lines += ["  " + line.strip() for line in P.disasm_pm4(list(dwords))]
        else:
            lines += [f"  POLL_REGMEM u32 at {va:#x} >= {value}" for va, value in waits]
            lines += ["  " + note]
        debug.log(DebugFlag.CMD, "\n".join(lines))

    def sdma(self, emit, ndwords: int, note: str, bos=(), keep=()) -> int:
        """Append SDMA packets: ``emit(SdmaIb)`` adds at most ``ndwords`` dwords."""
        self._queue(DQ)
        ib = libvgpu.SdmaIb()
        waits = self._prelude(DQ, ib)
        emit(ib)
        return self._commit(DQ, ib.dwords, note, keep=tuple(keep), waits=waits)

    def _kernarg(self, data: bytes) -> int:
        """``data`` copied into the kernarg arena; its VA. An arena is handed back to
        the device's IbPool once the compute queue passed its last dispatch."""
        need = -(-len(data) // KERNARG_ALIGN) * KERNARG_ALIGN
        if need > IB_BYTES:
            raise UMDError(f"a kernarg segment of {len(data)} bytes does not fit an arena of {IB_BYTES}")
        if self._arena is None or self._arena_top + need > IB_BYTES:
            if self._arena is not None:
                self._busy_arenas.append((self._arena, self._arena_wptr))
            q = self._queues[CQ]
            while self._busy_arenas and q.rptr >= self._busy_arenas[0][1]:
                self.device.ib_pool.release(self._busy_arenas.popleft()[0])
            self._arena, self._arena_top = self.device.ib_pool.acquire(), 0
        off = self._arena_top
        self._arena.cpu[off:off + len(data)] = data
        self._arena_top = off + need
        return self._arena.va + off

    def dispatch(self, loaded, grid, block, kernarg: bytes, note: str, bos=(), program=None,
                 on_retire=None) -> int:
        """Append a dispatch of ``loaded`` with ``kernarg`` in the kernarg arena and its
        VA in user data s[0:1]; ``on_retire()`` runs when the host sees it done."""
        self._queue(CQ)
        kernarg_va = self._kernarg(kernarg) if kernarg else 0
        if self._next_deps or self._last_q == DQ or self._twin_busy:
            ib = libvgpu.Pm4Ib()
            self._prelude(CQ, ib)
            dwords = ib.dwords
        else:
            dwords = []
        if self._acquire:
            dwords += _ACQUIRE
            self._acquire = False
        # SET_SH_REG + DISPATCH_DIRECT, then the end-of-kernel release: write the L2
        # back, then the command's number.
        dwords += dispatch_packets(loaded, tuple(grid) + (1,) * (3 - len(grid)), tuple(block), kernarg_va,
                                   self.device.__dict__.setdefault("_dispatch_prefixes", {}))
        mark = self._commit(CQ, dwords, note, (loaded.code_va, program), on_retire)
        self._arena_wptr = self._queues[CQ].wptr
        return mark

    def timestamp(self, va: int, bo, note: str) -> int:
        """Append a write of the GPU clock (ns) to ``va`` on the queue of the stream's
        last command (compute if it has none): RELEASE_MEM DATA_SEL 3, or SDMA TIMESTAMP;
        with a done write, as events are what other streams wait for."""
        qi = self._last_q if self._last_q is not None else (DQ if self._queues[CQ] is None
                                                            and self._queues[DQ] is not None else CQ)
        self._queue(qi)
        if qi == CQ:
            ib = libvgpu.Pm4Ib()
            self._prelude(CQ, ib)
            ib.release_mem(va, 0, P.DATA_SEL_TIMESTAMP)
            waits = ()
        else:
            ib = libvgpu.SdmaIb()
            waits = self._prelude(DQ, ib)
            ib.timestamp(va)
        dwords = ib.dwords + self._done_write(qi, self._seq[qi] + 1)
        mark = self._commit(qi, dwords, note, waits=waits)
        self._fenced[qi] = self._seq[qi]
        return mark

    def wait_fence(self, fence) -> None:
        """Make the stream's next command wait for ``fence`` (a QueueFence: in memory,
        on the GPU; a CS fence: on the host when that command is written)."""
        self._next_deps.append(fence)

    def flush(self) -> None:
        """Nothing to do: every command was committed when it was written."""

    def submission_of(self, mark: int):
        """None: a queue stream has no CS submissions (see :meth:`fence_of`)."""
        return None

    def fence_of(self, mark: int) -> QueueFence | None:
        """A fence another stream's queue waits for in memory: command ``mark``'s
        number on its queue's done word; None once it is done."""
        if mark <= self.completed_mark:
            return None
        e = self._entries[mark - self._entries[0].mark]
        if self._fenced[e.qi] < e.seq:
            self._fence(e.qi)
        return QueueFence(self, mark, self._done_va[e.qi], e.seq, self._done[e.qi])

    # -- retiring and waiting -----------------------------------------------------------
    def _poll(self) -> None:
        """Retire the commands the queues' rptrs passed (in mark order); their hooks
        wait for the next sync point."""
        entries, queues = self._entries, self._queues
        while entries:
            e = entries[0]
            q = queues[e.qi]
            if q.rptr < e.wptr:
                break
            entries.popleft()
            self._retired(e)
        self._completed = entries[0].mark - 1 if entries else self.mark

    def _retired(self, e: _Cmd) -> None:
        e.keep = ()
        if e.hook is not None:
            self._hooks.append(e.hook)

    def _run_hooks(self) -> None:
        hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    @property
    def completed_mark(self) -> int:
        """Commands known complete (the queues' rptrs, read from memory)."""
        if self._entries:
            self._poll()
        return self._completed

    def _wait_rptr(self, qi: int, value: int) -> None:
        """Wait until queue ``qi``'s rptr is >= ``value``; a stopped queue of the
        stream (this one, or the other whose work it may be waiting for) raises."""
        q = self._queues[qi]
        if q is None or q.rptr >= value:
            return
        debug.log(DebugFlag.SYNC, f"{self.name}: wait {_NAMES[qi]} queue {q.id} rptr >= {value}")
        try:
            while not q.wait(value, WAIT_SLICE_S):
                other = self._queues[1 - qi]
                if other is not None:
                    try:
                        other.check()
                    except libvgpu.VgpuError as e:
                        self._fail(1 - qi, e)
        except libvgpu.VgpuError as e:
            self._fail(qi, e)

    def wait_mark(self, mark: int) -> None:
        """Wait until the stream's command ``mark`` is done."""
        if mark > self.completed_mark:
            e = self._entries[mark - self._entries[0].mark]
            self._wait_rptr(1 - e.qi, e.other)
            self._wait_rptr(e.qi, e.wptr)
            while self._entries and self._entries[0].mark <= mark:
                self._retired(self._entries.popleft())
            self._poll()
        self._acquire = True           # the host may write what the next kernel reads
        self._run_hooks()

    def query_mark(self, mark: int) -> bool:
        """True if command ``mark`` is done; a stopped queue raises its GPU error."""
        if mark <= self.completed_mark:
            self._run_hooks()
            return True
        for qi, q in enumerate(self._queues):
            if q is not None:
                try:
                    q.check()
                except libvgpu.VgpuError as e:
                    self._fail(qi, e)
        return False

    def busy_mark(self) -> int | None:
        """The mark of the latest command if it may not be done yet, else None."""
        return self.mark if self.mark > self.completed_mark else None

    def wait_queued(self) -> None:
        """Wait for every command queued so far and for the events the stream was told
        to wait for (a host copy's order)."""
        deps, self._next_deps = self._next_deps, []
        for f in deps:
            f.wait() if isinstance(f, QueueFence) else self._host_wait_cs(f)
        if self._twin_busy:
            self._twin_busy = False
            self._twin.synchronize()
        self.wait_mark(self.mark)

    @traced("sync", lambda self: f"{self.name}.synchronize")
    def synchronize(self) -> None:
        """Wait for everything queued; raises GPUFault/GPUHang."""
        debug.log(DebugFlag.API, f"{self.name}.synchronize()")
        self.wait_queued()

    def query(self) -> bool:
        """True when all work queued so far is done."""
        return self.query_mark(self.mark)

    # -- failure --------------------------------------------------------------------
    def _fail(self, qi: int, err: OSError):
        """Raise the GPU error of stopped queue ``qi`` (its crash dump explains it);
        the stream drops its queued work and makes new queues for the next command."""
        q = self._queues[qi]
        errno, devcd, rptr = err.errno, None, "?"
        try:
            st = q.state()
            errno, rptr = st.error or errno, st.rptr
            devcd = None if st.devcd == uapi.VGPU_USERQ_NO_DEVCD else st.devcd
        except OSError:
            pass
        pending = [e for e in self._entries if e.qi == qi]
        programs = [e.program for e in pending if e.program is not None]
        if errno in (E.EFAULT, E.EINVAL, E.ETIME, E.ETIMEDOUT, E.EIO):
            exc = error_from_dump(self.device, errno, dump_path_of(self.device, devcd), programs,
                                  [e.note for e in pending], qi == CQ, f"{_NAMES[qi]} user queue {q.id} work",
                                  f"stream {self.name}, user queue {q.id} at rptr {rptr}")
        else:
            exc = GPUError(f"stream {self.name}: {_NAMES[qi]} user queue {q.id}: {err}", errno)
        self._reset_queues()
        raise exc from err

    def _reset_queues(self) -> None:
        """Free both queues (a stopped queue runs nothing more; the other may be
        waiting for it) and drop the queued work; mark every number issued done, so
        that no other queue waits for it."""
        ids = [q.id for q in self._queues if q is not None]
        _free_queues(self._queues, self.device)
        if self._done_page is not None:
            for qi in (CQ, DQ):
                self._done[qi].value = self._seq[qi]
        self._fenced = list(self._seq)
        self._entries.clear()
        self._next_deps = []
        if self._arena is not None:
            self._busy_arenas.append((self._arena, 0))
            self._arena = None
        while self._busy_arenas:
            self.device.ib_pool.release(self._busy_arenas.popleft()[0])
        self._completed = self.submitted_mark = self.mark
        self._last_q = None
        self._acquire = True
        debug.log(DebugFlag.SYNC, f"{self.name}: user queues {ids} freed after a GPU error; new ones "
                                  f"are made for the next command")

    def destroy(self) -> None:
        """Free the stream's queues and buffers (after synchronize; queued work is dropped)."""
        self._entries.clear()
        self.device.streams.discard(self)
        self._finalizer.detach()
        if self._twin is not None:
            self._twin.destroy()
        _free_queues(self._queues, self.device)
        if self.device.lv.fd >= 0:
            if self._arena is not None:
                self._busy_arenas.append((self._arena, 0))
                self._arena = None
            while self._busy_arenas:
                self.device.ib_pool.release(self._busy_arenas.popleft()[0])
            self._done = (None, None)
            if self._done_page is not None:
                self._done_page.free()

    def __repr__(self) -> str:
        ids = "/".join(str(q.id) if q is not None else "-" for q in self._queues)
        return f"<Stream {self.name} user queues {ids} priority {self.priority!r} mark {self.mark}>"


Stream.user_queue_variant = (UserqStream, userq_enabled)
