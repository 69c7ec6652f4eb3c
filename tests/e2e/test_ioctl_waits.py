"""End to end, blocking ioctls from raw clients (tests/raw_ioctl.py: ctypes structs and
libc's ioctl, no libvgpu) on one mount with an 8 s ring timeout (docs/design.md
section 3, "Threads" and "Signals"):

- eight threads on one file, four blocked in SYNCOBJ_WAIT and four signalling: each
  wait returns once its syncobj is signalled, while the others still wait;
- a signal (SIGALRM or SIGUSR1, with a Python handler) during each of the waits
  (SYNCOBJ_WAIT, SYNCOBJ_TIMELINE_WAIT, WAIT_CS, WAIT_FENCES, GEM_WAIT_IDLE) makes the
  ioctl fail with EINTR before what it waits for can happen; afterwards the daemon
  serves the file, the same wait completes once its condition holds, and the
  syncobj is destroyed (the waiter left nothing behind that a client can see: the
  in-process checks of the syncobj's and fence's callbacks are in
  tests/vdev/ioctl/test_path.py);
- a process that exits with ten waits blocked has its file released;
- Ctrl-C of a Python client blocked in WAIT_CS (fcntl.ioctl; libvgpu's
  umd.synchronize() too) ends it with KeyboardInterrupt while the job still runs;
- 300 threads of 30 processes blocked in SYNCOBJ_WAIT: a new client is answered,
  then a signal releases them all.

A waiter is known to wait once /proc shows its thread inside that ioctl. The only
time limits are watchdogs against hangs; the times are printed (pytest -s).
"""
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import _mounted
from tests.helpers import ROOT, read_text, run_client, start_client, wait_for
from tests.raw_ioctl import wait_threads_in_ioctl
from vgpu import uapi

WATCHDOG = 30


@pytest.fixture(scope="module")
def mount():
    yield from _mounted("--vram", "64M", "--timeout", "8")


@contextlib.contextmanager
def watchdog(*procs, seconds=WATCHDOG):
    """Kill ``procs`` if the block takes longer than ``seconds`` (a hang, not a
    timing assertion): their pipes then close and the test fails instead of hanging."""
    fired = []

    def fire():
        fired.append(True)
        for p in procs:
            if p.poll() is None:
                p.kill()
    timer = threading.Timer(seconds, fire)
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert not fired, f"watchdog: killed after {seconds} s"


# -- eight threads on one file -------------------------------------------------------------
EIGHT_THREADS = r"""
import os, sys, threading
from vgpu import uapi
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
handles = [r.syncobj_create() for _ in range(4)]
signalled = [threading.Event() for _ in range(4)]
out = {}

def waiter(i):
    err = r.errno(uapi.DRM_IOCTL_SYNCOBJ_WAIT, r.syncobj_wait_struct([handles[i]]))
    out[i] = (errname(err), signalled[i].is_set())   # it returned after its SIGNAL, not before

def signaller(i, go):
    go.wait()
    signalled[i].set()
    r.syncobj_signal([handles[i]])

waiters = [threading.Thread(target=waiter, args=(i,)) for i in range(4)]
gos = [threading.Event() for _ in range(4)]
signallers = [threading.Thread(target=signaller, args=(i, gos[i])) for i in range(4)]
for t in waiters + signallers:
    t.start()
wait_threads_in_ioctl(os.getpid(), 4, uapi.DRM_IOCTL_SYNCOBJ_WAIT)
for i in range(4):            # one at a time: the others still wait meanwhile
    gos[i].set()
    signallers[i].join(30)
    waiters[i].join(30)
    print(i, *out.get(i, ("hung", False)), threads_in_ioctl(os.getpid(), uapi.DRM_IOCTL_SYNCOBJ_WAIT), flush=True)
"""


def test_eight_threads_on_one_file_four_waiting_four_signalling(mount):
    r = run_client(EIGHT_THREADS, mount, timeout=WATCHDOG, check=True)
    assert r.stdout.splitlines() == [f"{i} ok True {3 - i}" for i in range(4)]


