"""The docs as tests: find the ```sh and ```python blocks of README.md and docs/*.md,
run them on a temporary mount, and compare the outputs they show by their shape.

The conventions (docs/doc-tests.md explains them to a doc writer):

- A block runs as written, with the docs' mount ``/tmp/vgpu`` replaced by the test's
  mount (also in ``$VGPU_MOUNT``, except for a `vgpu` command given ``--mount``: that
  one must use it, and pass it on to a COMMAND it runs), in a scratch directory where
  ``samples/`` is the repository's and ``vgpu`` runs this tree's command.
- A ```sh block whose lines start with ``$ `` is a transcript: each ``$`` line is one
  command (a trailing backslash continues it); the lines under it, up to the next
  ``$``, are its output, compared by :func:`shape` (``...`` stands for any lines).
  Other ```sh blocks are scripts: each line is one command, nothing compared. Every
  command must exit 0.
- The ```python blocks of one file run in order in one Python process, so a block
  can use what an earlier block of its file defined; a traceback names the markdown
  file and line.
- HTML comments right above a fence (``<!-- doc-test: ... -->``, one per line) say
  how to run it: ``not-run REASON``, ``root`` (skipped unless the tests run as root),
  ``timeout SECONDS``, ``mount OPTIONS`` (the
  block needs a mount made with these `vgpu mount` options), ``shape labels`` (compare
  only each output line's text up to its first two-space gap: drawings), ``file NAME``
  (any block: write it to NAME in the scratch directory, for the blocks after it).
"""
from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOC_MOUNT = "/tmp/vgpu"                 # the mount every doc uses
DEFAULT_TIMEOUT = 60.0                  # seconds per command or python block
DEFAULT_MOUNT_ARGS = ("--vram", "256M")  # README's walkthrough mount

