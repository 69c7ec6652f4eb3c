"""A user's mistakes with the `vgpu` command end in one line (issue 24, docs/errors.md):
each case runs the real command in a subprocess and checks a non-zero exit, no
traceback on stderr, and the key words of the message (what is wrong, what to do).

Placeholders in a case's arguments: {T} a fresh directory, {M} a live mount,
{D} a mount whose daemon was killed."""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from tests.conftest import _mounted
from tests.helpers import NOBODY, ROOT, client_python, make_mount_dir, mount, unmount
from vgpu_tools.cli import mount_state, state_paths


@dataclass
class Case:
    id: str
    argv: list[str]
    words: list[str]                                  # in stderr, case-sensitive
    files: dict[str, str] = field(default_factory=dict)   # {T}/name -> content, made first
    uid: int | None = None
    status: int | None = None                         # the exit status, when it matters


SOURCE_S = ".kernel k\n.arg out ptr\n.sgprs 24\ns_mov_b32 s24, 0\ns_endpgm\n"
STRACE_LOG = 'openat(AT_FDCWD, "/etc/hosts", O_RDONLY) = 3\nclose(3) = 0\n'

# No mount needed: the option checks of `vgpu mount` and the files given to the tools.
CASES = [
    Case("mount-vram-1", ["mount", "{T}/m", "--vram", "1"], ["--vram", "4 KiB"], status=2),
    Case("mount-gtt-1", ["mount", "{T}/m", "--gtt", "1"], ["--gtt", "GTT size", "4 KiB"], status=2),
    Case("mount-vram-word", ["mount", "{T}/m", "--vram", "lots"], ["--vram", "not a size"], status=2),
    Case("mount-gtt-zero", ["mount", "{T}/m", "--gtt", "0"], ["--gtt", "positive"], status=2),
    Case("mount-heartbeat-misses-0", ["mount", "{T}/m", "--heartbeat-misses", "0"],
         ["--heartbeat-misses", "at least 1", "--heartbeat-ms 0"], status=2),
    Case("mount-timeout-0", ["mount", "{T}/m", "--timeout", "0"], ["--timeout", "more than 0"], status=2),
    Case("mount-timeout-negative", ["mount", "{T}/m", "--timeout=-1"], ["--timeout", "more than 0"], status=2),
    Case("mount-timeout-inf", ["mount", "{T}/m", "--timeout", "inf"], ["--timeout"], status=2),
    Case("mount-shm-dir-missing", ["mount", "{T}/m", "--shm-dir", "{T}/no-such-dir"],
         ["--shm-dir", "does not exist"], status=2),
    Case("mount-shm-dir-file", ["mount", "{T}/m", "--shm-dir", "{T}/a-file"], ["--shm-dir", "not a directory"],
         files={"a-file": ""}, status=2),
    Case("mount-regular-file", ["mount", "{T}/a-file"], ["not a directory", "mount point"],
         files={"a-file": ""}, status=2),
    Case("mount-no-such-group", ["mount", "{T}/m", "--group", "no-such-group-24"], ["--group", "no group named"],
         status=2),
    Case("mount-bad-mode", ["mount", "{T}/m", "--mode", "999"], ["--mode", "octal"], status=2),
    Case("mount-bad-partitions", ["mount", "{T}/m", "--partitions", "lots"], ["--partitions", "not a number"],
         status=2),
    Case("mount-partitions-too-small", ["mount", "{T}/m", "--partitions", "2", "--vram", "4K"],
         ["--partitions 2", "--vram"], status=2),
    Case("mount-negative-limit", ["mount", "{T}/m", "--max-bos-per-file=-1"], ["--max-bos-per-file", "negative"],
         status=2),
    Case("umount-not-mounted", ["umount", "{T}"], ["is not mounted"]),
    Case("dmesg-no-mount", ["dmesg", "--mount", "{T}/none"], ["no vgpu at", "no such directory", "vgpu mount"]),
    Case("dmesg-unmounted-dir", ["dmesg", "--mount", "{T}"], ["nothing is mounted", "vgpu mount"]),
    Case("info-no-mount", ["info", "--mount", "{T}"], ["nothing is mounted", "vgpu mount", "--mount"]),
    Case("smi-no-mount", ["smi", "--mount", "{T}"], ["not a live vgpu mount", "vgpu mount"]),
    Case("smi-dmon-bad-delay", ["smi", "dmon", "-d", "0", "--mount", "{T}"], ["-d must be > 0"], status=2),
    Case("run-no-command", ["run", "--mount", "{T}"], ["no command given"], status=2),
    Case("run-no-mount", ["run", "--mount", "{T}", "--", "true"], ["nothing is mounted", "vgpu mount"]),
    Case("timeline-no-command", ["timeline", "--mount", "{T}"], ["-o FILE.json", "COMMAND"], status=2),
    Case("timeline-no-mount", ["timeline", "--mount", "{T}", "-o", "{T}/t.json", "--", "true"],
         ["not found", "vgpu mount"]),
    Case("timeline-from-missing", ["timeline", "--from", "{T}/missing.json", "--text"],
         ["missing.json", "No such file"]),
    Case("timeline-from-not-json", ["timeline", "--from", "{T}/x.txt", "--text"], ["not a JSON trace", "vgpu timeline -o"],
         files={"x.txt": "hello\n"}),
    Case("timeline-from-json-not-trace", ["timeline", "--from", "{T}/x.json", "--text"], ["not a trace", "traceEvents"],
         files={"x.json": "[1, 2]"}),
    Case("timeline-from-no-output", ["timeline", "--from", "{T}/x.json"], ["--svg", "--text"],
         files={"x.json": json.dumps({"traceEvents": []})}, status=2),
    Case("timeline-svg-unwritable", ["timeline", "--from", "{T}/x.json", "--svg", "{T}/no/dir/x.svg"],
         ["x.svg", "No such file"], files={"x.json": json.dumps({"traceEvents": []})}),
    Case("trace-decode-missing", ["trace", "--decode", "{T}/missing.log"], ["missing.log", "No such file"]),
    Case("trace-decode-not-strace", ["trace", "--decode", "{T}/notes.txt"], ["not an strace log", "vgpu trace --log"],
         files={"notes.txt": "just some notes\nnothing here\n"}),
    Case("trace-decode-and-command", ["trace", "--decode", "{T}/x.log", "--", "true"], ["either"],
         files={"x.log": STRACE_LOG}, status=2),
    Case("disasm-source", ["disasm", "{T}/k.s"], ["not a code object", "vgpu asm"], files={"k.s": SOURCE_S}),
    Case("disasm-missing", ["disasm", "{T}/k.vco"], ["k.vco", "No such file"]),
    Case("asm-sgprs-past-declared", ["asm", "{T}/k.s", "-o", "{T}/k.vco"], ["s24", "24 SGPRs", ".sgprs 25", "k.s:4"],
         files={"k.s": SOURCE_S}),
    Case("asm-vgprs-past-declared", ["asm", "{T}/k.s", "-o", "{T}/k.vco"], ["v7", ".vgprs", "k.s:2"],
         files={"k.s": ".vgprs 4\nv_mov_b32 v7, 0\ns_endpgm\n"}),
    Case("asm-missing", ["asm", "{T}/k.s"], ["k.s", "No such file"]),
    Case("asm-output-dir-missing", ["asm", "{T}/k.s", "-o", "{T}/no/dir/k.vco"], ["k.vco", "No such file"],
         files={"k.s": "s_endpgm\n"}),
    Case("asm-binary-input", ["asm", "{T}/k.bin"], ["not a text file", ".s file"], files={"k.bin": "\udcff"}),
    Case("smi-negative-loop", ["smi", "-l", "-1", "--mount", "{T}"], ["-l must be > 0"], status=2),
    Case("unknown-subcommand", ["frobnicate"], ["invalid choice"], status=2),
]


