"""Tracepoints and the timeline recording (docs/tracing.md).

Two consumers of the same call sites:

- ftrace's events, as Linux defines them (amdgpu_trace.h, gpu_scheduler_trace.h,
  include/trace/events/dma_fence.h): MOUNT/sys/kernel/debug/tracing/ with
  ``events/**/enable``, ``trace_pipe`` (consuming, blocking) and ``trace`` (a
  snapshot). One line per event in ftrace's default format,
  ``task-pid [cpu] flags timestamp: event: fields``, the fields printed with the
  event's TP_printk format. The buffer is bounded and overwrites its oldest events,
  as ftrace's ring buffer does: a reader that falls behind loses events and is told
  so by a ``CPU:N [LOST M EVENTS]`` line; a writer never waits for a reader.
- recordings (``vgpu timeline``): each open of MOUNT/sys/kernel/debug/tracing/vgpu_timeline
  gets every record from then on (ioctls with their arguments, jobs queued, run,
  done and signalled, BOs created and freed), as JSON lines, in its own bounded buffer.

Tracing costs one flag check when off: each call site reads ``Tracer.on`` and does
nothing else while it is False (no event enabled, or ``tracing_on`` 0, and no
recording open). Timestamps are CLOCK_MONOTONIC (time.monotonic()), the clock the
UMD's own spans use, so both go on one timeline.
"""
from __future__ import annotations

import collections
import ctypes
import errno
import json
import os
import threading
import time
from typing import Callable

from vgpu import uapi

from .errors import KmdError

# The events, by system, with their TP_printk formats (Linux 6.6), Python spelling:
# %p is printed as a hashed pointer (16 hex digits), as Linux prints it.
EVENTS: dict[str, dict[str, str]] = {
    "amdgpu": {
        "amdgpu_bo_create": "bo=%s, pages=%d, type=%d, preferred=%d, allowed=%d, visible=%d",
        "amdgpu_bo_move": "bo=%s, from=%d, to=%d, size=%d",
        "amdgpu_cs_ioctl": "sched_job=%d, timeline=%s, context=%d, seqno=%d, ring_name=%s, num_ibs=%d",
        "amdgpu_sched_run_job": "sched_job=%d, timeline=%s, context=%d, seqno=%d, ring_name=%s, num_ibs=%d",
        "amdgpu_vm_bo_map": "bo=%s, start=%x, last=%x, offset=%010x, flags=%x",
        "amdgpu_vm_bo_unmap": "bo=%s, start=%x, last=%x, offset=%010x, flags=%x",
    },
    "gpu_scheduler": {
        "drm_sched_job": "entity=%s, id=%d, fence=%s, ring=%s, job count:%d, hw job count:%d",
        "drm_run_job": "entity=%s, id=%d, fence=%s, ring=%s, job count:%d, hw job count:%d",
        "drm_sched_process_job": "fence=%s signaled",
    },
    "dma_fence": {
        "dma_fence_emit": "driver=%s timeline=%s context=%d seqno=%d",
        "dma_fence_signaled": "driver=%s timeline=%s context=%d seqno=%d",
    },
    # vgpu's own: Linux has no tracepoint for a mid-job preemption (docs/preemption.md)
    "vgpu": {
        "vgpu_job_preempt": "sched_job=%d, ring_name=%s, seqno=%d, reason=%s, run_us=%d",
        "vgpu_job_resume": "sched_job=%d, ring_name=%s, seqno=%d, preemptions=%d",
        "vgpu_userq_run": "queue=%s, client=%d, queue_id=%d, rptr=%d, dwords=%d",
        "vgpu_userq_done": "queue=%s, client=%d, queue_id=%d, rptr=%d, status=%s, run_us=%d",
    },
}
SYSTEM_OF = {event: system for system, events in EVENTS.items() for event in events}

