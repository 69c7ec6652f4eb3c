"""vgpu trace and drm.debug end to end: real clients on a mounted vgpu.

`vgpu trace` runs strace (or attaches it with -p) and matches each DRM ioctl strace
shows with the daemon's record of that request (MOUNT/sys/kernel/debug/tracing/
vgpu_timeline, root only): the tests run as root, as the suite does. drm.debug is
MOUNT/sys/module/drm/parameters/debug; its lines go to MOUNT/dev/kmsg.
"""
import os
import re
import select
import shutil
import subprocess
import sys
import time

import pytest

from tests.helpers import NOBODY, ROOT, _env, read_text, run_client, start_client, vgpu_cli, wait_for
from vgpu.paths import PCI_SLOT

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the daemon's records are in debugfs: root only")
SAMPLE = os.path.join(ROOT, "samples", "sdma_copy_linear.py")

# A strace line as `vgpu trace` shows it: tid, time of day, the call, its duration.
STRACE = r"^(\d+) \d\d:\d\d:\d\d\.\d{6} "
# The decoded line under it.
DECODED = r"^    "

CLIENT = """
import sys, threading
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev:
    bo = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    def other():
        lv.bo_alloc(dev, 8192, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    t = threading.Thread(target=other)
    t.start(); t.join()
    try:
        lv.bo_va_op(bo, 0, bo.size, 0x10)   # unaligned VA: EINVAL
    except OSError:
        sys.exit(5)
"""


def ioctl_pairs(out: str) -> list[tuple[int, str, str]]:
    """(tid, strace's line, the decoded line) for each ioctl shown."""
    lines = out.splitlines()
    pairs = []
    for i, text in enumerate(lines):
        m = re.match(STRACE + r"ioctl\(", text)
        if m and i + 1 < len(lines) and lines[i + 1].startswith("    "):
            pairs.append((int(m.group(1)), text, lines[i + 1][4:]))
    return pairs


@needs_strace
@needs_root
@pytest.mark.skipif(not os.path.exists(SAMPLE), reason="needs samples/sdma_copy_linear.py")
def test_trace_of_the_copy_sample_decodes_its_cs_chunks(vgpu_mount, tmp_path):
    log = tmp_path / "copy.strace"
    r = vgpu_cli("trace", "--log", log, "--", sys.executable, SAMPLE, "--device", vgpu_mount, "--size", "4096")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
    pairs = ioctl_pairs(r.stdout)
    assert pairs, r.stdout
    for tid, strace_line, decoded in pairs:
        assert "DRM_IOCTL_" in strace_line and not decoded.startswith(("<", "?")), (strace_line, decoded)
        assert "<no vgpu record>" not in decoded
    cs = [(s, d) for _, s, d in pairs if "AMDGPU_CS {" in d]
    assert len(cs) == 4, r.stdout
    for strace_line, decoded in cs:
        assert re.search(r"ioctl\(\d+, DRM_IOCTL_AMDGPU_CS, 0x[0-9a-f]+\) = 0 <[\d.]+>$", strace_line), strace_line
        assert re.fullmatch(r"renderD128: AMDGPU_CS \{ctx=1, bo_list=\d+, chunks=\[IB\{va=0x[0-9a-f]+, "
                            r"size=\d+ bytes, ip=DMA ring=0\}\]\} = 0 \{seq=\d\}", decoded), decoded
    seqs = [re.search(r"seq=(\d)\}$", d)[1] for _, d in cs]
    waits = [re.search(r"\{seq=(\d+),", d)[1] for _, _, d in pairs if d.startswith("renderD128: AMDGPU_WAIT_CS")]
    assert seqs == ["1", "2", "3", "4"] and waits == seqs
    assert any(re.fullmatch(r"renderD128: AMDGPU_BO_LIST \{op=CREATE, bo_number=3, handles=\[\d+, \d+, \d+\]\} "
                            r"= 0 \{list_handle=\d+\}", d) for _, _, d in pairs)
    assert any(d.startswith('renderD128: VERSION {') and 'name="amdgpu"' in d for _, _, d in pairs)
    assert re.search(STRACE + r'openat\(AT_FDCWD, "[^"]*/dev/dri/renderD128", ', r.stdout, re.M)
    # strace's log and the daemon's records are kept: --decode shows the same lines again.
    assert log.exists() and (tmp_path / "copy.strace.vgpu").exists()
    again = vgpu_cli("trace", "--decode", log)
    assert again.returncode == 0 and again.stdout and r.stdout.endswith(again.stdout)


