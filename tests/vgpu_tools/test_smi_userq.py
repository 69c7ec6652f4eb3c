"""`vgpu smi` shows user-queue work as it shows ring jobs (issue 27): a row per user
queue, queue work in the process rows and a dmon column of queue busy, all read from
the mount's files (fdinfo's vgpu-userq-<name> lines). End to end: a real mount, a
client process whose SDMA user queue spins on a POLL_REGMEM until the test releases
it, so that one run of the queue is in progress the whole time."""
import json
import os
import time

import pytest

from tests.conftest import _mounted
from tests.helpers import read_text, start_client, vgpu_cli

# One SDMA queue, one run: a POLL_REGMEM on a word the client sets when told to.
SPIN_QUEUE = """
import struct, sys, libvgpu
from libvgpu.userq import UserQueue
from vgpu import uapi
dev = libvgpu.device_initialize(sys.argv[1])
flag = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
va = libvgpu.va_range_alloc(dev, 4096)
libvgpu.bo_va_op(flag, 0, 4096, va.address)
cpu = flag.cpu_map()
q = UserQueue(dev, uapi.AMDGPU_HW_IP_DMA)
done = q.submit(libvgpu.SdmaIb().poll_regmem(va.address, 1).dwords)
print("running", q.id, flush=True)
sys.stdin.readline()
cpu[:4] = struct.pack("<I", 1)
q.wait(done)
print("done", q.rptr, flush=True)
"""


@pytest.fixture
def mount60():
    """A vgpu whose ring timeout (and so the queue watchdog's) outlasts the spin."""
    yield from _mounted("--vram", "64M", "--timeout", "60")


@pytest.fixture
def spinning(mount60):
    """(mount, client process) while the client's SDMA queue runs its one long run."""
    client = start_client(SPIN_QUEUE, mount60)
    try:
        assert client.stdout.readline().split() == ["running", "1"]
        yield mount60, client
    finally:
        client.stdin.write("\n")
        client.stdin.flush()
        out = client.stdout.readline().split()
        client.wait(timeout=30)
        assert out[:1] == ["done"], out


def smi_json(mount: str) -> dict:
    r = vgpu_cli("smi", "--json", "--mount", mount)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_until(what: str, fn, limit: float = 60.0):
    """fn() until it gives a true value; generous: no timing is asserted."""
    deadline = time.monotonic() + limit
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what}: not within {limit:g} s"
        time.sleep(0.1)


def fdinfo_of(mount: str, pid: int) -> dict[str, str]:
    d = os.path.join(mount, "proc", str(pid), "fdinfo")
    client, = os.listdir(d)
    return dict(line.split(":\t", 1) for line in read_text(os.path.join(d, client)).splitlines())


def test_fdinfo_engine_time_rises_during_one_queue_run_and_never_goes_down(spinning):
    """What nvtop differentiates: drm-engine-dma grows while the queue's single run is
    still in progress (not only when it ends), and no read shows less than the one
    before."""
    mount, client = spinning
    first = fdinfo_of(mount, client.pid)
    ns = [int(first["drm-engine-dma"].split()[0])]
    wait_until("drm-engine-dma grows", lambda: ns.append(int(fdinfo_of(mount, client.pid)["drm-engine-dma"]
                                                             .split()[0])) or ns[-1] > ns[0])
    for _ in range(20):
        info = fdinfo_of(mount, client.pid)
        ns.append(int(info["drm-engine-dma"].split()[0]))
    assert ns == sorted(ns), ns
    assert ns[-1] > ns[0]
    # still the one run: none has finished
    q = dict(zip(*[iter(info["vgpu-userq-sdma_userq0"].split())] * 2))
    assert q["runs"] == "0" and q["state"] == "active" and q["ip"] == "dma", q
    assert int(q["busy-ns"]) <= ns[-1]
    assert int(first["drm-engine-compute"].split()[0]) == 0


def test_smi_json_has_a_row_per_user_queue_and_its_busy_share(spinning):
    mount, client = spinning
    s = wait_until("the queue reads busy", lambda: (lambda s: s if [
        q for q in s["user_queues"] if q["pid"] == client.pid and q["busy_percent"] >= 90] else None)(smi_json(mount)))
    q, = [q for q in s["user_queues"] if q["pid"] == client.pid]
    assert q["name"] == "sdma_userq0" and q["id"] == 1 and q["ip"] == "dma" and q["gpu"] == 0
    assert q["process"].startswith("python") and q["uid"] == os.getuid()
    assert (q["priority"], q["state"], q["runs"]) == ("normal-low", "active", 0)
    assert q["busy_ns"] > 0
    # the process's row: its queue, and the queue's time in its engine time
    p, = [p for p in s["processes"] if p["pid"] == client.pid]
    assert p["user_queues"] == ["sdma_userq0"]
    assert p["engine_ns"]["dma"] >= q["busy_ns"] > 0
    # the name is debugfs vgpu_userqs's (root reads it)
    debugfs = read_text(os.path.join(mount, "sys", "kernel", "debug", "dri", "0", "vgpu_userqs"))
    assert debugfs.startswith(f"sdma_userq0: client {p['clients'][0]} queue 1 normal-low active")