# -- a signal during each wait ----------------------------------------------------------------
SIGNALLED = r"""
import ctypes, os, signal, sys, time
from vgpu import uapi
from tests.raw_ioctl import *
M, what, signame, times = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
got = []
signal.signal(getattr(signal, signame), lambda *a: got.append(1))
r = Raw(M)
ctx = r.ctx()
s = r.syncobj_create()
gate = r.gate(ctx)              # a job that runs until gate.open()
handles, points = u32_array([s]), u64_array([1])
fences = (uapi.drm_amdgpu_fence * 1)(uapi.drm_amdgpu_fence(ctx_id=ctx, ip_type=DMA, seq_no=gate.seq))
if what == "SYNCOBJ_WAIT":      # no fence yet: WAIT_FOR_SUBMIT, forever
    request, arg = uapi.DRM_IOCTL_SYNCOBJ_WAIT, r.syncobj_wait_struct([s])
elif what == "SYNCOBJ_TIMELINE_WAIT":
    request = uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT
    arg = uapi.drm_syncobj_timeline_wait(handles=address(handles), points=address(points), count_handles=1,
                                         timeout_nsec=SYNCOBJ_FOREVER,
                                         flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
elif what == "WAIT_CS":
    request, arg = uapi.DRM_IOCTL_AMDGPU_WAIT_CS, r.wait_cs_struct(ctx, gate.seq)
elif what == "WAIT_FENCES":
    request, arg = uapi.DRM_IOCTL_AMDGPU_WAIT_FENCES, uapi.drm_amdgpu_wait_fences()
    arg.in_.fences, arg.in_.fence_count, arg.in_.wait_all, arg.in_.timeout_ns = address(fences), 1, 1, AMDGPU_FOREVER
elif what == "GEM_WAIT_IDLE":
    request, arg = uapi.DRM_IOCTL_AMDGPU_GEM_WAIT_IDLE, uapi.drm_amdgpu_gem_wait_idle()
    arg.in_.handle, arg.in_.timeout = gate.bo.handle, AMDGPU_FOREVER
sent = bytes(arg)
for i in range(times):
    print("waiting", request, flush=True)
    t0 = time.monotonic()
    err = r.errno(request, arg)
    print(errname(err), len(got), f"{time.monotonic() - t0:.3f}", flush=True)
# what a wait waited for was never there: the job still runs, the syncobj has no fence
print("busy" if r.wait_cs(ctx, gate.seq, timeout=0) == 1 else "done",
      errname(r.errno(uapi.DRM_IOCTL_SYNCOBJ_WAIT, r.syncobj_wait_struct([s], timeout_nsec=0, flags=0))))
# the daemon serves the file; the same wait now completes once its condition holds
print(r.get_cap(), end=" ")
if what == "SYNCOBJ_TIMELINE_WAIT":
    r.call(uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, uapi.drm_syncobj_timeline_array(
        handles=address(handles), points=address(points), count_handles=1))
elif what == "SYNCOBJ_WAIT":
    r.syncobj_signal([s])
else:
    gate.open()
ctypes.memmove(address(arg), sent, len(sent))
print(errname(r.errno(request, arg)), end=" ")
gate.open()
print(r.wait_cs(ctx, gate.seq), end=" ")
r.syncobj_destroy(s)
print(errname(r.errno(uapi.DRM_IOCTL_SYNCOBJ_DESTROY, uapi.drm_syncobj_destroy(handle=s))))
"""

WAITS = ["SYNCOBJ_WAIT", "SYNCOBJ_TIMELINE_WAIT", "WAIT_CS", "WAIT_FENCES", "GEM_WAIT_IDLE"]


@pytest.mark.parametrize("what,signame", [(w, "SIGALRM") for w in WAITS]
                         + [("SYNCOBJ_WAIT", "SIGUSR1"), ("WAIT_CS", "SIGUSR1")])
def test_a_signal_during_a_wait_is_eintr_and_leaves_nothing_behind(mount, what, signame):
    times = 3
    client = start_client(SIGNALLED, mount, what, signame, times)
    request = getattr(uapi, "DRM_IOCTL_" + what if what.startswith("SYNCOBJ") else "DRM_IOCTL_AMDGPU_" + what)
    with watchdog(client):
        took = []
        for _ in range(times):
            assert client.stdout.readline().split() == ["waiting", str(request)]
            wait_threads_in_ioctl(client.pid, 1, request)
            os.kill(client.pid, getattr(signal, signame))
            err, handled, seconds = client.stdout.readline().split()
            assert err == "EINTR" and handled == str(len(took) + 1)
            took.append(seconds)
        assert client.stdout.readline().split() == ["busy", "EINVAL"]   # the job runs, the syncobj is empty
        assert client.stdout.readline().split() == ["1", "ok", "0", "ENOENT"]
        assert client.wait() == 0
    print(f"\n{what} {signame}: EINTR after {', '.join(took)} s")
    assert "internal error" not in read_text(f"{mount}/dev/kmsg")


# -- a process that exits with waits blocked ---------------------------------------------------
EXIT_BLOCKED = r"""
import os, sys, threading
from vgpu import uapi
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
hs = [r.syncobj_create() for _ in range(10)]
handles, points = u32_array(hs), u64_array([1] * 10)
structs = [r.syncobj_wait_struct([h]) for h in hs[:5]] + [
    uapi.drm_syncobj_timeline_wait(handles=address(handles) + 4 * i, points=address(points), count_handles=1,
                                   timeout_nsec=SYNCOBJ_FOREVER, flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
    for i in range(5, 10)]
requests = [uapi.DRM_IOCTL_SYNCOBJ_WAIT] * 5 + [uapi.DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT] * 5
for request, arg in zip(requests, structs):
    threading.Thread(target=r.errno, args=(request, arg), daemon=True).start()
wait_threads_in_ioctl(os.getpid(), 10)
print("blocked", os.getpid(), flush=True)
os._exit(0)
"""