@needs_strace
@needs_root
def test_trace_tells_threads_apart_and_shows_a_failure(vgpu_mount):
    r = vgpu_cli("trace", "--", sys.executable, "-c", CLIENT, vgpu_mount)
    assert r.returncode == 5, r.stdout + r.stderr
    pairs = ioctl_pairs(r.stdout)
    creates = {tid: d for tid, _, d in pairs if d.startswith("renderD128: AMDGPU_GEM_CREATE")}
    assert len(creates) == 2, r.stdout   # the main thread's and the other thread's
    assert sorted(creates.values()) == [
        "renderD128: AMDGPU_GEM_CREATE {bo_size=4096, alignment=4096, domains=GTT, flags=0} = 0 {handle=1}",
        "renderD128: AMDGPU_GEM_CREATE {bo_size=8192, alignment=4096, domains=VRAM, flags=0} = 0 {handle=2}"]
    va = [(s, d) for _, s, d in pairs if "AMDGPU_GEM_VA" in d]
    assert len(va) == 1 and va[0][0].endswith(re.search(r"(= -1 EINVAL \(Invalid argument\) <[\d.]+>)$",
                                                        va[0][0])[1])
    assert re.fullmatch(r"renderD128: AMDGPU_GEM_VA \{op=MAP, handle=1, va=0x10, offset=0x0, size=4096, "
                        r"flags=READ\|WRITE\|EXEC\} = -1 EINVAL \(Invalid argument\)", va[0][1]), va


@needs_strace
@needs_root
def test_trace_of_a_frame_client(vgpu_mount):
    """The write()/read() frame protocol of the first versions: the request's pwrite64
    matched with the daemon's record of it by its tag."""
    code = ("import sys, libvgpu as lv\nfrom vgpu import uapi\n"
            "with lv.device_initialize(sys.argv[1]) as dev:\n"
            "    lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)\n")
    env = dict(_env(), VGPU_TRANSPORT="frame")
    r = subprocess.run([sys.executable, "-m", "vgpu_tools", "trace", "--", sys.executable, "-c", code, vgpu_mount],
                       env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(STRACE + r"pwrite64\(\d+, .*\n    renderD128: AMDGPU_GEM_CREATE \{bo_size=4096, alignment=4096, "
                     r"domains=GTT, flags=0\} = 0 \{handle=1\} \(frame\)$", r.stdout, re.M), r.stdout


ATTACHED = """
import sys
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev:
    print("ready", flush=True)
    sys.stdin.readline()                   # the tracer attaches meanwhile
    bo = lv.bo_alloc(dev, 65536, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    with lv.cs_ctx_create(dev) as ctx:
        pass
    print("done", flush=True)
    sys.stdin.readline()
"""


def _read_until(stream, needle: str, limit: float = 30.0) -> str:
    seen = ""
    deadline = time.monotonic() + limit
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} in {seen!r}"
        if select.select([stream], [], [], left)[0]:
            chunk = os.read(stream.fileno(), 4096).decode()
            assert chunk, f"end of output before {needle!r}: {seen!r}"
            seen += chunk
    return seen


