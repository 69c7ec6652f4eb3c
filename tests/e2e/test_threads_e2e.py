"""End to end: several threads on one DRM file (request tags, docs/design.md section
3) and submissions past the per-context cap, through a real mount.

- libvgpu: a thread blocked in SYNCOBJ_TIMELINE_WAIT (WAIT_FOR_SUBMIT) on a Device
  while another thread of the same Device signals the point: the wait returns at
  once, not at its timeout.
- C with pthreads through the preload library (`vgpu run`): the same on one fd.
- The raw protocol: tags are independent, plain write()/read() still pair.
- 1000 back-to-back submissions on one context: none refused (a CS past the cap
  waits for room instead of failing with EBUSY).
"""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, daemon_log, run_client, vgpu_cli
from vgpu import frame, uapi

TWO_THREADS = r"""
import sys, threading, time, libvgpu
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
s = libvgpu.syncobj_create(dev)
out = {}

def waiter():
    t0 = time.monotonic()
    try:
        libvgpu.syncobj_timeline_wait(dev, [s], [1], 3_000_000_000, uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT)
        out["wait"] = "ok"
    except OSError as e:
        out["wait"] = e.errno
    out["returned"] = time.monotonic()

t = threading.Thread(target=waiter)
t.start()
time.sleep(0.1)
signalled = time.monotonic()
libvgpu.syncobj_timeline_signal([s], [1])
t.join()
print(out["wait"], round(out["returned"] - signalled, 3), libvgpu.syncobj_query([s]), flush=True)
"""


def test_libvgpu_a_waiting_thread_does_not_hold_up_another(vgpu_mount):
    r = run_client(TWO_THREADS, vgpu_mount, check=True)
    status, after_signal, points = r.stdout.split(maxsplit=2)
    assert status == "ok"
    assert float(after_signal) < 1.0, f"the wait returned {after_signal} s after the signal (timeout 3 s)"
    assert points.strip() == "[1]"


C_TWO_THREADS = r"""
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>

static int fd;
static uint32_t syncobj;
static double waited_until;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *waiter(void *arg)
{
	uint64_t point = 1;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t deadline = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + 3000000000LL;
	int r = drmSyncobjTimelineWait(fd, &syncobj, &point, 1, deadline,
				       DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, NULL);
	waited_until = now();
	*(int *)arg = r;
	return NULL;
}

int main(void)
{
	pthread_t t;
	int r = -1;
	uint64_t point = 1, query = 0;
	fd = open("/dev/dri/renderD128", O_RDWR);
	if (fd < 0 || drmSyncobjCreate(fd, 0, &syncobj)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	pthread_create(&t, NULL, waiter, &r);
	usleep(100000);
	double signalled = now();
	if (drmSyncobjTimelineSignal(fd, &syncobj, &point, 1)) {
		printf("FAIL signal: %s\n", strerror(errno));
		return 1;
	}
	pthread_join(t, NULL);
	drmSyncobjQuery(fd, &syncobj, &query, 1);
	printf("wait=%d after_signal=%.3f point=%llu\n", r, waited_until - signalled, (unsigned long long)query);
	return r != 0 || waited_until - signalled >= 1.0 || query != 1;
}
"""


@pytest.mark.skipif(not (Path(ROOT) / "preload" / "libvgpu_preload.so").is_file() or not shutil.which("gcc"),
                    reason="the preload library is not built (make build) or there is no gcc")
