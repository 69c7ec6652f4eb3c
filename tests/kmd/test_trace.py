"""Tracepoints and recordings (kmd/trace.py), through the dispatch table: ftrace's
line format and the events' TP_printk fields, the enable files, the bounded buffer,
the timeline records."""
import errno
import json
import re

import pytest

from kmd.errors import KmdError
from kmd.hw import SdmaIb
from kmd.trace import EVENTS
from vgpu import uapi

from .conftest import call
from .test_cs import VA_A, VA_B, Setup

# trace_print_context() + trace_print_lat_fmt() + the time, then "event: fields"
LINE = re.compile(r"^ {0,15}(?P<comm>.{1,16})-(?P<pid>\d+) +\[(?P<cpu>\d{3})\] (?P<flags>[.a-zA-Z0-9]{5}) +"
                  r"(?P<ts>\d+\.\d{6}): (?P<event>\w+): (?P<fields>.*)$")
PTR = r"[0-9a-f]{16}"
FIELDS = {  # the TP_printk output of each event (Linux 6.6)
    "amdgpu_bo_create": rf"bo={PTR}, pages=\d+, type=\d+, preferred=\d+, allowed=\d+, visible=\d+",
    "amdgpu_bo_move": rf"bo={PTR}, from=\d, to=\d, size=\d+",
    "amdgpu_cs_ioctl": r"sched_job=\d+, timeline=\S+, context=\d+, seqno=\d+, ring_name=\S+, num_ibs=\d+",
    "amdgpu_sched_run_job": r"sched_job=\d+, timeline=\S+, context=\d+, seqno=\d+, ring_name=\S+, num_ibs=\d+",
    "amdgpu_vm_bo_map": rf"bo={PTR}, start=[0-9a-f]+, last=[0-9a-f]+, offset=[0-9a-f]{{10}}, flags=[0-9a-f]+",
    "amdgpu_vm_bo_unmap": rf"bo={PTR}, start=[0-9a-f]+, last=[0-9a-f]+, offset=[0-9a-f]{{10}}, flags=[0-9a-f]+",
    "drm_sched_job": rf"entity={PTR}, id=\d+, fence={PTR}, ring=\S+, job count:\d+, hw job count:\d+",
    "drm_run_job": rf"entity={PTR}, id=\d+, fence={PTR}, ring=\S+, job count:\d+, hw job count:\d+",
    "drm_sched_process_job": rf"fence={PTR} signaled",
    "dma_fence_emit": r"driver=\S+ timeline=\S+ context=\d+ seqno=\d+",
    "dma_fence_signaled": r"driver=\S+ timeline=\S+ context=\d+ seqno=\d+",
    "vgpu_job_preempt": r"sched_job=\d+, ring_name=\S+, seqno=\d+, reason=[a-z ]+, run_us=\d+",
    "vgpu_job_resume": r"sched_job=\d+, ring_name=\S+, seqno=\d+, preemptions=\d+",
    "vgpu_userq_run": r"queue=\S+, client=\d+, queue_id=\d+, rptr=\d+, dwords=\d+",
    "vgpu_userq_done": r"queue=\S+, client=\d+, queue_id=\d+, rptr=\d+, status=\w+, run_us=\d+",
}
PREEMPTION = {"vgpu_job_preempt", "vgpu_job_resume"}  # only a preempted job has them (test_preempt.py)
USERQ = {"vgpu_userq_run", "vgpu_userq_done"}         # only user queues have them (test_userq_is_traced)


def tracing(dev, *path):
    """The (read, write) entry at tracing/<path>."""
    entry = dev.tracing_files()
    for name in path:
        entry = entry[name]
    return entry


def enable_all(dev, value=b"1\n"):
    tracing(dev, "events", "enable")[1](value)


