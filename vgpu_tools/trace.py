"""``vgpu trace``: strace, with each DRM ioctl's arguments and result as the daemon saw them.

Every DRM request is a real ``ioctl(fd, DRM_IOCTL_..., &arg)`` on MOUNT/dev/dri/card*
or renderD* (docs/design.md section 3), so plain ``strace -e trace=ioctl`` names each
one, but cannot read amdgpu's structs. The daemon can: while a recording is open
(MOUNT/sys/kernel/debug/tracing/vgpu_timeline, root's, as debugfs is; kmd/trace.py), it
records every request with the caller's thread id, the struct, the data its pointers
pointed to (CS chunks, BO list entries, syncobj handles...), the reply and the errno.
``vgpu trace`` runs strace (``-- CMD``, or attached with ``-p PID``) and that recording
together, and prints each DRM ioctl strace shows with the daemon's decoding under it::

    4242 14:02:11.402211 ioctl(3, DRM_IOCTL_AMDGPU_CS, 0x7ffc7ad8a620) = 0 <0.000310>
        renderD128: AMDGPU_CS {ctx=1, bo_list=1, chunks=[IB{va=0x100020000, size=28 bytes, ip=DMA ring=0}]} = 0 {seq=1}

A line and a record are the same request when they are of the same thread (strace's
pid column is the thread id; the FUSE request's pid, which the daemon records, is
too), of the same request number, and the record's time lies within the call's
(strace's -ttt start and -T duration; the daemon's CLOCK_MONOTONIC, converted to the
wall clock). No memory dumps and no -y are needed: the daemon says which node it was.
The opens, closes and mmaps of vgpu's files are shown as strace printed them, and
requests of the legacy frame transport (a pwrite64 of a request frame) are matched by
their tag. Without the recording (not root, no mount) the DRM ioctls are shown alone.

``vgpu trace --decode LOG`` decodes a log again: with the records a run kept beside
it (``--log LOG`` writes LOG.vgpu) as the run showed it; an old log of the frame
transport (``strace -f -xx -s 65536``) from the frames' bytes, as before (:class:`Decoder`).
Reading strace's text is :mod:`vgpu_tools.trace_strace`, the structs :mod:`vgpu_tools.trace_ioctls`.
"""
from __future__ import annotations

import argparse
import collections
import errno
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable

from vgpu import uapi
from vgpu_tools.trace_ioctls import (DecodedRequest, decode_record, decode_reply,  # noqa: F401  (re-exported)
                                     decode_request)
from vgpu_tools.trace_strace import LogParser, ProcessTable, Syscall, parse_log, parse_string

#: What `vgpu trace` asks strace for: the ioctls, the fd life cycle (open/dup/fork, so
#: that vgpu's files are known by name), BO mappings, and the legacy frame transport's
#: writes. fcntl catches F_DUPFD_CLOEXEC (Python's mmap dups the fd).
STRACE_SYSCALLS = ("ioctl,openat,open,creat,close,dup,dup2,dup3,fcntl,mmap,munmap,msync,"
                   "write,pwrite64,pread64,clone,clone3,fork,vfork")
#: seconds of slack when a record's time is held against a strace call's: -ttt/-T
#: print microseconds, and the wall clock <-> CLOCK_MONOTONIC offset is measured
EPS = 0.002
#: seconds a live trace (-p) waits for a line's record before showing the line alone
HOLD = 0.5
#: the recording's file under a mount (kmd/trace.py, docs/tracing.md)
RECORDING = "sys/kernel/debug/tracing/vgpu_timeline"
#: `vgpu`'s default mount (vgpu_tools/cli.py passes its own DEFAULT_MOUNT to add_parser)
DEFAULT_MOUNT = "/tmp/vgpu"

_CONTROL = re.compile(r"(?:^|/)dev/dri/((?:card|renderD)\d+)$")
_BO_FILE = re.compile(r"(?:^|/)((?:bo|prime)/[0-9a-f]+)$")
# Reads that do not consume the reply: the client asks again (libvgpu retries them).
_RETRY_ERRNOS = {"EINTR", "EAGAIN", "EWOULDBLOCK", "ERESTARTSYS", "ERESTARTNOINTR",
                 "ERESTARTNOHAND", "ERESTART_RESTARTBLOCK"}

# ---------------------------------------------------------------------------
# The log decoder (no records): strace calls in, lines out. It decodes the legacy
# frame transport from the frames' bytes in old logs (strace -xx -s 65536), names
# the ioctls of new ones, and keeps the fd tables the record matcher uses too.
# ---------------------------------------------------------------------------
@dataclass
class Event:
    """One output line: the log position of its first call, its pid, its text."""
    index: int
    pid: int | None
    text: str


@dataclass
class _Pending:
    index: int
    node: str
    request: DecodedRequest


def _failure(call: Syscall) -> str:
    if call.errno is None:
        return f"= {call.ret}"
    return f"= {call.ret} {call.errno}" + (f" ({call.errmsg})" if call.errmsg else "")