@needs_strace
@needs_root
def test_trace_attached_to_a_running_client(vgpu_mount):
    client = start_client(ATTACHED, vgpu_mount)
    tracer = None
    try:
        assert client.stdout.readline().strip() == "ready"
        tracer = subprocess.Popen([sys.executable, "-m", "vgpu_tools", "trace", "-p", str(client.pid)],
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        _read_until(tracer.stderr, "attached")
        client.stdin.write("go\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "done"
        # -p shows the lines as they happen: the CTX ioctls come before the process ends
        seen = _read_until(tracer.stdout, "AMDGPU_CTX {op=FREE_CTX")
        client.stdin.write("end\n")
        client.stdin.flush()
        assert client.wait(timeout=30) == 0
        out, err = tracer.communicate(timeout=60)
        out = seen + out.decode()
        assert tracer.returncode == 0, err
    finally:
        for p in (client, tracer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    pairs = ioctl_pairs(out)
    decoded = [d for _, _, d in pairs]
    assert {tid for tid, _, _ in pairs} == {client.pid}
    assert "renderD128: AMDGPU_GEM_CREATE {bo_size=65536, alignment=4096, domains=GTT, flags=0} = 0 {handle=1}" \
        in decoded, out
    assert "renderD128: AMDGPU_CTX {op=ALLOC_CTX, priority=NORMAL} = 0 {ctx_id=1}" in decoded
    assert not any(d.startswith("renderD128: VERSION") for d in decoded)   # before the attach: not traced
    assert "<no vgpu record>" not in out


DRM_DEBUG = "sys/module/drm/parameters/debug"

KMSG_CLIENT = """
import sys
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev, lv.cs_ctx_create(dev) as ctx:
    bo = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    va = lv.va_range_alloc(dev, 4096)
    lv.bo_va_op(bo, 0, 4096, va.address)
    ib = lv.SdmaIb().constant_fill(va.address, 0x1234, 64)
    bo.cpu_map()[:len(ib) * 4] = ib.tobytes()
    with lv.bo_list_create(dev, [bo]) as bos:
        req = lv.CsRequest(uapi.AMDGPU_HW_IP_DMA, [lv.IbInfo(va.address, len(ib))], resources=bos)
        lv.cs_submit(ctx, req)
        lv.cs_query_fence_status(lv.fence_of(ctx, req), lv.AMDGPU_TIMEOUT_INFINITE)
    try:
        lv.bo_va_op(bo, 0, 4096, 0x10)
    except OSError:
        pass
    import os
    print(os.getpid(), open("/proc/self/comm").read().strip())
"""


def test_drm_debug_logs_every_ioctl_as_drm_ioctl_does(vgpu_mount):
    knob = os.path.join(vgpu_mount, DRM_DEBUG)
    st = os.stat(knob)
    assert (st.st_mode & 0o777, st.st_uid) == (0o644, os.geteuid())
    assert read_text(knob) == "0\n"
    quiet = run_client(KMSG_CLIENT, vgpu_mount, check=True)
    assert "[drm:drm_ioctl]" not in read_text(os.path.join(vgpu_mount, "dev/kmsg"))
    with open(knob, "w") as f:
        f.write("0x1\n")
    assert read_text(knob) == "1\n"
    loud = run_client(KMSG_CLIENT, vgpu_mount, check=True)
    pid, comm = loud.stdout.split()
    kmsg = read_text(os.path.join(vgpu_mount, "dev/kmsg"))
    # root opened the render node: authenticated, as drm_file_alloc makes root's files
    prefix = rf'vgpu {re.escape(PCI_SLOT)}: \[drm:drm_ioctl\] comm="{comm}" pid={pid}, dev=0xe280, auth=1, '
    names = re.findall(prefix + r"(\w+)$", kmsg, re.M)
    assert names[:2] == ["DRM_IOCTL_VERSION", "DRM_IOCTL_VERSION"], kmsg
    assert {"AMDGPU_CS", "AMDGPU_WAIT_CS", "AMDGPU_BO_LIST", "AMDGPU_GEM_CREATE", "AMDGPU_CTX"} <= set(names)
    assert names.count("AMDGPU_GEM_VA") >= 2
    assert re.search(rf'\[drm:drm_ioctl\] comm="{comm}", pid={pid}, ret=-22$', kmsg, re.M), kmsg
    # the legacy frame transport is observed as well
    env_code = "import os; os.environ['VGPU_TRANSPORT'] = 'frame'\n" + KMSG_CLIENT
    framed = run_client(env_code, vgpu_mount, check=True)
    fpid, comm = framed.stdout.split()
    kmsg = read_text(os.path.join(vgpu_mount, "dev/kmsg"))
    assert re.search(rf'comm="{comm}" pid={fpid}, dev=0xe280, auth=1, AMDGPU_CS$', kmsg, re.M), kmsg
    with open(knob, "w") as f:
        f.write("0")
    before = read_text(os.path.join(vgpu_mount, "dev/kmsg")).count("[drm:drm_ioctl]")
    run_client(KMSG_CLIENT, vgpu_mount, check=True)
    assert read_text(os.path.join(vgpu_mount, "dev/kmsg")).count("[drm:drm_ioctl]") == before
    assert quiet.returncode == 0


def test_drm_debug_is_roots_to_write(vgpu_mount):
    code = """
import errno, sys
path = sys.argv[1] + "/sys/module/drm/parameters/debug"
print(open(path).read().strip())
try:
    with open(path, "w") as f:
        f.write("0x1")
    print("written")
except OSError as e:
    print(errno.errorcode[e.errno])
"""
    r = run_client(code, vgpu_mount, uid=NOBODY, check=True)
    assert r.stdout.split() == ["0", "EACCES"]
    assert read_text(os.path.join(vgpu_mount, DRM_DEBUG)) == "0\n"
    for bad in ("2x", "-1"):
        r = run_client(f"with open({os.path.join(vgpu_mount, DRM_DEBUG)!r}, 'w') as f:\n    f.write({bad!r})",
                       vgpu_mount)
        assert r.returncode != 0 and "Invalid argument" in r.stderr
    wait_for(lambda: "write by uid" in read_text(os.path.join(vgpu_mount, "dev/kmsg")), "the refusal's kmsg line")
