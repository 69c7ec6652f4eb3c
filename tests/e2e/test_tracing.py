"""MOUNT/sys/kernel/debug/tracing end to end: a blocking trace_pipe read in another
process, the enable files through the file system, root only, and readers that
never read or read slowly do not hold up submissions."""
import errno
import os
import re
import select
import signal
import subprocess
import sys

from tests.helpers import NOBODY, ROOT, _env, read_text, run_client, start_client
from tests.kmd.test_trace import FIELDS, parse

TRACING = "sys/kernel/debug/tracing"

# One process reads trace_pipe with a plain blocking read() and prints what it got.
BLOCKING_READER = """
import os, signal, sys
# A shell's background job starts with SIGINT ignored, and Python then keeps it so:
# the interrupt test needs Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
data = b""
while data.count(b"\\n") < int(sys.argv[2]):
    data += os.read(fd, 65536)
sys.stdout.write(data.decode())
"""

# A client that makes `n` submissions of a 4 KiB copy, each waited for.
SUBMITTER = """
import sys
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev, lv.cs_ctx_create(dev) as ctx:
    src = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    dst = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    ib = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    vas = [lv.va_range_alloc(dev, 4096) for _ in range(3)]
    for bo, va in zip((src, dst, ib), vas):
        lv.bo_va_op(bo, 0, 4096, va.address)
    packets = lv.SdmaIb().copy_linear(vas[1].address, vas[0].address, 4096)
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    with lv.bo_list_create(dev, [src, dst, ib]) as bos:
        for _ in range(int(sys.argv[2])):
            req = lv.CsRequest(uapi.AMDGPU_HW_IP_DMA, [lv.IbInfo(vas[2].address, len(packets))], resources=bos)
            lv.cs_submit(ctx, req)
            lv.cs_query_fence_status(lv.fence_of(ctx, req), lv.AMDGPU_TIMEOUT_INFINITE)
print("done")
"""


def write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def test_trace_pipe_blocks_until_events_come_then_gives_ftrace_lines(vgpu_mount):
    tracing = os.path.join(vgpu_mount, TRACING)
    assert read_text(f"{tracing}/events/enable") == "0\n"
    reader = start_client(BLOCKING_READER, f"{tracing}/trace_pipe", 40)
    try:
        assert reader.stdout.readline() == "open\n"
        write(f"{tracing}/events/enable", "1\n")
        assert read_text(f"{tracing}/events/enable") == "1\n"
        assert read_text(f"{tracing}/events/gpu_scheduler/drm_run_job/enable") == "1\n"
        run_client(SUBMITTER, vgpu_mount, 4, check=True)
        out, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
        reader.wait()
    events = parse(out)
    assert len(events) >= 40
    for e in events:
        assert re.fullmatch(FIELDS[e["event"]], e["fields"]), e
    stamps = [float(e["ts"]) for e in events]
    assert stamps == sorted(stamps)
    assert {"amdgpu_bo_create", "amdgpu_vm_bo_map", "amdgpu_cs_ioctl", "drm_sched_job", "drm_run_job",
            "amdgpu_sched_run_job", "dma_fence_emit", "drm_sched_process_job",
            "dma_fence_signaled"} <= {e["event"] for e in events}
    cs = [e for e in events if e["event"] == "amdgpu_cs_ioctl"]
    assert {e["comm"].strip() for e in cs} == {"python3"} or all(e["comm"].strip() for e in cs)


