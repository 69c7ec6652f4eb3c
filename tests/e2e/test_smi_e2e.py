"""`vgpu smi`, `vgpu smi dmon` and the counters behind them, end to end: real clients in
their own processes on a mount, counts known from the work they did."""
import contextlib
import json
import os
import subprocess
import sys
import time
import types

from kmd import perf
from tests.helpers import NOBODY, ROOT, read_text, run_client, start_client, vgpu_cli

SYSFS = ("sys", "class", "drm", "card0", "device")


def engine_counters(mount_path: str) -> dict[str, dict[str, int]]:
    d = os.path.join(mount_path, *SYSFS, "vgpu_engines")
    return {ring: {k: int(v) for k, v in (line.split() for line in read_text(os.path.join(d, ring, "counters"))
                                          .splitlines())}
            for ring in os.listdir(d)}


def smi_json(mount_path: str) -> dict:
    r = vgpu_cli("smi", "--json", "--mount", mount_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_sdma_byte_counters_equal_the_bytes_a_sample_copies(vgpu_mount):
    size = 3 * 65536 + 4096
    r = subprocess.run([sys.executable, os.path.join(ROOT, "samples", "sdma_copy_linear.py"), "--device",
                        vgpu_mount, "--size", str(size)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    sdma = [c for ring, c in engine_counters(vgpu_mount).items() if ring.startswith("sdma")]
    # GTT->GTT, GTT->VRAM, VRAM->GTT, VRAM->VRAM: each one COPY_LINEAR of `size` bytes.
    assert sum(c.get("bytes_read", 0) for c in sdma) == 4 * size
    assert sum(c.get("bytes_written", 0) for c in sdma) == 4 * size
    assert sum(c.get("pkt_COPY", 0) for c in sdma) == 4
    assert sum(c["jobs"] for c in sdma) == sum(c["submitted"] for c in sdma) == 4


HOLD = """
import sys, libvgpu
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
ctx = libvgpu.cs_ctx_create(dev)
bos = [libvgpu.bo_alloc(dev, n, 4096, d) for n, d in ((12288, uapi.AMDGPU_GEM_DOMAIN_VRAM),
       (1 << 20, uapi.AMDGPU_GEM_DOMAIN_VRAM), (8192, uapi.AMDGPU_GEM_DOMAIN_GTT))]
print("ready", flush=True)
sys.stdin.readline()
"""


def test_smi_json_lists_a_live_clients_vram_to_the_byte(vgpu_mount):
    client = start_client(HOLD, vgpu_mount)
    try:
        assert client.stdout.readline().strip() == "ready"
        s = smi_json(vgpu_mount)
        row, = [p for p in s["processes"] if p["pid"] == client.pid]
        assert row["vram_bytes"] == 12288 + (1 << 20) and row["gtt_bytes"] == 8192
        assert (row["contexts"], row["jobs_submitted"], row["jobs_in_flight"]) == (1, 0, 0)
        assert row["uid"] == os.getuid() and row["name"].startswith("python")
        assert s["device"]["vram_used_bytes"] >= 12288 + (1 << 20)
        assert {e["name"] for e in s["engines"]} >= {"sdma0", "sdma1", "comp_1.0.0"}
        screen = vgpu_cli("smi", "--mount", vgpu_mount).stdout
        assert f"{client.pid:>6}  python" in screen and "Processes:" in screen
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(timeout=30)


def test_a_user_sees_only_their_own_processes(vgpu_mount):
    root_client = start_client(HOLD, vgpu_mount)
    nobody_client = start_client(HOLD, vgpu_mount, uid=NOBODY)
    try:
        assert root_client.stdout.readline().strip() == "ready"
        assert nobody_client.stdout.readline().strip() == "ready"
        as_root = {p["pid"] for p in smi_json(vgpu_mount)["processes"]}
        assert {root_client.pid, nobody_client.pid} <= as_root
        # smi as nobody (its reading half: the system python may lack the daemon's modules)
        r = run_client("import sys\nfrom vgpu_tools import smi\ns = smi.sample(sys.argv[1])\n"
                       "print(smi.as_json(s))\nprint(s['hidden'], file=sys.stderr)", vgpu_mount, uid=NOBODY)
        assert r.returncode == 0, r.stderr
        assert {p["pid"] for p in json.loads(r.stdout)["processes"]} == {nobody_client.pid}
        assert r.stderr.strip() == "1"          # root's client: counted, not shown
    finally:
        for c in (root_client, nobody_client):
            c.stdin.write("\n")
            c.stdin.flush()
            c.wait(timeout=30)


SPIN = """
import sys, numpy as np, umd
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
print("running", flush=True)
sys.stdin.readline()
other = umd.Stream()
umd.memcpy_htod(flag.ptr, np.ones(1, np.int32), stream=other)   # SDMA ends the spin
umd.synchronize()
print("done", flush=True)
"""


@contextlib.contextmanager
def spinning(source: str, mount: str):
    """A client running `source` (SPIN's protocol: prints "running" once its kernel
    spins, ends it on a line of stdin, prints "done"), with a whole busy window
    (BUSY_WINDOW, 1 s) filled before the body reads; `.out` is its last line."""
    spin = types.SimpleNamespace(client=start_client(source, mount=mount), out=None)
    try:
        assert spin.client.stdout.readline().strip() == "running"
        time.sleep(perf.BUSY_WINDOW + 0.5)
        yield spin
    finally:
        spin.client.stdin.write("\n")
        spin.client.stdin.flush()
        spin.out = spin.client.stdout.readline().strip()
        spin.client.wait(timeout=30)


def test_a_ring_kept_busy_by_a_long_kernel_reads_at_least_90_percent(long_timeout_mount):
    sysfs = os.path.join(long_timeout_mount, *SYSFS)
    # on the compute ring: umd on CS (on user queues the queue's engine is busy instead)
    with spinning("import os; os.environ['VGPU_USERQ'] = '0'\n" + SPIN, long_timeout_mount) as spin:
        busy = int(read_text(os.path.join(sysfs, "gpu_busy_percent")))
        comp = int(read_text(os.path.join(sysfs, "vgpu_engines", "comp_1.0.0", "busy_percent")))
        s = smi_json(long_timeout_mount)
    assert spin.out == "done"
    assert busy >= 90 and comp >= 90
    assert s["device"]["busy_percent"] >= 90
    assert next(e for e in s["engines"] if e["name"] == "comp_1.0.0")["busy_percent"] >= 90
    row, = [p for p in s["processes"] if p["pid"] == spin.client.pid]
    assert row["jobs_in_flight"] == 1


def test_dmon_prints_count_lines_with_sane_columns(vgpu_mount):
    client = start_client(HOLD, vgpu_mount)
    try:
        assert client.stdout.readline().strip() == "ready"
        r = vgpu_cli("smi", "dmon", "-d", "0.2", "-c", "3", "--mount", vgpu_mount)
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        client.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = [line for line in lines if line.startswith("#")]
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert len(header) == 2 and len(rows) == 3
    names = header[0].split()[2:]
    assert names[:3] == ["sdma0", "sdma1", "comp_1.0.0"] and names[-6:] == \
        ["sdmaRd", "sdmaWr", "lanes", "subm", "vramUsed", "fault"]
    for row in rows:
        assert len(row) == len(names) + 1 and row[0] == "0"
        engines = [int(x) for x in row[1:len(names) - 5]]
        assert all(0 <= x <= 100 for x in engines)
        assert float(row[-2]) >= (12288 + (1 << 20)) / (1 << 20) - 0.05     # the client's VRAM, in MiB
        assert int(row[-1]) == 0


def test_smi_refuses_what_is_not_a_vgpu_mount(tmp_path):
    r = vgpu_cli("smi", "--mount", str(tmp_path))
    assert r.returncode == 1 and "not a live vgpu mount" in r.stderr
    r = vgpu_cli("smi", "dmon", "-c", "0", "--mount", str(tmp_path))
    assert r.returncode == 2


def test_smi_loop_repeats_the_screen(vgpu_mount):
    proc = subprocess.Popen([sys.executable, "-m", "vgpu_tools", "smi", "-l", "0.1", "--mount", vgpu_mount],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        screens = 0
        for line in proc.stdout:
            screens += "Processes:" in line
            if screens == 3:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert screens == 3


def test_a_user_queue_kept_busy_by_a_long_kernel_keeps_the_gpu_busy(long_timeout_mount):
    """umd's default: the kernel spins on a compute user queue; gpu_busy_percent and
    smi's device row count the queue's run, and the process's fdinfo time grows."""
    sysfs = os.path.join(long_timeout_mount, *SYSFS)
    with spinning(SPIN, long_timeout_mount) as spin:
        busy = int(read_text(os.path.join(sysfs, "gpu_busy_percent")))
        s = smi_json(long_timeout_mount)
    assert spin.out == "done"
    assert busy >= 90 and s["device"]["busy_percent"] >= 90
    row, = [p for p in s["processes"] if p["pid"] == spin.client.pid]
    assert row["engine_ns"]["compute"] >= 0.9e9
