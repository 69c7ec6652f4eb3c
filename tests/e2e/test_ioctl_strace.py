"""End to end: DRM requests are real ioctl() system calls, so the standard tools see
them by name (docs/design.md section 3).

- `strace -f -e trace=ioctl` of a raw client (tests/raw_ioctl.py) shows VERSION,
  AMDGPU_INFO, _CTX, _GEM_CREATE, _GEM_VA, _BO_LIST, _CS and _WAIT_CS on its fd;
- so does the same of `samples/sdma_copy_linear.py` once libvgpu makes ioctls;
- `strace -p PID` attached to a running client shows the ioctls it makes from then on;
- gdb's `catch syscall ioctl` stops samples/c/sdma_exercise (libdrm, run with the
  environment `vgpu run` sets) in drmIoctl, once the preload library passes ioctls
  through instead of writing frames.
"""
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import _mounted
from tests.helpers import ROOT, _env
from vgpu import uapi

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")

EXPECTED = ["DRM_IOCTL_VERSION", "DRM_IOCTL_AMDGPU_INFO", "DRM_IOCTL_AMDGPU_CTX", "DRM_IOCTL_AMDGPU_GEM_CREATE",
            "DRM_IOCTL_AMDGPU_GEM_VA", "DRM_IOCTL_AMDGPU_BO_LIST", "DRM_IOCTL_AMDGPU_CS",
            "DRM_IOCTL_AMDGPU_WAIT_CS"]


@pytest.fixture(scope="module")
def mount():
    yield from _mounted("--vram", "64M")


# The whole flow of one submission; with "wait" it first waits for a line on stdin.
RAW_FLOW = r"""
import sys
from vgpu import uapi
from vgpu.sdma import SdmaIb
from tests.raw_ioctl import *
if sys.argv[2:] == ["wait"]:
    print("ready", flush=True)
    sys.stdin.readline()
r = Raw(sys.argv[1])
r.version()
r.info(uapi.AMDGPU_INFO_DEV_INFO, uapi.drm_amdgpu_info_device)
ctx = r.ctx()
bo = Bo(r, 4096)
ib = SdmaIb().write_linear(bo.va + 2048, [0xC0FFEE]).tobytes()
bo.write(0, ib)
lst = r.bo_list([bo.handle])
seq = r.submit(ctx, [ib_chunk(bo.va, len(ib) // 4)], bo_list=lst)
print(r.wait_cs(ctx, seq), hex(int.from_bytes(bo.read(2048, 4), "little")), flush=True)
"""


def drm_ioctls(log: str) -> list[str]:
    """The request names of the DRM ioctls in an strace log, in order (strace names
    a number several drivers share as "A or B": each such alternative counts)."""
    names = []
    for line in log.splitlines():
        m = re.search(r"ioctl\(\d+, (DRM_IOCTL_[A-Z0-9_]+(?: or DRM_IOCTL_[A-Z0-9_]+)*), .*\) = 0", line)
        if m:
            names.append(m.group(1))
    return names


def in_order(names: list[str], expected: list[str]) -> bool:
    """``expected`` appear among ``names`` in this order (each as one of the alternatives)."""
    it = iter(names)
    return all(any(e in n.split(" or ") for n in it) for e in expected)


def test_strace_of_a_raw_client_names_the_drm_ioctls(mount, tmp_path):
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-e", "trace=ioctl", "-o", str(log), sys.executable, "-c", RAW_FLOW, mount],
                       env=_env(), capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0xc0ffee"]
    names = drm_ioctls(log.read_text())
    assert in_order(names, EXPECTED), names


def _libvgpu_uses_ioctl() -> bool:
    """libvgpu makes real ioctls by default (it has a transport choice, ioctl first)."""
    try:
        from libvgpu import ioctl
    except Exception:
        return False
    return getattr(ioctl, "TRANSPORTS", ("frame",))[0] == "ioctl"


@pytest.mark.skipif(not _libvgpu_uses_ioctl(), reason="libvgpu still speaks the frame protocol")
def test_strace_of_the_copy_sample_names_the_drm_ioctls(mount, tmp_path):
    log = tmp_path / "strace.log"
    env = _env()
    env.pop("VGPU_TRANSPORT", None)
    r = subprocess.run(["strace", "-f", "-e", "trace=ioctl", "-o", str(log), sys.executable,
                        "samples/sdma_copy_linear.py", "--device", mount, "--size", "4096"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    names = drm_ioctls(log.read_text())
    assert in_order(names, EXPECTED), names


def test_strace_attached_to_a_running_client_shows_its_ioctls(mount, tmp_path):
    log = tmp_path / "strace.log"
    client = subprocess.Popen([sys.executable, "-c", RAW_FLOW, mount, "wait"], env=_env(), cwd="/",
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        assert client.stdout.readline().split() == ["ready"]
        tracer = subprocess.Popen(["strace", "-f", "-e", "trace=ioctl", "-o", str(log), "-p", str(client.pid)],
                                  stderr=subprocess.PIPE, text=True)
        line = tracer.stderr.readline()     # "strace: Process N attached"
        assert "attached" in line, line
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().split() == ["0", "0xc0ffee"]
        assert client.wait(timeout=60) == 0
        tracer.wait(timeout=60)              # strace ends with the process it traces
    finally:
        for p in (client, tracer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    names = drm_ioctls(log.read_text())
    assert in_order(names, EXPECTED), names


def _preload_passes_ioctls() -> bool:
    with open(os.path.join(ROOT, "preload", "vgpu_preload.c")) as f:
        src = f.read()
    return "REAL(ioctl)" in src and "pwrite" not in src and "encode_request" not in src


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the catchpoint's condition reads x86-64's $rsi")
@pytest.mark.skipif(not _preload_passes_ioctls(), reason="the preload library still writes frames")
def test_gdb_catch_syscall_ioctl_stops_a_libdrm_program_in_drmioctl(mount):
    """As `vgpu run` runs it (VGPU_MOUNT and LD_PRELOAD, set for the inferior only, so
    that gdb itself does not load the preload library)."""
    from vgpu_tools.cli import PRELOAD_LIBRARY
    program = os.path.join(ROOT, "samples", "c", "sdma_exercise")
    if not (PRELOAD_LIBRARY.is_file() and os.path.isfile(program)):
        pytest.skip("the preload library or the C sample is not built (make build)")
    r = subprocess.run(["gdb", "-batch", "-nx", "-ex", "set startup-with-shell off",
                        "-ex", f"set environment VGPU_MOUNT {mount}",
                        "-ex", f"set environment LD_PRELOAD {PRELOAD_LIBRARY}",
                        "-ex", "catch syscall ioctl",
                        "-ex", f"condition 1 $rsi == {uapi.DRM_IOCTL_VERSION:#x}",
                        "-ex", "run", "-ex", "bt", "-ex", "kill", "--args", program],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    out = r.stdout + r.stderr
    assert "Catchpoint 1 (call to syscall ioctl)" in out, out
    frames = [line for line in out.splitlines() if re.match(r"#\d+ ", line)]
    assert any("drmIoctl" in f for f in frames) and any("drmGetVersion" in f for f in frames), out
