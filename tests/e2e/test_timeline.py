"""vgpu timeline end to end: a sample run recorded into Chrome trace-event JSON with
the expected spans, flows and counters; the UMD's spans merged on the same clock; the
SVG drawing; root only."""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

from tests.helpers import NOBODY, ROOT, run_client, start_client, vgpu_cli

GPU_PID = 1 << 30


def timeline(mount, out, *command):
    r = vgpu_cli("timeline", "--mount", mount, "-o", out, "--", sys.executable, *command, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out) as f:
        return json.load(f)


def spans(trace, cat=None, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)
            and (pid is None or e["pid"] == pid)]


def enclosing(trace, ev, cat):
    """The span of category `cat` on ev's thread that contains ev's time."""
    return [s for s in spans(trace, cat) if (s["pid"], s["tid"]) == (ev["pid"], ev["tid"])
            and s["ts"] <= ev["ts"] <= s["ts"] + s["dur"]]


# A client outside the recorded command: submits until told to stop.
BYSTANDER = """
import sys
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev, lv.cs_ctx_create(dev) as ctx:
    bo = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    print("ready", flush=True)
    sys.stdin.readline()
"""


# Submits a job that polls a flag, sends WAIT_CS for it (the write() returns: the wait
# is pending), then sets the flag and reads the reply: a wait the fence signal ends.
BLOCKED_WAIT = """
import os, sys
import libvgpu as lv
from vgpu import frame, uapi
with lv.device_initialize(sys.argv[1]) as dev, lv.cs_ctx_create(dev) as ctx:
    flag = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    ib = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    va_flag, va_ib = lv.va_range_alloc(dev, 4096), lv.va_range_alloc(dev, 4096)
    lv.bo_va_op(flag, 0, 4096, va_flag.address)
    lv.bo_va_op(ib, 0, 4096, va_ib.address)
    packets = lv.SdmaIb().poll_regmem(va_flag.address, 1)
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    with lv.bo_list_create(dev, [flag, ib]) as bos:
        req = lv.CsRequest(uapi.AMDGPU_HW_IP_DMA, [lv.IbInfo(va_ib.address, len(packets))], resources=bos)
        seq = lv.cs_submit(ctx, req)
        w = uapi.drm_amdgpu_wait_cs()
        w.in_.handle, w.in_.ip_type, w.in_.ctx_id, w.in_.timeout = seq, uapi.AMDGPU_HW_IP_DMA, ctx.id, (1 << 63)
        tag = 1 << 40
        os.pwrite(dev.fd, frame.encode_request(uapi.DRM_IOCTL_AMDGPU_WAIT_CS, bytes(w)), tag)
        flag.cpu_map()[:4] = (1).to_bytes(4, "little")
        reply = frame.parse_reply(os.pread(dev.fd, 4096, tag))
        assert reply.result == 0, reply
"""