def test_a_process_exiting_with_ten_waits_blocked_is_released(mount):
    """exit_group kills the blocked threads (a fatal signal: FUSE_INTERRUPT for each
    wait); the file's last reference goes and the daemon releases it."""
    r = run_client(EXIT_BLOCKED, mount, timeout=WATCHDOG, check=True)
    blocked, client = r.stdout.split()
    assert blocked == "blocked"
    clients = f"{mount}/sys/kernel/debug/dri/0/clients"
    wait_for(lambda: client not in [line.split()[1] for line in read_text(clients).splitlines()[1:]],
             "the release of the exited client's file", limit=WATCHDOG)
    assert f"closed renderD128: pid {client} " in read_text(f"{mount}/dev/kmsg")
    assert "internal error" not in read_text(f"{mount}/dev/kmsg")


# -- Ctrl-C -------------------------------------------------------------------------------------
CTRL_C_RAW = r"""
import fcntl, sys, time
from vgpu import uapi
from tests.raw_ioctl import *
r = Raw(sys.argv[1])
ctx = r.ctx()
gate = r.gate(ctx)
w = r.wait_cs_struct(ctx, gate.seq)
print("waiting", flush=True)
try:
    fcntl.ioctl(r.fd, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, w, True)
    print("returned", w.out.status, flush=True)
except KeyboardInterrupt:
    # interrupted while the job still runs (not ended by the ring timeout)
    print("interrupted", "busy" if r.wait_cs(ctx, gate.seq, timeout=0) == 1 else "done", flush=True)
    gate.open()     # (the job would otherwise poll until the ring timeout)
    raise
"""

CTRL_C_UMD = r"""
import os, sys, numpy as np, umd
from vgpu import asm
src = '''.kernel spin
.arg flag ptr
.block 32 1 1
    s_load_dwordx2 s[20:21], s[0:1]
    v_mov_b32 v1, 0
loop:
    global_load_dword v2, v1, s[20:21]
    v_cmp_eq_u32 vcc, v2, 0
    s_cbranch_vccnz loop
    s_endpgm
'''
k = umd.kernel_from_code_object(asm.assemble(src, "spin.s").pack(), "spin.s")
flag = umd.to_device(np.zeros(1, np.int32))
umd.synchronize()
umd.launch_kernel(k, 1, 32, [flag])
umd.default_stream().flush()
print("waiting", flush=True)
try:
    umd.synchronize()
    print("returned", flush=True)
except KeyboardInterrupt:
    if os.environ.get("VGPU_USERQ") == "0":
        ring = open(sys.argv[1] + "/sys/kernel/debug/dri/0/vgpu_ring_comp_1.0.0").read()
        busy = "running:      idle" not in ring
    else:    # umd on user queues: the spin is the compute queue's run
        busy = "comp_userq" in open(sys.argv[1] + "/sys/kernel/debug/dri/0/vgpu_userqs").read()
    print("interrupted", "busy" if busy else "idle", flush=True)
    other = umd.Stream()      # end the spin (it would otherwise run until the ring timeout)
    umd.memcpy_htod(flag.ptr, np.ones(1, np.int32), stream=other)
    other.synchronize()
    raise
"""


SYS_FUTEX = 202


def main_thread_in_futex(pid: int) -> bool:
    """The main thread of `pid` sleeps in futex(2) (umd's wait on a user queue's rptr)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/syscall") as f:
            return f.read().split()[0] == str(SYS_FUTEX)
    except (OSError, IndexError):
        return False


def _terminal_sigint():
    """The client's SIGINT as a terminal gives it. A suite started in the background by
    a non-interactive shell (`cmd &`) inherits SIGINT ignored, and Python then installs
    no KeyboardInterrupt handler: Ctrl-C would do nothing, whatever umd does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c(mount, code, request, env=None):
    """SIGINT to a client blocked in `request` (an ioctl), or with request None in a
    futex wait, ends it at once with KeyboardInterrupt."""
    client = subprocess.Popen([sys.executable, "-c", code, mount], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd="/", preexec_fn=_terminal_sigint,
                              env={k: v for k, v in dict(os.environ, PYTHONPATH=ROOT, VGPU_MOUNT=mount,
                                                         **(env or {})).items()
                                   if k != "VGPU_TRANSPORT"})
    with watchdog(client):
        assert client.stdout.readline().split() == ["waiting"]
        if request is None:
            wait_for(lambda: main_thread_in_futex(client.pid), "the client's futex wait")
        else:
            wait_threads_in_ioctl(client.pid, 1, request)
        t0 = time.monotonic()
        client.send_signal(signal.SIGINT)
        out, err = client.communicate()
        took = time.monotonic() - t0
    print(f"\nCtrl-C: the client was gone after {took:.3f} s")
    assert out.split() == ["interrupted", "busy"], err
    assert client.returncode != 0 and err.rstrip().endswith("KeyboardInterrupt"), err


