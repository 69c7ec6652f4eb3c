"""``vgpu trace``: run a command under strace and decode its vgpu ioctls.

An ioctl on a vgpu control file is one write() of a request frame and one read()
of the reply (docs/design.md section 3), so ``strace -xx`` already holds every byte of
it. This module pairs each write on a ``dev/dri/card*``/``renderD*`` fd with the
next read on that fd by the same pid, decodes both frames with the
:mod:`vgpu.uapi` structs, and prints one line per ioctl::

    renderD128: AMDGPU_GEM_CREATE {bo_size=4096, alignment=4096, domains=GTT, flags=0} = 0 {handle=1}

It also shows opens and closes of the device nodes and BO files (symlinks to
shared memory: strace shows the MOUNT/bo/<offset-hex> path), and mmap/munmap of BO
files. libvgpu never calls msync (there is nothing to flush); a program that does
gets its msync lines decoded too. Reading strace's text is :mod:`vgpu_tools.trace_strace`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterable

from vgpu import uapi
from vgpu_tools.trace_ioctls import DecodedRequest, decode_reply, decode_request  # noqa: F401  (re-exported)
from vgpu_tools.trace_strace import ProcessTable, Syscall, parse_log, parse_string

#: What `vgpu trace` asks strace for: fd life cycle (open/dup/fork), the frames,
#: and BO mappings. fcntl catches F_DUPFD_CLOEXEC (Python's mmap dups the fd).
STRACE_SYSCALLS = ("openat,open,creat,close,read,write,pread64,pwrite64,mmap,munmap,msync,"
                   "dup,dup2,dup3,fcntl,clone,clone3,fork,vfork")
#: -s: larger than VGPU_MAX_FRAME, so no frame is ever cut.
STRACE_STRSIZE = 2 * uapi.VGPU_MAX_FRAME

_CONTROL = re.compile(r"(?:^|/)dev/dri/((?:card|renderD)\d+)$")
_BO_FILE = re.compile(r"(?:^|/)((?:bo|prime)/[0-9a-f]+)$")
# Reads that do not consume the reply: the client asks again (libvgpu retries them).
_RETRY_ERRNOS = {"EINTR", "EAGAIN", "EWOULDBLOCK", "ERESTARTSYS", "ERESTARTNOINTR",
                 "ERESTARTNOHAND", "ERESTART_RESTARTBLOCK"}


# ---------------------------------------------------------------------------
# The decoder: strace calls in, lines out
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
        path_s = opened if _classify(opened) else (call.ret_path or opened)
        if call.ret_path and path_s == opened and call.ret_path != opened:
            self.procs.aliases[call.ret_path] = opened
        kind = _classify(path_s)
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
        kind = _classify(path)
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
        m = _CONTROL.search(path or "")
        return (fd, m.group(1)) if fd is not None and m else None

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

    # -- BO mappings --------------------------------------------------------
    def _on_mmap(self, call: Syscall) -> None:
        if len(call.args) < 6:
            return
        fd, path = self.procs.path(call.pid, call.args[4])
        kind = _classify(path)
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
    """Decode a strace log into output lines (pid-prefixed if several pids speak)."""
    decoder = Decoder()
    for call in parse_log(lines):
        decoder.feed(call)
    events = decoder.finish()
    pids = {e.pid for e in events}
    if len(pids) > 1:
        return [f"[pid {e.pid}] {e.text}" for e in events]
    return [e.text for e in events]


def decode_file(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return decode_lines(f)


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------
def strace_argv(log: str, command: list[str], strace: str = "strace") -> list[str]:
    return [strace, "-f", "-y", "-xx", "-s", str(STRACE_STRSIZE), "-e", f"trace={STRACE_SYSCALLS}",
            "-o", log, "--", *command]


def run(command: list[str], log: str | None = None, out=None) -> int:
    """Run ``command`` under strace, print the decoded trace; the command's exit status."""
    out = out or sys.stdout
    strace = shutil.which("strace")
    if strace is None:
        print("vgpu trace: strace not found (install it: apt-get install strace)", file=sys.stderr)
        return 127
    keep = log is not None
    if log is None:
        fd, log = tempfile.mkstemp(prefix="vgpu-trace-", suffix=".strace")
        os.close(fd)
    try:
        proc = subprocess.Popen(strace_argv(log, command, strace))
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the command got the SIGINT too; decode what it did
        lines = decode_file(log)
    finally:
        if not keep:
            os.unlink(log)
    for line in lines:
        print(line, file=out)
    out.flush()
    return 128 - status if status < 0 else status


def main(args) -> int:
    """Entry point from ``vgpu trace`` (vgpu/cli.py)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if args.decode:
        if command:
            print("vgpu trace: give either --decode LOG or a command, not both", file=sys.stderr)
            return 2
        try:
            lines = decode_file(args.decode)
        except OSError as e:
            print(f"vgpu trace: {args.decode}: {e.strerror}", file=sys.stderr)
            return 1
        for line in lines:
            print(line)
        return 0
    if not command:
        print("vgpu trace: no command given (vgpu trace -- CMD [ARGS])", file=sys.stderr)
        return 2
    return run(command, args.log)