#: events trace_pipe's buffer holds before it overwrites the oldest
PIPE_CAPACITY = 16384
#: bytes an event counts for in buffer_size_kb: vgpu's buffer holds events, not
#: bytes, so the file shows and takes the capacity at this nominal size per event
#: (16,384 events show as 1024, Linux's order of magnitude)
EVENT_BYTES = 64
#: records one recording holds before it drops the oldest
RECORD_CAPACITY = 1 << 17
#: bytes of an ioctl's extra data kept in its record (a CS's chunks fit)
RECORD_EXTRA_BYTES = 4096

# dma_fence contexts (dma_fence_context_alloc): one per ring for the hardware fences
# (adev->fence_context + ring->idx), one per ring for the scheduler's finished fences,
# whose seqno is the CS sequence number (vgpu numbers CS fences per ring).
HW_FENCE_CONTEXT = 1
SCHED_FENCE_CONTEXT = 1 + 64

# TTM placements (ttm_placement.h, amdgpu_ttm.h), amdgpu_bo_create's `type` field.
TTM_PL_SYSTEM, TTM_PL_TT, TTM_PL_VRAM = 0, 1, 2
TTM_PL = {uapi.AMDGPU_GEM_DOMAIN_CPU: TTM_PL_SYSTEM, uapi.AMDGPU_GEM_DOMAIN_GTT: TTM_PL_TT,
          uapi.AMDGPU_GEM_DOMAIN_VRAM: TTM_PL_VRAM}
# amdgpu_vm.h PTE bits, what amdgpu_gem_va_map_flags makes of AMDGPU_VM_PAGE_*.
AMDGPU_PTE_EXECUTABLE, AMDGPU_PTE_READABLE, AMDGPU_PTE_WRITEABLE = 1 << 4, 1 << 5, 1 << 6
AMDGPU_GPU_PAGE_SHIFT = 12

try:
    _sched_getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
except (OSError, AttributeError):  # not glibc: every event on CPU 0
    def _sched_getcpu() -> int:
        return 0


def ptr(obj) -> str:
    """A %p field: Linux prints hashed 32-bit pointer values as 16 hex digits."""
    return f"{hash(obj) & 0xFFFFFFFF:016x}"


def _job_fence(fence):
    """The fence a syncobj's timeline point (a chain node) stands for."""
    while getattr(fence, "fence", None) is not None:
        fence = fence.fence
    return fence


def _thread_task() -> tuple[str, int]:
    """(comm, pid) of the calling thread, as ftrace names a kernel thread."""
    return threading.current_thread().name[:15], threading.get_native_id()


class TraceBuffer:
    """A bounded FIFO shared by writers in any thread and readers on the loop.
    Full, it drops its oldest entry and counts it (ftrace's overwrite mode): a
    writer never waits. Thread-safe; its lock is a leaf."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self.lost = 0       # dropped since a reader last took entries
        self.written = 0    # entries ever pushed (ftrace's entries-written)

    def push(self, item, stamp: bool = False) -> None:
        """Append `item`; with `stamp`, `item` is a tuple and gets the time now
        (time.monotonic()) prepended under the lock, so entries are in time order."""
        with self._lock:
            if stamp:
                item = (time.monotonic(), *item)
            if len(self._items) >= self.capacity:
                self._items.popleft()
                self.lost += 1
            self._items.append(item)
            self.written += 1
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def take(self, limit: int) -> tuple[int, list]:
        """(events lost before these, up to `limit` oldest entries), removed."""
        with self._lock:
            n = min(limit, len(self._items))
            items = [self._items.popleft() for _ in range(n)]
            lost, self.lost = self.lost, 0
            return lost, items

    def resize(self, capacity: int) -> None:
        """Hold `capacity` entries from now on; a shrink drops the oldest and counts
        them as lost, as ring_buffer_resize() loses what no longer fits."""
        with self._lock:
            self.capacity = capacity
            while len(self._items) > capacity:
                self._items.popleft()
                self.lost += 1

    def peek(self) -> tuple[list, int]:
        """(every entry now, entries ever written), nothing removed (the `trace` file)."""
        with self._lock:
            return list(self._items), self.written

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.lost = 0
            self.written = 0

    def __len__(self) -> int:
        return len(self._items)

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake()` once, at the next push (at once if entries are waiting), in
        the pushing thread: it must only hand work off. Returns the cancel function."""
        with self._lock:
            if not self._items and not self.lost:
                self._wakers.append(wake)
                return lambda: self._unsubscribe(wake)
        wake()
        return lambda: None

    def _unsubscribe(self, wake) -> None:
        with self._lock:
            if wake in self._wakers:
                self._wakers.remove(wake)