def test_c_pthreads_through_the_preload_library(vgpu_mount, tmp_path):
    src, exe = tmp_path / "two_threads.c", tmp_path / "two_threads"
    src.write_text(C_TWO_THREADS)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdrm"], capture_output=True, text=True,
                           check=True).stdout.split()
    subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(src), *flags, "-lpthread"], check=True)
    r = vgpu_cli("run", "--mount", vgpu_mount, "--", str(exe), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wait=0" in r.stdout and "point=1" in r.stdout


def _frame(name: str, struct, extra: bytes = b"") -> bytes:
    return frame.encode_request(getattr(uapi, "DRM_IOCTL_" + name), bytes(struct), extra)


def test_raw_tags_on_a_mount(vgpu_mount):
    """pwrite/pread at offset = tag: a reply goes only to its tag, an unread reply of
    one tag survives requests on others, plain write()/read() still pair up."""
    fd = os.open(os.path.join(vgpu_mount, "dev/dri/renderD128"), os.O_RDWR)
    try:
        os.pwrite(fd, _frame("SYNCOBJ_CREATE", uapi.drm_syncobj_create()), 500)
        handle = uapi.drm_syncobj_create.from_buffer_copy(frame.parse_reply(os.pread(fd, 4096, 500)).arg).handle
        # tag 600: a wait that blocks (no point 1 yet); nobody reads it yet
        wait = uapi.drm_syncobj_timeline_wait(count_handles=1, flags=uapi.DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT,
                                              timeout_nsec=(1 << 63) - 1)
        arrays = handle.to_bytes(4, "little") + (1).to_bytes(8, "little")
        os.pwrite(fd, _frame("SYNCOBJ_TIMELINE_WAIT", wait, arrays), 600)
        # tag 700: answered at once, whatever tag 600 is doing
        os.pwrite(fd, _frame("GET_CAP", uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ_TIMELINE)), 700)
        with pytest.raises(OSError):
            os.pread(fd, 4096, 800)                       # nothing on tag 800
        cap = frame.parse_reply(os.pread(fd, 4096, 700))
        assert uapi.drm_get_cap.from_buffer_copy(cap.arg).value == 1
        # plain write()/read() (they move the file offset) pair up as before
        os.lseek(fd, 0, os.SEEK_SET)
        for _ in range(3):
            os.write(fd, _frame("GET_CAP", uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ)))
            assert frame.parse_reply(os.read(fd, 4096)).result == 0
        # the signal on tag 900 completes the wait of tag 600, whose reply was kept
        os.pwrite(fd, _frame("SYNCOBJ_TIMELINE_SIGNAL", uapi.drm_syncobj_timeline_array(count_handles=1), arrays),
                  900)
        assert frame.parse_reply(os.pread(fd, 4096, 900)).result == 0
        t0 = time.monotonic()
        assert frame.parse_reply(os.pread(fd, 4096, 600)).result == 0
        assert time.monotonic() - t0 < 5
    finally:
        os.close(fd)


BACK_TO_BACK = r"""
import sys, libvgpu
from vgpu import uapi
N = int(sys.argv[2])
with libvgpu.device_initialize(sys.argv[1]) as dev, libvgpu.cs_ctx_create(dev) as ctx:
    ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    va = libvgpu.va_range_alloc(dev, 4096)
    libvgpu.bo_va_op(ib, 0, 4096, va.address)
    ib.cpu_map()[:4] = bytes(4)                       # one SDMA NOP
    with libvgpu.bo_list_create(dev, [ib]) as bos:
        req = libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va.address, 1)], resources=bos)
        seqs = [libvgpu.cs_submit(ctx, req) for _ in range(N)]
        assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
    print(len(seqs), seqs == list(range(seqs[0], seqs[0] + N)), flush=True)
"""


def test_1000_back_to_back_submissions_on_one_context(vgpu_mount):
    """More than the 64 jobs a context may have in flight, with no waits in between:
    each CS past the cap is answered once an older job completes; none fails."""
    r = run_client(BACK_TO_BACK, vgpu_mount, 1000, timeout=300, check=True)
    assert r.stdout.split() == ["1000", "True"]
    log = daemon_log(vgpu_mount) + (Path(vgpu_mount) / "dev" / "kmsg").read_text()
    assert "EBUSY" not in log and "AMDGPU_CS refused" not in log


MANY_WAITERS = r"""
import sys, threading, time, libvgpu
from vgpu import uapi
N = int(sys.argv[2])
dev = libvgpu.device_initialize(sys.argv[1])
objs = [libvgpu.syncobj_create(dev) for _ in range(N)]
done = []

def waiter(s):
    libvgpu.syncobj_wait(dev, [s], 30_000_000_000, wait_for_submit=True)
    done.append(s)

threads = [threading.Thread(target=waiter, args=(s,)) for s in objs]
for t in threads:
    t.start()
time.sleep(1.0)                                  # every waiter is blocked in its read
t0 = time.monotonic()
libvgpu.get_cap(dev, uapi.DRM_CAP_SYNCOBJ)       # one more request still goes through
print(round(time.monotonic() - t0, 3), len(done), flush=True)
libvgpu.syncobj_signal(objs)
for t in threads:
    t.join(30)
print(len(done), flush=True)
"""


def test_more_blocked_waits_than_pyfuse3s_default_tasks(vgpu_mount):
    """150 threads of one Device blocked in SYNCOBJ_WAIT (pyfuse3 would serve 99
    requests at once by default): another request is still answered at once, and a
    signal releases them all."""
    r = run_client(MANY_WAITERS, vgpu_mount, 150, timeout=120, check=True)
    first, last = r.stdout.splitlines()
    took, done_before = first.split()
    assert float(took) < 2.0 and done_before == "0"
    assert last == "150"