class Decoder:
    """Feed it :class:`Syscall` s in log order; read :attr:`events`."""

    def __init__(self) -> None:
        self.procs = ProcessTable()
        self.pending: dict[tuple[int | None, int], _Pending] = {}
        self.events: list[Event] = []

    def _emit(self, call: Syscall, text: str, index: int | None = None) -> None:
        self.events.append(Event(call.index if index is None else index, call.pid, text))

    def _classify(self, path: str | None) -> str | None:
        return _classify(path)

    def feed(self, call: Syscall) -> None:
        handler = getattr(self, f"_on_{call.name}", None)
        if handler is not None:
            handler(call)

    def finish(self) -> list[Event]:
        """Requests still without a reply become lines too; events in log order."""
        for (pid, _fd), p in self.pending.items():
            self.events.append(Event(p.index, pid, f"{p.node}: {p.request.text} = ? <no reply read>"))
        self.pending.clear()
        self.events.sort(key=lambda e: e.index)
        return self.events

    # -- fd life cycle ------------------------------------------------------
    def _open(self, call: Syscall, path_arg: str) -> None:
        path, _ = parse_string(path_arg)
        opened = path.decode("utf-8", "replace")
        # A BO path is a symlink to shared memory: strace -y shows where it leads,
        # but the name the program opened is the one that says which BO it is.
        path_s = opened if self._classify(opened) else (call.ret_path or opened)
        if call.ret_path and path_s == opened and call.ret_path != opened:
            self.procs.aliases[call.ret_path] = opened
        kind = self._classify(path_s)
        fd = call.ret_int()
        if not call.failed and fd is not None and fd >= 0:
            self.procs.get(call.pid).fds[fd] = path_s
        if kind is None:
            return
        if call.failed:
            self._emit(call, f"open {kind} {_failure(call)}")
        else:
            self._emit(call, f"open {kind} -> fd {fd}")

    def _on_openat(self, call: Syscall) -> None:
        if len(call.args) >= 2:
            self._open(call, call.args[1])

    def _on_open(self, call: Syscall) -> None:
        if call.args:
            self._open(call, call.args[0])

    _on_creat = _on_open

    def _on_close(self, call: Syscall) -> None:
        if not call.args:
            return
        fd, path = self.procs.path(call.pid, call.args[0])
        if fd is None:
            return
        kind = self._classify(path)
        if not call.failed:
            self.procs.get(call.pid).fds.pop(fd, None)
            stale = self.pending.pop((call.pid, fd), None)
            if stale is not None:
                self._emit(call, f"{stale.node}: {stale.request.text} = ? <no reply read>",
                           stale.index)
        if kind is not None:
            self._emit(call, f"close {kind} fd {fd}" + (f" {_failure(call)}" if call.failed else ""))

    def _dup_to(self, call: Syscall, src_arg: str, new_fd: int | None) -> None:
        _, path = self.procs.path(call.pid, src_arg)
        if call.ret_path is not None and path is None:
            path = call.ret_path
        if call.failed or new_fd is None or path is None:
            return
        self.procs.get(call.pid).fds[new_fd] = path

    def _on_dup(self, call: Syscall) -> None:
        if call.args:
            self._dup_to(call, call.args[0], call.ret_int())

    def _on_dup2(self, call: Syscall) -> None:
        if len(call.args) >= 2:
            self._dup_to(call, call.args[0], call.ret_int())

    _on_dup3 = _on_dup2

    def _on_fcntl(self, call: Syscall) -> None:
        if len(call.args) >= 2 and call.args[1].startswith("F_DUPFD"):
            self._dup_to(call, call.args[0], call.ret_int())

    def _on_clone(self, call: Syscall) -> None:
        child = call.ret_int()
        if not call.failed and child and child > 0:
            self.procs.forked(call.pid, child, ",".join(call.args))

    _on_clone3 = _on_fork = _on_vfork = _on_clone

    # -- the frames ---------------------------------------------------------
    def _control(self, call: Syscall) -> tuple[int, str] | None:
        if not call.args:
            return None
        fd, path = self.procs.path(call.pid, call.args[0])
        kind = self._classify(path)
        return (fd, kind) if fd is not None and kind and kind.startswith(("card", "renderD")) else None

    def _on_write(self, call: Syscall) -> None:
        ctl = self._control(call)
        if ctl is None or len(call.args) < 2:
            return
        fd, node = ctl
        data, truncated = parse_string(call.args[1])
        req = decode_request(data, truncated)
        stale = self.pending.pop((call.pid, fd), None)
        if stale is not None:  # a new request replaces an unread reply
            self._emit(call, f"{stale.node}: {stale.request.text} = ? <reply not read>",
                       stale.index)
        if call.failed:
            self._emit(call, f"{node}: {req.text} {_failure(call)}")
        else:
            self.pending[(call.pid, fd)] = _Pending(call.index, node, req)

    _on_pwrite64 = _on_write

    def _on_read(self, call: Syscall) -> None:
        ctl = self._control(call)
        if ctl is None:
            return
        fd, node = ctl
        if call.failed and call.errno in _RETRY_ERRNOS:
            return  # the reply stays queued for the next read
        p = self.pending.pop((call.pid, fd), None)
        if p is None:
            self._emit(call, f"{node}: read with no request pending {_failure(call)}"
                       if call.failed else f"{node}: read of {call.ret} bytes with no request pending")
            return
        if call.failed:
            self._emit(call, f"{node}: {p.request.text} {_failure(call)} (in read)", p.index)
            return
        data, _ = parse_string(call.args[1]) if len(call.args) >= 2 else (b"", False)
        self._emit(call, f"{node}: {p.request.text} {decode_reply(p.request, data)}", p.index)

    _on_pread64 = _on_read

    # -- real ioctls (a log with no records: names and results only) ---------
    def _drm_ioctl(self, call: Syscall):
        """(request, fd, node kind) of a DRM ioctl on a vgpu node (or an fd whose
        path the log does not show); None for anything else."""
        if len(call.args) < 2:
            return None
        req = strace_request(call.args[1])
        if req is None:
            return None
        fd, path = self.procs.path(call.pid, call.args[0])
        kind = self._classify(path)
        if path is not None and kind is None:
            return None   # a DRM node that is not vgpu's (a real GPU's)
        return req, fd, kind

    def _on_ioctl(self, call: Syscall) -> None:
        found = self._drm_ioctl(call)
        if found is None:
            return
        req, fd, kind = found
        node = kind or f"fd {fd}"
        result = _failure(call) if call.failed else f"= {call.ret}"
        self._emit(call, f"{node}: {request_label(req)} {result} <arguments not in the log>")

    # -- BO mappings --------------------------------------------------------
    def _on_mmap(self, call: Syscall) -> None:
        if len(call.args) < 6:
            return
        fd, path = self.procs.path(call.pid, call.args[4])
        kind = self._classify(path)
        if fd is None or kind is None or kind.startswith(("card", "renderD")):
            return
        size = _int(call.args[1])
        offset = _int(call.args[5])
        extra = "" if call.args[3] == "MAP_SHARED" else f" {call.args[3]}"
        where = f"mmap {kind} size={size}" + (f" offset={offset:#x}" if offset else "") + extra
        if call.failed:
            self._emit(call, f"{where} {_failure(call)}")
            return
        self.procs.get(call.pid).maps[_int(call.ret)] = (size, kind)
        self._emit(call, f"{where} -> {call.ret}")

    def _mapping(self, call: Syscall) -> tuple[int, int, str] | None:
        if len(call.args) < 2:
            return None
        addr, length = _int(call.args[0]), _int(call.args[1])
        for start, (size, kind) in self.procs.get(call.pid).maps.items():
            if start <= addr < start + size:
                return start, length, kind
        return None

    def _on_msync(self, call: Syscall) -> None:
        found = self._mapping(call)
        if found is not None:
            flags = f" {call.args[2]}" if len(call.args) > 2 and call.args[2] != "MS_SYNC" else ""
            self._emit(call, f"msync {call.args[0]} {found[1]} ({found[2]}){flags}"
                       + (f" {_failure(call)}" if call.failed else ""))

    def _on_munmap(self, call: Syscall) -> None:
        found = self._mapping(call)
        if found is not None:
            if not call.failed and _int(call.args[0]) == found[0]:
                self.procs.get(call.pid).maps.pop(found[0], None)
            self._emit(call, f"munmap {call.args[0]} {found[1]} ({found[2]})"
                       + (f" {_failure(call)}" if call.failed else ""))




