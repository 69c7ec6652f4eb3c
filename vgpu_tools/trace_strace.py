"""Reading strace output: one ``Syscall`` per completed call, fds tracked per process.

Accepts what ``strace -o LOG`` writes with or without ``-f`` (pid prefixes,
``<unfinished ...>`` / ``<... NAME resumed>`` pairs), ``-y`` (``3</path>``),
``-xx`` or strace's default C escapes, and ``-t``/``-tt``/``-ttt``/``-T``
timestamps (kept: `vgpu trace` matches a call with the daemon's record of it by its
time and duration). Nothing here knows about vgpu: :mod:`vgpu_tools.trace` decodes the calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

# "1234 ", "[pid  1234] ", then an optional -t/-tt/-ttt timestamp.
_PREFIX = re.compile(r"^(?:\[pid\s+(\d+)\]|(\d+))\s+")
_TIMESTAMP = re.compile(r"^(?:(\d+):(\d+):(\d+(?:\.\d+)?)|(\d+\.\d+))\s+")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>\s?")
_UNFINISHED = "<unfinished ...>"
# " = 80", " = 3</path>", " = -1 EINVAL (Invalid argument)", " = ? ERESTARTSYS (...)", then -T's "<0.000021>"
_RESULT = re.compile(r"^\s*=\s*(\S+?)(<(?:[^>\\]|\\.)*>)?(?:\s+(E[A-Z0-9]+)(?:\s+\((.*?)\))?)?"
                     r"(?:\s+<([\d.]+)>)?\s*$")
_FD = re.compile(r"^(-?\d+|AT_FDCWD)(?:<(.*)>)?$", re.S)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)     # a string literal, escapes kept
_HEX_ONLY = re.compile(r"(?:\\x[0-9a-fA-F]{2})*")         # a -xx string body
_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "v": 0x0B, "f": 0x0C, "a": 0x07, "b": 0x08,
            '"': 0x22, "\\": 0x5C, "'": 0x27, "?": 0x3F}


def unescape(text: str) -> bytes:
    """Bytes of a strace string body (no quotes): ``\\xNN``, octal, C escapes."""
    if _HEX_ONLY.fullmatch(text):      # -xx: the common case, done in C
        return bytes.fromhex(text.replace("\\x", ""))
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 == n:
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        e = text[i + 1]
        if e == "x":
            j = i + 2
            while j < n and j < i + 4 and text[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(text[i + 2:j], 16))
            i = j
        elif e in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1:j], 8) & 0xFF)
            i = j
        else:
            out.append(_ESCAPES.get(e, ord(e)))
            i += 2
    return bytes(out)


def parse_string(arg: str) -> tuple[bytes, bool]:
    """A quoted strace string argument -> (bytes, truncated by -s)."""
    arg = arg.strip()
    truncated = arg.endswith("...")
    if truncated:
        arg = arg[:-3]
    if len(arg) < 2 or arg[0] != '"' or arg[-1] != '"':
        return b"", False
    return unescape(arg[1:-1]), truncated


def parse_fd(arg: str) -> tuple[int | None, str | None]:
    """``3`` or ``3</path>`` (``-y``) -> (3, path or None); AT_FDCWD -> (None, path)."""
    m = _FD.match(arg.strip())
    if not m:
        return None, None
    fd = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
    path = m.group(2)
    return fd, (unescape(path).decode("utf-8", "replace") if path is not None else None)


def _skip_string(s: str, i: int) -> int:
    """Index just past the string literal starting at ``s[i] == '"'``."""
    return _STRING.match(s, i).end()


def split_call(text: str) -> tuple[str, list[str], str] | None:
    """``NAME(a, b, ...) = RET`` -> (NAME, top-level args, text after the ')')."""
    open_ = text.find("(")
    if open_ <= 0 or not re.fullmatch(r"\w+", text[:open_]):
        return None
    args, depth, start, i = [], 0, open_ + 1, open_ + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c == "<":                      # -y path: escaped, so the next '>' ends it
            end = text.find(">", i)
            i = len(text) if end < 0 else end + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                last = text[start:i].strip()
                if last or args:
                    args.append(last)
                return text[:open_], args, text[i + 1:]
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return None


@dataclass
class Syscall:
    """One completed system call as strace logged it."""
    pid: int | None
    name: str
    args: list[str]
    ret: str                  # "80", "0x7f...", "-1", "?"
    ret_path: str | None      # -y path of a returned fd
    errno: str | None         # "EINVAL"
    errmsg: str | None        # "Invalid argument"
    index: int                # line number (0-based) where the call started
    time: float | None = None      # when it started: -ttt's seconds since the epoch (-t/-tt: of the day)
    epoch: bool = False            # `time` is -ttt's (comparable with the clock), not a time of day
    duration: float | None = None  # -T: how long it took
    text: str = ""                 # the call as strace printed it, both halves of a split one joined

    @property
    def failed(self) -> bool:
        return self.errno is not None or self.ret in ("-1", "?")

    def ret_int(self) -> int | None:
        try:
            return int(self.ret, 0)
        except ValueError:
            return None


def _stamp(m: re.Match) -> tuple[float, bool]:
    """(seconds, epoch?) of a -t/-tt (time of day) or -ttt (epoch) timestamp."""
    if m.group(4):
        return float(m.group(4)), True
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)), False


class LogParser:
    """strace's lines in, completed calls out, one line at a time (a log being
    written is read as it grows): ``feed(line)`` returns the call that line
    completes, or None. Unfinished/resumed halves are joined per pid."""

    def __init__(self) -> None:
        self._pending: dict[int | None, tuple[str, int, tuple | None]] = {}
        self.index = 0

    def feed(self, line: str) -> Syscall | None:
        index = self.index
        self.index += 1
        line = line.rstrip("\n")
        pid = None
        m = _PREFIX.match(line)
        if m:
            pid = int(m.group(1) or m.group(2))
            line = line[m.end():]
        stamp = None
        m = _TIMESTAMP.match(line)
        if m:
            stamp = _stamp(m)
            line = line[m.end():]
        if line.startswith(("+++", "---")):
            return None
        start = index
        m = _RESUMED.match(line)
        if m:
            if pid not in self._pending:
                return None           # its first half came before the log started
            head, start, stamp = self._pending.pop(pid)
            rest = line[m.end():]
            line = head + ("" if rest.startswith((")", ",")) or head.endswith(" ") else " ") + rest
        cut = line.rfind(_UNFINISHED)
        if cut >= 0:
            self._pending[pid] = (line[:cut].rstrip(), start, stamp)
            return None
        call = split_call(line)
        if call is None:
            return None
        name, args, rest = call
        r = _RESULT.match(rest)
        if not r:
            return None
        ret_path = unescape(r.group(2)[1:-1]).decode("utf-8", "replace") if r.group(2) else None
        t, epoch = stamp if stamp else (None, False)
        return Syscall(pid, name, args, r.group(1), ret_path, r.group(3), r.group(4), start,
                       t, epoch, float(r.group(5)) if r.group(5) else None, line.rstrip())


def parse_log(lines: Iterable[str]) -> Iterator[Syscall]:
    """Yield each completed call of a strace log, joining unfinished/resumed halves."""
    parser = LogParser()
    for line in lines:
        call = parser.feed(line)
        if call is not None:
            yield call


@dataclass
class Process:
    """What a pid can see: its fd table (fd -> path) and its mappings (addr -> info).

    Threads (CLONE_FILES / CLONE_VM) share these objects; fork copies them.
    """
    fds: dict[int, str] = field(default_factory=dict)
    maps: dict[int, tuple[int, str]] = field(default_factory=dict)   # addr -> (size, name)


class ProcessTable:
    """Per-pid fd tables and mappings, following dup/fcntl/clone/fork."""

    def __init__(self) -> None:
        self._procs: dict[int | None, Process] = {}
        # -y shows where a symlink led (a BO's shared-memory file); this maps such a
        # target back to the name that was opened (MOUNT/bo/<offset-hex>).
        self.aliases: dict[str, str] = {}

    def get(self, pid: int | None) -> Process:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self._procs[pid] = Process()
        return proc

    def path(self, pid: int | None, fd_arg: str) -> tuple[int | None, str | None]:
        """Resolve an fd argument; a -y annotation also teaches the table."""
        fd, path = parse_fd(fd_arg)
        if fd is None:
            return None, None
        proc = self.get(pid)
        if path is not None:
            proc.fds[fd] = self.aliases.get(path, path)
        return fd, proc.fds.get(fd)

    def forked(self, parent: int | None, child: int, flags: str) -> None:
        """``clone``/``fork`` returned ``child``: share or copy the parent's tables.

        The child's own lines may precede the parent's return (-f); what it
        already recorded wins over the parent's copy.
        """
        p = self.get(parent)
        early = self._procs.get(child)
        fds = p.fds if "CLONE_FILES" in flags else dict(p.fds)
        maps = p.maps if "CLONE_VM" in flags else dict(p.maps)
        if early is not None:
            fds.update(early.fds)
            maps.update(early.maps)
        self._procs[child] = Process(fds, maps)