def test_ctrl_c_of_a_raw_wait_cs_ends_the_client(mount):
    ctrl_c(mount, CTRL_C_RAW, uapi.DRM_IOCTL_AMDGPU_WAIT_CS)


def _libvgpu_uses_ioctl() -> bool:
    """libvgpu makes real ioctls by default (it has a transport choice, ioctl first)."""
    try:
        from libvgpu import ioctl
    except Exception:
        return False
    return getattr(ioctl, "TRANSPORTS", ("frame",))[0] == "ioctl"


@pytest.mark.skipif(not _libvgpu_uses_ioctl(), reason="libvgpu still speaks the frame protocol")
def test_ctrl_c_of_umd_synchronize_ends_the_client(mount):
    """On CS (VGPU_USERQ=0): synchronize blocks in WAIT_CS, EINTR ends it."""
    ctrl_c(mount, CTRL_C_UMD, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, env={"VGPU_USERQ": "0"})


def test_ctrl_c_of_umd_synchronize_on_user_queues_ends_the_client(mount):
    """On user queues (umd's default): synchronize sleeps in futex on the queue's rptr."""
    ctrl_c(mount, CTRL_C_UMD, None)


# -- many waiters ---------------------------------------------------------------------------------
# Forks PROCS processes (one interpreter start for all) of THREADS threads each, every
# thread blocked in SYNCOBJ_WAIT on a syncobj of its own; says "ready N" once all are
# inside the ioctl; on a line from the test each process signals its syncobjs, and
# "done OK N" counts the waits that returned.
WAITERS = r"""
import os, sys, threading
from vgpu import uapi
from tests.raw_ioctl import *
M, procs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def child(ready_w, go_r, done_w):
    r = Raw(M)
    handles = [r.syncobj_create() for _ in range(n)]
    results = []

    def waiter(h):
        results.append(errname(r.errno(uapi.DRM_IOCTL_SYNCOBJ_WAIT, r.syncobj_wait_struct([h]))))
    threads = [threading.Thread(target=waiter, args=(h,), daemon=True) for h in handles]
    for t in threads:
        t.start()
    wait_threads_in_ioctl(os.getpid(), n, uapi.DRM_IOCTL_SYNCOBJ_WAIT)
    os.write(ready_w, b"r")
    os.read(go_r, 1)
    r.syncobj_signal(handles)
    for t in threads:
        t.join(30)
    os.write(done_w, bytes([results.count("ok")]))
    os._exit(0)

ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
done_r, done_w = os.pipe()
pids = []
for _ in range(procs):
    pid = os.fork()
    if pid == 0:
        child(ready_w, go_r, done_w)
    pids.append(pid)
ready = sum(len(os.read(ready_r, 1)) for _ in range(procs))
print("ready", ready * n, flush=True)
sys.stdin.readline()
os.write(go_w, b"g" * procs)
ok = sum(os.read(done_r, 1)[0] for _ in range(procs))
codes = [os.waitpid(pid, 0)[1] for pid in pids]
print("done", ok, procs * n, codes.count(0), flush=True)
"""

GET_CAP = r"""
import sys, time
from tests.raw_ioctl import *
t0 = time.monotonic()
r = Raw(sys.argv[1])
print(r.get_cap(), r.version()[1], f"{time.monotonic() - t0:.3f}")
"""


def test_300_blocked_waiters_in_30_processes_do_not_hold_up_a_new_client(mount):
    procs, threads = 30, 10
    waiters = start_client(WAITERS, mount, procs, threads)
    with watchdog(waiters, seconds=120):
        assert waiters.stdout.readline().split() == ["ready", str(procs * threads)]
        r = run_client(GET_CAP, mount, timeout=WATCHDOG, check=True)   # while the 300 wait
        cap, name, took = r.stdout.split()
        assert (cap, name) == ("1", "amdgpu")
        print(f"\nGET_CAP of a new client with {procs * threads} waits blocked: {took} s (open included)")
        waiters.stdin.write("\n")
        waiters.stdin.flush()
        assert waiters.stdout.readline().split() == ["done", str(procs * threads), str(procs * threads), str(procs)]
        assert waiters.wait() == 0
