"""End to end: user-mode queues through a real mount (docs/userq.md).

- samples/userq_nop.py runs and its queue's FENCE lands;
- under `strace -f -e trace=ioctl,futex`, a client that creates a queue and submits
  100 times makes no ioctl between USERQ CREATE and USERQ FREE: only futex calls;
- a client killed while its queue runs leaves nothing behind: the daemon tears the
  queue down and serves the next client.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import _mounted
from pathlib import Path

from tests.helpers import ROOT, _env, run_client, start_client, wait_for

ROOT = Path(ROOT)

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


@pytest.fixture(scope="module")
def mount():
    yield from _mounted("--vram", "64M")


QUEUE_FLOW = r"""
import sys
import libvgpu
from libvgpu.userq import UserQueue
from vgpu import uapi
with libvgpu.device_initialize(sys.argv[1]) as dev:
    with libvgpu.bo_alloc(dev, 4096, domain=uapi.AMDGPU_GEM_DOMAIN_GTT) as bo:
        va = libvgpu.va_range_alloc(dev, 4096)
        libvgpu.bo_va_op(bo, 0, 4096, va.address)
        cpu = bo.cpu_map()
        q = UserQueue(dev, uapi.AMDGPU_HW_IP_DMA)
        print("MARK-START", flush=True)
        for i in range(100):
            q.wait(q.submit(libvgpu.SdmaIb().fence(va.address, i).dwords))
        print("MARK-END", int.from_bytes(cpu[:4], "little"), flush=True)
        q.free()
        bo.cpu_unmap()
"""


def is_userq(line: str) -> bool:
    """An strace line of DRM_IOCTL_AMDGPU_USERQ: by name, or as an strace that
    predates it prints the code (nr 0x56, size 0x48)."""
    return "ioctl(" in line and ("DRM_IOCTL_AMDGPU_USERQ" in line or re.search(r"0x64, 0x56, 0x48|0xc0486456", line))


def test_sample_userq_nop(mount):
    r = subprocess.run([sys.executable, str(ROOT / "samples" / "userq_nop.py"), "--device", mount, "--count", "200"],
                       capture_output=True, text=True, timeout=120, env=_env(mount), cwd=ROOT / "samples")
    assert r.returncode == 0, r.stderr
    assert "fence written by the queue: 0xc0ffee" in r.stdout
    assert re.search(r"user queue: NOP submit -> rptr observed, median [\d.]+ us", r.stdout)


def test_strace_shows_only_futex_calls_between_create_and_free(mount, tmp_path):
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-o", str(log), "-e", "trace=ioctl,futex,write", sys.executable, "-c",
                        QUEUE_FLOW, mount], capture_output=True, text=True, timeout=120, env=_env(mount), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "MARK-END 99" in r.stdout
    lines = log.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "MARK-START" in l)
    end = next(i for i, l in enumerate(lines) if "MARK-END" in l)
    create = [l for l in lines[:start] if is_userq(l)]
    assert create, "the queue's CREATE is a real ioctl"
    between = lines[start:end]
    assert not [l for l in between if "ioctl(" in l], [l for l in between if "ioctl(" in l][:5]
    assert sum("futex(" in l for l in between) >= 100      # one FUTEX_WAKE per submission at least
    assert any(is_userq(l) for l in lines[end:])   # FREE


def test_client_killed_while_its_queue_runs(mount):
    code = QUEUE_FLOW.replace("for i in range(100):", "while True:\n            i = 1")
    p = start_client(code, mount)
    try:
        assert p.stdout.readline().strip() == "MARK-START"
        wait_for(lambda: "created sdma_userq" in open(f"{mount}/dev/kmsg").read(), "queue created")
    finally:
        p.kill()
        p.wait(10)
    wait_for(lambda: "torn down with its file" in open(f"{mount}/dev/kmsg").read(), "queue torn down")
    r = run_client(QUEUE_FLOW, mount)
    assert "MARK-END 99" in r.stdout


FAULT_FLOW = r"""
import sys
import libvgpu
from libvgpu.userq import UserQueue
from vgpu import uapi
with libvgpu.device_initialize(sys.argv[1]) as dev, UserQueue(dev, uapi.AMDGPU_HW_IP_DMA) as q:
    try:
        q.wait(q.submit(libvgpu.SdmaIb().fence(0x7000_0000, 1).dwords), timeout=20)
    except libvgpu.VgpuError as e:
        print("ERR", e.errno, e)
    else:
        print("no error")
"""


def test_a_faulting_queue_fails_the_waiter_with_its_crash_dump(mount):
    r = run_client(FAULT_FLOW, mount, check=True)
    assert r.stdout.startswith("ERR 14 "), r.stdout      # EFAULT
    assert "user queue 1 faulted" in r.stdout and "devcoredump/devcd" in r.stdout
    assert "page fault" in open(f"{mount}/dev/kmsg").read()


def test_c_sample_raw_flow_under_vgpu_run(mount, tmp_path):
    """samples/c/userq_nop (libdrm_amdgpu for the BOs, the raw USERQ ioctl, stores and
    futex calls for the work) under `vgpu run`, strace'd: no ioctl while it submits."""
    program = str(ROOT / "samples" / "c" / "userq_nop")
    if not os.path.exists(program):
        pytest.skip("samples/c/userq_nop is not built (make build)")
    log = tmp_path / "strace.log"
    r = subprocess.run([sys.executable, "-m", "vgpu_tools", "run", "--mount", mount, "--", "strace", "-f", "-o",
                        str(log), "-e", "trace=ioctl,futex,write", program, "--count", "50"],
                       capture_output=True, text=True, timeout=120, env=_env(mount), cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fence written by the queue: 0xc0ffee" in r.stdout and "queue 1 freed" in r.stdout
    lines = log.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "fence written by the queue" in l)
    end = next(i for i, l in enumerate(lines) if "NOPs:" in l)
    assert not [l for l in lines[start:end] if "ioctl(" in l]
    assert sum("FUTEX_WAKE" in l for l in lines[start:end]) >= 50