def test_smi_screen_shows_the_queue_row_and_the_process_queues(spinning):
    mount, client = spinning
    wait_until("the queue reads busy", lambda: any(q["busy_percent"] >= 90 for q in smi_json(mount)["user_queues"]))
    screen = vgpu_cli("smi", "--mount", mount).stdout
    lines = screen.splitlines()
    header = next(i for i, line in enumerate(lines) if "User queue" in line)
    assert "IP" in lines[header] and "Priority" in lines[header] and "Runs" in lines[header]
    row, = [line for line in lines if "sdma_userq0" in line]
    fields = row.strip("| ").split()
    assert fields[:4] == ["0", "sdma_userq0", "dma", str(client.pid)], row
    assert "normal-low" in fields and "active" in fields, row
    util = int(fields[fields.index("active") + 1])
    assert 90 <= util <= 100, row
    # the process table has a column of its user queues
    assert "UQ" in next(line for line in lines if "Process name" in line)
    prow, = [line for line in lines if f"{client.pid:>6}  python" in line and "userq" not in line]
    assert prow.strip("| ").split()[-5] == "1", prow      # UQ, between Ctx and Jobs


def test_smi_screen_says_when_there_are_no_user_queues(vgpu_mount):
    screen = vgpu_cli("smi", "--mount", vgpu_mount).stdout
    assert "No user queues" in screen
    assert smi_json(vgpu_mount)["user_queues"] == []


def test_dmon_counts_the_queue_busy(spinning):
    mount, client = spinning
    wait_until("the queue reads busy", lambda: any(q["busy_percent"] >= 90 for q in smi_json(mount)["user_queues"]))
    r = vgpu_cli("smi", "dmon", "-d", "0.5", "-c", "3", "--mount", mount)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    names = lines[0].split()[2:]
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert "uqSdma" in names and "uqComp" in names, lines[0]
    assert len(rows) == 3 and all(len(row) == len(names) + 1 for row in rows), lines
    sdma_q, comp_q = names.index("uqSdma") + 1, names.index("uqComp") + 1
    # a queue busy the whole interval: its engine's share, as a ring's column shows it
    assert max(int(row[sdma_q]) for row in rows) >= 90, lines
    assert all(int(row[comp_q]) == 0 for row in rows), lines
    # the kernel rings stay idle: the queue has an engine of its own
    assert all(int(row[names.index("sdma0") + 1]) == 0 for row in rows), lines


def test_the_queue_rows_fit_the_box_at_every_width(vgpu_mount):
    from vgpu_tools import smi
    s = smi.sample(vgpu_mount)
    s["user_queues"] = [{"gpu": 0, "name": "comp_userq63", "id": 32, "ip": "compute", "pid": 4194304,
                         "process": "a-process-with-a-long-name-indeed", "uid": 65534, "client": 9,
                         "priority": "normal-high", "state": "faulted", "busy_percent": 100, "runs": 999999,
                         "busy_ns": 1}]
    for columns in range(1, 240):
        lines = [line for line in smi.screen(s, columns).splitlines()[1:] if line]
        width = smi.box_width(columns)
        assert {len(line) for line in lines} == {width}, (columns, [line for line in lines if len(line) != width])
        row, = [line for line in lines if "comp_userq63" in line]
        assert "normal-high faulted 100 % 999999 |" in " ".join(row.split()), row


def test_a_user_sees_only_their_own_queues(spinning):
    """The queue rows come from fdinfo: root sees every queue, another user their own."""
    from tests.helpers import NOBODY, run_client
    mount, root_client = spinning
    nobody_client = start_client(SPIN_QUEUE, mount, uid=NOBODY)
    try:
        assert nobody_client.stdout.readline().split() == ["running", "1"]
        as_root = {(q["pid"], q["name"]) for q in smi_json(mount)["user_queues"]}
        assert as_root == {(root_client.pid, "sdma_userq0"), (nobody_client.pid, "sdma_userq1")}
        r = run_client("import sys\nfrom vgpu_tools import smi\ns = smi.sample(sys.argv[1])\n"
                       "print(smi.as_json(s))\nprint(smi.screen(s), file=sys.stderr)", mount, uid=NOBODY)
        assert r.returncode == 0, r.stderr
        assert [(q["pid"], q["name"], q["uid"]) for q in json.loads(r.stdout)["user_queues"]] == \
            [(nobody_client.pid, "sdma_userq1", NOBODY)]
        assert "sdma_userq1" in r.stderr and "sdma_userq0" not in r.stderr
    finally:
        nobody_client.stdin.write("\n")
        nobody_client.stdin.flush()
        nobody_client.wait(timeout=30)