class Reader:
    """One open of a streaming file (trace_pipe, timeline): read() takes whole
    entries off a TraceBuffer, formatted by `fmt`, never waiting. What does not fit
    in one read stays for this reader's next read."""

    def __init__(self, buf: TraceBuffer, fmt: Callable[[object], str], lost_line: Callable[[int, object], str],
                 on_close: Callable[[], None] | None = None):
        self.buf, self._fmt, self._lost_line, self._on_close = buf, fmt, lost_line, on_close
        self._left = b""

    def ready(self) -> bool:
        return bool(self._left) or len(self.buf) > 0 or self.buf.lost > 0

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        return self.buf.subscribe(wake)

    def read(self, size: int) -> bytes:
        """Up to `size` bytes of whole lines (a line longer than what is left of
        `size` is continued by the next read); b"" if there is nothing."""
        out = bytearray(self._left[:size])
        self._left = self._left[size:]
        while len(out) < size and not self._left:
            lost, items = self.buf.take(max(1, (size - len(out)) // 96))
            if not items and not lost:
                break
            text = (self._lost_line(lost, items[0] if items else None) if lost else "") + \
                "".join(self._fmt(i) for i in items)
            data = text.encode()
            room = size - len(out)
            out += data[:room]
            self._left = data[room:]
        return bytes(out)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


class Stream:
    """A provider entry for a file whose read() waits for entries (trace_pipe,
    timeline): vdev calls ``open_reader()`` at each open and drives the Reader."""

    def __init__(self, open_reader: Callable[[], Reader]):
        self.open_reader = open_reader


# ---------------------------------------------------------------------------
# ftrace's text
# ---------------------------------------------------------------------------
def format_event(e) -> str:
    """One trace_pipe line: trace_print_context() + the event's TP_printk output."""
    ts, cpu, comm, pid, name, args = e
    secs = int(ts)
    return (f"{comm:>16}-{pid:<7d} [{cpu:03d}] ..... {secs:5d}.{int((ts - secs) * 1e6):06d}: "
            f"{name}: {EVENTS[SYSTEM_OF[name]][name] % args}\n")


def lost_line(lost: int, next_event) -> str:
    """What ftrace prints where a reader missed events (trace_find_next_entry_inc)."""
    return f"CPU:{next_event[1] if next_event else 0} [LOST {lost} EVENTS]\n"


TRACE_HEADER = """# tracer: nop
#
# entries-in-buffer/entries-written: {entries}/{written}   #P:{cpus}
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
"""


def _record_line(r) -> str:
    return json.dumps(r, separators=(",", ":")) + "\n"


def _record_lost(lost: int, _next) -> str:
    return _record_line({"type": "lost", "count": lost, "ts": time.monotonic()})


class Tracer:
    """The device's tracepoints and recordings. ``on`` is the one flag hot paths read."""

    def __init__(self):
        self.on = False
        self.tracing_on = True
        self.enabled = dict.fromkeys(SYSTEM_OF, False)
        self.pipe = TraceBuffer(PIPE_CAPACITY)
        self._recordings: list[TraceBuffer] = []
        self._lock = threading.Lock()
        self._tgids: dict[int, int] = {}   # tid -> its process, for the ioctl records

    def _update(self) -> None:
        self.on = bool(self._recordings) or (self.tracing_on and any(self.enabled.values()))

    # -- emitting ---------------------------------------------------------------
    def event(self, name: str, task: tuple[str, int] | None, *args) -> None:
        """Put event `name` in trace_pipe's buffer if it is enabled; `task` is the
        (comm, pid) it is charged to (None: the calling thread), `args` its fields."""
        if self.enabled[name] and self.tracing_on:
            comm, pid = task or _thread_task()
            self.pipe.push((_sched_getcpu(), comm, pid, name, args), stamp=True)

    def record(self, rec: dict) -> None:
        """Give `rec` (JSON-able, with "type" and "ts") to every open recording."""
        for buf in self._recordings:
            buf.push(rec)

    # -- control (the tracing/ files) ---------------------------------------------
    def set_enabled(self, names, value: bytes) -> None:
        """A write to an enable file: "0" or "1" (EINVAL otherwise) for `names`."""
        text = value.strip()
        if text not in (b"0", b"1"):
            raise KmdError(errno.EINVAL, f"enable takes 0 or 1, not {text[:16]!r}")
        with self._lock:
            for n in names:
                self.enabled[n] = text == b"1"
            self._update()

    def enable_text(self, names) -> str:
        """"0", "1", or "X" when some are on and some off (ftrace's system enable)."""
        states = {self.enabled[n] for n in names}
        return ("X" if len(states) > 1 else "1" if True in states else "0") + "\n"

    def set_tracing_on(self, value: bytes) -> None:
        text = value.strip()
        if not text.isdigit():
            raise KmdError(errno.EINVAL, f"tracing_on takes a number, not {text[:16]!r}")
        with self._lock:
            self.tracing_on = int(text) != 0
            self._update()

    def buffer_size_kb(self) -> str:
        return f"{self.pipe.capacity * EVENT_BYTES // 1024}\n"

    def set_buffer_size_kb(self, value: bytes) -> None:
        """A write to buffer_size_kb: a whole number of KiB, at least 1 (EINVAL
        otherwise), at most 64 times the default (ENOMEM past it: memory is bounded)."""
        text = value.strip()
        if not text.isdigit() or int(text) < 1:
            raise KmdError(errno.EINVAL, f"buffer_size_kb takes a number of KiB >= 1, not {text[:16]!r}")
        capacity = int(text) * 1024 // EVENT_BYTES
        if capacity > 64 * PIPE_CAPACITY:
            raise KmdError(errno.ENOMEM, f"buffer_size_kb {int(text)} is over the limit "
                           f"{64 * PIPE_CAPACITY * EVENT_BYTES // 1024}")
        self.pipe.resize(capacity)

    def open_pipe(self) -> Reader:
        return Reader(self.pipe, format_event, lost_line)

    def trace_text(self) -> str:
        events, written = self.pipe.peek()
        return TRACE_HEADER.format(entries=len(events), written=written, cpus=os.cpu_count() or 1) + \
            "".join(format_event(e) for e in events)

    def open_recording(self, header: dict) -> Reader:
        """A new recording: `header` first, then every record from now until closed."""
        buf = TraceBuffer(RECORD_CAPACITY)
        buf.push(header)
        with self._lock:
            self._tgids.clear()   # threads of before may have gone, their tids reused
            self._recordings = [*self._recordings, buf]  # copied: emitters iterate without the lock
            self._update()

        def close() -> None:
            with self._lock:
                self._recordings = [b for b in self._recordings if b is not buf]
                self._update()

        return Reader(buf, _record_line, _record_lost, close)

    def files(self) -> dict:
        """The provider of MOUNT/sys/kernel/debug/tracing/ (vdev builds the tree)."""
        everything = list(SYSTEM_OF)
        events: dict = {"enable": (lambda: self.enable_text(everything),
                                   lambda data: self.set_enabled(everything, data))}
        for system, names in EVENTS.items():
            sub: dict = {"enable": (lambda n=list(names): self.enable_text(n),
                                    lambda data, n=list(names): self.set_enabled(n, data))}
            for name, fmt in names.items():
                sub[name] = {
                    "enable": (lambda n=name: self.enable_text([n]), lambda data, n=name: self.set_enabled([n], data)),
                    "format": lambda n=name, f=fmt: f"name: {n}\nprint fmt: \"{f}\"\n",
                }
            events[system] = sub
        return {
            "trace_pipe": Stream(self.open_pipe),
            "trace": (self.trace_text, lambda data: self.pipe.clear()),
            "tracing_on": (lambda: f"{int(self.tracing_on)}\n", self.set_tracing_on),
            "buffer_size_kb": (self.buffer_size_kb, self.set_buffer_size_kb),
            # one buffer: Linux sums its per-CPU buffers here
            "buffer_total_size_kb": self.buffer_size_kb,
            "trace_clock": lambda: "local global counter uptime perf [mono] mono_raw boot\n",
            "available_events": lambda: "".join(f"{SYSTEM_OF[n]}:{n}\n" for n in everything),
            "events": events,
        }

    # -- the call sites (each called only when `on`) -------------------------------
    def ioctl(self, f, request: int, name: str, arg: bytes, extra: bytes, t0: float, out=None,
              error: int = 0, fences=(), tid: int = 0, tag: int | None = None) -> None:
        """An ioctl of client `f` began at `t0` and ended now with reply `out` (a
        kmd.ioctl.Reply) or `error`; `fences` are those a wait waited for. `tid`: the
        calling thread (the FUSE request's pid; 0 unknown), `tag`: a frame request's
        tag (the write's offset), None for an ioctl. `extra` is what the request's
        pointers pointed to (CS chunks, handle arrays...), as the KMD read it.

        The record's `pid`/`comm` are the file's (its opener's); `tid`, and `tgid`
        (the caller's process, from /proc) when the thread is known, are the caller's:
        what `vgpu trace` matches strace's lines with (vgpu_tools/trace.py)."""
        if not self._recordings:
            return
        rec = {"type": "ioctl", "ts": t0, "end": time.monotonic(), "pid": f.pid, "comm": f.comm,
               "client": f.id, "node": f.node, "tid": tid, "name": name, "request": request, "arg": arg.hex(),
               "extra": extra[:RECORD_EXTRA_BYTES].hex(), "extra_size": len(extra), "error": error}
        if tid:
            rec["tgid"] = self._tgid(tid, f.pid)
        if tag is not None:
            rec["tag"] = tag
        if out is not None:
            rec["reply_arg"] = out.arg.hex()
            rec["reply_extra"] = out.extra[:RECORD_EXTRA_BYTES].hex()
        if fences:
            rec["fences"] = [[fc.ring_name, fc.seq, fc.signaled_at] for fc in map(_job_fence, fences)
                             if fc is not None and fc.signaled_at is not None]
        self.record(rec)

    def _tgid(self, tid: int, default: int) -> int:
        """The process of thread `tid` (/proc/<tid>/status), remembered while recording:
        a thread's process does not change (a tid reused by another process after
        wrapping around pid_max is not worth a read per ioctl)."""
        tgid = self._tgids.get(tid)
        if tgid is None:
            tgid = default
            try:
                with open(f"/proc/{tid}/status") as st:
                    for line in st:
                        if line.startswith("Tgid:"):
                            tgid = int(line.split()[1])
                            break
            except (OSError, ValueError):
                pass
            if len(self._tgids) >= 4096:
                self._tgids.clear()
            self._tgids[tid] = tgid
        return tgid

    def bo_create(self, f, bo, memory) -> None:
        """amdgpu_bo_create (amdgpu_object.c) for GEM_CREATE by `f`."""
        allowed = bo.preferred_domains
        if allowed == uapi.AMDGPU_GEM_DOMAIN_VRAM and not bo.flags & getattr(uapi, "AMDGPU_GEM_CREATE_DISCARDABLE", 0):
            allowed |= uapi.AMDGPU_GEM_DOMAIN_GTT  # amdgpu_bo_create: VRAM BOs may be evicted to GTT
        mem_type = TTM_PL_VRAM if bo.domain == uapi.AMDGPU_GEM_DOMAIN_VRAM else TTM_PL_TT
        self.event("amdgpu_bo_create", (f.comm, f.pid), ptr(id(bo)), (bo.size + 4095) >> 12, mem_type,
                   bo.preferred_domains, allowed, bo.flags)
        self.memory_changed(memory, f.pid)

    def bo_move(self, f, bo, old_domain: int) -> None:
        """amdgpu_bo_move (amdgpu_ttm.c): `bo` was evicted or moved back (kmd/residency.py),
        charged to the client `f` whose GEM_CREATE or CS caused it."""
        self.event("amdgpu_bo_move", (f.comm, f.pid) if f is not None else None, ptr(id(bo)),
                   TTM_PL[old_domain], TTM_PL[bo.domain], bo.size)

    def memory_changed(self, memory, pid: int = 0) -> None:
        self.record({"type": "memory", "ts": time.monotonic(), "pid": pid,
                     "vram_used": memory.vram_allocator.used, "gtt_used": memory.gtt_used})

    def vm_mapping(self, f, m, mapped: bool) -> None:
        """amdgpu_vm_bo_map / amdgpu_vm_bo_unmap for mapping `m` of client `f`."""
        pte = ((AMDGPU_PTE_READABLE if m.flags & uapi.AMDGPU_VM_PAGE_READABLE else 0)
               | (AMDGPU_PTE_WRITEABLE if m.flags & uapi.AMDGPU_VM_PAGE_WRITEABLE else 0)
               | (AMDGPU_PTE_EXECUTABLE if m.flags & uapi.AMDGPU_VM_PAGE_EXECUTABLE else 0))
        task = (f.comm, f.pid) if f is not None else None
        self.event("amdgpu_vm_bo_map" if mapped else "amdgpu_vm_bo_unmap", task, ptr(id(m.bo)),
                   m.va >> AMDGPU_GPU_PAGE_SHIFT, (m.end >> AMDGPU_GPU_PAGE_SHIFT) - 1, m.offset, pte)

    def _job_fields(self, ring, job) -> tuple:
        return (job.id, ring.name, SCHED_FENCE_CONTEXT + ring.ring_id, job.fence.seq, ring.name, len(job.ibs))

    def job_queued(self, ring, job, entity_jobs: int) -> None:
        """amdgpu_cs_ioctl and drm_sched_job (drm_sched_entity_push_job): `job` got its
        fence on `ring`; `entity_jobs` are queued on its entity now."""
        task = (job.file.comm, job.file.pid)
        entity = ptr(("entity", job.file.id, job.ctx.id, ring.ring_id))
        self.event("amdgpu_cs_ioctl", task, *self._job_fields(ring, job))
        self.event("drm_sched_job", task, entity, job.id, ptr(id(job.fence)), ring.name, entity_jobs,
                   len(ring.hw_pending))
        if self._recordings:
            self.record({"type": "job_queued", "ts": time.monotonic(), "job": job.id, "ring": ring.name,
                         "seq": job.fence.seq, "pid": job.file.pid, "comm": job.file.comm,
                         "client": job.file.id, "ctx": job.ctx.id,
                         "ibs": [[va, dw] for va, dw in job.ibs], "bos": len(job.bos)})

    def job_run(self, ring, job, entity_jobs: int, resumed: bool = False) -> None:
        """drm_run_job, amdgpu_sched_run_job, dma_fence_emit of its hardware fence; for
        a preempted job that resumes, vgpu_job_resume and the new hardware fence."""
        if resumed:
            self.event("vgpu_job_resume", None, job.id, ring.name, job.fence.seq, job.preemptions)
        else:
            entity = ptr(("entity", job.file.id, job.ctx.id, ring.ring_id))
            self.event("drm_run_job", None, entity, job.id, ptr(id(job.fence)), ring.name, entity_jobs,
                       len(ring.hw_pending))
            self.event("amdgpu_sched_run_job", None, *self._job_fields(ring, job))
        self.event("dma_fence_emit", None, "amdgpu", ring.name, HW_FENCE_CONTEXT + ring.ring_id, job.hw_seq)
        if self._recordings:
            self.record({"type": "job_resumed" if resumed else "job_run", "ts": time.monotonic(), "job": job.id,
                         "ring": ring.name, "hw_seq": job.hw_seq})

    def userq_run(self, q, dwords: int) -> None:
        """vgpu_userq_run: user queue `q`'s worker hands `dwords` new dwords (from its
        rptr) to its engine (kmd/userq_worker.py)."""
        self.event("vgpu_userq_run", (q.file.comm, q.file.pid), q.name, q.file.id, q.id, q.rptr, dwords)

    def userq_done(self, q, dwords: int, rptr: int, status: str, start: float, end: float) -> None:
        """vgpu_userq_done: the run ended (`status` ok, preempted, fault, illegal,
        aborted), `rptr` the read pointer after it (past it when ok); recordings get a "userq_run" span
        that `vgpu timeline` draws on the queue's own lane."""
        self.event("vgpu_userq_done", (q.file.comm, q.file.pid), q.name, q.file.id, q.id, rptr, status,
                   int((end - start) * 1e6))
        if self._recordings:
            self.record({"type": "userq_run", "ts": start, "end": end, "queue": q.name, "queue_id": q.id,
                         "client": q.file.id, "pid": q.file.pid, "comm": q.file.comm, "dwords": dwords,
                         "status": status})

    def job_preempted(self, ring, job, reason: str) -> None:
        """vgpu_job_preempt: the engine stopped `job` mid-job (`reason`: priority,
        timeslice, heartbeat or ib boundary); it resumes later."""
        self.event("vgpu_job_preempt", None, job.id, ring.name, job.fence.seq, reason, int(job.run_time * 1e6))
        if self._recordings:
            self.record({"type": "job_preempted", "ts": time.monotonic(), "job": job.id, "ring": ring.name,
                         "reason": reason})

    def job_done(self, ring, job) -> None:
        """The ring finished `job` (its end-of-job packets), with what the engines
        counted for it (`job.counters`, when they count)."""
        if self._recordings:
            counters = getattr(job, "counters", None)
            rec = {"type": "job_done", "ts": time.monotonic(), "job": job.id, "ring": ring.name,
                   "error": job.error, "status": getattr(job.result, "status", None) or ("skipped" if job.error else "ok")}
            if counters:
                rec["counters"] = counters
            self.record(rec)

    def job_signaled(self, ring, job) -> None:
        """The hardware fence signals, drm_sched_job_done runs, the finished fence signals."""
        self.event("dma_fence_signaled", None, "amdgpu", ring.name, HW_FENCE_CONTEXT + ring.ring_id, job.hw_seq)
        self.event("drm_sched_process_job", None, ptr(id(job.fence)))
        self.event("dma_fence_signaled", None, "drm_sched", ring.name, SCHED_FENCE_CONTEXT + ring.ring_id,
                   job.fence.seq)
        if self._recordings:
            self.record({"type": "job_signaled", "ts": time.monotonic(), "job": job.id, "ring": ring.name,
                         "seq": job.fence.seq, "error": job.error})


#: A tracer that is never switched on: the default of objects made without a device.
DISABLED = Tracer()