def test_a_sample_run_gives_jobs_ioctls_flows_and_counters(vgpu_mount, tmp_path):
    other = start_client(BYSTANDER, vgpu_mount)
    try:
        assert other.stdout.readline() == "ready\n"
        prog = tmp_path / "prog.py"
        prog.write_text(BLOCKED_WAIT)
        trace = timeline(vgpu_mount, str(tmp_path / "t.json"),
                         os.path.join(ROOT, "samples/sdma_copy_linear.py"), "--device", vgpu_mount, "--size", "4096")
        blocked = timeline(vgpu_mount, str(tmp_path / "b.json"), str(prog), vgpu_mount)
        other.stdin.write("\n")
        other.stdin.flush()
    finally:
        other.wait(timeout=60)
    ev = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    jobs = spans(trace, "job")
    ioctls = spans(trace, "ioctl")
    cs = [s for s in ioctls if s["name"] == "AMDGPU_CS"]
    assert jobs and len(jobs) == len(cs)
    pids = {s["pid"] for s in ioctls}
    assert len(pids) == 1 and other.pid not in pids  # only the command's processes
    for j in jobs:
        assert threads[(j["pid"], j["tid"])] in ("sdma0", "sdma1") and j["pid"] == GPU_PID
        a = j["args"]
        assert a["pid"] in pids and a["seq"] >= 1 and a["ib_bytes"] == 4 * a["ib_dwords"] > 0 and a["status"] == "ok"
        # the job's counters (docs/observability.md): one COPY_LINEAR of the sample's 4096 bytes
        assert (a["packets"], a["pkt_COPY"], a["bytes_read"], a["bytes_written"]) == (1, 1, 4096, 4096), a
    assert {"AMDGPU_GEM_CREATE", "AMDGPU_GEM_VA", "AMDGPU_CTX", "AMDGPU_CS", "AMDGPU_WAIT_CS"} <= {s["name"] for s in ioctls}
    assert all(s["args"]["call"].startswith(s["name"]) for s in ioctls)
    seqs = sorted(int(re.search(r"seq=(\d+)", s["args"]["reply"])[1]) for s in cs)
    assert seqs and all(f"seq {q}" in " ".join(j["name"] for j in jobs) for q in seqs)
    # a flow from each CS to its job
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    submit = [i for i in starts if i.startswith("cs-")]
    assert len(submit) == len(jobs)
    for i in submit:
        assert [s["name"] for s in enclosing(trace, starts[i], "ioctl")] == ["AMDGPU_CS"]
        assert len(enclosing(trace, ends[i], "job")) == 1 and ends[i]["bp"] == "e"
    # a fence flow exists only for a wait its signal ended (the sample's copies may be done before it waits)
    for i in (i for i in starts if i.startswith("fence-")):
        assert len(enclosing(trace, starts[i], "job")) == 1
        assert [s["name"] for s in enclosing(trace, ends[i], "ioctl")] == ["AMDGPU_WAIT_CS"]
    # a wait that was: one flow from the polling job's end to the end of the WAIT_CS
    ev = blocked["traceEvents"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    fence = [i for i in starts if i.startswith("fence-")]
    assert len(fence) == 1
    job, = enclosing(blocked, starts[fence[0]], "job")
    wait, = enclosing(blocked, ends[fence[0]], "ioctl")
    assert wait["name"] == "AMDGPU_WAIT_CS" and f"seq={job['args']['seq']}" in wait["args"]["call"]
    assert wait["ts"] < job["ts"] + job["dur"] <= wait["ts"] + wait["dur"]
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    assert {"VRAM used", "GTT used"} <= counters and any(c.endswith(" busy") for c in counters)
    # the SVG drawing of it
    r = vgpu_cli("timeline", "--from", str(tmp_path / "t.json"), "--svg", str(tmp_path / "t.svg"))
    assert r.returncode == 0, r.stderr
    svg = (tmp_path / "t.svg").read_text()
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag.endswith("svg") and "sdma0" in svg and "AMDGPU_CS" in svg
    assert len([r for r in root.iter() if r.tag.endswith("rect")]) >= len(jobs) + len(ioctls)
    r = vgpu_cli("timeline", "--from", str(tmp_path / "t.json"), "--text")
    rows = {line[2:22].strip(): line[23:] for line in r.stdout.splitlines()[1:] if line.startswith("  ")}
    assert r.returncode == 0 and "#" in rows.get("sdma0", "") + rows.get("sdma1", "") and "C" in rows["ioctls"]


UMD_PROGRAM = """
import numpy as np
import umd
import umd.intrinsics as gpu
from umd.types import Ptr, f32, i32

@umd.kernel
def add_one(n: i32, x: Ptr[f32]):
    i = gpu.block_idx.x * gpu.block_dim.x + gpu.thread_idx.x
    if i < n:
        x[i] = x[i] + 1.0

d = umd.to_device(np.zeros(256, np.float32))
add_one[4, 64](256, d)
umd.synchronize()
assert (d.copy_to_host() == 1).all()
"""


def test_the_umd_spans_are_merged_on_the_same_clock(vgpu_mount, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(UMD_PROGRAM)
    env_mount = os.environ.get("VGPU_MOUNT")
    os.environ["VGPU_MOUNT"] = vgpu_mount
    try:
        trace = timeline(vgpu_mount, str(tmp_path / "t.json"), str(prog))
    finally:
        if env_mount is None:
            del os.environ["VGPU_MOUNT"]
        else:
            os.environ["VGPU_MOUNT"] = env_mount
    umd = [s for s in spans(trace) if s["cat"] not in ("job", "userq", "ioctl")]
    launch = [s for s in umd if s["cat"] == "kernel"]
    assert [s["name"] for s in launch] == ["add_one"] and launch[0]["args"]["grid"] == [4, 1, 1]
    assert {"memcpy", "sync"} <= {s["cat"] for s in umd}
    ioctl_pids = {s["pid"] for s in spans(trace, "ioctl")}
    assert {s["pid"] for s in umd} == ioctl_pids
    # one clock: the kernel's job runs after its launch began and is done when synchronize returns
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    # the kernel ran as a ring job (CS) or as a run of a user queue (umd's default)
    compute = [j for j in spans(trace, "job") + spans(trace, "userq") if threads[(j["pid"], j["tid"])].startswith("comp")]
    assert len(compute) >= 1
    done_by = max(s["ts"] + s["dur"] for s in umd if s["cat"] == "sync")
    assert launch[0]["ts"] <= compute[0]["ts"] and compute[0]["ts"] + compute[0]["dur"] <= done_by


def test_timeline_needs_root(vgpu_mount):
    r = run_client("import sys; from vgpu_tools.cli import main; sys.exit(main(sys.argv[1:]))",
                   "timeline", "--mount", vgpu_mount, "-o", "/tmp/never.json", "--", "true", uid=NOBODY)
    assert r.returncode == 2 and "permission denied" in r.stderr
    assert not os.path.exists("/tmp/never.json")