def _int(text: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return -1


def _classify(path: str | None) -> str | None:
    """``renderD128``/``card0`` for control files, ``bo/<hex>`` for BO files, else None."""
    if not path:
        return None
    m = _CONTROL.search(path) or _BO_FILE.search(path)
    return m.group(1) if m else None


def decode_lines(lines: Iterable[str]) -> list[str]:
    """Decode a strace log without records (frames from their bytes; ioctls by name
    only) into output lines, pid-prefixed if several pids speak."""
    decoder = Decoder()
    for call in parse_log(lines):
        decoder.feed(call)
    events = decoder.finish()
    pids = {e.pid for e in events}
    if len(pids) > 1:
        return [f"[pid {e.pid}] {e.text}" for e in events]
    return [e.text for e in events]


# ---------------------------------------------------------------------------
# strace's ioctl requests
# ---------------------------------------------------------------------------
_DRM_NAME = re.compile(r"\bDRM_IOCTL_(\w+)")
_NUM = r"(0x[0-9a-fA-F]+|\d+)"
_IOC = re.compile(rf"^_IOC\([^,]*,\s*{_NUM},\s*{_NUM}")
_DRM_IO = re.compile(rf"^DRM_IO(?:R|W|WR)?\(\s*{_NUM}")


def strace_request(text: str) -> tuple[set[int], set[str]] | None:
    """The DRM request strace printed as an ioctl's second argument: (its numbers,
    its names without DRM_IOCTL_), or None for a request that is not DRM's. strace
    names a number several drivers share ``A or B or C`` (all the same number);
    one it has no name for is ``_IOC(dir, 0x64, nr, size)`` (or, decoded by its
    DRM code, ``DRM_IOWR(nr, size)``), and ``-X raw`` prints the number itself."""
    text = text.strip()
    m = _DRM_IO.match(text)
    if m:
        return {int(m.group(1), 0)}, set()
    m = _IOC.match(text)
    if m:
        return ({int(m.group(2), 0)}, set()) if int(m.group(1), 0) == uapi.DRM_IOCTL_BASE else None
    if re.fullmatch(_NUM, text):
        value = int(text, 0)
        return ({uapi._IOC_NR(value)}, set()) if uapi._IOC_TYPE(value) == uapi.DRM_IOCTL_BASE else None
    names = set(_DRM_NAME.findall(text))
    if not names:
        return None
    nrs = {uapi._IOC_NR(v) for v in (getattr(uapi, f"DRM_IOCTL_{n}", None) for n in names)
           if isinstance(v, int) and uapi._IOC_TYPE(v) == uapi.DRM_IOCTL_BASE}
    return nrs, names


def request_label(req: tuple[set[int], set[str]]) -> str:
    """The uapi's name of a strace request (``AMDGPU_CS``), else strace's, else ``""``."""
    nrs, names = req
    for nr in sorted(nrs):
        known = uapi.IOCTLS.get(nr)
        if known is not None:
            return known.name
    return sorted(names)[0] if names else (f"nr {min(nrs):#x}" if nrs else "")


def _matches(rec: dict, req: tuple[set[int], set[str]]) -> bool:
    nrs, names = req
    return uapi._IOC_NR(rec["request"]) in nrs or rec.get("name") in names


def clock_text(t: float) -> str:
    """-tt's time of day with microseconds, of -ttt's seconds since the epoch."""
    us = round(t * 1e6)
    secs, us = divmod(us, 1_000_000)
    return time.strftime("%H:%M:%S", time.localtime(secs)) + f".{us:06d}"


# ---------------------------------------------------------------------------
# The engine: strace's calls and the daemon's records in, lines out
# ---------------------------------------------------------------------------
@dataclass(eq=False)
class _Item:
    """One entry of the output, in strace's order: a line strace printed, and, for
    a request, the record it is waiting for (`kind` "ioctl" or "frame")."""
    call: Syscall
    kind: str = "plain"
    req: tuple | None = None
    tag: int | None = None
    seen: float = 0.0
    rec: dict | None = None
    control: bool = False   # a frame's fd is known to be a control file


class IoctlTrace(Decoder):
    """strace's calls (:meth:`add_call`, in log order) and the daemon's ioctl records
    (:meth:`add_record`, in any order) in; :meth:`lines` gives the output so far.

    The fd bookkeeping (opens, dups, forks, mappings) is the frame Decoder's; where
    that shows a vgpu file's open, close or mapping, this shows strace's own line."""

    #: records kept per thread (and of frames) before the oldest are dropped: the
    #: threads of other clients of the mount, which strace does not show
    KEEP = 10000

    def __init__(self, several_mounts: bool = False, mounts: Iterable[str] = (), hold: float | None = HOLD,
                 keep: int | None = KEEP):
        super().__init__()
        # vgpu's mount points: a node path under none of them is another device's
        self.mounts = [m.rstrip("/") + "/" for m in mounts]
        self.items: collections.deque[_Item] = collections.deque()   # the output, in order
        self.waiting: list[_Item] = []           # requests whose record has not been found
        self.by_tid: dict[int, list[dict]] = {}  # records per calling thread, in the order they began
        self.frames: list[dict] = []
        self.several_mounts = several_mounts
        self.hold = hold   # None: wait for the end (a run shown once it is over)
        self.keep = keep   # None: every record (a whole run's, given at once)
        self._now = 0.0

    # -- input ------------------------------------------------------------------
    def add_record(self, rec: dict, clock_offset: float = 0.0) -> None:
        """An ioctl record (kmd/trace.py); its times become the wall clock's by
        `clock_offset` (time.time() - time.monotonic()) unless it has them ("rt")."""
        if rec.get("type") != "ioctl" or "request" not in rec:
            return
        rec.setdefault("rt", rec["ts"] + clock_offset)
        rec.setdefault("rt_end", rec.get("end", rec["ts"]) + clock_offset)
        if rec.get("tag") is not None:
            pool = self.frames
        elif rec.get("tid"):
            pool = self.by_tid.setdefault(rec["tid"], [])
        else:
            return
        pool.append(rec)
        if self.keep is not None and len(pool) > self.keep:
            del pool[:len(pool) - self.keep // 2]

    def add_call(self, call: Syscall, now: float = 0.0) -> None:
        self._now = now
        self.feed(call)

    def _emit(self, call: Syscall, text: str, index: int | None = None) -> None:
        self.items.append(_Item(call))

    def _classify(self, path: str | None) -> str | None:
        if path and self.mounts and path.startswith("/") and not any(path.startswith(m) for m in self.mounts):
            return None
        return _classify(path)

    # -- the requests -------------------------------------------------------------
    def _on_ioctl(self, call: Syscall) -> None:
        found = self._drm_ioctl(call)
        if found is not None:
            self._wait(_Item(call, "ioctl", found[0], seen=self._now))

    def _on_write(self, call: Syscall) -> None:
        ctl = self._control(call)
        tag = _int(call.args[3]) if call.name == "pwrite64" and len(call.args) >= 4 else None
        if ctl is None and tag is None:
            return   # a plain write() to a file that is no control file
        self._wait(_Item(call, "frame", tag=tag, seen=self._now, control=ctl is not None))

    def _wait(self, item: _Item) -> None:
        self.items.append(item)
        self.waiting.append(item)

    _on_pwrite64 = _on_write

    def _on_read(self, call: Syscall) -> None:
        if self._control(call) is not None:
            self._emit(call, "")   # a frame's reply: shown, its decoding is the request's

    _on_pread64 = _on_read

    # -- matching ---------------------------------------------------------------------
    @staticmethod
    def _in_time(call: Syscall, rec: dict) -> bool | None:
        """Whether the record began within the call (None: the log has no -ttt)."""
        if call.time is None or not call.epoch:
            return None
        end = call.time + (call.duration if call.duration is not None else HOLD)
        return call.time - EPS <= rec["rt"] <= end + EPS

    @staticmethod
    def _prune(pool: list[dict], call: Syscall) -> None:
        """Drop the records that began before `call` did: a thread's calls come one
        after the other, so no later call of its can be theirs (an EFAULT'd copy-out,
        the time before -p attached). Records of a thread come in the order they
        began (each ends before the thread's next begins)."""
        if call.time is None or not call.epoch:
            return
        n = 0
        while n < len(pool) and pool[n]["rt"] < call.time - EPS:
            n += 1
        if n:
            del pool[:n]

    def _match_ioctl(self, item: _Item) -> dict | None:
        call = item.call
        if call.pid is not None:
            pools = [self.by_tid[call.pid]] if call.pid in self.by_tid else []
        else:
            pools = list(self.by_tid.values())   # no -f: a single thread, whichever
        for pool in pools:
            self._prune(pool, call)
            for i, rec in enumerate(pool):
                timed = self._in_time(call, rec)
                if timed is False:
                    if rec["rt"] > call.time:
                        break   # began after the call ended: so did all that follow
                    continue
                if not _matches(rec, item.req):
                    continue
                if timed is None and _errno_of(call) != rec.get("error", 0):
                    continue   # no times: in order, and only the same result
                del pool[i]
                return rec
        return None

    def _match_frame(self, item: _Item) -> dict | None:
        for i, rec in enumerate(self.frames):
            if item.tag is not None and rec.get("tag") != item.tag:
                continue
            timed = self._in_time(item.call, rec)
            if timed is False or (timed is None and item.tag is None):
                continue
            del self.frames[i]
            return rec
        return None

    # -- output -------------------------------------------------------------------------
    def _strace_line(self, call: Syscall) -> str:
        parts = [] if call.pid is None else [str(call.pid)]
        if call.time is not None:
            parts.append(clock_text(call.time) if call.epoch else _tod_text(call.time))
        parts.append(call.text)
        return " ".join(parts)

    def _decoded(self, rec: dict, suffix: str = "") -> str:
        node = rec.get("node", "?")
        if self.several_mounts and rec.get("mount"):
            node = f"{rec['mount']}/dev/dri/{node}"
        return f"    {node}: {decode_record(rec)}{suffix}"

    def lines(self, final: bool = False, now: float = 0.0) -> list[str]:
        """The output lines that are ready, in strace's order: a request waits for its
        record until it comes, `hold` seconds pass (`now`: time.monotonic()), or `final`."""
        waiting = []
        for item in self.waiting:
            item.rec = (self._match_ioctl if item.kind == "ioctl" else self._match_frame)(item)
            if item.rec is None:
                waiting.append(item)
        self.waiting = waiting
        out: list[str] = []
        while self.items:
            item = self.items[0]
            if item.kind != "plain" and item.rec is None and not final and \
                    (self.hold is None or now - item.seen < self.hold):
                break
            self.items.popleft()
            if item.kind != "plain" and item.rec is None and item in self.waiting:
                self.waiting.remove(item)   # shown without: its record will not be looked for
            if item.kind == "frame" and item.rec is None and not item.control:
                continue   # a pwrite64 that was no vgpu request
            out.append(self._strace_line(item.call))
            if item.kind == "ioctl":
                out.append(self._decoded(item.rec) if item.rec is not None else _no_record(item))
            elif item.kind == "frame":
                out.append(self._decoded(item.rec, " (frame)") if item.rec is not None else "    <no vgpu record>")
        return out


def _no_record(item: _Item) -> str:
    """The line under a DRM ioctl the daemon has no record of, with the likely why."""
    label = request_label(item.req)
    why = {"EFAULT": ": refused before the ioctl table, reading what the struct points to",
           "E2BIG": ": refused before the ioctl table, pointing to too much",
           "EINTR": ": interrupted before the daemon answered"}.get(item.call.errno or "", "")
    return f"    {label + ' ' if label else ''}<no vgpu record{why}>"


def _errno_of(call: Syscall) -> int:
    if call.errno is None:
        return 0
    return getattr(errno, call.errno, -1)


def _tod_text(t: float) -> str:
    secs = int(t)
    return f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{round((t - secs) * 1e6):06d}"


def trace_lines(lines: Iterable[str], records: Iterable[dict], clock_offset: float = 0.0,
                mounts: Iterable[str] = ()) -> list[str]:
    """The output for a whole strace log and the records of the same run (`mounts`:
    vgpu's mount points, when known)."""
    records = list(records)
    engine = IoctlTrace(len({r.get("mount") for r in records if r.get("mount")}) > 1, mounts, keep=None)
    for rec in sorted(records, key=lambda r: r["ts"]):
        engine.add_record(rec, clock_offset)
    for call in parse_log(lines):
        engine.add_call(call)
    return engine.lines(final=True)


def records_path(log: str) -> str:
    """Where `--log LOG` keeps the daemon's records: LOG.vgpu, JSON lines."""
    return f"{log}.vgpu"


def is_strace_log(path: str) -> bool:
    """True if the file at ``path`` holds at least one system call as strace logs it."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return next(parse_log(f), None) is not None


def decode_file(path: str) -> list[str]:
    """`--decode`: with the records kept beside the log, as the run showed it; else the
    frames from their bytes and the ioctls by name (:func:`decode_lines`)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.readlines()
    try:
        with open(records_path(path)) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return decode_lines(lines)
    return trace_lines(lines, records)


# ---------------------------------------------------------------------------
# The daemon's records
# ---------------------------------------------------------------------------
def _unescape_mountinfo(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def find_mounts(mountinfo: str | None = None) -> list[str]:
    """Every vgpu mount point (file system type fuse.vgpu) of /proc/self/mountinfo."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) > sep + 1 and fields[sep + 1] == "fuse.vgpu" and len(fields) > 4:
            found.append(_unescape_mountinfo(fields[4]))
    return found


class Recordings:
    """The daemon's records from each mount: one open of MOUNT/<RECORDING> each,
    read without blocking. `problems`: what could not be opened, said once."""

    def __init__(self, mounts: list[str], explicit: bool = False):
        self.mounts = sorted(set(mounts) | set(find_mounts()))   # every vgpu mount: which paths are vgpu's
        self.fds: dict[int, str] = {}
        self.problems: list[str] = []
        self._partial: dict[int, bytes] = {}
        for mount in mounts:
            path = os.path.join(mount, RECORDING)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except PermissionError:
                self.problems.append(f"{path}: permission denied: the daemon's records are in debugfs, "
                                     f"which is root's (run vgpu trace as root)")
                continue
            except OSError as e:
                if explicit:
                    self.problems.append(f"{path}: {e.strerror}: is a vgpu mounted at {mount}?")
                continue
            self.fds[fd] = mount
            self._partial[fd] = b""
        self.several = len(self.fds) > 1

    def drain(self) -> list[dict]:
        """The records that came since the last call, their times on the wall clock
        too ("rt", "rt_end"), their mount named when there are several."""
        out = []
        for fd, mount in self.fds.items():
            while True:
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                except OSError:
                    break   # the daemon went away: what came is kept
                if not data:
                    break
                lines = (self._partial[fd] + data).split(b"\n")
                self._partial[fd] = lines.pop()
                offset = time.time() - time.monotonic()
                for line in lines:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("type") != "ioctl":
                        continue
                    rec["rt"] = rec["ts"] + offset
                    rec["rt_end"] = rec.get("end", rec["ts"]) + offset
                    if self.several:
                        rec["mount"] = mount
                    out.append(rec)
        return out

    def wait(self, timeout: float) -> None:
        if not self.fds:
            time.sleep(timeout)
            return
        p = select.poll()
        for fd in self.fds:
            p.register(fd, select.POLLIN)
        p.poll(timeout * 1000)

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass   # the daemon went away first
        self.fds.clear()


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------
def strace_argv(log: str, command: list[str] | None = None, strace: str = "strace",
                pid: int | None = None) -> list[str]:
    """strace for `command`, or attached to `pid`: -f (threads and children), -ttt
    and -T (when each call began and how long it took: what a record is matched by)."""
    argv = [strace, "-f", "-ttt", "-T", "-e", f"trace={STRACE_SYSCALLS}", "-o", log]
    if pid is not None:
        return [*argv, "-p", str(pid)]
    return [*argv, "--", *command]


def _say(text: str) -> None:
    print(f"vgpu trace: {text}", file=sys.stderr, flush=True)


def _under(path: str, mounts: list[str]) -> str | None:
    """The mount of `mounts` that `path` is (in), if any."""
    for m in mounts:
        if path == m or path.startswith(m.rstrip("/") + "/"):
            return m
    return None


def guess_mounts(command: list[str] | None = None, pid: int | None = None,
                 env: dict | None = None, all_mounts: list[str] | None = None,
                 default: str = DEFAULT_MOUNT) -> list[str]:
    """The vgpu mounts a trace should read the records of, when --mount names none:
    those the command's arguments name (``--device /tmp/vgpu``, ``--device=...``, or a
    path inside one), $VGPU_MOUNT, for ``-p`` those the process has files open in;
    else `default` (/tmp/vgpu), else the machine's only vgpu mount. Other mounts are left alone:
    a recording costs their daemon a record per request."""
    mounts = find_mounts() if all_mounts is None else all_mounts
    env = os.environ if env is None else env
    found: list[str] = []

    def add(path: str) -> None:
        if not path:
            return
        m = _under(os.path.realpath(path), mounts)
        if m and m not in found:
            found.append(m)

    for arg in command or ():
        for part in arg.split("=", 1)[-1:] if arg.startswith("-") else [arg]:
            if "/" in part:
                add(part)
    add(env.get("VGPU_MOUNT", ""))
    if pid is not None:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            names = []
        for name in names:
            try:
                add(os.readlink(f"/proc/{pid}/fd/{name}"))
            except OSError:
                pass
    if not found:
        add(default)
    if not found and len(mounts) == 1:
        found = list(mounts)
    return found


def _open_recordings(mount: str | None, command: list[str] | None = None, pid: int | None = None,
                     default: str = DEFAULT_MOUNT) -> Recordings:
    all_mounts = find_mounts()
    mounts = [os.path.realpath(mount)] if mount else guess_mounts(command, pid, all_mounts=all_mounts,
                                                                  default=default)
    recs = Recordings(mounts, explicit=bool(mount))
    for problem in recs.problems:
        _say(problem)
    if not recs.fds:
        if not mounts:
            _say(f"no vgpu mount found in the command's arguments, $VGPU_MOUNT or {default}"
                 + (f" (mounted: {', '.join(all_mounts)}; name one with --mount MOUNT)" if all_mounts else ""))
        _say("the DRM ioctls are shown without the daemon's decoding")
    return recs


def _trace(argv: list[str], log: str, recs: Recordings, out, live: bool, keep: bool) -> int:
    """Run strace (`argv`, writing `log`) while reading the records; the trace goes
    to `out` as it comes (`live`) or once strace has exited; with `keep` the records
    are saved beside the log. strace's exit status."""
    engine = IoctlTrace(recs.several, recs.mounts, hold=HOLD if live else None)
    parser = LogParser()
    kept: list[dict] = []
    shown: list[str] = []
    partial = ""
    open(log, "w").close()   # strace writes it from its start; we read it as it grows
    # argv[0] "strace", so that its messages read "strace: Process N attached"
    proc = subprocess.Popen(["strace", *argv[1:]], executable=argv[0])
    with open(log, encoding="utf-8", errors="surrogateescape") as logf:
        def step(final: bool = False) -> None:
            nonlocal partial
            for rec in recs.drain():      # records first: a line's record is in before the line
                engine.add_record(rec)
                if keep:
                    kept.append(rec)
            chunk = logf.read()
            if chunk:
                lines = (partial + chunk).split("\n")
                partial = lines.pop()
                now = time.monotonic()
                for line in lines:
                    call = parser.feed(line)
                    if call is not None:
                        engine.add_call(call, now)
            if final and partial:
                call = parser.feed(partial)
                partial = ""
                if call is not None:
                    engine.add_call(call, time.monotonic())
            shown.extend(engine.lines(final=final, now=time.monotonic()))
            if live or final:
                for text in shown:
                    print(text, file=out)
                shown.clear()
                out.flush()

        interrupted = False
        while True:
            try:
                if proc.poll() is not None:
                    break
                recs.wait(0.1)
                step()
            except KeyboardInterrupt:
                # strace had the SIGINT too (the terminal's foreground group): it ends the
                # command (or detaches, -p); what was traced is still shown
                if live and not interrupted and proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                interrupted = True
        time.sleep(0.05)
        step(final=True)
    recs.close()
    if keep:
        _save(log, kept)
    return proc.returncode


def _save(log: str, records: list[dict]) -> None:
    try:
        with open(records_path(log), "w") as f:
            for rec in records:
                f.write(json.dumps({k: v for k, v in rec.items() if not k.startswith("_")}) + "\n")
    except OSError as e:
        _say(f"{records_path(log)}: {e.strerror}")


def _temp_log() -> str:
    fd, log = tempfile.mkstemp(prefix="vgpu-trace-", suffix=".strace")
    os.close(fd)
    return log


def _strace() -> str | None:
    path = shutil.which("strace")
    if path is None:
        _say("strace not found (install it: apt-get install strace)")
    return path


def run(command: list[str], log: str | None = None, out=None, mount: str | None = None,
        default_mount: str = DEFAULT_MOUNT) -> int:
    """`vgpu trace -- COMMAND`: run it under strace with the daemon's records; print the
    trace once it exits (its own output comes first). The command's exit status."""
    out = out or sys.stdout
    strace = _strace()
    if strace is None:
        return 127
    keep = log is not None
    log = log or _temp_log()
    recs = _open_recordings(mount, command=command, default=default_mount)
    try:
        status = _trace(strace_argv(log, command, strace), log, recs, out, live=False, keep=keep)
    finally:
        recs.close()
        if not keep:
            for path in (log, records_path(log)):
                if os.path.exists(path):
                    os.unlink(path)
    return 128 - status if status < 0 else status


def attach(pid: int, log: str | None = None, out=None, mount: str | None = None,
           default_mount: str = DEFAULT_MOUNT) -> int:
    """`vgpu trace -p PID`: attach strace to a running process (all its threads) and
    show its requests as they happen, until it exits or Ctrl-C detaches."""
    out = out or sys.stdout
    if not os.path.exists(f"/proc/{pid}"):
        _say(f"no process {pid}")
        return 1
    strace = _strace()
    if strace is None:
        return 127
    keep = log is not None
    log = log or _temp_log()
    recs = _open_recordings(mount, pid=pid, default=default_mount)
    try:
        status = _trace(strace_argv(log, strace=strace, pid=pid), log, recs, out, live=True, keep=keep)
    finally:
        recs.close()
        if not keep:
            for path in (log, records_path(log)):
                if os.path.exists(path):
                    os.unlink(path)
    return 0 if status in (0, -signal.SIGINT, 128 + signal.SIGINT) else status


def main(args) -> int:
    """Entry point from ``vgpu trace`` (vgpu_tools/cli.py)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    pid = getattr(args, "pid", None)
    if args.decode:
        if command or pid is not None:
            _say("give either --decode LOG, -p PID or a command")
            return 2
        try:
            lines = decode_file(args.decode)
            if not lines and not is_strace_log(args.decode):
                _say(f"{args.decode} is not an strace log (no system call in it); record one with "
                     f"`vgpu trace --log {args.decode} -- CMD` or `strace -f -o {args.decode} CMD`")
                return 1
        except OSError as e:
            _say(f"{args.decode}: {e.strerror}")
            return 1
        if not lines:
            _say(f"{args.decode}: no DRM ioctl on a vgpu node in this strace log")
        for line in lines:
            print(line)
        return 0
    if pid is not None:
        if command:
            _say("give either -p PID or a command, not both")
            return 2
        return attach(pid, args.log, mount=args.mount, default_mount=args.default_mount)
    if not command:
        _say("no command given (vgpu trace -- CMD [ARGS], or vgpu trace -p PID)")
        return 2
    return run(command, args.log, mount=args.mount, default_mount=args.default_mount)


def add_parser(sub, default_mount: str = DEFAULT_MOUNT) -> None:
    """`vgpu trace` in the `vgpu` command's parser (vgpu_tools/cli.py); `default_mount`:
    the mount whose records it reads when nothing names one (/tmp/vgpu)."""
    t = sub.add_parser("trace", help="strace with each DRM ioctl's arguments and result decoded",
                       description="Run CMD under strace (or attach to PID) and show each DRM ioctl "
                                   "with its arguments and result as the vgpu daemon saw them (its "
                                   "records are in debugfs: run as root), or decode a log again. "
                                   "See docs/trace.md.")
    t.add_argument("-p", "--pid", type=int, metavar="PID", help="attach to this running process")
    t.add_argument("--mount", metavar="MOUNT", help="read the records of this vgpu mount only "
                                                    "(default: every vgpu mount)")
    t.add_argument("--decode", metavar="LOG", help="decode this strace log (with LOG.vgpu's records "
                                                   "if a run kept them) instead of running CMD")
    t.add_argument("--log", metavar="FILE", help="keep strace's log in FILE and the records in FILE.vgpu")
    t.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS]")
    t.set_defaults(func=main, default_mount=default_mount)