_FENCE = re.compile(r"^(\s*)```(.*)$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_MARKER_WORDS = ("not-run", "root", "timeout", "mount", "shape", "file")


class DocError(Exception):
    """A block that failed, or a marker that does not parse; the message starts with
    the block's file:line."""


@dataclass
class Block:
    path: str                      # relative to the repository, "docs/umd.md"
    line: int                      # 1-based line of the opening fence
    lang: str                      # "sh", "python", or "file" (a `file NAME` block)
    lines: list[str]               # the block's lines, indentation removed
    not_run: str | None = None     # the reason it is not run
    root: bool = False             # `root`: run only by a root test run (debugfs, HIGH priority)
    timeout: float = DEFAULT_TIMEOUT
    mount_args: tuple[str, ...] | None = None
    labels_only: bool = False      # `shape labels`: compare each output line's label only
    file: str | None = None        # `file NAME`: the block is written to NAME in the scratch directory

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _marker(where: str, text: str, block: Block) -> None:
    word, _, rest = text.partition(" ")
    rest = rest.strip()
    if word == "not-run":
        if not rest:
            raise DocError(f"{where}: `doc-test: not-run` needs a reason")
        block.not_run = rest
    elif word == "root":
        block.root = True
    elif word == "timeout":
        try:
            block.timeout = float(rest)
        except ValueError:
            raise DocError(f"{where}: `doc-test: timeout {rest}` is not a number of seconds") from None
    elif word == "mount":
        block.mount_args = tuple(shlex.split(rest))
    elif word == "file":
        if not re.fullmatch(r"[\w.-]+", rest):
            raise DocError(f"{where}: `doc-test: file {rest}`: a plain file name")
        block.file = rest
    elif word == "shape":
        if rest not in ("labels", "fields"):
            raise DocError(f"{where}: `doc-test: shape {rest}`: labels or fields")
        block.labels_only = rest == "labels"
    else:
        raise DocError(f"{where}: unknown `doc-test: {word}` (known: {', '.join(_MARKER_WORDS)})")


def extract(path: Path) -> list[Block]:
    """The ```sh and ```python blocks of ``path``, with the markers above each."""
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            if _MARKER.match(lines[i]):
                j = i
                while j < len(lines) and _MARKER.match(lines[j]):
                    j += 1
                if j >= len(lines) or not _FENCE.match(lines[j]):
                    raise DocError(f"{rel}:{i + 1}: a doc-test marker must sit right above a fence")
            i += 1
            continue
        indent, info = m.group(1), m.group(2).split()
        start, body = i, []
        i += 1
        while i < len(lines) and not _FENCE.match(lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1                                   # the closing fence
        block = Block(rel, start + 1, info[0] if info else "", body)
        j = start - 1
        while j >= 0 and (mm := _MARKER.match(lines[j])):
            _marker(f"{rel}:{j + 1}", mm.group(1), block)
            j -= 1
        if block.file:                           # an example file later blocks use
            block.lang = "file"
        if block.lang in ("sh", "python", "file"):
            blocks.append(block)
    return blocks


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in extract(p)]


# ---- shapes --------------------------------------------------------------------------

_SHAPES = [
    (re.compile(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b"), "<day>"),
    (re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\b"), "<month>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b"), "<n>"),    # ids, hashes (maybe all digits)
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
    (re.compile(r"(?:<n>[.:,/-]?)+<n>"), "<n>"),        # dates, times, versions, ranges
    (re.compile(r"(\S)\1+"), r"\1"),                    # rules and bars of any length
    (re.compile(r"\s+"), ""),                           # columns of any width
]


def shape(line: str) -> str:
    """What of an output line must stay as the docs show it: its words and punctuation.
    Numbers, hex values, ids, dates and times are wildcards; runs of one character (a
    table's rules, a bar) and the spacing of columns are not compared."""
    for pattern, repl in _SHAPES:
        line = pattern.sub(repl, line)
    return line


def label(line: str) -> str:
    """A drawing's line as `shape labels` compares it: its text up to the first gap of
    two spaces (a track's name, a legend), the rest (bars, marks) ignored."""
    return shape(re.split(r"(?<=\S) {2,}", line.strip(), maxsplit=1)[0])


def match_output(expected: list[str], actual: list[str], labels_only: bool = False) -> str | None:
    """None when ``actual`` has the shape of ``expected`` (a ``...`` line there stands
    for any lines); otherwise a message naming the first expected line not found.
    ``labels_only`` compares each line's :func:`label` only."""
    norm = label if labels_only else shape
    exp = [None if e.strip() == "..." else norm(e) for e in expected]
    act = [norm(a) for a in actual]
    best = [0]                                      # the furthest expected line matched

    def m(i: int, j: int, memo: dict) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        best[0] = max(best[0], i)
        if i == len(exp):
            ok = j == len(act)
        elif exp[i] is None:
            ok = any(m(i + 1, k, memo) for k in range(j, len(act) + 1))
        else:
            ok = j < len(act) and exp[i] == act[j] and m(i + 1, j + 1, memo)
        memo[key] = ok
        return ok

    if m(0, 0, {}):
        return None
    i = min(best[0], len(expected) - 1)
    if i < 0:
        return "expected no output"
    return f"no line of the shape of expected line {i + 1}: {expected[i]!r}"


# ---- running -------------------------------------------------------------------------

def transcript(block: Block) -> list[tuple[int, str, list[str]]]:
    """A ```sh block as (line, command, expected output lines); a script block gives
    its lines as commands with no output to compare (None)."""
    out, i, lines = [], 0, block.lines
    is_transcript = any(line.startswith("$ ") for line in lines)
    while i < len(lines):
        line = lines[i]
        lineno = block.line + 1 + i
        if is_transcript and not line.startswith("$ "):
            if out:
                out[-1][2].append(line)
            i += 1
            continue
        cmd = line[2:] if is_transcript else line
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        i += 1
        if cmd.strip() and not cmd.lstrip().startswith("#"):
            out.append((lineno, cmd, [] if is_transcript else None))
    return [(n, c, e if e is None or any(x.strip() for x in e) else None) for n, c, e in out]


# The blocks' text goes into linecache as the markdown file's lines, so tracebacks and
# the umd compiler (which reads a kernel's source through inspect) see the block as it
# was extracted, even when the file on disk has changed since.
_WORKER = r'''
import json, linecache, os, sys, traceback
ns = {"__name__": "__main__"}
token, sources = sys.argv[1], {}
for request in sys.stdin:
    req = json.loads(request)
    result = {"ok": True}
    try:
        text = "\n" * req["line"] + req["code"]
        src, lines = sources.setdefault(req["file"], []), text.splitlines(True)
        src.extend(["\n"] * (len(lines) - len(src)))
        src[req["line"]:len(lines)] = lines[req["line"]:]
        linecache.cache[req["file"]] = (sum(map(len, src)), None, src, req["file"])
        exec(compile(text, req["file"], "exec"), ns)
    except BaseException as e:
        tb = e.__traceback__.tb_next      # from the block's first frame: the worker's is not the doc's
        result = {"ok": False, "error": "".join(traceback.format_exception(type(e), e, tb))}
    sys.stdout.flush(); sys.stderr.flush()
    os.write(1, (token + json.dumps(result) + "\n").encode())
'''


@dataclass
class DocRunner:
    """Runs blocks on one temporary mount, one Python worker per doc file."""
    mount: str
    work: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="vgpu-docs-work-"))
    mount_args: tuple[str, ...] | None = None       # the mount's options; None: not mounted
    doc_mount_args: tuple[str, ...] | None = None   # the options a doc command of this file mounted with
    _file: str | None = None
    _worker: subprocess.Popen | None = None
    _token: str = "\x1eDOC-TEST-RESULT "

    def __post_init__(self) -> None:
        for name in ("samples", "bench", "deps"):
            os.symlink(ROOT / name, Path(self.work) / name)
        bindir = Path(self.work) / ".bin"
        bindir.mkdir()
        vgpu = bindir / "vgpu"
        vgpu.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m vgpu_tools \"$@\"\n")
        vgpu.chmod(0o755)
        py = bindir / "python3"                 # the interpreter of this test run
        py.symlink_to(sys.executable)
        self.env = dict(os.environ)
        self.env.update(VGPU_MOUNT=self.mount, PATH=f"{bindir}{os.pathsep}{self.env.get('PATH', '')}",
                        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), self.env.get("PYTHONPATH")])),
                        PYTHONUNBUFFERED="1", COLUMNS="80")
        self.env.pop("VGPU_DEBUG", None)

    # -- the mount -------------------------------------------------------------------
    def _vgpu(self, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "vgpu_tools", *args], env=self.env, cwd=self.work,
                              capture_output=True, text=True, timeout=timeout)

    def unmount(self) -> None:
        self.stop_worker()
        if os.path.ismount(self.mount):
            self._vgpu("umount", self.mount)
            subprocess.run(["fusermount3", "-u", "-z", self.mount], stderr=subprocess.DEVNULL)
        self.mount_args = None

    def ensure_mount(self, args: tuple[str, ...]) -> None:
        if self.mount_args == args and os.path.ismount(self.mount):
            return
        self.unmount()
        r = self._vgpu("mount", self.mount, *args)
        if r.returncode != 0 or not os.path.ismount(self.mount):
            raise RuntimeError(f"vgpu mount {self.mount} {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
        self.mount_args = args

    def close(self) -> None:
        self.unmount()
        shutil.rmtree(self.work, ignore_errors=True)

    # -- text --------------------------------------------------------------------------
    def localize(self, text: str) -> str:
        """The docs' mount path replaced by this run's."""
        return re.sub(re.escape(DOC_MOUNT) + r"(?![\w.-])", self.mount, text)

    def generalize(self, text: str) -> str:
        """This run's paths replaced by the ones the docs show."""
        text = text.replace(self.mount, DOC_MOUNT).replace(self.work + "/", "").replace(self.work, ".")
        state = os.environ.get("VGPU_STATE_DIR")
        return text.replace(state, "/tmp") if state else text

    # -- blocks ----------------------------------------------------------------------
    def run(self, block: Block) -> None:
        if block.path != self._file:                 # each file starts on a fresh mount
            self.unmount()
            self._file, self.doc_mount_args = block.path, None
        if block.lang == "file":                     # needs no mount
            Path(self.work, block.file).write_text(block.text)
            return
        self.ensure_mount(block.mount_args or self.doc_mount_args or DEFAULT_MOUNT_ARGS)
        if block.lang == "python":
            self.run_python(block)
        else:
            for lineno, cmd, expected in transcript(block):
                self.run_command(block, lineno, cmd, expected)

    def run_command(self, block: Block, lineno: int, cmd: str, expected: list[str] | None) -> None:
        where = f"{block.path}:{lineno}"
        words = cmd.split()
        remounts = words[:2] in (["vgpu", "mount"], ["vgpu", "umount"])
        if remounts:                                 # the doc mounts (or unmounts) the device itself
            self.stop_worker()                       # its python blocks' devices go first
            if words[1] == "mount":
                self.unmount()
        env = self.env
        if re.match(r"vgpu\s", cmd) and "--mount" in cmd.split(" -- ")[0].split():
            # `vgpu X --mount M`: M is the mount it (and a COMMAND it runs) must use
            env = dict(env, VGPU_MOUNT=str(Path(self.work, "not-the-mount")))
        try:
            r = subprocess.run(["bash", "-o", "pipefail", "-c", self.localize(cmd)], cwd=self.work,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, errors="replace",
                               timeout=block.timeout)
        except subprocess.TimeoutExpired as e:
            out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
            raise DocError(f"{where}: `{cmd}` did not finish in {block.timeout:g} s; its output:\n"
                           f"{self.generalize(out)}") from None
        finally:
            if remounts and words[1] == "mount" and os.path.ismount(self.mount):
                self.mount_args = self.doc_mount_args = tuple(shlex.split(cmd, comments=True)[3:])
            elif remounts:
                self.mount_args = None
        out = self.generalize(r.stdout)
        if r.returncode != 0:
            raise DocError(f"{where}: `{cmd}` exited {r.returncode}; its output:\n{out}{self.kmsg_tail()}")
        if expected is not None:
            mismatch = match_output(expected, out.splitlines(), block.labels_only)
            if mismatch:
                raise DocError(f"{where}: the output of `{cmd}` has not the shape the doc shows: "
                               f"{mismatch}\n--- it printed:\n{out}")

    def kmsg_tail(self, lines: int = 8) -> str:
        """The end of the driver's log, for a failure's message."""
        try:
            tail = Path(self.mount, "dev/kmsg").read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "--- the end of MOUNT/dev/kmsg:\n" + self.generalize("\n".join(tail)) + "\n"

    # -- python ----------------------------------------------------------------------
    def stop_worker(self) -> None:
        w, self._worker = self._worker, None
        if w is not None:
            w.stdin.close()
            try:
                w.wait(10)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
            w.stdout.close()

    def run_python(self, block: Block) -> None:
        if self._worker is None:
            self._worker = subprocess.Popen([sys.executable, "-c", _WORKER, self._token], cwd=self.work,
                                            env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT)
        w = self._worker
        w.stdin.write((json.dumps({"code": self.localize(block.text), "file": block.path,
                                   "line": block.line}) + "\n").encode())
        w.stdin.flush()
        out, deadline = b"", time.monotonic() + block.timeout
        token = self._token.encode()
        with selectors.DefaultSelector() as sel:
            sel.register(w.stdout, selectors.EVENT_READ)
            while token not in out or not out.endswith(b"\n"):
                left = deadline - time.monotonic()
                chunk = os.read(w.stdout.fileno(), 65536) if left > 0 and sel.select(left) else None
                if not chunk:
                    self.kill_worker()
                    why = f"did not finish in {block.timeout:g} s" if chunk is None else "ended its process"
                    raise DocError(f"{block.where}: the python block {why}; its output:\n"
                                   f"{self.generalize(out.decode(errors='replace'))}")
                out += chunk
        printed, _, result = out.partition(token)
        result = json.loads(result.decode())
        if not result["ok"]:
            raise DocError(f"{block.where}: the python block failed:\n{self.generalize(result['error'])}"
                           f"--- it printed:\n{self.generalize(printed.decode(errors='replace'))}"
                           f"{self.kmsg_tail()}")

    def kill_worker(self) -> None:
        w, self._worker = self._worker, None
        if w is not None:
            w.kill()
            w.wait()
            w.stdin.close()
            w.stdout.close()