def test_enable_files_through_the_mount(vgpu_mount):
    tracing = os.path.join(vgpu_mount, TRACING)
    write(f"{tracing}/events/dma_fence/dma_fence_signaled/enable", "1")
    assert read_text(f"{tracing}/events/dma_fence/enable") == "X\n"
    assert read_text(f"{tracing}/events/enable") == "X\n"
    fd = os.open(f"{tracing}/events/dma_fence/enable", os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"on\n")
        raise AssertionError("a write of 'on' was taken")
    except OSError as e:
        assert e.errno == errno.EINVAL
    finally:
        os.close(fd)
    assert "amdgpu:amdgpu_cs_ioctl\n" in read_text(f"{tracing}/available_events")
    run_client(SUBMITTER, vgpu_mount, 2, check=True)
    fd = os.open(f"{tracing}/trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        events = parse(os.read(fd, 1 << 16).decode())
        try:
            os.read(fd, 1 << 16)
            raise AssertionError("an empty non-blocking trace_pipe read did not fail")
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    assert {e["event"] for e in events} == {"dma_fence_signaled"} and len(events) == 4  # hw + finished, x2


def test_tracing_is_root_only(vgpu_mount):
    try_open = """
import errno, os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK))
        print("ok")
    except OSError as e:
        print(errno.errorcode[e.errno])
"""
    paths = [os.path.join(vgpu_mount, TRACING, p) for p in ("trace_pipe", "events/enable", "trace")]
    paths.append(os.path.join(vgpu_mount, TRACING, "vgpu_timeline"))
    for p in paths:  # root may: the kernel then knows the names
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK))
    r = run_client(try_open, *paths, uid=NOBODY, check=True)
    assert r.stdout.split() == ["EACCES"] * len(paths)


SLOW_READER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
out = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND)
while not os.path.exists(sys.argv[3]):
    try:
        os.write(out, os.read(fd, 64))
    except BlockingIOError:
        pass
    time.sleep(0.05)
"""


def test_readers_that_never_read_or_read_slowly_do_not_hold_up_submissions(vgpu_mount, tmp_path):
    tracing = os.path.join(vgpu_mount, TRACING)
    write(f"{tracing}/buffer_size_kb", "1")  # 16 events: 60 jobs make about 400
    assert read_text(f"{tracing}/buffer_size_kb") == "1\n"
    write(f"{tracing}/events/enable", "1")
    idle = os.open(f"{tracing}/trace_pipe", os.O_RDONLY | os.O_NONBLOCK)  # opened, never read
    timeline = os.open(os.path.join(vgpu_mount, TRACING, "vgpu_timeline"), os.O_RDONLY)
    seen, stop = tmp_path / "slow.out", tmp_path / "stop"
    seen.write_bytes(b"")
    slow = subprocess.Popen([sys.executable, "-c", SLOW_READER, f"{tracing}/trace_pipe", str(seen), str(stop)],
                            env=_env(), cwd=ROOT)
    try:
        r = run_client(SUBMITTER, vgpu_mount, 60, check=True, timeout=600)
        assert r.stdout == "done\n"
        stop.write_bytes(b"")
        assert slow.wait(timeout=60) == 0
        # With no reader left, 5 more jobs (about 35 events) overflow the 16-event
        # buffer: the next reader is told what it lost before its first event.
        assert run_client(SUBMITTER, vgpu_mount, 5, check=True).stdout == "done\n"
        first = os.read(idle, 1 << 16).decode()
        assert re.match(r"CPU:\d+ \[LOST \d+ EVENTS\]\n", first), first
        ready, _, _ = select.select([timeline], [], [], 0)
        assert ready  # poll() says POLLIN: records are waiting
    finally:
        slow.kill()
        slow.wait()
        os.close(idle)
        os.close(timeline)


def test_buffer_size_kb_takes_a_positive_number(vgpu_mount):
    path = os.path.join(vgpu_mount, TRACING, "buffer_size_kb")
    assert read_text(path) == "1024\n"
    for bad in ("0", "-4", "lots", "99999999"):
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, bad.encode())
            raise AssertionError(f"buffer_size_kb took {bad!r}")
        except OSError as e:
            assert e.errno == (errno.ENOMEM if bad == "99999999" else errno.EINVAL), bad
        finally:
            os.close(fd)
    assert read_text(path) == "1024\n"


def test_a_reader_blocked_on_trace_pipe_can_be_interrupted(vgpu_mount):
    # The kernel waits for the daemon's answer even for a killed reader (fuse's
    # request_wait_answer): the daemon must fail the read once the reader is dying.
    reader = start_client(BLOCKING_READER, os.path.join(vgpu_mount, TRACING, "trace_pipe"), 1)
    try:
        assert reader.stdout.readline() == "open\n"
        reader.send_signal(signal.SIGINT)
        assert reader.wait(timeout=60) != 0
    finally:
        reader.kill()
        reader.wait()
