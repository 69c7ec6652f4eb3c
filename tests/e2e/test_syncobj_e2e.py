"""End to end: syncobjs shared between processes by token, sync files and poll()."""
import os
import select

import pytest

from tests.helpers import NOBODY, run_client, start_client

SETUP = r"""
import sys, libvgpu
from vgpu import uapi
M = sys.argv[1]
MODE = sys.argv[2]
dev = libvgpu.device_initialize(M)
ctx = libvgpu.cs_ctx_create(dev)
ib = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
data = libvgpu.bo_alloc(dev, 4096, 4096, uapi.AMDGPU_GEM_DOMAIN_GTT)
va_ib, va_data = libvgpu.va_range_alloc(dev, 4096), libvgpu.va_range_alloc(dev, 4096)
libvgpu.bo_va_op(ib, 0, 4096, va_ib.address)
libvgpu.bo_va_op(data, 0, 4096, va_data.address)
bl = libvgpu.bo_list_create(dev, [ib, data])

def request(packets, ring, **sync):
    ib.cpu_map()[:len(packets) * 4] = packets.tobytes()
    return libvgpu.CsRequest(uapi.AMDGPU_HW_IP_DMA, [libvgpu.IbInfo(va_ib.address, len(packets))],
                             resources=bl, ring=ring, **sync)
"""

# B: a job on sdma1 that polls a flag in its BO, then signals the shared syncobj.
SIGNALLER = SETUP + r"""
s = libvgpu.syncobj_create(dev)
req = request(libvgpu.SdmaIb().poll_regmem(va_data.address, 1).fence(va_data.address + 8, 0x55), 1,
              **({"syncobj_out": [s]} if MODE == "binary" else {"timeline_signal": [(s, 5)]}))
libvgpu.cs_submit(ctx, req)
print(libvgpu.syncobj_export(s), libvgpu.syncobj_export_sync_file(s), flush=True)
sys.stdin.readline()                       # "go"
m = data.cpu_map(); m[:4] = (1).to_bytes(4, "little")
assert libvgpu.cs_query_fence_status(libvgpu.fence_of(ctx, req), libvgpu.AMDGPU_TIMEOUT_INFINITE)
print("signaller done", flush=True)
sys.stdin.readline()                       # keep the tokens alive until told
"""

# A: imports the syncobj, queues an sdma0 job that depends on it, then blocks in a wait.
WAITER = SETUP + r"""
s = libvgpu.syncobj_import(dev, int(sys.argv[3]))
req = request(libvgpu.SdmaIb().fence(va_data.address, 0xAA), 0,
              **({"syncobj_in": [s]} if MODE == "binary" else {"timeline_wait": [(s, 5)]}))
libvgpu.cs_submit(ctx, req)
fence = libvgpu.fence_of(ctx, req)
print("pending" if not libvgpu.cs_query_fence_status(fence, 0) else "ran early", flush=True)
if MODE == "binary":
    libvgpu.syncobj_wait(dev, [s])
else:
    libvgpu.syncobj_timeline_wait(dev, [s], [5])
assert libvgpu.cs_query_fence_status(fence, libvgpu.AMDGPU_TIMEOUT_INFINITE)
print("waiter", hex(int.from_bytes(data.cpu_map()[:8], "little")), libvgpu.syncobj_query([s]), flush=True)
"""

POLLER = r"""
import sys, libvgpu
print("polling", flush=True)
print("woke" if libvgpu.sync_file_wait(sys.argv[1], int(sys.argv[2])) else "timeout",
      libvgpu.sync_file_status(sys.argv[1], int(sys.argv[2])), flush=True)
"""

QUICK = r"""
import sys, time, libvgpu
t = time.monotonic()
with libvgpu.device_initialize(sys.argv[1]) as dev:
    for _ in range(20):
        libvgpu.get_version(dev)
print("quick ok")
"""


@pytest.mark.parametrize("mode", ["binary", "timeline"])
def test_two_processes_share_a_syncobj(vgpu_mount, mode):
    b = start_client(SIGNALLER, vgpu_mount, mode)
    a = poller = None
    try:
        token, sync_token = map(int, b.stdout.readline().split())
        path = os.path.join(vgpu_mount, "sync", format(sync_token, "x"))
        assert "active" in open(path).read()
        assert format(sync_token, "x") not in os.listdir(os.path.join(vgpu_mount, "sync"))
        a = start_client(WAITER, vgpu_mount, mode, token)
        assert a.stdout.readline().strip() == "pending"        # A's job waits for B's
        poller = start_client(POLLER, vgpu_mount, sync_token)
        assert poller.stdout.readline().strip() == "polling"
        # A is blocked in a syncobj wait and the poller in poll(): others go on
        assert "quick ok" in run_client(QUICK, vgpu_mount, timeout=30, check=True).stdout
        fd = os.open(path, os.O_RDONLY)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            assert p.poll(100) == []                            # not signalled yet
            assert a.poll() is None and poller.poll() is None
            b.stdin.write("go\n")
            b.stdin.flush()
            assert p.poll(30000)                                # wakes once B's job signals
        finally:
            os.close(fd)
        assert b.stdout.readline().strip() == "signaller done"
        out, err = a.communicate(timeout=60)
        assert a.returncode == 0, err
        assert out.split()[:2] == ["waiter", "0xaa"] and ("[5]" in out if mode == "timeline" else "[0]" in out)
        out, err = poller.communicate(timeout=60)
        assert out.strip() == "woke signaled", err
        # only the exporter's uid (and root) may open its sync file
        r = run_client(f"import os\ntry:\n    os.open({path!r}, os.O_RDONLY)\nexcept OSError as e:\n"
                       f"    print(e.errno)\n", uid=NOBODY, timeout=30)
        assert r.stdout.strip() == "13", r.stderr
    finally:
        for p in (a, poller, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
