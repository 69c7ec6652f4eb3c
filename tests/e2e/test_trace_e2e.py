"""vgpu trace end to end: real clients under strace against a mounted vgpu."""
import os
import re
import shutil
import sys

import pytest

from tests.helpers import ROOT, vgpu_cli

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")

MEMORY_CLIENT = """
import sys
import libvgpu as lv
from vgpu import uapi
with lv.device_initialize(sys.argv[1]) as dev:
    bo = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
    m = lv.bo_cpu_map(bo)
    m[:4] = b"abcd"
    del m
    va = lv.va_range_alloc(dev, bo.size)
    lv.bo_va_op(bo, 0, bo.size, va.address)
    ctx = lv.cs_ctx_create(dev)
    bo.cpu_unmap()
"""

FAILING_FORKING_CLIENT = """
import os, sys
import libvgpu as lv
from vgpu import uapi
pid = os.fork()
with lv.device_initialize(sys.argv[1]) as dev:
    bo = lv.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_VRAM)
    if pid:
        os.waitpid(pid, 0)
        try:
            lv.bo_va_op(bo, 0, bo.size, 0x10)   # unaligned VA: the write() fails
        except OSError:
            sys.exit(5)
"""


def trace(mount, code):
    return vgpu_cli("trace", "--", sys.executable, "-c", code, mount)


def test_trace_memory_client(vgpu_mount):
    r = trace(vgpu_mount, MEMORY_CLIENT)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "open renderD128 -> fd " in out
    assert 'renderD128: VERSION {name_len=6, date_len=8, desc_len=' in out and 'name="amdgpu"' in out
    assert "renderD128: AMDGPU_INFO {query=DEV_INFO, return_size=" in out
    assert ("renderD128: AMDGPU_GEM_CREATE {bo_size=4096, alignment=4096, domains=GTT, flags=0} "
            "= 0 {handle=1}") in out
    m = re.search(r"AMDGPU_GEM_MMAP \{handle=1\} = 0 \{offset=0x[0-9a-f]+ \(bo/([0-9a-f]+)\)\}", out)
    assert m, out
    bo = f"bo/{m.group(1)}"
    mm = re.search(rf"^mmap {bo} size=4096 -> (0x[0-9a-f]+)$", out, re.M)
    assert mm, out
    assert "msync" not in out  # BO pages are shared: libvgpu never flushes
    assert f"munmap {mm.group(1)} 4096 ({bo})" in out
    assert re.search(r"AMDGPU_GEM_VA \{op=MAP, handle=1, va=0x[0-9a-f]+, offset=0x0, size=4096, "
                     r"flags=READ\|WRITE\|EXEC\} = 0$", out, re.M), out
    assert "renderD128: AMDGPU_CTX {op=ALLOC_CTX, priority=NORMAL} = 0 {ctx_id=1}" in out
    assert "[pid " not in out


def test_trace_failure_exit_status_and_pids(vgpu_mount):
    r = trace(vgpu_mount, FAILING_FORKING_CLIENT)
    assert r.returncode == 5, r.stderr
    creates = re.findall(r"^\[pid (\d+)\] renderD128: AMDGPU_GEM_CREATE .* = 0 \{handle=1\}$",
                         r.stdout, re.M)
    assert len(set(creates)) == 2, r.stdout
    assert re.search(r"^\[pid \d+\] renderD128: AMDGPU_GEM_VA \{op=MAP, handle=1, va=0x10, .*\} "
                     r"= -1 EINVAL \(Invalid argument\)$", r.stdout, re.M), r.stdout


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "samples", "sdma_copy_linear.py")),
                    reason="needs samples/sdma_copy_linear.py")
def test_trace_cs_submit_and_wait(vgpu_mount, tmp_path):
    log = tmp_path / "raw.strace"
    r = vgpu_cli("trace", "--log", log, "--", sys.executable,
                 os.path.join(ROOT, "samples", "sdma_copy_linear.py"), "--device", vgpu_mount,
                 "--size", "4096")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert re.search(r"AMDGPU_BO_LIST \{op=CREATE, bo_number=3, handles=\[\d+, \d+, \d+\]\} "
                     r"= 0 \{list_handle=\d+\}", out), out
    cs = re.findall(r"AMDGPU_CS \{ctx=1, bo_list=\d+, chunks=\[IB\{va=0x[0-9a-f]+, size=\d+ bytes, "
                    r"ip=DMA ring=0\}\]\} = 0 \{seq=(\d+)\}", out)
    waits = re.findall(r"AMDGPU_WAIT_CS \{seq=(\d+), ctx=1, ip=DMA ring=0, timeout=\w+\} "
                       r"= 0 \{status=0 \(signaled\)\}", out)
    assert cs == ["1", "2", "3", "4"] and waits == cs, out
    # The kept raw log decodes to the same lines.
    again = vgpu_cli("trace", "--decode", log)
    assert again.returncode == 0 and len(again.stdout.splitlines()) > 20
    assert out.endswith(again.stdout)   # the command's own output comes first
