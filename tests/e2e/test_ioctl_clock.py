"""INFO TIMESTAMP through a mount: the clock read vdev.ioctl.fast answers in C and
the one the Python path answers (a frame request) are the same clock, CLOCK_MONOTONIC
from the device's start, so a caller that reads its own clock around the call gets
a device clock inside that window (IGT amd_info query-timestamp's property, exact
here: no tolerance). With drm.debug on, the request is the Python path's and logged."""
import os
import re

from tests.helpers import NOBODY, daemon_log, read_text, run_client, unmount

CLIENT = """
import ctypes, fcntl, os, sys, time
from vgpu import frame, uapi
fd = os.open(sys.argv[1] + "/dev/dri/" + sys.argv[2], os.O_RDWR)   # frames need a writable fd
buf = ctypes.c_uint64()
req = uapi.drm_amdgpu_info(return_pointer=ctypes.addressof(buf), return_size=8, query=uapi.AMDGPU_INFO_TIMESTAMP)
def by_ioctl():
    fcntl.ioctl(fd, uapi.DRM_IOCTL_AMDGPU_INFO, bytes(req))
    return buf.value
def by_frame():
    os.write(fd, frame.encode_request(uapi.DRM_IOCTL_AMDGPU_INFO, bytes(req)))
    return int.from_bytes(frame.parse_reply(os.read(fd, 4096)).extra[:8], "little")
first = by_ioctl()
for read in [by_ioctl, by_frame] * 10:
    c0 = time.monotonic_ns(); t1 = read(); c1 = time.monotonic_ns()
    time.sleep(0.01)
    c2 = time.monotonic_ns(); t2 = read(); c3 = time.monotonic_ns()
    # the device clock advanced as CLOCK_MONOTONIC did between the two calls (2 ns: rounding)
    assert c2 - c1 - 2 <= t2 - t1 <= c3 - c0 + 2, (read.__name__, c1 - c0, t2 - t1, c3 - c2)
    assert first < t1
a, b, c = by_ioctl(), by_frame(), by_ioctl()
assert a < b < c, (a, b, c)   # one clock, whichever path answers
print(os.getpid(), "ok")
"""


def test_the_clock_read_by_ioctl_and_by_frame_is_one_clock_inside_the_callers_window(vgpu_mount):
    for node in ("renderD128", "card0"):
        r = run_client(CLIENT, vgpu_mount, node)
        assert r.returncode == 0 and r.stdout.split()[1] == "ok", r.stderr
    unmount(vgpu_mount)
    # 2 x 23 ioctls: answered in C, as the daemon says when it stops (the frames are not)
    m = re.search(r"unmounted .* \((\d+) clock reads answered in C", daemon_log(vgpu_mount))
    assert m and int(m.group(1)) == 46, daemon_log(vgpu_mount)[-2000:]


def test_with_drm_debug_on_the_clock_read_is_logged(vgpu_mount):
    debug = os.path.join(vgpu_mount, "sys/module/drm/parameters/debug")
    with open(debug, "w") as f:
        f.write("0x1")
    r = run_client(CLIENT, vgpu_mount, "renderD128")
    assert r.returncode == 0, r.stderr
    pid = r.stdout.split()[0]
    kmsg = read_text(os.path.join(vgpu_mount, "dev/kmsg"))
    lines = [ln for ln in kmsg.splitlines() if f"pid={pid}," in ln and ln.endswith("AMDGPU_INFO")]
    assert len(lines) == 44, kmsg[-2000:]   # 23 ioctls and 21 frames, each one line
    with open(debug, "w") as f:
        f.write("0")
    unmount(vgpu_mount)
    m = re.search(r"\((\d+) clock reads answered in C", daemon_log(vgpu_mount))
    assert m and m.group(1) == "0"


THREADS = """
import ctypes, fcntl, os, sys, threading
from vgpu import uapi
fd = os.open(sys.argv[1] + "/dev/dri/renderD128", os.O_RDWR)
bad = []
def reader():
    buf = ctypes.c_uint64()
    req = bytes(uapi.drm_amdgpu_info(return_pointer=ctypes.addressof(buf), return_size=8,
                                     query=uapi.AMDGPU_INFO_TIMESTAMP))
    last = 0
    for _ in range(2000):
        fcntl.ioctl(fd, uapi.DRM_IOCTL_AMDGPU_INFO, req)
        if buf.value <= last:
            bad.append((last, buf.value))
        last = buf.value
def churn():   # other opens and closes of the node while the readers run
    for _ in range(200):
        os.close(os.open(sys.argv[1] + "/dev/dri/renderD128", os.O_RDWR))
ts = [threading.Thread(target=reader) for _ in range(8)] + [threading.Thread(target=churn)]
[t.start() for t in ts]; [t.join() for t in ts]
print(len(bad))
"""


def test_eight_threads_on_one_fd_and_another_uid_read_the_clock(vgpu_mount):
    """8 threads x 2,000 clock reads on one fd while the node is opened and closed
    beside them: each thread's values only grow; a client of another uid is answered
    too (the daemon writes into its memory), and every one of them in C."""
    r = run_client(THREADS, vgpu_mount)
    assert r.returncode == 0 and r.stdout.split() == ["0"], r.stderr
    r = run_client(CLIENT, vgpu_mount, "renderD128", uid=NOBODY)
    assert r.returncode == 0 and r.stdout.split()[1] == "ok", r.stderr
    unmount(vgpu_mount)
    m = re.search(r"\((\d+) clock reads answered in C", daemon_log(vgpu_mount))
    assert m and int(m.group(1)) == 8 * 2000 + 23, daemon_log(vgpu_mount)[-2000:]