def parse(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, f"not an ftrace line: {line!r}"
        out.append(m.groupdict())
    return out


def copy_and_wait(s, nbytes=4096) -> int:
    seq = s.submit(SdmaIb().copy_linear(VA_B, VA_A, nbytes))
    assert s.wait(seq) == 0
    return seq


def test_every_event_in_ftrace_format_in_time_order(dev, client):
    assert set(FIELDS) == {e for events in EVENTS.values() for e in events}
    pipe = dev.trace.open_pipe()
    enable_all(dev)
    s = Setup(dev, client)
    op = uapi.drm_amdgpu_gem_op(handle=s.a, op=uapi.AMDGPU_GEM_OP_SET_PLACEMENT, value=uapi.AMDGPU_GEM_DOMAIN_GTT)
    call(dev, client, "AMDGPU_GEM_OP", op)   # the CS moves A to GTT: amdgpu_bo_move
    seq = copy_and_wait(s)
    dev.close_file(client)  # unmaps: amdgpu_vm_bo_unmap
    events = parse(pipe.read(1 << 20).decode())
    assert {e["event"] for e in events} == set(FIELDS) - PREEMPTION - USERQ
    for e in events:
        assert re.fullmatch(FIELDS[e["event"]], e["fields"]), e
    stamps = [float(e["ts"]) for e in events]
    assert stamps == sorted(stamps)
    cs = next(e for e in events if e["event"] == "amdgpu_cs_ioctl")
    assert (cs["comm"].strip(), cs["pid"]) == ("test", "1000")  # charged to the client, as in its ioctl
    assert f"seqno={seq}, ring_name=sdma0, num_ibs=1" in cs["fields"]
    move = next(e for e in events if e["event"] == "amdgpu_bo_move")
    assert move["fields"].endswith("from=2, to=1, size=65536") and move["comm"].strip() == "test"
    sched_ctx = re.search(r"context=(\d+)", cs["fields"])[1]
    # the finished fence of that job signals with the CS's seqno on the same context
    assert any(e["event"] == "dma_fence_signaled" and
               e["fields"] == f"driver=drm_sched timeline=sdma0 context={sched_ctx} seqno={seq}" for e in events)
    order = [e["event"] for e in events if e["event"] in ("amdgpu_cs_ioctl", "drm_run_job", "dma_fence_emit",
                                                         "drm_sched_process_job")]
    assert order[-4:] == ["amdgpu_cs_ioctl", "drm_run_job", "dma_fence_emit", "drm_sched_process_job"]
    maps = [e for e in events if e["event"] == "amdgpu_vm_bo_map"]
    assert any(f"start={VA_A >> 12:x}, last={(VA_A + 65536 >> 12) - 1:x}, offset=0000000000, flags=60"
               == e["fields"].split(", ", 1)[1] for e in maps)


def test_enable_files_read_back_and_refuse_garbage(dev, client):
    read_all = tracing(dev, "events", "enable")[0]
    amdgpu_read, amdgpu_write = tracing(dev, "events", "amdgpu", "enable")
    cs_read, cs_write = tracing(dev, "events", "amdgpu", "amdgpu_cs_ioctl", "enable")
    assert (read_all(), amdgpu_read(), cs_read()) == ("0\n", "0\n", "0\n")
    assert not dev.trace.on
    cs_write(b"1\n")
    assert (read_all(), amdgpu_read(), cs_read()) == ("X\n", "X\n", "1\n")
    assert dev.trace.on
    for bad in (b"2\n", b"yes", b""):
        with pytest.raises(KmdError) as e:
            cs_write(bad)
        assert e.value.errno == errno.EINVAL
    pipe = dev.trace.open_pipe()
    s = Setup(dev, client)
    copy_and_wait(s)
    assert {e["event"] for e in parse(pipe.read(1 << 20).decode())} == {"amdgpu_cs_ioctl"}
    amdgpu_write(b"0")
    assert (read_all(), cs_read()) == ("0\n", "0\n")
    assert not dev.trace.on
    enable_all(dev)
    tracing(dev, "tracing_on")[1](b"0\n")
    assert not dev.trace.on  # ftrace's tracing_on stops recording into the buffer
    copy_and_wait(s)
    assert pipe.read(1 << 20) == b""


def test_a_full_buffer_drops_the_oldest_and_says_so(dev, client):
    dev.trace.pipe.capacity = 12
    enable_all(dev)
    s = Setup(dev, client)
    for _ in range(6):  # nobody reads: the submissions go on regardless
        copy_and_wait(s)
    lines = dev.trace.open_pipe().read(1 << 20).decode().splitlines()
    lost = re.fullmatch(r"CPU:(\d+) \[LOST (\d+) EVENTS\]", lines[0])
    assert lost, lines[0]
    assert len(lines) == 1 + 12
    assert int(lost[2]) == dev.trace.pipe.written - 12
    parse("\n".join(lines[1:]))


def test_buffer_size_kb_resizes_and_a_shrink_counts_what_it_drops(dev, client):
    read, write = tracing(dev, "buffer_size_kb")
    assert read() == "1024\n" == tracing(dev, "buffer_total_size_kb")()
    enable_all(dev)
    s = Setup(dev, client)
    for _ in range(3):
        copy_and_wait(s)
    held = len(dev.trace.pipe)
    assert held > 16
    write(b"1\n")  # 16 events of a nominal 64 bytes
    assert read() == "1\n" and len(dev.trace.pipe) == 16
    lines = dev.trace.open_pipe().read(1 << 20).decode().splitlines()
    assert lines[0].endswith(f"[LOST {held - 16} EVENTS]") and len(lines) == 17
    for bad, err in ((b"0", errno.EINVAL), (b"x", errno.EINVAL), (b"-1", errno.EINVAL), (b"99999999", errno.ENOMEM)):
        with pytest.raises(KmdError) as e:
            write(bad)
        assert e.value.errno == err
    assert read() == "1\n"


def test_trace_file_is_a_snapshot_and_a_write_clears_it(dev, client):
    enable_all(dev)
    copy_and_wait(Setup(dev, client))
    read, write = tracing(dev, "trace")
    text = read()
    assert text.startswith("# tracer: nop\n")
    n = int(re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", text)[1])
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(body) == n > 0 and read() == text  # not consumed
    parse("\n".join(body))
    write(b"")
    assert re.search(r"entries-in-buffer/entries-written: 0/0", read())


def test_a_recording_gets_ioctls_jobs_fences_and_memory(dev, client):
    rec = dev.open_timeline()
    assert dev.trace.on
    s = Setup(dev, client)
    seq = copy_and_wait(s)
    records = [json.loads(line) for line in rec.read(1 << 22).decode().splitlines()]
    head = records[0]
    assert head["type"] == "header" and head["clock"] == "CLOCK_MONOTONIC" and "sdma0" in head["rings"]
    ioctls = [r for r in records if r["type"] == "ioctl"]
    assert [r["name"] for r in ioctls].count("AMDGPU_GEM_CREATE") == 3
    cs = next(r for r in ioctls if r["name"] == "AMDGPU_CS")
    assert cs["pid"] == 1000 and cs["error"] == 0 and cs["ts"] <= cs["end"]
    job = next(r for r in records if r["type"] == "job_queued")
    assert (job["seq"], job["ring"], job["pid"], job["ctx"]) == (seq, "sdma0", 1000, s.ctx)
    kinds = [r["type"] for r in records if r.get("job") == job["job"]]
    assert kinds == ["job_queued", "job_run", "job_done", "job_signaled"]
    signaled = next(r for r in records if r["type"] == "job_signaled")
    wait = next(r for r in ioctls if r["name"] == "AMDGPU_WAIT_CS")
    (ring, fseq, at), = wait["fences"]
    assert (ring, fseq) == ("sdma0", seq) and at <= wait["end"] and signaled["ts"] <= at
    mem = [r for r in records if r["type"] == "memory"]
    assert mem[-1]["vram_used"] == dev.memory.vram_allocator.used
    rec.close()
    assert not dev.trace.on


def test_a_failed_ioctl_is_recorded_with_its_errno(dev, client):
    rec = dev.open_timeline()
    s = Setup(dev, client)
    with pytest.raises(KmdError):
        s.wait(99)
    records = [json.loads(line) for line in rec.read(1 << 22).decode().splitlines()]
    assert records[-1]["name"] == "AMDGPU_WAIT_CS" and records[-1]["error"] == errno.EINVAL


def test_a_record_names_the_calling_thread_its_process_and_the_node(dev, client, root_client):
    """What `vgpu trace` matches strace's lines with: the caller's thread id (the FUSE
    request's pid, passed by vdev), its process, the node; a frame request's tag."""
    import os
    import threading
    rec = dev.open_timeline()
    cap = uapi.drm_get_cap(capability=uapi.DRM_CAP_SYNCOBJ)
    tid = threading.get_native_id()
    dev.ioctl(client, uapi.DRM_IOCTL_GET_CAP, bytes(cap), tid=tid)
    dev.ioctl(root_client, uapi.DRM_IOCTL_GET_CAP, bytes(cap), tag=4321)   # a frame: its tag, no thread
    dev.ioctl(client, uapi.DRM_IOCTL_GET_CAP, bytes(cap))
    with pytest.raises(KmdError):
        dev.ioctl(client, uapi.DRM_IOCTL_AMDGPU_GEM_VA, bytes(uapi.drm_amdgpu_gem_va(handle=99)), tid=tid)
    s = Setup(dev, client)
    seq = copy_and_wait(s)
    w = uapi.drm_amdgpu_wait_cs()
    w.in_.handle, w.in_.ip_type, w.in_.ctx_id, w.in_.timeout = seq, uapi.AMDGPU_HW_IP_DMA, s.ctx, (1 << 64) - 1
    reply = dev.ioctl(client, uapi.DRM_IOCTL_AMDGPU_WAIT_CS, bytes(w), tid=tid)
    if hasattr(reply, "wait"):
        reply.wait()   # a wait's record is made when it ends, with the tid it began with
    records = [json.loads(line) for line in rec.read(1 << 22).decode().splitlines()]
    ioctls = [r for r in records if r["type"] == "ioctl"]
    mine, frame, unknown, failed = ioctls[:4]
    assert (mine["tid"], mine["tgid"], mine["node"], mine["pid"]) == (tid, os.getpid(), "renderD128", 1000)
    assert "tag" not in mine
    assert (frame["tag"], frame["tid"], frame["node"]) == (4321, 0, "card0") and "tgid" not in frame
    assert unknown["tid"] == 0 and "tag" not in unknown and "tgid" not in unknown
    assert (failed["tid"], failed["error"]) == (tid, errno.EINVAL)
    wait = [r for r in ioctls if r["name"] == "AMDGPU_WAIT_CS"][-1]
    assert wait["tid"] == tid and wait["error"] == 0


def test_userq_is_traced_and_recorded(dev, client):
    """A user queue's runs: vgpu_userq_run/done in trace_pipe, charged to the client,
    and a "userq_run" span in a recording (what `vgpu timeline` draws)."""
    from .test_userq import Queue
    pipe = dev.trace.open_pipe()
    rec = dev.open_timeline()
    enable_all(dev)
    s = Setup(dev, client, domain=uapi.AMDGPU_GEM_DOMAIN_GTT)
    q = Queue(s)
    q.wait_rptr(q.write(SdmaIb().fence(VA_A, 1).dwords))
    events = [e for e in parse(pipe.read(1 << 20).decode()) if e["event"] in USERQ]
    assert [e["event"] for e in events[:2]] == ["vgpu_userq_run", "vgpu_userq_done"]
    for e in events:
        assert re.fullmatch(FIELDS[e["event"]], e["fields"]), e
        assert (e["comm"].strip(), e["pid"]) == ("test", "1000")
    assert "queue=sdma_userq0, client=%d, queue_id=1, rptr=0, dwords=4" % client.id == events[0]["fields"]
    assert "rptr=4, status=ok" in events[1]["fields"]
    spans = [r for r in (json.loads(line) for line in rec.read(1 << 22).decode().splitlines())
             if r["type"] == "userq_run"]
    rec.close()
    assert spans and (spans[0]["queue"], spans[0]["dwords"], spans[0]["status"], spans[0]["pid"]) == \
        ("sdma_userq0", 4, "ok", 1000)
    from vgpu_tools.timeline import build
    ev = build([{"type": "header", "rings": ["sdma0"]}, *spans])["traceEvents"]
    lane = next(e for e in ev if e.get("name") == "thread_name" and e["args"]["name"] == "sdma_userq0")
    assert any(e.get("cat") == "userq" and e["tid"] == lane["tid"] for e in ev)