def _fill(argv: list[str], **places: str) -> list[str]:
    return [a.format(**places) for a in argv]


def _vgpu(argv, uid=None, env=None, timeout=60) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    e.pop("VGPU_DEBUG", None)
    pre = None
    if uid is not None:
        def pre():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    return subprocess.run([client_python(uid), "-m", "vgpu_tools", *argv], env=e, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, preexec_fn=pre)


def check(r: subprocess.CompletedProcess, words: list[str], status: int | None = None) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
    if status is not None:
        assert r.returncode == status, (r.returncode, r.stderr)
    for w in words:
        assert w in r.stderr, f"{w!r} not in {r.stderr!r}"
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr   # one line


@pytest.fixture
def tdir():
    path = make_mount_dir()
    yield path
    m = os.path.join(path, "m")
    if os.path.ismount(m) or mount_state(m) == "dead":   # a check that let a mount through
        unmount(m)
    subprocess.run(["rm", "-rf", "--one-file-system", path])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_mistake_ends_in_one_line(case, tdir):
    for name, text in case.files.items():
        with open(os.path.join(tdir, name), "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape"))
    r = _vgpu(_fill(case.argv, T=tdir), uid=case.uid)
    check(r, case.words, case.status)
    assert not os.path.ismount(os.path.join(tdir, "m"))


def test_vgpu_debug_shows_the_traceback(tdir):
    r = subprocess.run([sys.executable, "-m", "vgpu_tools", "timeline", "--from", f"{tdir}/missing.json", "--text"],
                       env=dict(os.environ, PYTHONPATH=ROOT, VGPU_DEBUG="1"), capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode != 0 and "Traceback" in r.stderr and "FileNotFoundError" in r.stderr


def test_a_non_root_mount_without_dev_fuse_access(tdir):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a command as nobody")
    if os.stat("/dev/fuse").st_mode & stat.S_IROTH and os.stat("/dev/fuse").st_mode & stat.S_IWOTH:
        pytest.skip("/dev/fuse is open to everyone here")
    r = _vgpu(["mount", f"{tdir}/m"], uid=NOBODY, env={"VGPU_STATE_DIR": tdir})
    check(r, ["/dev/fuse", "0600", "non-root", "chmod"])


def test_ctrl_c_during_mount_leaves_no_mount(tdir):
    m = os.path.join(tdir, "m")
    proc = subprocess.Popen([sys.executable, "-m", "vgpu_tools", "mount", m, "--vram", "32M"],
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            # a terminal's SIGINT, even when the suite runs as a background job
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        pid_file = state_paths(m)[1]
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:   # the daemon is starting
            time.sleep(0.01)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        daemon = pid_file.read_text() if pid_file.exists() else ""
        assert proc.returncode == 130, (proc.returncode, out, err)
        assert "Traceback" not in err and "interrupted" in err and "nothing is mounted" in err, err
        time.sleep(0.5)
        assert mount_state(m) == "none" and not daemon, (mount_state(m), daemon)
    finally:
        proc.kill()
        unmount(m)


# -- on a mount -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live():
    yield from _mounted("--vram", "32M", "--gtt", "64M")


MOUNT_CASES = [
    Case("mount-already-mounted", ["mount", "{M}"], ["already mounted", "vgpu umount"]),
    Case("umount-roots-mount-as-nobody", ["umount", "{M}"], ["mounted by root", "as root"], uid=NOBODY),
    Case("smi-dmon-bad-count", ["smi", "dmon", "-c", "0", "--mount", "{M}"], ["-c >= 1"], status=2),
    Case("timeline-output-unwritable", ["timeline", "--mount", "{M}", "-o", "/nonexistent/t.json", "--", "true"],
         ["/nonexistent/t.json", "No such file"]),
    Case("timeline-not-root", ["timeline", "--mount", "{M}", "-o", "/tmp/x.json", "--", "true"],
         ["permission denied", "root"], uid=NOBODY),
]


@pytest.mark.parametrize("case", MOUNT_CASES, ids=[c.id for c in MOUNT_CASES])
def test_a_mistake_on_a_mount_ends_in_one_line(case, live):
    if case.uid is not None and os.geteuid() != 0:
        pytest.skip("needs root to run a command as nobody")
    r = _vgpu(_fill(case.argv, M=live), uid=case.uid)
    check(r, case.words, case.status)
    assert mount_state(live) == "live"


@pytest.mark.parametrize("argv", [["info"], ["dmesg"], ["smi"], ["trace", "--decode", "{L}"]],
                         ids=["info", "dmesg", "smi", "trace-decode"])
def test_a_closed_pipe_ends_quietly(argv, live, tdir):
    log = os.path.join(tdir, "big.log")
    with open(log, "w") as f:
        f.write(f'openat(AT_FDCWD, "{live}/dev/dri/renderD128", O_RDWR) = 3\nclose(3) = 0\n' * 20000)
    where = [] if argv[0] == "trace" else ["--mount", live]
    cmd = " ".join([sys.executable, "-m", "vgpu_tools", *_fill(argv, L=log), *where])
    r = subprocess.run(["bash", "-c", f"{cmd} | head -1"], env=dict(os.environ, PYTHONPATH=ROOT),
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.stdout.count("\n") == 1, r.stdout
    assert r.stderr == "", r.stderr


def test_the_smi_screen_fits_its_box_at_every_width(live):
    from vgpu_tools import smi
    s = smi.sample(live)
    s["processes"] = [{"gpu": 0, "pid": 4194304, "name": "a-process-with-a-long-name", "uid": 65534,
                       "vram_bytes": 123 << 30, "gtt_bytes": 456 << 30, "contexts": 999, "jobs_submitted": 9999999,
                       "jobs_in_flight": 999, "faults": 999, "hangs": 9999}]
    s["devices"][0]["mount"] = s["device"]["mount"] = "/a/very/long/mount/point/" + "x" * 100
    for columns in range(1, 240):
        lines = [line for line in smi.screen(s, columns).splitlines()[1:] if line]
        width = smi.box_width(columns)
        assert {len(line) for line in lines} == {width}, (columns, [line for line in lines if len(line) != width])
        assert re.search(r"Flt Hang *\|", "\n".join(lines))
        assert "x" * 100 in "".join(line[2:-2] for line in lines)   # wrapped, not cut


def test_timeline_gives_its_mount_to_the_command(live, tdir):
    if os.geteuid() != 0:
        pytest.skip("the recording is root's")
    out = os.path.join(tdir, "t.json")
    env = dict(os.environ, PYTHONPATH=ROOT, VGPU_MOUNT="/nonexistent")
    r = subprocess.run([sys.executable, "-m", "vgpu_tools", "timeline", "--mount", live, "-o", out, "--",
                        sys.executable, "-c", "import os, umd; print(os.environ['VGPU_MOUNT']); "
                        "a = umd.empty(256, 'float32'); umd.memset(a.ptr, 0, a.nbytes); umd.synchronize()"],
                       env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.realpath(live)
    # the memset ran as a ring job (CS path) or as a user-queue run (umd's default)
    work = [e for e in json.load(open(out))["traceEvents"] if e.get("cat") in ("job", "userq")]
    assert work, r.stderr


def test_a_per_file_limit_is_named(tdir):
    m = make_mount_dir()
    try:
        mount(m, "--vram", "32M", "--max-bos-per-file", "2")
        code = ("import libvgpu\nfrom vgpu import uapi\nfrom vgpu.errors import exit_main\n"
                "def main():\n    d = libvgpu.device_initialize(%r)\n"
                "    bos = [libvgpu.bo_alloc(d, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT) for _ in range(3)]\n"
                "exit_main(main, 'client')\n" % m)
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT),
                           capture_output=True, text=True, timeout=60)
        check(r, ["AMDGPU_GEM_CREATE", "--max-bos-per-file"])
    finally:
        unmount(m)


# -- a mount whose daemon died --------------------------------------------------------------
@pytest.fixture(scope="module")
def dead():
    m = make_mount_dir()
    try:
        mount(m, "--vram", "32M")
        pid = int(state_paths(m)[1].read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while mount_state(m) != "dead" and time.monotonic() < deadline:
            time.sleep(0.05)
        yield m
    finally:
        subprocess.run(["fusermount3", "-u", "-z", m], stderr=subprocess.DEVNULL)
        unmount(m)


@pytest.mark.parametrize("argv", [["smi"], ["smi", "dmon", "-c", "1"], ["dmesg"], ["info"],
                                  ["timeline", "-o", "/tmp/vgpu-24-dead.json", "--", "true"],
                                  ["run", "--", "true"]],
                         ids=["smi", "smi-dmon", "dmesg", "info", "timeline", "run"])
def test_a_dead_mount_ends_in_one_line(argv, dead):
    r = _vgpu([*argv[:1], "--mount", dead, *argv[1:]] if argv[0] != "smi" else [*argv, "--mount", dead])
    check(r, ["dead", "vgpu umount", "vgpu mount"])
